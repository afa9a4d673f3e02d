"""The GitLab users guard's pure parts: the calls that describe a token (httpx.MockTransport
playing GitLab) and the viewer cache (a fake look-up and an injected clock)."""

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest

from gitlab_knowledge.config import parse_config
from gitlab_knowledge.mcp.gitlab_auth import (
    GitLabUnreachable,
    TokenRefused,
    ViewerCache,
    ask_gitlab,
    token_key,
)
from gitlab_knowledge.redact import is_secret, redact, register_secret
from gitlab_knowledge.viewer import DEVELOPER, GUEST, NO_ACCESS, PLANNER, REPORTER, Viewer

TOKEN = "glpat-unit-0123456789"
PROJECTS = [{"id": 1, "path_with_namespace": "g/one"}, {"id": 2, "path_with_namespace": "g/two"},
            {"id": 9, "path_with_namespace": "other/nine"}]
VISIBILITY = {1: "private", 2: "public", 9: "internal"}


def gitlab(levels: dict[int, int], readable: set[int], user: dict[str, Any] | None = None,
           status: int = 200) -> tuple[httpx.MockTransport, Counter[str]]:
    asked: Counter[str] = Counter()

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"].startswith("Bearer glpat-") and "private-token" not in request.headers
        path = request.url.path.removeprefix("/api/v4")
        asked[path] += 1
        if status != 200:
            return httpx.Response(status, json={"message": f"{status}"})
        if path == "/user":
            return httpx.Response(200, json=user or {"id": 7, "username": "u"})
        if path == "/projects":
            level = int(parse_qs(request.url.query.decode())["min_access_level"][0])
            rows = [p for p in PROJECTS if levels.get(p["id"], 0) >= level]
            # `simple` projects carry no visibility (GitLab's BasicProjectDetails); the full ones do
            rows = [{**p, **({} if "simple" in request.url.params else {"visibility": VISIBILITY[p["id"]]})}
                    for p in rows]
            return httpx.Response(200, json=rows, headers={"x-page": "1", "x-total-pages": "1", "x-next-page": ""})
        wanted = path.split("/", 2)[2].replace("%2F", "/").replace("g/old", "g/one")  # a rename's redirect
        found = next((p for p in PROJECTS if p["path_with_namespace"] == wanted), None)
        if found is None or found["id"] not in readable:
            return httpx.Response(404, json={"message": "404 Project Not Found"})
        return httpx.Response(200, json={**found, "visibility": VISIBILITY[found["id"]]})

    return httpx.MockTransport(answer), asked


def settings() -> Any:
    return parse_config({"gitlab": {"url": "https://gitlab.test", "rate_limit": 0, "max_retries": 0},
                         "projects": ["g/one", "g/two"]}, Path("."), {}, "t").gitlab


def test_levels_from_the_membership_lists_and_readable_non_member_projects() -> None:
    transport, asked = gitlab({1: PLANNER, 9: DEVELOPER}, readable={1, 2})
    viewer = asyncio.run(ask_gitlab(settings(), ("g/one", "G/Two"), TOKEN, transport))
    assert viewer == Viewer(user_id=7, username="u", access={1: PLANNER, 2: NO_ACCESS},
                            visibility={1: "private", 2: "public"})
    # /user, six membership lists, and the one synced project not among the memberships
    assert asked == Counter({"/user": 1, "/projects": 6, "/projects/g/two": 1})


def test_a_guest_of_a_private_project_is_told_from_the_guest_list_without_another_call() -> None:
    """The Guest membership list is asked in full (its projects carry `visibility`): a Guest of a
    private synced project does not see its merge requests, at no extra call."""
    transport, asked = gitlab({1: GUEST, 9: GUEST}, readable={1, 2})
    viewer = asyncio.run(ask_gitlab(settings(), ("g/one", "g/two"), TOKEN, transport))
    assert viewer.access == {1: GUEST, 2: NO_ACCESS} and viewer.visibility == {1: "private", 2: "public"}
    assert not viewer.sees_merge_requests(1) and viewer.sees_merge_requests(2)
    assert asked == Counter({"/user": 1, "/projects": 6, "/projects/g/two": 1})


def test_a_synced_project_under_its_old_path_gets_its_level() -> None:
    """The config names `g/old` (renamed to g/one): GitLab answers the old path with the project,
    and the user's level there is still asked for."""
    transport, asked = gitlab({1: REPORTER}, readable={1})
    viewer = asyncio.run(ask_gitlab(settings(), ("g/old",), TOKEN, transport))
    assert viewer.access == {1: REPORTER}
    assert asked == Counter({"/user": 1, "/projects": 6, "/projects/g/old": 1})


def test_a_user_without_synced_memberships_costs_one_list() -> None:
    transport, asked = gitlab({9: REPORTER}, readable=set())
    viewer = asyncio.run(ask_gitlab(settings(), ("g/one", "g/two"), TOKEN, transport))
    assert viewer.access == {} and not viewer.reads(1)
    assert asked["/projects"] == 1


def test_an_admin_is_asked_nothing_more() -> None:
    transport, asked = gitlab({}, readable=set(), user={"id": 1, "username": "root", "is_admin": True})
    viewer = asyncio.run(ask_gitlab(settings(), ("g/one",), TOKEN, transport))
    assert viewer.is_admin and viewer.reads(1) and sum(asked.values()) == 1


@pytest.mark.parametrize(("status", "raised"), [(401, TokenRefused), (403, TokenRefused), (503, GitLabUnreachable)])
def test_refusals_and_failures(status: int, raised: type[Exception]) -> None:
    transport, _ = gitlab({}, set(), status=status)
    token = f"glpat-answered-{status}-0123456789"  # never registered before this test
    with pytest.raises(raised) as caught:
        asyncio.run(ask_gitlab(settings(), ("g/one",), token, transport))
    assert token not in str(caught.value)
    # a refused token is not kept in the redaction list (a stream of made-up tokens cannot grow it)
    assert is_secret(token) is (raised is GitLabUnreachable)


def test_a_refused_token_that_was_already_a_secret_stays_masked() -> None:
    register_secret("glpat-sync-token-0123456789")
    transport, _ = gitlab({}, set(), status=401)
    with pytest.raises(TokenRefused):
        asyncio.run(ask_gitlab(settings(), ("g/one",), "glpat-sync-token-0123456789", transport))
    assert redact("x glpat-sync-token-0123456789 y") == "x [REDACTED] y"


def test_the_cache_trusts_an_answer_for_its_bound_and_asks_once_at_a_time() -> None:
    asked: list[str] = []
    now = [0.0]

    async def lookup(token: str) -> Viewer:
        asked.append(token)
        await asyncio.sleep(0)  # both callers are waiting on this one look-up
        if token == "bad-token":
            raise TokenRefused()
        return Viewer(user_id=len(asked), username="u", access={1: GUEST})

    cache = ViewerCache(lookup, 300, clock=lambda: now[0])

    async def run() -> None:
        first, second = await asyncio.gather(cache.viewer(TOKEN), cache.viewer(TOKEN))
        assert first is second and asked == [TOKEN]
        now[0] = 299.9
        assert await cache.viewer(TOKEN) is first
        now[0] = 300.0
        assert (await cache.viewer(TOKEN)).user_id == 2
        for _ in range(2):  # refusals are not cached: a token made valid is asked again
            with pytest.raises(TokenRefused):
                await cache.viewer("bad-token")
        assert asked.count("bad-token") == 2
        for bogus in ("", "has space", "x" * 5000, "tøken"):
            with pytest.raises(TokenRefused):
                await cache.viewer(bogus)

    asyncio.run(run())
    assert TOKEN not in repr(cache.__dict__) and token_key(TOKEN) in cache._entries


def test_look_ups_in_flight_are_bounded() -> None:
    """Many different tokens at once (a flood of made-up ones) reach GitLab MAX_LOOKUPS at a time."""
    from gitlab_knowledge.mcp.gitlab_auth import MAX_LOOKUPS

    inside, most = 0, 0

    async def lookup(token: str) -> Viewer:
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        for _ in range(3):
            await asyncio.sleep(0)  # let the others pile up
        inside -= 1
        raise TokenRefused()

    cache = ViewerCache(lookup, 300)

    async def run() -> list[Any]:
        return await asyncio.gather(*(cache.viewer(f"glpat-flood-{i:04d}") for i in range(40)), return_exceptions=True)

    answers = asyncio.run(run())
    assert all(isinstance(a, TokenRefused) for a in answers) and most == MAX_LOOKUPS
