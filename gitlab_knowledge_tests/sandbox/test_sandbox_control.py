"""The /-/sandbox control routes, the clock, and the sandbox lifecycle."""

from datetime import UTC, datetime
from typing import Any

import httpx

from gitlab_knowledge_sandbox import SandboxClock, SandboxGitLab


def test_stats_route_counts_api_requests_by_route(sandbox: SandboxGitLab, client: httpx.Client) -> None:
    client.get("/user")
    client.get("/projects")
    client.get("/projects/101")
    client.get("/projects/101/issues")
    client.get("/projects/101/issues/1")
    client.get("/projects/101/issues/1/discussions")
    client.get("/projects/101/merge_requests")
    client.get("/projects/101/merge_requests/1")
    client.get("/projects/101/merge_requests/1/discussions")
    client.post("/projects/101/issues", json={"title": "x"})
    client.get("/projects/101/issues/404")
    client.get("/bogus")
    stats = httpx.get(sandbox.url + "/-/sandbox/stats").json()
    assert stats["requests"] == 12
    assert stats["by_route"] == {
        "user": 1, "projects": 1, "project": 1, "issues": 1, "issue": 2, "issue_discussions": 1,
        "merge_requests": 1, "merge_request": 1, "merge_request_discussions": 1, "mutation": 1, "unknown": 1,
    }
    assert stats["status"] == {"200": 9, "201": 1, "404": 2}
    assert stats["faults"] == {}
    assert stats == sandbox.stats()


def test_stats_reset_route(sandbox: SandboxGitLab, client: httpx.Client) -> None:
    client.get("/user")
    response = httpx.post(sandbox.url + "/-/sandbox/stats/reset")
    assert response.status_code == 200
    assert sandbox.stats() == {"requests": 0, "by_route": {}, "status": {}, "faults": {}}
    client.get("/user")
    sandbox.reset_stats()
    assert sandbox.stats()["requests"] == 0


def test_unauthenticated_requests_are_counted(sandbox: SandboxGitLab) -> None:
    httpx.get(sandbox.url + "/api/v4/user")
    assert sandbox.stats()["status"] == {"401": 1}


def test_clock_route(sandbox: SandboxGitLab, client: httpx.Client) -> None:
    response = httpx.post(sandbox.url + "/-/sandbox/clock", json={"advance": 90})
    assert response.json() == {"now": "2026-01-01T12:01:30.000Z"}
    response = httpx.post(sandbox.url + "/-/sandbox/clock", json={"set": "2027-03-04T05:06:07Z"})
    assert response.json() == {"now": "2027-03-04T05:06:07.000Z"}
    assert client.get("/user").headers["date"] == "Thu, 04 Mar 2027 05:06:07 GMT"
    assert client.post("/projects/101/issues", json={"title": "t"}).json()["created_at"] == "2027-03-04T05:06:07.000Z"
    assert httpx.post(sandbox.url + "/-/sandbox/clock", json={"set": "nope"}).status_code == 400


def test_faults_route(sandbox: SandboxGitLab, client: httpx.Client) -> None:
    response = httpx.post(sandbox.url + "/-/sandbox/faults", json={"spec": "503:count=1"})
    assert response.json() == {"spec": "503:count=1"}
    assert client.get("/user").status_code == 503
    assert client.get("/user").status_code == 200
    assert httpx.post(sandbox.url + "/-/sandbox/faults", json={"spec": "bogus"}).status_code == 400
    assert httpx.post(sandbox.url + "/-/sandbox/faults", json={"spec": None}).json() == {"spec": None}
    assert httpx.get(sandbox.url + "/-/sandbox/nothing").status_code == 404


def test_clock_modes() -> None:
    clock = SandboxClock()
    real = datetime.now(UTC)
    assert abs((clock.now() - real).total_seconds()) < 5
    clock.advance(3600)
    assert 3590 < (clock.now() - real).total_seconds() < 3610
    assert not clock.frozen
    instant = datetime(2030, 1, 1, tzinfo=UTC)
    clock.set(instant)
    assert clock.frozen and clock.now() == instant
    clock.advance(1.5)
    assert clock.now() == datetime(2030, 1, 1, 0, 0, 1, 500000, tzinfo=UTC)
    clock.unfreeze()
    assert clock.now() >= datetime(2030, 1, 1, 0, 0, 1, 500000, tzinfo=UTC)
    naive = SandboxClock(frozen_at=datetime(2031, 5, 5))
    assert naive.now().tzinfo is not None


def test_context_manager_and_url(tiny_dataset: Any) -> None:
    with SandboxGitLab(tiny_dataset) as sb:
        assert sb.url.startswith("http://127.0.0.1:") and not sb.url.endswith("/")
        assert sb.port > 0
        url = sb.url
        assert httpx.get(url + "/-/sandbox/stats").status_code == 200
    try:
        httpx.get(url + "/-/sandbox/stats", timeout=1)
        reachable = True
    except httpx.TransportError:
        reachable = False
    assert not reachable


def test_keep_alive_connections_are_closed_on_stop(make_sandbox: Any, client_for: Any) -> None:
    sb = make_sandbox()
    client = client_for(sb)
    assert client.get("/user").status_code == 200  # leaves a pooled keep-alive connection
    sb.stop()
    try:
        client.get("/user")
        served = True
    except httpx.TransportError:
        served = False
    assert not served


def test_concurrent_clients(make_sandbox: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    sb = make_sandbox()

    def fetch(n: int) -> int:
        with httpx.Client(base_url=sb.url + "/api/v4", headers={"PRIVATE-TOKEN": sb.token}, verify=False) as c:
            return sum(c.get("/projects/101/issues", params={"page": 1 + n % 2, "per_page": 3}).status_code
                       for _ in range(5))

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(fetch, range(8))) == [1000] * 8
    assert sb.stats()["requests"] == 40
