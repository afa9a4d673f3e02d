"""The confidential check's pure parts (mcp/confidential_watch.py, store/overlay.py): the calls
(httpx.MockTransport playing GitLab, the store's projects given), what a failure keeps and logs,
and when the watch checks (an injected clock)."""

import asyncio
import logging
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest

from gitlab_knowledge.config import parse_config
from gitlab_knowledge.mcp import confidential_watch
from gitlab_knowledge.mcp.confidential_watch import ConfidentialCheck, ConfidentialWatch, Watched
from gitlab_knowledge.store.overlay import ConfidentialOverlay
from gitlab_knowledge.store.reader import StoreReader

SYNC_TOKEN = "glpat-sync-unit-0123456789"


def config(tmp_path: Path) -> Any:
    return parse_config({"gitlab": {"url": "http://gitlab.test", "rate_limit": 0, "max_retries": 0},
                         "projects": ["g/one", "g/two"], "storage": {"data_dir": str(tmp_path / "data")},
                         "mcp": {"auth": "gitlab"}}, tmp_path, {}, "test")


class GitLab:
    """Per project id: the confidential issues GitLab lists (or a status to answer instead)."""

    def __init__(self) -> None:
        self.issues: dict[int, list[dict[str, Any]]] = {}
        self.down: set[int] = set()
        self.asked: list[tuple[int, dict[str, list[str]]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.headers["private-token"] == SYNC_TOKEN  # the sync's token, as the sync sends it
        pid = int(request.url.path.split("/")[4])
        query = parse_qs(request.url.query.decode())
        self.asked.append((pid, query))
        if pid in self.down:
            return httpx.Response(503, json={"message": "503 Service Unavailable"})
        rows = self.issues.get(pid, [])
        page, per_page = int(query.get("page", ["1"])[0]), int(query["per_page"][0])
        chunk = rows[(page - 1) * per_page:page * per_page]
        more = page * per_page < len(rows)
        return httpx.Response(200, json=chunk, headers={"x-next-page": str(page + 1) if more else "",
                                                        "x-page": str(page)})


@pytest.fixture
def check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ConfidentialCheck, GitLab, ConfidentialOverlay]:
    projects = [Watched(1, "2024-05-01T10:00:00.000Z"), Watched(2, None)]
    monkeypatch.setattr(confidential_watch, "watched_projects", lambda _reader: projects)
    gitlab = GitLab()
    overlay = ConfidentialOverlay()
    reader = StoreReader(tmp_path / "none.duckdb", overlay)
    return ConfidentialCheck(config(tmp_path), reader, SYNC_TOKEN, httpx.MockTransport(gitlab)), gitlab, overlay


def test_one_call_per_project_asks_for_confidential_issues_since_the_cursor(check: Any) -> None:
    run, gitlab, overlay = check
    gitlab.issues = {1: [{"id": 11, "confidential": True}, {"id": 12, "confidential": False}],
                     2: [{"id": 21 + n, "confidential": True} for n in range(150)]}
    asyncio.run(run())
    assert overlay.state().issues == {11} | {21 + n for n in range(150)}  # a listed public one is not taken
    assert overlay.state().unchecked == frozenset()
    # Project 1: one page; project 2: 150 confidential issues since its sync, two pages of 100.
    assert sorted(pid for pid, _ in gitlab.asked) == [1, 2, 2]
    first = dict(gitlab.asked)[1]
    # The cursor a day early: the flag is stored by the sync before the documents and indexes follow.
    assert first["confidential"] == ["true"] and first["updated_after"] == ["2024-04-30T10:00:00.000Z"]
    assert first["per_page"] == ["100"] and first["order_by"] == ["updated_at"]
    assert "updated_after" not in gitlab.asked[1][1]  # never synced: no cursor


def test_a_project_not_checked_keeps_its_last_answer_and_is_unchecked_until_asked_again(
        check: Any, caplog: pytest.LogCaptureFixture) -> None:
    run, gitlab, overlay = check
    gitlab.issues = {1: [{"id": 11, "confidential": True}], 2: [{"id": 21, "confidential": True}]}
    asyncio.run(run())
    generation = overlay.generation
    gitlab.down = {2}
    gitlab.issues[2] = []
    with caplog.at_level(logging.WARNING):
        asyncio.run(run())
    assert overlay.state().issues == {11, 21} and overlay.state().unchecked == {2}
    assert overlay.generation == generation + 1
    [line] = caplog.messages
    assert "1 of 2 projects not checked" in line and SYNC_TOKEN not in caplog.text
    gitlab.down = set()
    asyncio.run(run())
    assert overlay.state().issues == {11} and overlay.state().unchecked == frozenset()


def test_an_unchanged_answer_keeps_the_generation(check: Any) -> None:
    """Readers rebuild their lenses when the generation moves: not on every check."""
    run, gitlab, overlay = check
    gitlab.issues = {1: [{"id": 11, "confidential": True}]}
    asyncio.run(run())
    generation = overlay.generation
    asyncio.run(run())
    assert overlay.generation == generation


def test_the_watch_checks_once_per_period_and_requests_share_a_check() -> None:
    now = [1000.0]
    ran: list[float] = []
    gate: asyncio.Event | None = None

    async def slow_check() -> None:
        ran.append(now[0])
        assert gate is not None
        await gate.wait()

    async def scenario() -> None:
        nonlocal gate
        gate = asyncio.Event()
        watch = ConfidentialWatch(slow_check, 300, lambda: now[0])
        waiting = [asyncio.ensure_future(watch.fresh()) for _ in range(5)]
        await asyncio.sleep(0)
        assert not any(w.done() for w in waiting)  # the first requests wait for the first check
        gate.set()
        await asyncio.gather(*waiting)
        now[0] += 299
        await watch.fresh()  # within the period: no check
        now[0] += 1
        await watch.fresh()

    asyncio.run(scenario())
    assert ran == [1000.0, 1300.0]


def test_a_busy_store_checks_with_the_projects_last_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """A sync holding the store: the cursors last read (they only move forward) still bound the
    check; before any was read there is nothing stored to hide, and the next period reads again."""
    from gitlab_knowledge.errors import StoreBusyError

    reads: list[Any] = [StoreBusyError("busy"), [Watched(1, None)], StoreBusyError("busy")]

    def watched(_reader: Any) -> list[Watched]:
        answer = reads.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]

    monkeypatch.setattr(confidential_watch, "watched_projects", watched)
    gitlab = GitLab()
    gitlab.issues = {1: [{"id": 11, "confidential": True}]}
    overlay = ConfidentialOverlay()
    run = ConfidentialCheck(config(tmp_path), StoreReader(tmp_path / "none.duckdb", overlay), SYNC_TOKEN,
                            httpx.MockTransport(gitlab))
    with caplog.at_level(logging.WARNING):
        asyncio.run(run())
    assert gitlab.asked == [] and overlay.generation == 0 and len(caplog.messages) == 1
    asyncio.run(run())
    asyncio.run(run())
    assert [pid for pid, _ in gitlab.asked] == [1, 1] and overlay.state().issues == {11}
