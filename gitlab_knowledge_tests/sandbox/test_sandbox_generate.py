"""The synthetic dataset generator: format, determinism, and the properties clients rely on."""

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gitlab_knowledge_sandbox import Dataset, generate_dataset, load_dataset
from gitlab_knowledge_sandbox.clock import ts_key


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Dataset]:
    # 450 issues put ~260 in the first project: enough for the >100-item bulk edit.
    root = tmp_path_factory.mktemp("gen") / "ds"
    summary = generate_dataset(root, projects=2, issues=450, mrs=120, seed=11)
    return summary, load_dataset(root)


def parents(data: Dataset) -> list[tuple[str, dict[str, Any]]]:
    return [("Issue", i) for v in data.issues.values() for i in v] + \
           [("MergeRequest", m) for v in data.merge_requests.values() for m in v]


def all_notes(data: Dataset) -> list[dict[str, Any]]:
    return [n for entries in data.discussions.values() for e in entries for t in e["discussions"] for n in t["notes"]]


def test_summary_matches_what_loads(generated: tuple[Any, Dataset]) -> None:
    summary, data = generated
    counts = data.counts()
    assert (counts["projects"], counts["issues"], counts["merge_requests"]) == (2, 450, 120)
    assert (counts["discussions"], counts["notes"], counts["documents"]) == (
        summary.discussions, summary.notes, summary.documents)
    assert re.fullmatch(r"Generated .+: 2 projects, 450 issues, 120 merge requests, \d+ discussions, \d+ notes "
                        r"\(\d+ system\), \d+ documents \(seed 11, [\d.]+s\)", summary.line())


def test_deterministic_for_a_seed(tmp_path: Path) -> None:
    def files(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    generate_dataset(tmp_path / "a", issues=30, mrs=10, seed=5)
    generate_dataset(tmp_path / "b", issues=30, mrs=10, seed=5)
    generate_dataset(tmp_path / "c", issues=30, mrs=10, seed=6)
    a, b, c = files(tmp_path / "a"), files(tmp_path / "b"), files(tmp_path / "c")
    assert a == b
    assert a != c


def test_ids_are_unique_and_counts_consistent(generated: tuple[Any, Dataset]) -> None:
    _, data = generated
    for kind in ("Issue", "MergeRequest"):
        ids = [p["id"] for k, p in parents(data) if k == kind]
        assert len(ids) == len(set(ids))
    note_ids = [n["id"] for n in all_notes(data)]
    assert len(note_ids) == len(set(note_ids))
    by_parent = {}
    for pid, entries in data.discussions.items():
        for e in entries:
            by_parent[(pid, e["noteable_type"], e["noteable_iid"])] = e["discussions"]
    for kind, p in parents(data):
        threads = by_parent.get((p["project_id"], kind, p["iid"]), [])
        assert p["user_notes_count"] == sum(1 for t in threads for n in t["notes"] if not n["system"])


def test_about_30_percent_of_parents_have_no_user_notes(generated: tuple[Any, Dataset]) -> None:
    _, data = generated
    share = sum(1 for _, p in parents(data) if p["user_notes_count"] == 0) / len(parents(data))
    assert 0.2 < share < 0.4


def test_note_variety(generated: tuple[Any, Dataset]) -> None:
    _, data = generated
    notes = all_notes(data)
    kinds = Counter(("system" if n["system"] else n["type"]) for n in notes)
    assert kinds["system"] > 0 and kinds["DiffNote"] > 0 and kinds["DiscussionNote"] > 0 and kinds[None] > 0
    assert any(n["internal"] for n in notes)
    diff = next(n for n in notes if n["type"] == "DiffNote")
    assert diff["noteable_type"] == "MergeRequest"
    assert {"base_sha", "head_sha", "start_sha", "new_path", "old_path", "position_type"} <= set(diff["position"])
    system = [n for n in notes if n["system"]]
    assert all(n["type"] is None and n["resolvable"] is False for n in system)
    issues = [p for k, p in parents(data) if k == "Issue"]
    assert 0.01 < sum(p["confidential"] for p in issues) / len(issues) < 0.12
    assert {p["state"] for p in issues} == {"opened", "closed"}
    assert {p["state"] for k, p in parents(data) if k == "MergeRequest"} == {"opened", "closed", "merged"}


def test_text_has_identifiers_paths_and_references(generated: tuple[Any, Dataset]) -> None:
    _, data = generated
    text = " ".join(f"{p['title']} {p['description']}" for _, p in parents(data)) + \
        " ".join(n["body"] for n in all_notes(data))
    assert re.search(r"\b[a-z]+_[a-z_]+\b", text)  # snake_case
    assert re.search(r"\b[a-z]+[A-Z][a-zA-Z]+\b", text)  # camelCase
    assert re.search(r"\b[A-Z]+_[A-Z_]+\b", text)  # CONSTANT_CASE
    assert re.search(r"\bsrc/[\w/]+\.(ts|py)\b", text)
    assert re.search(r"#\d+", text) and re.search(r"!\d+", text)
    topics = ("auth", "cach", "database", "pipeline", "deploy", "API", "UI", "latency", "billing")
    assert all(t.lower() in text.lower() for t in topics)


def test_timestamps_are_consistent(generated: tuple[Any, Dataset]) -> None:
    _, data = generated
    start, end = ts_key("2024-05-01T00:00:00Z"), ts_key("2026-06-01T00:00:00Z")
    by_parent = {(pid, e["noteable_type"], e["noteable_iid"]): e["discussions"]
                 for pid, entries in data.discussions.items() for e in entries}
    created_keys = []
    for kind, p in parents(data):
        created, updated = ts_key(p["created_at"]), ts_key(p["updated_at"])
        created_keys.append(created)
        assert start <= created <= updated < end
        for field in ("closed_at", "merged_at"):
            if p.get(field):
                assert created <= ts_key(p[field]) <= updated
        for t in by_parent.get((p["project_id"], kind, p["iid"]), []):
            for n in t["notes"]:
                assert created < ts_key(n["created_at"]) <= ts_key(n["updated_at"]) <= updated
    # Spread over roughly two years.
    assert max(created_keys) - min(created_keys) > 600 * 86_400 * 1_000_000


def test_bulk_edits_share_updated_at_across_more_than_100_items(generated: tuple[Any, Dataset]) -> None:
    _, data = generated
    first_project = data.projects[0]["id"]
    ties = Counter(i["updated_at"] for i in data.issues[first_project])
    assert ties.most_common(1)[0][1] > 100
    smaller = [n for _, n in ties.most_common() if 2 <= n <= 100]
    assert smaller  # and some small bulk edits too


def test_paging_through_ties_sees_every_item_once(generated: tuple[Any, Dataset], make_sandbox: Any,
                                                   client_for: Any) -> None:
    _, data = generated
    client = client_for(make_sandbox(data))
    pid = data.projects[0]["id"]
    seen: list[int] = []
    url: str | None = f"/projects/{pid}/issues?order_by=updated_at&sort=asc&per_page=100"
    while url:
        response = client.get(url)
        seen += [i["iid"] for i in response.json()]
        nxt = re.search(r'<([^>]+)>; rel="next"', response.headers["link"])
        url = nxt.group(1) if nxt else None
    assert sorted(seen) == sorted(i["iid"] for i in data.issues[pid])
