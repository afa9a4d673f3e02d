"""The GitLab REST v4 client every fetch goes through (CLI, Dagster assets, doctor).

- Auth with `PRIVATE-TOKEN`; the token is registered for redaction and never put in a URL.
- Every request waits for the shared `RateLimiter` slot and a concurrency permit.
- 429: wait `Retry-After` (or `RateLimit-Reset`, or backoff when GitLab sends neither, as
  gitlab-org/gitlab#199738 shows it can), plus jitter, and hold back the other requests too.
  Hand-written rather than a tenacity wait: the wait is a pause of the shared `RateLimiter`, not
  a sleep of the one request that saw the 429, and it has its own bound apart from `max_retries`.
- 5xx, timeouts, dropped connections and bodies that are not JSON (a truncated page): tenacity
  retries with exponential backoff and full jitter, bounded by `max_retries`; then a one-line
  `GitLabError` (the policy and the waits: gitlab/retry.py). The jitter is drawn from the client's `rng` (tenacity's `wait_random_exponential`
  uses the global `random`, which a test cannot seed) and slept with the client's `sleep`.
- Pagination follows `Link: rel="next"` (GitLab: "use these links instead of generating your own
  URLs", parsed by httpx's `Response.links`), falling back to `x-next-page`; the link is rebased
  onto the configured base URL so a proxy that rewrites the host cannot send us elsewhere.
- A listing is trusted to be complete only when GitLab says its last page is the last
  (`x-next-page` empty, `x-page` = `x-total-pages`, or a short page): what a sync removes follows
  from a complete listing, so a page that lost its headers on the way fails instead. A `next`
  link back to a page already read is a loop and fails too.
- Bodies are read as a stream and capped (MAX_BODY_BYTES, counted after decompression), so a
  runaway or gzip-bomb answer is one error, not the machine's memory.
"""

import asyncio
import contextvars
import importlib.util
import json
import logging
import random
import ssl
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import httpx

from gitlab_knowledge.config import GitLabSettings
from gitlab_knowledge.errors import AuthError, ConfigError, GitLabError, NotFoundError
from gitlab_knowledge.gitlab.paging import Page, claims_more, int_header, says_last
from gitlab_knowledge.gitlab.ratelimit import RateLimiter
from gitlab_knowledge.gitlab.retry import (
    Transient,
    asked_wait,
    full_jitter,
    parse_server_time,
    quota_wait,
    retrying,
)
from gitlab_knowledge.redact import redact, register_secret

USER_AGENT = "gitlab-knowledge/0.1"
RETRYABLE_STATUS = {500, 502, 503, 504}
MAX_THROTTLE_RETRIES = 12
MAX_THROTTLE_WAIT = 900.0  # a longer Retry-After is reported rather than slept through
# A page of 100 items whose descriptions hit GitLab's 1 MB limit is ~100 MB; real pages are a few MB.
MAX_BODY_BYTES = 128 * 2**20
NOTICE_WAIT_S = 5.0  # pauses at least this long are announced: a silent sync looks hung
log = logging.getLogger(__name__)

if importlib.util.find_spec("sniffio") is None:
    # httpcore asks `import sniffio` several times per request to tell asyncio from trio; anyio
    # 4.x no longer brings sniffio, and a failed import is not remembered, so each try searched
    # every sys.path entry again (~80 us; ~0.5 ms of CPU per GitLab call, on the thread the
    # batch's fetches share). A None entry makes the import fail at once; httpcore then assumes
    # asyncio, which is what this client runs on.
    sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]  # None: "known absent"


# The stats of the fetch running in this task, where one client serves several projects' syncs on
# one loop (a batch: sync/many.py): each project's sync records its own calls, not the batch's.
_TASK_STATS: contextvars.ContextVar["ClientStats | None"] = contextvars.ContextVar("gitlab_client_stats", default=None)


@dataclass
class ClientStats:
    requests: int = 0  # HTTP requests sent, retries included: what the rate limit is spent on
    retries: int = 0
    throttled: int = 0  # 429 answers
    throttle_wait: float = 0.0  # seconds slept because GitLab said 429
    limiter_wait: float = 0.0  # seconds spent waiting for our own limiter slot
    failures: Counter[str] = field(default_factory=Counter)  # retried failures by kind

    def as_dict(self) -> dict[str, Any]:
        return {
            "api_calls": self.requests,
            "retries": self.retries,
            "throttled": self.throttled,
            "throttle_wait_s": round(self.throttle_wait, 3),
            "limiter_wait_s": round(self.limiter_wait, 3),
            "failures": dict(self.failures),
        }


def encode_project(project: str | int) -> str:
    """A project id or `group/sub/project` path as GitLab's `:id` path segment."""
    return str(project) if isinstance(project, int) else quote(project, safe="")


class GitLabClient:
    """Async client; use as `async with GitLabClient(settings, token) as gl:`."""

    def __init__(
        self,
        settings: GitLabSettings,
        token: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        bearer: bool = False,
    ) -> None:
        """`bearer`: send the token as `Authorization: Bearer` (an OAuth access token works only
        so; a personal access token both ways) instead of `PRIVATE-TOKEN`."""
        register_secret(token)
        self.settings = settings
        self._stats = ClientStats()
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._limiter = RateLimiter(settings.rate_limit, sleep=sleep)
        self._permits = asyncio.Semaphore(max(1, settings.concurrency))
        # Who hears about long pauses (the sync's progress sink); a log warning otherwise.
        self.notify: Callable[[str], None] = log.warning
        base = urlsplit(settings.api_url)
        self._base = (base.scheme, base.netloc)
        self._base_path = base.path.rstrip("/")
        verify: ssl.SSLContext | bool = True
        if settings.ca_bundle:
            try:
                verify = ssl.create_default_context(cafile=str(settings.ca_bundle))
            except (ssl.SSLError, OSError, ValueError) as exc:
                raise ConfigError(f"config field gitlab.ca_bundle: {settings.ca_bundle} is not a readable PEM "
                                  f"certificate file ({type(exc).__name__})") from None
        self._http = httpx.AsyncClient(
            headers={**({"Authorization": f"Bearer {token}"} if bearer else {"PRIVATE-TOKEN": token}),
                     "User-Agent": USER_AGENT, "Accept": "application/json"},
            timeout=httpx.Timeout(settings.timeout, connect=min(10.0, settings.timeout)),
            verify=verify,
            transport=transport,
            follow_redirects=False,
            limits=httpx.Limits(max_connections=max(2, settings.concurrency * 2)),
        )

    @property
    def stats(self) -> ClientStats:
        """What this client spent: in a task that `counts_apart`, that task's (and its subtasks') own."""
        return _TASK_STATS.get() or self._stats

    @staticmethod
    def counts_apart() -> ClientStats:
        """From here on in the current task (and the tasks it creates), `stats` counts apart from
        the client's other users: one project's sync among several sharing the client."""
        stats = ClientStats()
        _TASK_STATS.set(stats)
        return stats

    async def __aenter__(self) -> "GitLabClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- URLs -------------------------------------------------------------------------------

    def url(self, path: str, params: dict[str, Any] | None = None) -> str:
        """An absolute API URL for `path` (relative to /api/v4) or a rebased absolute URL."""
        if path.startswith("http://") or path.startswith("https://"):
            parts = urlsplit(path)
            query = parts.query
            path_only = parts.path
        else:
            path_only = self._base_path + "/" + path.lstrip("/")
            query = ""
        pairs = parse_qsl(query, keep_blank_values=True)
        if params:
            keys = set(params)
            pairs = [(k, v) for k, v in pairs if k not in keys]
            pairs += [(k, str(v)) for k, v in params.items() if v is not None]
        return urlunsplit((self._base[0], self._base[1], path_only, urlencode(pairs), ""))

    # -- requests ---------------------------------------------------------------------------

    def _describe(self, method: str, url: str) -> str:
        parts = urlsplit(url)
        shown = parts.path[len(self._base_path):] if parts.path.startswith(self._base_path) else parts.path
        return f"{method} {shown}" + (f"?{parts.query}" if parts.query else "")

    def _backoff(self, attempt: int) -> float:
        return full_jitter(self._rng, attempt, self._backoff_base, self._backoff_cap)

    def _honour_quota(self, headers: httpx.Headers) -> None:
        wait = quota_wait(headers, MAX_THROTTLE_WAIT)
        # Concurrent answers carry the same reset: only the one that moves the pause speaks.
        if wait is not None and self._limiter.pause(wait) > 1.0 and wait >= NOTICE_WAIT_S:
            self.notify(f"GitLab says this token's request quota is used up (RateLimit-Remaining: 0): "
                        f"waiting {wait:.0f}s for it to reset")

    async def request(self, method: str, path: str, params: dict[str, Any] | None = None,
                      json_body: Any = None) -> tuple[Any, httpx.Response]:
        """One API call with retries; returns (parsed JSON, response)."""
        url = self.url(path, params)
        what = self._describe(method, url)
        throttles = 0

        async def attempt() -> tuple[Any, httpx.Response]:
            nonlocal throttles
            # 429s loop within one attempt: they have their own bound and must not use up max_retries.
            while True:
                response = await self._send(method, url, json_body)
                if response.status_code != 429:
                    return self._parse(response, what)
                throttles += 1
                self._throttled(response, throttles, what)

        return await retrying(attempts=self.settings.max_retries + 1, wait=self._backoff, sleep=self._sleep,
                              stats=self.stats, what=what)(attempt)

    async def _send(self, method: str, url: str, json_body: Any) -> httpx.Response:
        self.stats.limiter_wait += await self._limiter.acquire()
        async with self._permits:
            self.stats.requests += 1
            try:
                request = self._http.build_request(method, url, json=json_body)
                response = await self._http.send(request, stream=True)
                try:
                    await self._read_capped(response, method)
                finally:
                    await response.aclose()
            except httpx.TimeoutException:
                raise Transient("timeout") from None
            except httpx.TransportError as exc:
                if "CERTIFICATE_VERIFY_FAILED" in str(exc):
                    # Not transient: retrying cannot make an untrusted certificate trusted.
                    raise GitLabError(
                        f"the TLS certificate of {self.settings.display_url} is not trusted: set gitlab.ca_bundle to "
                        "the PEM file of the CA that signed it") from None
                raise Transient(f"connection error ({type(exc).__name__})") from None
            except httpx.DecodingError:
                raise Transient("undecodable response body") from None
            self._honour_quota(response.headers)
            return response

    async def _read_capped(self, response: httpx.Response, method: str) -> None:
        """Read the body, decompressed, refusing more than MAX_BODY_BYTES of it."""
        body = bytearray()  # grown in place: a list of chunks joined at the end holds the body twice
        async for chunk in response.aiter_bytes():
            if len(body) + len(chunk) > MAX_BODY_BYTES:
                raise GitLabError(
                    f"GitLab's answer to {self._describe(method, str(response.url))} is larger than "
                    f"{MAX_BODY_BYTES // 2**20} MB once decompressed: stopped reading it (lower gitlab.per_page, "
                    "or check what sits between here and GitLab)")
            body += chunk
        response._content = body  # type: ignore[assignment]  # what Response.aread() would have stored (json.loads reads it)

    def _throttled(self, response: httpx.Response, throttles: int, what: str) -> None:
        """Account for a 429 and pause every request for its wait, or give up on it."""
        self.stats.throttled += 1
        wait = asked_wait(response.headers)
        if wait is None:  # GitLab named no wait
            wait = self._backoff(throttles)
        if throttles > MAX_THROTTLE_RETRIES or wait > MAX_THROTTLE_WAIT:
            raise GitLabError(
                f"GitLab kept rate-limiting {what} (429 x{throttles}, asked to wait {wait:.0f}s); "
                "lower gitlab.rate_limit or try again later", status=429)
        wait += self._rng.uniform(0, min(1.0, 0.1 + wait * 0.1))
        if self._limiter.pause(wait) > 1.0 and wait >= NOTICE_WAIT_S:
            self.notify(f"GitLab rate-limited {what} (429): waiting {wait:.0f}s as it asked")
        self.stats.throttle_wait += wait
        self.stats.retries += 1

    def _parse(self, response: httpx.Response, what: str) -> tuple[Any, httpx.Response]:
        status = response.status_code
        if 300 <= status < 400:
            target = response.headers.get("location", "elsewhere")
            raise GitLabError(f"GitLab redirected {what} to {redact(target)} ({status}): check gitlab.url "
                              f"(scheme, host, no trailing path) in the config", status=status)
        if status in RETRYABLE_STATUS:
            raise Transient(f"HTTP {status}")
        if status >= 400:
            self._raise_for_status(response, what)
        if status == 204 or not response.content:
            return None, response
        try:
            data = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise Transient("truncated or non-JSON response body") from None
        # The parsed JSON is all that is read from here on (the response only for its headers):
        # the body, up to MAX_BODY_BYTES, goes now rather than when the caller is done with the page.
        response._content = b""
        return data, response

    def _raise_for_status(self, response: httpx.Response, what: str) -> None:
        status = response.status_code
        message = ""
        try:
            body = response.json()
            if isinstance(body, dict):
                message = str(body.get("message") or body.get("error") or "")
        except (json.JSONDecodeError, UnicodeDecodeError):
            message = response.text[:200].strip()
        message = redact(message)
        if status == 401:
            raise AuthError(
                f"GitLab rejected the token in ${self.settings.token_env} (401 Unauthorized) at {self.settings.display_url}: "
                "check that it is valid, not expired, and has the read_api scope")
        if status == 403:
            raise GitLabError(f"GitLab refused {what} (403 Forbidden): the token lacks access or the read_api scope",
                              status=403)
        if status == 404:
            raise NotFoundError(f"GitLab has no {what} (404{': ' + message if message else ''})", status=404)
        raise GitLabError(f"GitLab answered {status} to {what}{': ' + message if message else ''}", status=status)

    async def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        data, _ = await self.request("GET", path, params)
        return data

    async def get_page(self, path: str, params: dict[str, Any] | None = None) -> Page:
        data, response = await self.request("GET", path, params)
        url = str(response.url)
        if not isinstance(data, list):
            raise GitLabError(f"GitLab answered {self._describe('GET', url)} with a non-list body")
        nxt = response.links.get("next", {}).get("url")
        if not nxt:
            x_next = response.headers.get("x-next-page", "").strip()
            if x_next:
                nxt = self.url(url, {"page": x_next})
        if nxt:
            nxt = self.url(nxt)  # rebased: the loop check compares it with the URLs actually read
        asked = dict(parse_qsl(urlsplit(url).query)).get("per_page", "")
        per_page = int(asked) if asked.isdigit() else None
        if data:
            final = nxt is None and says_last(response.headers, len(data), per_page)
        else:  # an empty page ends a listing, unless its own headers say there is more
            final = nxt is None and not claims_more(response.headers, per_page)
        return Page(items=data, next_url=nxt, server_time=parse_server_time(response.headers),
                    total=int_header(response.headers, "x-total"), url=self.url(url), final=final)

    def record_page(self, page: Page, read: set[str]) -> None:
        """Fail when this page was already read by the same listing: a next link (or a re-query)
        leading back to it would loop for ever."""
        if page.url in read:
            raise GitLabError(f"GitLab led the listing back to {self._describe('GET', page.url)}, a page already read "
                              "(a pagination loop): stopped, nothing was removed")
        read.add(page.url)

    def check_complete(self, page: Page) -> None:
        """Fail when a listing ended on a page GitLab did not mark as its last."""
        if not page.final:
            raise GitLabError(f"the listing ended at {self._describe('GET', page.url)}, which GitLab does not mark "
                              "as its last page (an empty page with more announced, or a full page without "
                              "x-next-page): it may be cut short, so nothing was removed; check what sits "
                              "between here and GitLab")

    async def iter_pages(self, path: str, params: dict[str, Any] | None = None) -> AsyncIterator[Page]:
        """Every page of a list, following the next links; fails on a loop or a doubtful end."""
        params = {"per_page": self.settings.per_page, **(params or {})}
        read: set[str] = set()
        page = await self.get_page(path, params)
        self.record_page(page, read)
        yield page
        while page.next_url and page.items:
            page = await self.get_page(page.next_url)
            self.record_page(page, read)
            yield page
        self.check_complete(page)

    async def get_all(self, path: str, params: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], datetime | None]:
        """All items of a complete list and the server time of its first page."""
        items: list[dict[str, Any]] = []
        first_time = None
        async for page in self.iter_pages(path, params):
            if first_time is None:
                first_time = page.server_time
            items.extend(page.items)
        return items, first_time

    # -- endpoints --------------------------------------------------------------------------

    async def current_user(self) -> dict[str, Any]:
        user: dict[str, Any] = await self.get("/user")
        return user

    async def project(self, project: str | int) -> dict[str, Any]:
        try:
            found: dict[str, Any] = await self.get(f"/projects/{encode_project(project)}")
            return found
        except NotFoundError:
            raise NotFoundError(
                f"GitLab project {project!r} not found at {self.settings.display_url} (or the token cannot see it)",
                status=404) from None

