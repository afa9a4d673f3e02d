"""Fault injection (spec grammar, deterministic selection, each kind over HTTP) and rate limiting."""

import json
import threading
import time
from typing import Any

import httpx
import pytest

from gitlab_knowledge_sandbox import FaultSpecError, SandboxGitLab
from gitlab_knowledge_sandbox.faults import FaultInjector, parse_faults
from gitlab_knowledge_sandbox.ratelimit import RateLimiter

# -- grammar ---------------------------------------------------------------------------------


def test_parse_full_spec() -> None:
    rules = parse_faults("500:p=0.25,seed=7,after=2,count=3;429:retry_after=none,reset=none;"
                         "timeout:delay=1.5,path=/discussions;latency:ms=20,every=4,burst=2;drop;truncate")
    assert [r.kind for r in rules] == ["500", "429", "timeout", "latency", "drop", "truncate"]
    assert (rules[0].p, rules[0].seed, rules[0].after, rules[0].count) == (0.25, 7, 2, 3)
    assert (rules[1].fault.retry_after, rules[1].fault.reset) == (None, False)
    assert rules[2].fault.delay == 1.5
    assert rules[2].path is not None and rules[2].path.pattern == "/discussions"
    assert (rules[3].fault.ms, rules[3].every, rules[3].burst) == (20.0, 4, 2)


def test_path_regex_may_contain_commas() -> None:
    rule = parse_faults("503:path=/issues/\\d{1,3}$,count=1")[0]
    assert rule.path is not None and rule.path.pattern == "/issues/\\d{1,3}$"
    assert rule.count == 1


@pytest.mark.parametrize("spec", ["418", "500:q=1", "500:p=2", "500:p=x", "500:burst=2", "500:every=2,burst=3",
                                  "500:path=(", "429:retry_after=soon", "429:reset=later", "timeout:ms=3",
                                  "500:count=-1", "500:p", "500:p=0.1,p=0.2"])
def test_bad_specs_are_rejected(spec: str) -> None:
    with pytest.raises(FaultSpecError):
        parse_faults(spec)


def test_blank_spec_means_no_faults() -> None:
    assert parse_faults(None) == [] and parse_faults(" ; ") == []


# -- selection (no sockets) ------------------------------------------------------------------


def fired(spec: str, n: int, path: str = "/api/v4/projects/1/issues", method: str = "GET") -> list[str | None]:
    injector = FaultInjector(spec)
    return [(f.kind if (f := injector.pick(method, path)) else None) for _ in range(n)]


def test_without_selectors_every_request_fires() -> None:
    assert fired("502", 3) == ["502", "502", "502"]


def test_after_and_count() -> None:
    assert fired("500:after=2,count=2", 6) == [None, None, "500", "500", None, None]


def test_every_and_burst() -> None:
    assert fired("503:every=4,burst=2", 8) == ["503", "503", None, None, "503", "503", None, None]
    assert fired("503:after=1,every=3", 7) == [None, "503", None, None, "503", None, None]


def test_probability_is_seeded_and_repeatable() -> None:
    first = fired("500:p=0.5,seed=3", 40)
    assert first == fired("500:p=0.5,seed=3", 40)
    assert 5 < first.count("500") < 35
    assert first != fired("500:p=0.5,seed=4", 40)
    assert fired("500:p=0", 10) == [None] * 10
    assert fired("500:p=1", 3) == ["500"] * 3


def test_path_and_method_filters() -> None:
    injector = FaultInjector("drop:path=/discussions;500:method=POST")
    assert injector.pick("GET", "/api/v4/projects/1/issues") is None
    assert injector.pick("GET", "/api/v4/projects/1/issues/2/discussions").kind == "drop"
    assert injector.pick("POST", "/api/v4/projects/1/issues").kind == "500"


def test_first_rule_that_fires_wins() -> None:
    assert fired("500:count=1;503:count=1", 3) == ["500", "503", None]


# -- each kind over HTTP ---------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "message"), [("500", "500 Internal Server Error"), ("502", "502 Bad Gateway"),
                                               ("503", "503 Service Unavailable")])
def test_server_errors(make_sandbox: Any, client_for: Any, kind: str, message: str) -> None:
    client = client_for(make_sandbox(faults=f"{kind}:count=1"))
    response = client.get("/projects")
    assert (response.status_code, response.json()) == (int(kind), {"message": message})
    assert response.headers["content-type"] == "application/json"
    assert client.get("/projects").status_code == 200


def test_injected_429_defaults(make_sandbox: Any, client_for: Any) -> None:
    response = client_for(make_sandbox(faults="429")).get("/projects")
    assert response.status_code == 429
    assert response.headers["content-type"] == "text/plain"
    assert response.text.strip() == "Retry later"
    assert response.headers["retry-after"] == "1"
    assert int(response.headers["ratelimit-reset"]) == 1767268801  # the frozen clock + 1 s
    assert response.headers["ratelimit-resettime"] == "Thu, 01 Jan 2026 12:00:01 GMT"
    assert response.headers["ratelimit-remaining"] == "0"
    assert response.headers["ratelimit-name"] == "throttle_authenticated_api"


def test_injected_429_without_retry_after(make_sandbox: Any, client_for: Any) -> None:
    response = client_for(make_sandbox(faults="429:retry_after=none")).get("/projects")
    assert response.status_code == 429
    assert "retry-after" not in response.headers
    assert "ratelimit-reset" in response.headers
    response = client_for(make_sandbox(faults="429:retry_after=none,reset=none")).get("/projects")
    assert "retry-after" not in response.headers
    assert "ratelimit-reset" not in response.headers
    assert "ratelimit-resettime" not in response.headers


def test_injected_429_custom_retry_after(make_sandbox: Any, client_for: Any) -> None:
    response = client_for(make_sandbox(faults="429:retry_after=7")).get("/projects")
    assert response.headers["retry-after"] == "7"


def test_drop_closes_without_a_response(make_sandbox: Any, client_for: Any) -> None:
    client = client_for(make_sandbox(faults="drop:count=1"))
    with pytest.raises(httpx.RemoteProtocolError):
        client.get("/projects")
    assert client.get("/projects").status_code == 200


def test_timeout_stalls_then_closes(make_sandbox: Any, client_for: Any) -> None:
    sb = make_sandbox(faults="timeout:delay=0.3,count=2")
    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        client_for(sb, timeout=0.1).get("/projects")
    with pytest.raises(httpx.RemoteProtocolError):
        client_for(sb, timeout=5).get("/projects")
    assert time.monotonic() - started >= 0.3
    assert client_for(sb).get("/projects").status_code == 200


def test_stop_ends_a_stalled_timeout_quickly(make_sandbox: Any, client_for: Any) -> None:
    # The fault stalls for an hour; the stop must end the stall, not wait it out. The join's deadline
    # is a hang detector (30x below the stall), not a speed bound.
    sb = make_sandbox(faults="timeout:delay=3600")
    with pytest.raises(httpx.ReadTimeout):
        client_for(sb, timeout=0.2).get("/projects")
    stopping = threading.Thread(target=sb.stop, daemon=True)
    stopping.start()
    stopping.join(timeout=120)
    assert not stopping.is_alive(), "stop() waited for the stalled request"


def test_truncate_breaks_only_the_json(make_sandbox: Any, client_for: Any) -> None:
    client = client_for(make_sandbox(faults="truncate:count=1"))
    broken = client.get("/projects/101/issues")
    intact = client.get("/projects/101/issues")
    assert broken.status_code == 200
    assert int(broken.headers["content-length"]) == len(broken.content)
    assert abs(len(broken.content) - len(intact.content) // 2) <= 1
    assert broken.headers["x-total"] == intact.headers["x-total"]
    with pytest.raises(json.JSONDecodeError):
        json.loads(broken.content)


def test_latency_fault_and_latency_option(make_sandbox: Any, client_for: Any) -> None:
    client = client_for(make_sandbox(faults="latency:ms=150,count=1"))
    started = time.monotonic()
    assert client.get("/user").status_code == 200
    assert time.monotonic() - started >= 0.15
    client = client_for(make_sandbox(latency_ms=100))
    started = time.monotonic()
    client.get("/user")
    assert time.monotonic() - started >= 0.1


def test_path_selector_over_http(make_sandbox: Any, client_for: Any) -> None:
    client = client_for(make_sandbox(faults="503:path=/discussions"))
    assert client.get("/projects/101/issues").status_code == 200
    assert client.get("/projects/101/issues/1/discussions").status_code == 503


def test_faults_never_hit_control_routes(make_sandbox: Any) -> None:
    sb = make_sandbox(faults="500")
    assert httpx.get(sb.url + "/-/sandbox/stats").status_code == 200


def test_set_faults_at_runtime(sandbox: SandboxGitLab, client: httpx.Client) -> None:
    sandbox.set_faults("502:count=1")
    assert client.get("/user").status_code == 502
    assert client.get("/user").status_code == 200
    sandbox.set_faults(None)
    with pytest.raises(FaultSpecError):
        sandbox.set_faults("nope")


def test_faulted_requests_are_counted(make_sandbox: Any, client_for: Any) -> None:
    sb = make_sandbox(faults="500:count=2;drop:count=1")
    client = client_for(sb)
    for _ in range(2):
        client.get("/projects")
    with pytest.raises(httpx.RemoteProtocolError):
        client.get("/projects")
    client.get("/projects")
    stats = sb.stats()
    assert stats["requests"] == 4
    assert stats["by_route"] == {"projects": 4}
    assert stats["faults"] == {"500": 2, "drop": 1}
    assert stats["status"] == {"500": 2, "200": 1}


# -- rate limiting -----------------------------------------------------------------------------


def test_rate_limit_token_bucket(make_sandbox: Any, client_for: Any) -> None:
    sb = make_sandbox(rate_limit=2)
    tick = [1000.0]
    sb.limiter = RateLimiter(2, monotonic=lambda: tick[0])  # a fake monotonic clock: no luck involved
    client = client_for(sb)
    first, second = client.get("/user"), client.get("/user")
    assert (first.status_code, second.status_code) == (200, 200)
    assert (first.headers["ratelimit-limit"], first.headers["ratelimit-remaining"]) == ("2", "1")
    assert (second.headers["ratelimit-remaining"], second.headers["ratelimit-observed"]) == ("0", "2")
    assert first.headers["ratelimit-name"] == "throttle_authenticated_api"
    assert int(first.headers["ratelimit-reset"]) >= 1767268800
    throttled = client.get("/user")
    assert throttled.status_code == 429
    assert throttled.headers["content-type"] == "text/plain"
    assert throttled.text.strip() == "Retry later"
    assert throttled.headers["retry-after"] == "1"
    assert throttled.headers["ratelimit-resettime"] == "Thu, 01 Jan 2026 12:00:01 GMT"
    tick[0] += 0.5  # refills one token at 2/s
    assert client.get("/user").status_code == 200
    assert client.get("/user").status_code == 429
    assert sb.stats()["status"] == {"200": 3, "429": 2}


def test_rate_limit_is_per_token(make_sandbox: Any, client_for: Any) -> None:
    sb = make_sandbox(rate_limit=1, token=["t1", "t2"])
    tick = [0.0]
    sb.limiter = RateLimiter(1, monotonic=lambda: tick[0])
    assert client_for(sb, "t1").get("/user").status_code == 200
    assert client_for(sb, "t1").get("/user").status_code == 429
    assert client_for(sb, "t2").get("/user").status_code == 200


def test_slow_rate_retry_after_rounds_up(make_sandbox: Any, client_for: Any) -> None:
    sb = make_sandbox(rate_limit=0.25)
    sb.limiter = RateLimiter(0.25, monotonic=lambda: 5.0)
    client = client_for(sb)
    client.get("/user")
    assert client.get("/user").headers["retry-after"] == "4"
