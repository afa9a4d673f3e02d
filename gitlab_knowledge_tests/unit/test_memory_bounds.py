"""Memory without a stopwatch: the Python heap a hot path allocates for one very long issue
description (tracemalloc's peak), at n and at 4n characters. The raw write path holds the text
about twice at most (json.dumps builds its canonical JSON from pieces, then joins them); the link
scan costs a small constant per character (it held a list of every character: 8 bytes each) and
stops at GitLab's own limit on a description, so past it the memory stops growing."""

import gc
import tracemalloc
from collections.abc import Callable
from typing import Any

from gitlab_knowledge.graph.refs import MAX_SCAN, extract
from gitlab_knowledge.store.payloads import item_problem
from gitlab_knowledge.store.raw import RawRow

LINE = "Step {n}: the cache in services/auth/session_cache.py timed out; see #12 and !34 for the retry policy.\n"


def peak(work: Callable[[], Any]) -> int:
    """The most bytes `work` had allocated at once (what existed before is not counted)."""
    gc.collect()
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def log_text(chars: int) -> str:
    lines, size, n = [], 0, 0
    while size < chars:
        lines.append(LINE.format(n=n))
        size += len(lines[-1])
        n += 1
    return "".join(lines)[:chars]


def item(chars: int) -> dict[str, Any]:
    return {"id": 7, "iid": 1, "project_id": 3, "title": "A pasted log", "description": log_text(chars),
            "updated_at": "2026-11-01T12:00:00.000Z", "created_at": "2026-11-01T11:00:00.000Z", "state": "opened",
            "labels": [], "web_url": "https://gitlab.example.com/acme/platform/-/issues/1"}


def test_the_raw_write_path_holds_a_long_description_about_once_more():
    for chars in (2**20, 2**22):
        payload = item(chars)

        def write_path(payload: dict[str, Any] = payload) -> None:
            assert item_problem(payload) is None
            row = RawRow.for_item("issue", payload)  # its canonical JSON: the one copy the raw layer keeps
            assert row.payload_hash

        assert peak(write_path) <= 2.25 * chars + 2**21, chars


def test_the_link_scan_is_linear_up_to_gitlabs_limit_and_flat_past_it():
    def scan(text: str) -> None:
        extract(text, project_path="acme/platform", gitlab_url="https://gitlab.example.com", source_type="issue",
                found_in="description")

    quarter = log_text(MAX_SCAN // 4)
    at_limit = log_text(MAX_SCAN)
    past = log_text(4 * MAX_SCAN)
    small, limit, large = peak(lambda: scan(quarter)), peak(lambda: scan(at_limit)), peak(lambda: scan(past))
    assert limit <= 4.5 * small, (small, limit)  # linear: 4x the text, about 4x the memory
    assert large <= 1.25 * limit, (limit, large)  # past the limit nothing more is scanned (one slice)
    assert limit <= 10 * MAX_SCAN, limit  # a small constant per character, references included


def test_a_link_past_gitlabs_limit_is_not_looked_for():
    def targets(text: str) -> list[int]:
        return [r.target_iid for r in extract(text, project_path="acme/platform", gitlab_url="https://gitlab.example.com",
                                              source_type="issue", found_in="description")]

    assert targets("a" * (MAX_SCAN - 10) + " see #5") == [5]
    assert targets("a" * MAX_SCAN + " see #5") == []
