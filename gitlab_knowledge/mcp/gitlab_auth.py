"""`[mcp] auth = "gitlab"`: each HTTP client is the GitLab user whose token it sends.

A client sends its own GitLab token (a personal access token or an OAuth access token) as
`Authorization: Bearer`. The server asks GitLab, with that token, who it is and which synced
projects it reads at what level (docs/gitlab-api-permissions.md has the calls and GitLab's rules
they rely on), builds a `Viewer` and hands it to the tool handlers through the request
(mcp/asking.py). GitLab's answer is trusted for `[mcp] auth_cache_seconds`: a revoked token or a
removed membership takes effect within that bound.

The token is never stored: the cache is keyed by its SHA-256, it is registered for redaction, and
no answer, log line or exception names it. A token GitLab refuses is a 401 of one line; GitLab
not answering is a 503 of one line. `/.well-known/oauth-protected-resource` (RFC 9728) names the
configured GitLab as the authorization server, for clients that get a token by OAuth themselves.
With the server's store reader, the guard also keeps the confidential flips GitLab made since the
sync at most `auth_cache_seconds` old before it lets a request through (mcp/confidential_watch.py).
"""

import asyncio
import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx

from gitlab_knowledge.config import Config, GitLabSettings
from gitlab_knowledge.errors import AuthError, GitLabError, NotFoundError
from gitlab_knowledge.gitlab.client import GitLabClient
from gitlab_knowledge.mcp.asking import SCOPE_TOKEN, SCOPE_VIEWER
from gitlab_knowledge.mcp.confidential_watch import ConfidentialCheck, ConfidentialWatch
from gitlab_knowledge.redact import forget_secret, is_secret, redact
from gitlab_knowledge.store.reader import StoreReader
from gitlab_knowledge.viewer import DEVELOPER, GUEST, MAINTAINER, NO_ACCESS, OWNER, PLANNER, REPORTER, Viewer

ASGIApp = Callable[[MutableMapping[str, Any], Any, Any], Awaitable[None]]
METADATA_PATH = "/.well-known/oauth-protected-resource"
MCP_PATH = "/mcp"
# `min_access_level` takes the roles; a project listed at a level and not at the next is at that level.
LEVELS = (GUEST, PLANNER, REPORTER, DEVELOPER, MAINTAINER, OWNER)
MAX_TOKEN_CHARS = 4096
MAX_ENTRIES = 10_000  # cached viewers; the oldest go first past this
MAX_LOOKUPS = 8  # look-ups in flight at once: a flood of made-up tokens costs GitLab this much at a time
LOOKUP_RETRIES = 1  # a client waits on these calls: one retry, then 503
log = logging.getLogger(__name__)


class TokenRefused(Exception):
    """GitLab refused the token (401, or 403 for a token without the scope to read /user)."""


class GitLabUnreachable(Exception):
    """GitLab did not answer who the token is (down, timing out, a 5xx)."""


def token_key(token: str) -> str:
    """What the cache is keyed by: never the token itself."""
    return hashlib.sha256(token.encode()).hexdigest()


async def ask_gitlab(settings: GitLabSettings, projects: tuple[str, ...], token: str,
                     transport: httpx.AsyncBaseTransport | None = None) -> Viewer:
    """The Viewer GitLab describes for `token`: who it is and the synced projects (`projects`,
    the config's paths) it reads, with its access level in each."""
    quick = dataclasses.replace(settings, max_retries=min(settings.max_retries, LOOKUP_RETRIES), rate_limit=0)
    known = is_secret(token)  # e.g. the sync's own token: stays masked whatever GitLab says now
    try:
        return await _ask(quick, projects, token, transport)
    except TokenRefused:
        if not known:
            forget_secret(token)
        raise


async def _ask(quick: GitLabSettings, projects: tuple[str, ...], token: str,
               transport: httpx.AsyncBaseTransport | None) -> Viewer:
    try:
        async with GitLabClient(quick, token, transport=transport, bearer=True) as gl:
            try:
                user = await gl.current_user()
            except GitLabError as exc:
                if exc.status == 403:
                    raise TokenRefused() from None
                raise
            admin = bool(user.get("is_admin"))
            access, visibility = ({}, {}) if admin else await _access(gl, projects)
    except AuthError:
        raise TokenRefused() from None
    except GitLabError as exc:
        raise GitLabUnreachable(redact(str(exc))) from None
    return Viewer(user_id=int(user["id"]), username=str(user.get("username") or ""), is_admin=admin,
                  external=bool(user.get("external")), access=access, visibility=visibility)


async def _access(gl: GitLabClient, projects: tuple[str, ...]) -> tuple[dict[int, int], dict[int, str]]:
    """(synced project id → the user's level, → its visibility), for the synced projects the user reads.

    The membership lists say the levels (GitLab counts inherited and shared-group membership in
    them); a synced project in none of them is asked for by path, which GitLab answers for a
    public project, an internal one (unless the user is external), or 404. The Guest list is
    asked in full (not `simple`), whose projects carry their `visibility`: a Guest of a private
    project does not see its merge requests."""
    async def member_of(level: int, simple: bool = True) -> dict[int, dict[str, Any]]:
        rows, _ = await gl.get_all("/projects", {"membership": "true", "min_access_level": level,
                                                 **({"simple": "true"} if simple else {})})
        return {int(r["id"]): r for r in rows}

    wanted = {p.lower() for p in projects}
    guest = await member_of(GUEST, simple=False)
    paths = {str(r.get("path_with_namespace") or "").lower(): pid for pid, r in guest.items()}

    async def readable(path: str) -> dict[str, Any] | None:
        try:
            return await gl.project(path)
        except NotFoundError:
            return None

    # A synced project is found by its path in the list, else asked for (an old path still answers).
    found = {paths[p]: guest[paths[p]] for p in wanted if p in paths}
    found |= {int(r["id"]): r for r in await asyncio.gather(*(readable(p) for p in wanted if p not in paths))
              if r is not None}
    synced = set(found)
    levels = {pid: GUEST for pid in guest}
    if synced & set(guest):  # the higher levels matter only where a synced project is a membership
        for level, listed in zip(LEVELS[1:], await asyncio.gather(*(member_of(lv) for lv in LEVELS[1:])), strict=True):
            for pid in listed:
                levels[pid] = max(levels.get(pid, NO_ACCESS), level)
    visibility = {pid: str(r["visibility"]) for pid, r in found.items() if isinstance(r.get("visibility"), str)}
    return {pid: levels.get(pid, NO_ACCESS) for pid in sorted(synced)}, visibility


class ViewerCache:
    """Viewers by token hash, each trusted for `seconds`; one GitLab look-up per token at a time."""

    def __init__(self, lookup: Callable[[str], Awaitable[Viewer]], seconds: float,
                 clock: Callable[[], float] = time.monotonic, max_entries: int = MAX_ENTRIES) -> None:
        self._lookup = lookup
        self._seconds = seconds
        self._clock = clock
        self._max = max_entries
        self._entries: dict[str, tuple[float, Viewer]] = {}
        self._pending: dict[str, asyncio.Future[Viewer]] = {}
        self._lookups = asyncio.Semaphore(MAX_LOOKUPS)

    async def viewer(self, token: str) -> Viewer:
        """The token's Viewer; raises TokenRefused or GitLabUnreachable."""
        if not token or len(token) > MAX_TOKEN_CHARS or not (token.isascii() and token.isprintable()) or " " in token:
            raise TokenRefused()  # no GitLab token looks like this; an HTTP header could not carry it on
        key = token_key(token)
        entry = self._entries.get(key)
        if entry is not None and self._clock() < entry[0]:
            return entry[1]
        self._entries.pop(key, None)
        pending = self._pending.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._limited(token))
            self._pending[key] = pending
            pending.add_done_callback(lambda done: self._settle(key, done))
        return await asyncio.shield(pending)

    async def _limited(self, token: str) -> Viewer:
        async with self._lookups:
            return await self._lookup(token)

    def _settle(self, key: str, done: "asyncio.Future[Viewer]") -> None:
        self._pending.pop(key, None)
        if done.cancelled() or done.exception() is not None:
            return  # refusals and failures are asked again next time, never cached
        if len(self._entries) >= self._max:
            self._entries.pop(next(iter(self._entries)))
        self._entries[key] = (self._clock() + self._seconds, done.result())


def resource_url(scope: MutableMapping[str, Any]) -> str:
    """The MCP endpoint as the client addressed it (RFC 9728's `resource`)."""
    headers = dict(scope.get("headers") or [])
    host = headers.get(b"host", b"").decode("latin-1").strip()
    if not host:
        server = scope.get("server") or ("127.0.0.1", 0)
        host = f"{server[0]}:{server[1]}"
    return f"{scope.get('scheme', 'http')}://{host}{MCP_PATH}"


def metadata(scope: MutableMapping[str, Any], gitlab_url: str) -> dict[str, Any]:
    return {"resource": resource_url(scope), "authorization_servers": [gitlab_url.rstrip("/")],
            "bearer_methods_supported": ["header"], "scopes_supported": ["read_api"],
            "resource_name": "gitlab_knowledge"}


async def _answer(send: Any, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None) -> None:
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": payload})


def gitlab_users(app: ASGIApp, cache: ViewerCache, gitlab_url: str, watch: ConfidentialWatch | None = None) -> ASGIApp:
    """Serve the protected resource metadata; let through only requests whose GitLab token GitLab
    accepts, with the Viewer in the request's scope for the tool handlers (mcp/asking.py), once
    `watch` says the confidential flips it knows are fresh."""

    async def guarded(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        path = scope.get("path", "")
        if path in (METADATA_PATH, METADATA_PATH + MCP_PATH):
            await _answer(send, 200, metadata(scope, gitlab_url))
            return
        where = resource_url(scope)[: -len(MCP_PATH)] + METADATA_PATH
        challenge = f'Bearer resource_metadata="{where}"'
        sent = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
        scheme, _, token = sent.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            await _answer(send, 401, {"error": "send your GitLab token (a personal access token with read_api, or "
                                                "an OAuth access token) as Authorization: Bearer <token>"},
                          [(b"www-authenticate", challenge.encode())])
            return
        try:
            viewer = await cache.viewer(token)
        except TokenRefused:
            await _answer(send, 401, {"error": "GitLab refused this token (revoked, expired or without read_api): "
                                                "send a valid GitLab token as Authorization: Bearer <token>"},
                          [(b"www-authenticate", (challenge + ', error="invalid_token"').encode())])
            return
        except GitLabUnreachable as exc:
            log.warning("could not ask GitLab who a client is: %s", exc)
            await _answer(send, 503, {"error": f"GitLab at {gitlab_url} did not answer who this token is: "
                                                "try again later"}, [(b"retry-after", b"30")])
            return
        if watch is not None:  # after the token: a client GitLab refuses costs no check
            await watch.fresh()
        await app({**scope, SCOPE_VIEWER: viewer, SCOPE_TOKEN: token}, receive, send)

    return guarded


def gitlab_auth_app(app: ASGIApp, config: Config, clock: Callable[[], float] = time.monotonic,
                    transport: httpx.AsyncBaseTransport | None = None, reader: StoreReader | None = None) -> ASGIApp:
    """`app` behind the GitLab users guard configured by `config`; with the server's `reader`
    (one with an overlay), confidential flips are checked with the sync's token every
    `auth_cache_seconds`."""
    async def lookup(token: str) -> Viewer:
        return await ask_gitlab(config.gitlab, config.projects, token, transport)

    cache = ViewerCache(lookup, config.mcp.auth_cache_seconds, clock)
    watch = None
    if reader is not None and reader.overlay is not None:
        check = ConfidentialCheck(config, reader, config.token(), transport)
        watch = ConfidentialWatch(check, config.mcp.auth_cache_seconds, clock)
    return gitlab_users(app, cache, config.gitlab.display_url, watch)
