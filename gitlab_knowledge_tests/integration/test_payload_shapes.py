"""The fixture sweep (issue 16): payload shapes of older and newer GitLabs
(fixtures/payload-shapes/README.md), synced end to end through the sandbox, asserted field by field
in the normalized tables, the documents and the read commands."""

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from gitlab_knowledge.config import Config, parse_config
from gitlab_knowledge.sync.stats import RawStats
from gitlab_knowledge_sandbox import DEFAULT_TOKEN, SandboxGitLab
from gitlab_knowledge_tests.conftest import TOKEN_ENV
from gitlab_knowledge_tests.helpers import rows, run_layers, sync

SHAPES = Path(__file__).resolve().parents[1] / "fixtures" / "payload-shapes"
PROJECT = "shapes/versions"
LAYERS = ("raw_gitlab_payloads", "normalized_gitlab", "knowledge_graph", "search_documents")


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Config, Path, RawStats, RawStats]:
    base = tmp_path_factory.mktemp("shapes")
    os.environ.setdefault(TOKEN_ENV, DEFAULT_TOKEN)
    with SandboxGitLab(dataset=SHAPES) as sb:
        doc = {"gitlab": {"url": sb.url, "rate_limit": 0}, "projects": [PROJECT],
               "storage": {"data_dir": str(base / "data")}}
        config = parse_config(doc, base, {}, "test")
        first = run_layers(config, [PROJECT], LAYERS)[0].stats(RawStats)
        # Again, incrementally: the cursor is GitLab's own string, offsets and all, sent back.
        second = sync(config, PROJECT)
    path = base / "gitlab_knowledge.toml"
    path.write_text(f'projects = ["{PROJECT}"]\n[gitlab]\nurl = "http://127.0.0.1:9"\n'
                    f'[storage]\ndata_dir = "{base / "data"}"\n')
    return config, path, first, second


def table(config: Config, sql: str, key: str) -> dict[Any, dict[str, Any]]:
    from gitlab_knowledge.store.db import read_connection

    with read_connection(config.duckdb_path) as con:
        cur = con.execute(sql)
        names = [d[0] for d in cur.description]
        out = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    return {r[key]: r for r in out}


def subset(row: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in expected}


def test_every_item_lands_and_an_incremental_sync_finds_nothing_new(shapes) -> None:
    config, _, first, second = shapes
    assert (first.items_new, first.items_rejected) == (7, 0)
    assert (second.items_fetched, second.items_rejected) == (0, 0)
    assert rows(config, "SELECT count(*) FROM issues")[0][0] == 4
    assert rows(config, "SELECT count(*) FROM merge_requests")[0][0] == 3


ISSUES = {
    1: {"title": "Legacy issue from 9.x", "state": "reopened", "author_username": "alice", "assignees": ["bob"],
        "labels": ["bug", "legacy"], "milestone": "v8.0", "confidential": False,
        "created_at": datetime(2016, 1, 4, 14, 31, 51), "updated_at": datetime(2016, 1, 5, 9, 0, 0),
        "closed_at": None, "user_notes_count": 3, "reference": None,
        "web_url": "https://gitlab.example.com/shapes/versions/issues/1"},
    2: {"state": "closed", "author_username": "bob", "assignees": ["alice", "carol"], "labels": ["feature"],
        "milestone": None, "confidential": True, "closed_at": datetime(2020, 6, 2, 9, 30, 0, 123000),
        "updated_at": datetime(2020, 6, 2, 9, 30, 0, 123000), "reference": "shapes/versions#2"},
    3: {"description": None, "author_username": None, "author_name": None, "assignees": [],
        "labels": ["backend", "priority::high"], "created_at": datetime(2021, 2, 3, 4, 5, 6),
        "updated_at": datetime(2021, 2, 3, 4, 5, 7)},
    4: {"title": "Bare minimum", "description": None, "author_username": None, "assignees": [], "labels": [],
        "milestone": None, "confidential": False, "web_url": None, "reference": None, "user_notes_count": 0},
}

MERGE_REQUESTS = {
    1: {"draft": True, "state": "merged", "merged_by": "bob", "assignees": ["carol"], "reviewers": [],
        "labels": ["legacy"], "source_branch": "legacy-branch", "target_branch": "master",
        "created_at": datetime(2017, 3, 1, 12, 0, 0), "merged_at": None,
        "web_url": "https://gitlab.example.com/shapes/versions/merge_requests/1"},
    2: {"draft": False, "merged_by": "carol", "assignees": ["bob"], "reviewers": ["alice", "carol"],
        "labels": ["backend"], "merged_at": datetime(2023, 9, 2, 8, 0, 0),
        "created_at": datetime(2023, 9, 1, 8, 0, 0), "reference": "shapes/versions!2"},
    3: {"draft": True, "merged_by": None, "assignees": [], "labels": [], "description": ""},
}

NOTES = {
    95001: {"discussion_id": "aa01", "internal": True, "author_username": "alice", "author_name": "Alice Archer",
            "created_at": datetime(2016, 1, 4, 15, 0, 0)},
    95002: {"discussion_id": "aa02", "internal": False, "author_username": None, "author_name": "Legacy Importer",
            "updated_at": None, "type": "DiscussionNote", "position": 0},
    95003: {"discussion_id": "aa02", "author_username": None, "author_name": None, "position": 1},
    95011: {"internal": True, "author_username": "bob"},
    95012: {"internal": False},
    95021: {"type": "DiffNote", "resolvable": True, "resolved": True, "resolved_by": "bob",
            "resolved_at": datetime(2023, 9, 1, 10, 0, 0), "noteable_type": "MergeRequest"},
    95022: {"resolved": False, "resolved_by": None},
    95023: {"type": "DiffNote"},
}

POSITIONS = {
    95021: {"new_path": "app/models/user.rb", "old_line": None, "new_line": 11, "position_type": "text",
            "line_range_start_line_code": "0fa1_9_10", "line_range_start_type": "new",
            "line_range_start_old_line": None, "line_range_start_new_line": 10,
            "line_range_end_line_code": "0fa1_10_11", "line_range_end_type": "new",
            "line_range_end_old_line": None, "line_range_end_new_line": 11},
    95022: {"old_path": "lib/old.rb", "old_line": 21, "new_line": None,
            "line_range_start_type": "old", "line_range_start_old_line": 20, "line_range_start_new_line": None,
            "line_range_end_type": "old", "line_range_end_old_line": 21, "line_range_end_new_line": None},
    95023: {"old_line": 5, "new_line": 5, "line_range_start_line_code": None, "line_range_start_new_line": None,
            "line_range_end_new_line": None},
}


@pytest.mark.parametrize("iid", sorted(ISSUES))
def test_issue_fields(shapes, iid: int) -> None:
    got = table(shapes[0], "SELECT * FROM issues", "iid")[iid]
    assert subset(got, ISSUES[iid]) == ISSUES[iid]


@pytest.mark.parametrize("iid", sorted(MERGE_REQUESTS))
def test_merge_request_fields(shapes, iid: int) -> None:
    got = table(shapes[0], "SELECT * FROM merge_requests", "iid")[iid]
    assert subset(got, MERGE_REQUESTS[iid]) == MERGE_REQUESTS[iid]


@pytest.mark.parametrize("note_id", sorted(NOTES))
def test_note_fields(shapes, note_id: int) -> None:
    got = table(shapes[0], "SELECT * FROM notes", "id")[note_id]
    assert subset(got, NOTES[note_id]) == NOTES[note_id]


@pytest.mark.parametrize("note_id", sorted(POSITIONS))
def test_diff_note_positions(shapes, note_id: int) -> None:
    got = table(shapes[0], "SELECT * FROM note_positions", "note_id")[note_id]
    assert subset(got, POSITIONS[note_id]) == POSITIONS[note_id]


def test_threads_labels_and_system_notes(shapes) -> None:
    config = shapes[0]
    assert sorted(table(config, "SELECT * FROM discussions", "id")) == ["aa01", "aa02", "bb01", "bb02", "cc01",
                                                                       "cc02", "cc03"]
    assert rows(config, "SELECT count(*) FROM notes WHERE id = 95004")[0][0] == 0  # the system note
    assert [r[0] for r in rows(config, "SELECT name FROM labels ORDER BY 1")] == [
        "backend", "bug", "feature", "legacy", "priority::high"]
    assert rows(config, "SELECT label_name FROM mr_labels ORDER BY 1") == [("backend",), ("legacy",)]


def test_documents(shapes) -> None:
    config = shapes[0]
    docs = table(config, "SELECT * FROM documents", "id")
    assert len(docs) == 4 + 3 + 7
    assert docs["issue:9003"]["author_username"] is None
    assert docs["issue:9003"]["labels"] == ["backend", "priority::high"]
    assert docs["issue:9002"]["confidential"] is True
    assert docs["discussion:aa01"]["internal"] is True
    assert docs["merge_request:9101"]["url"] == "https://gitlab.example.com/shapes/versions/merge_requests/1"
    assert "@unknown" in docs["discussion:aa02"]["content_text"]
    assert "None" not in docs["discussion:aa02"]["content_text"]


def cli(capsys: pytest.CaptureFixture[str], config_path: Path, *args: str) -> tuple[int, str, str]:
    from gitlab_knowledge.cli import main

    code = main(["--config", str(config_path), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_show_names_every_author_and_multi_line_ranges(shapes, capsys) -> None:
    _, path, _, _ = shapes
    code, out, err = cli(capsys, path, "show", "issue", "1")
    assert code == 0, err
    assert "@None" not in out
    assert "Legacy Importer (" in out and "@unknown (" in out and "@alice (" in out
    code, out, err = cli(capsys, path, "show", "issue", "3")
    assert code == 0, err
    assert "@None" not in out and " · @unknown · " in out
    code, out, err = cli(capsys, path, "show", "mr", "2")
    assert code == 0, err
    assert "on app/models/user.rb, lines 10–11" in out
    assert "on lib/old.rb, lines 20–21" in out
    assert "on README.md:5" in out
    code, out, _ = cli(capsys, path, "show", "mr", "2", "--json")
    notes = {n["id"]: n for t in json.loads(out)["threads"] for n in t["notes"]}
    assert (notes[95021]["line_range_start_new_line"], notes[95021]["line_range_end_new_line"]) == (10, 11)


def test_list_all_states_and_unknown_authors(shapes, capsys) -> None:
    _, path, _, _ = shapes
    code, out, err = cli(capsys, path, "list", "issues", "--state", "all", "--json")
    assert code == 0, err
    assert sorted(r["iid"] for r in json.loads(out)) == [1, 2, 3, 4]
    code, out, _ = cli(capsys, path, "list", "issues", "--state", "reopened", "--json")
    assert [r["iid"] for r in json.loads(out)] == [1]
    code, out, err = cli(capsys, path, "list", "issues")
    assert code == 0, err
    assert "@None" not in out and "@unknown" in out


@pytest.mark.parametrize(("url", "document"), [
    ("https://gitlab.example.com/shapes/versions/issues/1", "issue:9001"),
    ("https://gitlab.example.com/shapes/versions/merge_requests/1", "merge_request:9101"),
    ("https://gitlab.example.com/shapes/versions/issues/1#note_95002", "discussion:aa02"),
    ("https://gitlab.example.com/shapes/versions/-/issues/2", "issue:9002"),
    ("https://gitlab.example.com/shapes/versions/-/merge_requests/2/diffs#note_95021", "discussion:cc01"),
    ("https://gitlab.example.com/Shapes/Versions/merge_requests/3", "merge_request:9103"),
])
def test_explain_resolves_legacy_and_current_urls(shapes, url: str, document: str) -> None:
    from gitlab_knowledge.explain import resolve
    from gitlab_knowledge.store.db import read_connection

    with read_connection(shapes[0].duckdb_path) as con:
        assert resolve(con, url, None) == document


def test_a_system_note_written_with_the_projects_old_path_links_to_the_synced_item(shapes) -> None:
    """#4 has no user notes; its one thread says "marked this issue as a duplicate of
    shapes/old-name#1", written before the project was renamed shapes/versions: the sync fetches
    that thread, asks GitLab about shapes/old-name once, and the link is to shapes/versions#1."""
    from gitlab_knowledge.graph.queries import related
    from gitlab_knowledge.workspace import Workspace

    config, _, first, second = shapes
    links = related(Workspace(config), f"{PROJECT}#4").links
    assert [(link["reference"], link["external"], link["in_store"]) for link in links["duplicate_of"]] == [
        (f"{PROJECT}#1", False, True)]
    assert [link["reference"] for link in related(Workspace(config), f"{PROJECT}#1").links["duplicated_by"]] == [
        f"{PROJECT}#4"]
    assert (first.path_lookups, second.path_lookups) == (1, 0)
