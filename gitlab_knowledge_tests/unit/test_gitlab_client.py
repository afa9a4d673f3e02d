"""GitLabClient against an in-process MockTransport: auth, pagination, 429s, retries, errors."""

import asyncio
import email.utils
import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import httpx
import pytest

import gitlab_knowledge.redact as redact_module
from gitlab_knowledge.config import GitLabSettings
from gitlab_knowledge.errors import AuthError, GitLabError, KnowledgeError, NotFoundError
from gitlab_knowledge.gitlab.client import MAX_THROTTLE_RETRIES, MAX_THROTTLE_WAIT, ClientStats, GitLabClient

T = TypeVar("T")
TOKEN = "glpat-SECRET-abc123"
BASE = "https://gitlab.example.com"
API = BASE + "/api/v4"
Reply = Callable[[httpx.Request], httpx.Response]
Handler = Callable[[httpx.Request], httpx.Response | Awaitable[httpx.Response]]

# The issue-199738 response body: a 429 from an application limit, without Retry-After.
BODY_199738 = {"message": {"error": "This endpoint has been requested too many times. Try again later."}}


@pytest.fixture(autouse=True)
def isolated_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    # The client registers its token process-wide; keep that registration local to each test.
    monkeypatch.setattr(redact_module, "_secrets", set())


class MaxRandom(random.Random):
    """Every jitter draw returns its upper bound, so the caps themselves become observable."""

    def uniform(self, a: float, b: float) -> float:
        return b


def http_date(dt: datetime) -> str:
    return email.utils.format_datetime(dt, usegmt=True)


def reply(status: int = 200, body: Any = None, headers: dict[str, str] | None = None,
          raw: bytes | None = None) -> Reply:
    def make(request: httpx.Request) -> httpx.Response:
        if raw is not None:
            return httpx.Response(status, content=raw, headers=headers)
        return httpx.Response(status, json=[] if body is None else body, headers=headers)
    return make


def fail(exc_type: type[httpx.TransportError]) -> Reply:
    def make(request: httpx.Request) -> httpx.Response:
        # The token in the exception text checks that the client never copies httpx's message.
        raise exc_type(f"simulated failure for {request.url} ({TOKEN})", request=request)
    return make


class Script:
    """Answers requests with the given replies in order; the last one repeats forever."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = replies
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.replies[min(len(self.requests), len(self.replies)) - 1](request)


class Harness:
    """One client on a MockTransport, a recording fake sleep and a seeded rng."""

    def __init__(self, handler: Handler, *, rng: random.Random | None = None, token: str = TOKEN,
                 **overrides: Any) -> None:
        self.handler = handler
        self.sleeps: list[float] = []
        self.seen: list[httpx.Request] = []
        self.rng = rng if rng is not None else random.Random(7)
        self.token = token
        self.settings = GitLabSettings(url=BASE, **{"rate_limit": 0, **overrides})
        self.stats = ClientStats()

    async def _sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        result = self.handler(request)
        return await result if isinstance(result, Awaitable) else result

    def run(self, call: Callable[[GitLabClient], Awaitable[T]]) -> T:
        async def main() -> T:
            async with GitLabClient(self.settings, self.token, transport=httpx.MockTransport(self._handle),
                                    sleep=self._sleep, rng=self.rng) as gl:
                self.stats = gl.stats
                return await call(gl)
        return asyncio.run(main())

    @property
    def urls(self) -> list[str]:
        return [str(r.url) for r in self.seen]


def get(path: str) -> Callable[[GitLabClient], Awaitable[Any]]:
    return lambda gl: gl.get(path)


def get_all(path: str, params: dict[str, Any] | None = None) -> Callable[[GitLabClient], Awaitable[Any]]:
    return lambda gl: gl.get_all(path, params)


async def collect_pages(gl: GitLabClient, path: str, params: dict[str, Any] | None = None) -> list[Any]:
    return [page async for page in gl.iter_pages(path, params)]


def assert_one_line_without_token(exc: BaseException) -> None:
    # exc.args[0] is the raw message: str() redacts, so checking only str() could never fail.
    for text in (exc.args[0], str(exc), repr(exc)):
        assert TOKEN not in text
    assert "\n" not in str(exc)


# -- auth -----------------------------------------------------------------------------------------

def test_token_is_sent_as_private_token_header_and_never_in_the_url() -> None:
    link = f'<{API}/projects/7/issues?page=2&per_page=100>; rel="next"'
    h = Harness(Script(reply(body=[{"id": 1}], headers={"Link": link}), reply(body=[{"id": 2}])))

    items, _ = h.run(get_all("/projects/7/issues"))

    assert [i["id"] for i in items] == [1, 2]
    assert len(h.seen) == 2
    for request in h.seen:
        assert request.headers["PRIVATE-TOKEN"] == TOKEN
        assert TOKEN not in str(request.url)
        assert "authorization" not in request.headers


ERROR_SCENARIOS: dict[str, tuple[list[Reply], type[KnowledgeError]]] = {
    "401": ([reply(401, {"message": "401 Unauthorized"})], AuthError),
    "403": ([reply(403, {"message": "403 Forbidden"})], GitLabError),
    "404": ([reply(404, {"error": "404 Not Found"})], NotFoundError),
    "400 echoing the token": ([reply(400, {"message": f"token {TOKEN} is invalid"})], GitLabError),
    "500 forever": ([reply(500, {"message": "500 Internal Server Error"})], GitLabError),
    "503 forever": ([reply(503, raw=b"<html>Service Unavailable</html>")], GitLabError),
    "read timeout forever": ([fail(httpx.ReadTimeout)], GitLabError),
    "connect timeout forever": ([fail(httpx.ConnectTimeout)], GitLabError),
    "connect error forever": ([fail(httpx.ConnectError)], GitLabError),
    "dropped connection forever": ([fail(httpx.RemoteProtocolError)], GitLabError),
    "truncated json forever": ([reply(200, raw=b'[{"id": 1, "title": "trunc')], GitLabError),
    "429 forever": ([reply(429, raw=b"Retry later", headers={"Retry-After": "1"})], GitLabError),
    "429 too long": ([reply(429, raw=b"Retry later", headers={"Retry-After": "86400"})], GitLabError),
}


@pytest.mark.parametrize("scenario", list(ERROR_SCENARIOS))
def test_no_error_message_contains_the_token(scenario: str) -> None:
    replies, expected = ERROR_SCENARIOS[scenario]
    h = Harness(Script(*replies), max_retries=2)

    with pytest.raises(expected) as info:
        h.run(get("/projects/7/issues"))

    assert_one_line_without_token(info.value)


def test_project_not_found_message_does_not_contain_the_token() -> None:
    h = Harness(Script(reply(404, {"message": f"404 Project Not Found {TOKEN}"})))

    with pytest.raises(NotFoundError) as info:
        h.run(lambda gl: gl.project("group/sub/proj"))

    assert_one_line_without_token(info.value)


# -- pagination -----------------------------------------------------------------------------------

def paged_handler(pages: int, *, next_host: str, date: str) -> Callable[[httpx.Request], httpx.Response]:
    """Offset pagination as GitLab writes it, with Link URLs on `next_host` (a proxy's backend)."""

    def handle(request: httpx.Request) -> httpx.Response:
        page = int(request.url.params.get("page", "1"))
        base = f"{next_host}/api/v4/projects/7/issues?state=opened&per_page=2"
        # Same order as GitLab's documented example: prev, next, first, last.
        links = [f'<{base}&page={page - 1}>; rel="prev"'] if page > 1 else []
        if page < pages:
            links.append(f'<{base}&page={page + 1}>; rel="next"')
        links += [f'<{base}&page=1>; rel="first"', f'<{base}&page={pages}>; rel="last"']
        headers = {"Link": ", ".join(links), "Date": date, "x-page": str(page), "x-total": str(2 * pages)}
        return httpx.Response(200, json=[{"id": 2 * page - 1}, {"id": 2 * page}], headers=headers)

    return handle


def test_get_all_follows_link_next_across_three_pages_rebased_onto_the_configured_host() -> None:
    h = Harness(paged_handler(3, next_host="http://internal:8080", date="Mon, 18 Jan 2016 09:43:18 GMT"),
                per_page=2)

    items, server_time = h.run(get_all("/projects/7/issues", {"state": "opened"}))

    assert [i["id"] for i in items] == [1, 2, 3, 4, 5, 6]
    assert server_time == datetime(2016, 1, 18, 9, 43, 18, tzinfo=UTC)
    assert h.urls == [
        f"{API}/projects/7/issues?per_page=2&state=opened",
        f"{API}/projects/7/issues?state=opened&per_page=2&page=2",
        f"{API}/projects/7/issues?state=opened&per_page=2&page=3",
    ]
    assert all("internal" not in url for url in h.urls)


def test_iter_pages_yields_each_page_with_total_and_server_time() -> None:
    h = Harness(paged_handler(3, next_host=BASE, date="Thu, 30 Jan 2020 14:14:16 GMT"), per_page=2)

    pages = h.run(lambda gl: collect_pages(gl, "/projects/7/issues"))

    assert [[i["id"] for i in p.items] for p in pages] == [[1, 2], [3, 4], [5, 6]]
    assert [p.total for p in pages] == [6, 6, 6]
    assert pages[0].next_url is not None and pages[0].next_url.endswith("page=2")
    assert pages[-1].next_url is None
    assert pages[0].server_time == datetime(2020, 1, 30, 14, 14, 16, tzinfo=UTC)


def test_falls_back_to_x_next_page_when_there_is_no_link_header() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        page = int(request.url.params.get("page", "1"))
        # GitLab sends an empty x-next-page on the last page.
        headers = {"x-next-page": "2" if page == 1 else "", "x-page": str(page)}
        return httpx.Response(200, json=[{"id": page}], headers=headers)

    h = Harness(handle)

    items, _ = h.run(get_all("/projects/7/notes", {"sort": "asc"}))

    assert [i["id"] for i in items] == [1, 2]
    assert len(h.seen) == 2
    assert h.seen[1].url.host == "gitlab.example.com"
    assert dict(h.seen[1].url.params) == {"per_page": "100", "sort": "asc", "page": "2"}


def test_stops_when_gitlab_gives_no_next_page() -> None:
    h = Harness(Script(reply(body=[{"id": 1}])))

    pages = h.run(lambda gl: collect_pages(gl, "/projects/7/issues"))

    assert len(pages) == 1
    assert pages[0].next_url is None
    assert len(h.seen) == 1


def test_per_page_defaults_to_the_configured_value_and_can_be_overridden() -> None:
    h = Harness(Script(reply(body=[{"id": 1}])), per_page=37)

    h.run(get_all("/projects/7/issues"))
    h.run(get_all("/projects/7/issues", {"per_page": 5}))

    assert [r.url.params["per_page"] for r in h.seen] == ["37", "5"]


@pytest.mark.parametrize(("headers", "total"), [({"x-total": "8"}, 8), ({}, None)],
                         ids=["x-total", "omitted-over-10000"])
def test_page_total_comes_from_x_total(headers: dict[str, str], total: int | None) -> None:
    h = Harness(Script(reply(body=[{"id": 1}], headers=headers)))

    page = h.run(lambda gl: gl.get_page("/projects/7/issues"))

    assert page.total == total


def test_page_server_time_is_none_without_a_date_header() -> None:
    h = Harness(Script(reply(body=[])))

    page = h.run(lambda gl: gl.get_page("/projects/7/issues"))

    assert page.server_time is None


# -- 429 ------------------------------------------------------------------------------------------

def test_429_with_retry_after_waits_at_least_that_long_then_retries() -> None:
    h = Harness(Script(reply(429, raw=b"Retry later", headers={"Retry-After": "3"}), reply(body={"id": 1})))

    assert h.run(get("/projects/7")) == {"id": 1}

    assert len(h.seen) == 2
    assert len(h.sleeps) == 1
    assert 3.0 <= h.sleeps[0] <= 4.0
    assert h.stats.throttled == 1
    assert h.stats.retries == 1
    assert 3.0 <= h.stats.throttle_wait <= 4.0
    assert h.sleeps[0] == pytest.approx(h.stats.throttle_wait, abs=0.05)


def test_429_with_a_retry_after_date_waits_until_that_date() -> None:
    headers = {"Retry-After": "Thu, 30 Jan 2020 14:14:26 GMT", "Date": "Thu, 30 Jan 2020 14:14:16 GMT"}
    h = Harness(Script(reply(429, raw=b"Retry later", headers=headers), reply(body={"id": 1})))

    h.run(get("/projects/7"))

    assert 10.0 <= h.stats.throttle_wait <= 11.0


def test_429_with_only_ratelimit_reset_waits_until_the_reset() -> None:
    # The numbers of the real gitlab.com response in issue 199738: reset 14:15:17, Date 14:14:16.
    headers = {"RateLimit-Reset": "1580393717", "Date": "Thu, 30 Jan 2020 14:14:16 GMT"}
    h = Harness(Script(reply(429, BODY_199738, headers=headers), reply(body={"id": 1})))

    h.run(get("/projects/7/export"))

    assert 61.0 <= h.stats.throttle_wait <= 62.0
    assert h.sleeps == [pytest.approx(h.stats.throttle_wait, abs=0.05)]


def test_429_without_any_wait_header_backs_off_exponentially_then_succeeds() -> None:
    throttled = reply(429, BODY_199738, headers={"Date": "Thu, 30 Jan 2020 14:14:16 GMT"})
    h = Harness(Script(throttled, throttled, throttled, reply(body={"id": 1})), rng=MaxRandom())

    assert h.run(get("/projects/7/export")) == {"id": 1}

    # Caps base·2^n = 1, 2, 4 plus the jitter cap min(1, 0.1 + wait/10).
    assert h.sleeps == [pytest.approx(w, abs=0.05) for w in (1.2, 2.3, 4.5)]
    assert h.stats.throttled == 3
    assert h.stats.retries == 3
    assert h.stats.throttle_wait == pytest.approx(8.0)


def test_429_without_wait_header_with_seeded_jitter_stays_within_the_backoff_caps() -> None:
    throttled = reply(429, BODY_199738)
    h = Harness(Script(throttled, throttled, throttled, reply(body={"id": 1})), rng=random.Random(42))

    assert h.run(get("/projects/7/export")) == {"id": 1}

    assert h.stats.throttled == 3
    assert 0.0 <= h.stats.throttle_wait <= (1 + 2 + 4) + 3 * 1.0


@pytest.mark.parametrize("headers", [{"Retry-After": "1"}, {}], ids=["retry-after", "no-header"])
def test_429_forever_gives_up_after_a_bounded_number_of_attempts(headers: dict[str, str]) -> None:
    h = Harness(Script(reply(429, raw=b"Retry later", headers=headers)))

    with pytest.raises(GitLabError) as info:
        h.run(get("/projects/7/issues"))

    assert info.value.status == 429
    assert "429" in str(info.value)
    assert "/projects/7/issues" in str(info.value)
    assert len(h.seen) == MAX_THROTTLE_RETRIES + 1
    assert len(h.sleeps) == MAX_THROTTLE_RETRIES


def test_retry_after_beyond_the_maximum_wait_fails_at_once_without_sleeping() -> None:
    too_long = int(MAX_THROTTLE_WAIT * 4)
    h = Harness(Script(reply(429, raw=b"Retry later", headers={"Retry-After": str(too_long)}), reply(body={})))

    with pytest.raises(GitLabError) as info:
        h.run(get("/projects/7/issues"))

    assert h.sleeps == []
    assert len(h.seen) == 1
    assert info.value.status == 429
    message = str(info.value)
    assert f"{too_long}s" in message
    assert "rate_limit" in message


@pytest.mark.parametrize(("remaining", "expected_sleeps"), [("0", [5.0]), ("3", [])])
def test_an_exhausted_ratelimit_remaining_pauses_the_next_request_until_the_reset(
        remaining: str, expected_sleeps: list[float]) -> None:
    now = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
    headers = {"RateLimit-Remaining": remaining, "RateLimit-Reset": str(int(now.timestamp()) + 5),
               "Date": http_date(now)}
    h = Harness(Script(reply(body={"id": 1}, headers=headers), reply(body={"id": 2})))

    async def two_requests(gl: GitLabClient) -> list[Any]:
        return [await gl.get("/projects/1"), await gl.get("/projects/2")]

    assert h.run(two_requests) == [{"id": 1}, {"id": 2}]

    assert h.sleeps == [pytest.approx(s, abs=0.1) for s in expected_sleeps]
    assert h.stats.limiter_wait == pytest.approx(sum(expected_sleeps), abs=0.1)


# -- transient failures -------------------------------------------------------------------------

TRANSIENT: dict[str, tuple[Reply, str]] = {
    "500": (reply(500, {"message": "500 Internal Server Error"}), "HTTP 500"),
    "502": (reply(502, raw=b"<html>Bad Gateway</html>"), "HTTP 502"),
    "503": (reply(503, raw=b""), "HTTP 503"),
    "504": (reply(504, raw=b"Gateway Timeout"), "HTTP 504"),
    "ConnectTimeout": (fail(httpx.ConnectTimeout), "timeout"),
    "ReadTimeout": (fail(httpx.ReadTimeout), "timeout"),
    "ConnectError": (fail(httpx.ConnectError), "connection error (ConnectError)"),
    "RemoteProtocolError": (fail(httpx.RemoteProtocolError), "connection error (RemoteProtocolError)"),
    "truncated JSON": (reply(200, raw=b'[{"id": 1, "title": "half a pa'), "truncated or non-JSON response body"),
}


@pytest.mark.parametrize("fault", list(TRANSIENT))
def test_transient_failure_is_retried_with_full_jitter_backoff_until_it_stops(fault: str) -> None:
    failing, label = TRANSIENT[fault]
    h = Harness(Script(failing, failing, failing, reply(body=[{"id": 1}])), max_retries=5)

    assert h.run(get("/projects/7/issues")) == [{"id": 1}]

    assert len(h.seen) == 4
    assert h.stats.retries == 3
    assert h.stats.requests == 4
    assert h.stats.failures[label.split(" (")[0]] == 3
    assert len(h.sleeps) == 3
    for attempt, delay in enumerate(h.sleeps, start=1):
        assert 0.0 <= delay <= min(30.0, 0.5 * 2 ** attempt)


def test_backoff_delays_are_exactly_full_jitter_over_the_capped_exponential() -> None:
    h = Harness(Script(reply(503, raw=b"")), rng=random.Random(42), max_retries=7)

    with pytest.raises(GitLabError):
        h.run(get("/projects/7/issues"))

    twin = random.Random(42)
    caps = [min(30.0, 0.5 * 2 ** attempt) for attempt in range(1, 8)]
    assert caps == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert h.sleeps == pytest.approx([twin.random() * cap for cap in caps])


def test_backoff_caps_grow_exponentially_up_to_backoff_cap() -> None:
    h = Harness(Script(fail(httpx.ReadTimeout)), rng=MaxRandom(), max_retries=7)

    with pytest.raises(GitLabError):
        h.run(get("/projects/7/issues"))

    assert h.sleeps == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


@pytest.mark.parametrize("fault", list(TRANSIENT))
def test_after_max_retries_the_error_names_the_path_and_the_failure(fault: str) -> None:
    failing, label = TRANSIENT[fault]
    h = Harness(Script(failing), max_retries=3)

    with pytest.raises(GitLabError) as info:
        h.run(get_all("/projects/group%2Fproj/issues", {"state": "opened"}))

    message = str(info.value)
    assert len(h.seen) == 4
    assert len(h.sleeps) == 3
    assert "GET /projects/group%2Fproj/issues" in message
    assert "4 attempts" in message
    assert message.endswith(label)
    assert "\n" not in message


def test_the_exhaustion_error_names_the_last_failure_not_the_first() -> None:
    h = Harness(Script(reply(500), reply(502), fail(httpx.ReadTimeout)), max_retries=2)

    with pytest.raises(GitLabError) as info:
        h.run(get("/projects/7"))

    assert str(info.value).endswith(": timeout")
    assert "HTTP 50" not in str(info.value)
    assert dict(h.stats.failures) == {"HTTP 500": 1, "HTTP 502": 1, "timeout": 1}


# -- client errors --------------------------------------------------------------------------------

@pytest.mark.parametrize("token_env", ["GITLAB_TOKEN", "CORP_GITLAB_PAT"])
def test_401_is_an_auth_error_naming_the_token_variable_and_is_not_retried(token_env: str) -> None:
    h = Harness(Script(reply(401, {"message": "401 Unauthorized"}), reply(body={})), token_env=token_env)

    with pytest.raises(AuthError) as info:
        h.run(get("/user"))

    assert f"${token_env}" in str(info.value)
    assert len(h.seen) == 1
    assert h.sleeps == []
    assert h.stats.retries == 0


def test_403_is_a_gitlab_error_with_status_403_and_is_not_retried() -> None:
    h = Harness(Script(reply(403, {"message": "403 Forbidden"}), reply(body={})))

    with pytest.raises(GitLabError) as info:
        h.run(get("/projects/7/issues"))

    assert info.value.status == 403
    assert not isinstance(info.value, NotFoundError)
    assert "403" in str(info.value)
    assert len(h.seen) == 1
    assert h.sleeps == []


def test_404_is_a_not_found_error_and_is_not_retried() -> None:
    h = Harness(Script(reply(404, {"error": "404 Not Found"}), reply(body={})))

    with pytest.raises(NotFoundError) as info:
        h.run(get("/projects/7/nope"))

    assert info.value.status == 404
    assert "/projects/7/nope" in str(info.value)
    assert len(h.seen) == 1


def test_project_path_is_sent_url_encoded_as_one_segment() -> None:
    h = Harness(Script(reply(body={"id": 9, "path_with_namespace": "group/sub/proj"})))

    project = h.run(lambda gl: gl.project("group/sub/proj"))

    assert project["id"] == 9
    assert h.seen[0].url.raw_path == b"/api/v4/projects/group%2Fsub%2Fproj"


def test_project_404_names_the_project() -> None:
    h = Harness(Script(reply(404, {"message": "404 Project Not Found"})))

    with pytest.raises(NotFoundError) as info:
        h.run(lambda gl: gl.project("group/sub/proj"))

    assert "'group/sub/proj'" in str(info.value)
    assert info.value.status == 404


def test_400_surfaces_gitlabs_message() -> None:
    h = Harness(Script(reply(400, {"message": '400 (Bad request) "title" not given'})))

    with pytest.raises(GitLabError) as info:
        h.run(get("/projects/7/issues"))

    assert info.value.status == 400
    assert '"title" not given' in str(info.value)
    assert len(h.seen) == 1


# -- concurrency ----------------------------------------------------------------------------------

def run_concurrently(concurrency: int, requests: int = 6) -> tuple[int, Harness]:
    in_flight = 0
    peak = 0

    async def handle(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        for _ in range(5):
            await asyncio.sleep(0)
        in_flight -= 1
        return httpx.Response(200, json={"path": request.url.path})

    h = Harness(handle, concurrency=concurrency)

    async def launch(gl: GitLabClient) -> list[Any]:
        return await asyncio.gather(*(gl.get(f"/projects/{n}") for n in range(requests)))

    results = h.run(launch)
    assert [r["path"] for r in results] == [f"/api/v4/projects/{n}" for n in range(requests)]
    return peak, h


def test_no_more_than_concurrency_requests_are_in_flight() -> None:
    peak, h = run_concurrently(concurrency=2)

    assert peak == 2
    assert len(h.seen) == 6


def test_the_in_flight_counter_does_see_overlap_when_concurrency_allows_it() -> None:
    # Without this, the bound above could pass simply because the handler never overlapped.
    peak, _ = run_concurrently(concurrency=6)

    assert peak > 2


# -- hostile servers -----------------------------------------------------------------------------

def test_an_exhausted_quota_says_why_and_how_long_it_waits() -> None:
    now = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
    headers = {"RateLimit-Remaining": "0", "RateLimit-Reset": str(int(now.timestamp()) + 120), "Date": http_date(now)}
    said: list[str] = []

    async def two(gl: GitLabClient) -> None:
        gl.notify = said.append
        await gl.get("/projects/1")
        await gl.get("/projects/2")

    Harness(Script(reply(body={"id": 1}, headers=headers), reply(body={"id": 2}))).run(two)

    assert len(said) == 1 and "RateLimit-Remaining: 0" in said[0] and "120s" in said[0]


def test_a_next_link_back_to_a_page_already_read_is_a_loop_not_an_endless_listing() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=[{"id": 1}], headers={"Link": f'<{API}/projects/7/notes?per_page=1>; rel="next"'})

    h = Harness(handle)
    with pytest.raises(GitLabError, match="pagination loop"):
        h.run(get_all("/projects/7/notes", {"per_page": 1}))
    assert len(h.seen) == 2


@pytest.mark.parametrize("headers", [{}, {"x-page": "1", "x-total": "9"}])
def test_a_full_page_that_gitlab_does_not_mark_as_the_last_fails_the_listing(headers: dict[str, str]) -> None:
    h = Harness(Script(reply(body=[{"id": 1}, {"id": 2}], headers=headers)))
    with pytest.raises(GitLabError, match="not mark as its last page"):
        h.run(get_all("/projects/7/issues", {"per_page": 2}))


def test_an_empty_page_with_more_announced_fails_the_listing() -> None:
    h = Harness(Script(reply(body=[], headers={"x-page": "1", "x-per-page": "20", "x-total": "9"})))
    with pytest.raises(GitLabError, match="not mark as its last page"):
        h.run(get_all("/projects/7/issues"))


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
def test_a_body_past_the_cap_is_one_error_not_the_machines_memory(monkeypatch: pytest.MonkeyPatch,
                                                                  encoding: str) -> None:
    import gzip

    import gitlab_knowledge.gitlab.client as client_module

    monkeypatch.setattr(client_module, "MAX_BODY_BYTES", 1000)
    body = b"[" + b" " * 5000 + b"]"
    raw = gzip.compress(body) if encoding == "gzip" else body
    h = Harness(Script(reply(raw=raw, headers={"Content-Encoding": encoding})))
    with pytest.raises(GitLabError, match="larger than") as info:
        h.run(get("/projects/7/issues"))
    assert len(h.seen) == 1  # not retried: the same answer would come again
    assert_one_line_without_token(info.value)
