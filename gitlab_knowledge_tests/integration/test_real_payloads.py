"""Real GitLabs, real payloads (issues 16 and 19 point 9): a project path in another case or renamed,
a thread twice in one response, malformed items rejected by name, a stored bad row that must not
poison later syncs, and a project removed from the configuration."""

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gitlab_knowledge.config import Config, parse_config
from gitlab_knowledge.normalized.refresh import NormalizeStats
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_sandbox import SandboxGitLab
from gitlab_knowledge_tests.conftest import project_paths
from gitlab_knowledge_tests.helpers import SYNC_LAYERS, rows, run_layers, scalar, sync


@pytest.fixture
def config_for(tmp_path: Path, token_env: str) -> Callable[..., Config]:
    def factory(sb: SandboxGitLab, projects: list[str], data_dir: Path | None = None) -> Config:
        doc = {"gitlab": {"url": sb.url, "rate_limit": 0, "max_retries": 2, "timeout": 5}, "projects": projects,
               "storage": {"data_dir": str(data_dir or tmp_path / "data")}}
        return parse_config(doc, tmp_path, {}, "test")

    return factory


def first_project(sb: SandboxGitLab) -> dict[str, Any]:
    return sb.state.list_projects(order_by="id", sort="asc")[0]


def count(config: Config, what: str, project: str | None = None) -> int:
    from gitlab_knowledge.store import queries

    return queries.count(Workspace(config), what, project)


# -- point 1: a project is keyed by the id GitLab returns ------------------------------------------


def test_a_path_typed_in_another_case_stores_its_items(sandbox, config_for) -> None:
    project = first_project(sandbox)
    typed = project["path_with_namespace"].upper()
    config = config_for(sandbox, [typed])
    stats = sync(config, typed)
    expected = len(sandbox.state.list_items(project["id"], "merge_requests"))
    assert stats.items_new > 0
    assert count(config, "mrs") == count(config, "mrs", typed) == expected > 0
    assert count(config, "issues", typed) == len(sandbox.state.list_items(project["id"], "issues"))
    from gitlab_knowledge.store import queries

    listed = queries.list_items(Workspace(config), queries.kinds.ISSUE, typed, 5)
    assert {r["project"] for r in listed} == {project["path_with_namespace"]}  # the canonical path
    status = queries.sync_status(Workspace(config))
    assert status["projects"] == [{"configured": typed, "project_id": project["id"], "group": None,
                                   "project": project["path_with_namespace"]}]
    assert {c["project"] for c in status["cursors"]} == {project["path_with_namespace"]}


def test_a_renamed_project_keeps_its_data_under_either_path(sandbox, config_for, tmp_path) -> None:
    project = first_project(sandbox)
    old = project["path_with_namespace"]
    config = config_for(sandbox, [old])
    sync(config, old)
    before = count(config, "issues")
    sandbox.state.rename_project(project["id"], "moved/elsewhere")
    filed = sandbox.state.create_issue(project["id"], "Filed after the move")
    target = min(i["iid"] for i in sandbox.state.list_items(project["id"], "issues"))
    sandbox.state.create_discussion(project["id"], "issues", filed["iid"], f"Same as {old}#{target}")
    stats = sync(config, old)  # the old path follows GitLab's redirect
    assert stats.items_new == 1
    # Links written with the old path name this project: recorded without a look-up.
    assert rows(config, "SELECT path, project_id FROM project_aliases") == [(old.lower(), project["id"])]
    assert stats.path_lookups == 0
    # The link written with the old path, and those read before the rename, stay on the project.
    assert rows(config, "SELECT external, target_project_id FROM item_references WHERE text = ?",
                [f"{old}#{target}"]) == [(False, project["id"])]
    assert scalar(config, "SELECT count(*) FROM item_references WHERE external") == 0
    assert count(config, "issues") == count(config, "issues", old) == before + 1
    # The configuration updated to the new path: the same project, nothing refetched.
    renamed = config_for(sandbox, ["moved/elsewhere"])
    again = sync(renamed, "moved/elsewhere")
    assert (again.items_new, again.items_fetched) == (0, 0)
    assert count(renamed, "issues", "moved/elsewhere") == before + 1
    assert rows(renamed, "SELECT path_with_namespace FROM projects") == [("moved/elsewhere",)]


# -- point 2: one repeated id in one response -------------------------------------------------------


def test_a_thread_repeated_in_one_response_is_stored_once(sandbox, config_for, caplog) -> None:
    project = first_project(sandbox)
    coll = sandbox.state.project(project["id"]).collection("issues")
    iid = next(i for i, threads in coll.discussions.items()
               if any(not n.get("system") for t in threads for n in t["notes"]))
    threads = coll.discussions[iid]
    user_thread = next(t for t in threads if any(not n.get("system") for n in t["notes"]))
    coll.discussions[iid] = [*threads, dict(user_thread)]
    config = config_for(sandbox, [project["path_with_namespace"]])
    with caplog.at_level(logging.WARNING, logger="gitlab_knowledge.store.raw"):
        sync(config, project["path_with_namespace"])
    assert scalar(config, "SELECT count(*) FROM raw_payloads WHERE gitlab_key = ?", [user_thread["id"]]) == 1
    assert scalar(config, "SELECT count(*) FROM discussions WHERE id = ?", [user_thread["id"]]) == 1
    assert any(user_thread["id"] in r.getMessage() and "more than once" in r.getMessage() for r in caplog.records)
    assert sync(config, project["path_with_namespace"]).items_fetched == 0  # and later syncs go on


# -- issue 19 point 9: malformed payloads --------------------------------------------------------------


def test_malformed_items_are_rejected_by_name_and_the_rest_of_the_page_kept(synced, sandbox, capsys) -> None:
    from gitlab_knowledge.progress import LogProgress

    config = synced
    project = first_project(sandbox)
    path, pid = project["path_with_namespace"], project["id"]
    issues = sandbox.state.list_items(pid, "issues", None)
    victim = issues[0]
    now = "2030-01-01T00:00:00.000Z"
    sandbox.state.put_item(pid, "issues", {**victim, "title": ["a", "list"], "updated_at": now})
    sandbox.state.put_item(pid, "issues", {**{k: v for k, v in victim.items() if k != "id"}, "iid": 900,
                                           "updated_at": now})
    sandbox.state.put_item(pid, "issues", {**victim, "id": 777777, "iid": 10**23 * 1.0, "updated_at": now})
    good = sandbox.state.create_issue(pid, "A well-formed issue on the same page")
    stored = rows(config, "SELECT title FROM issues WHERE id = ?", [victim["id"]])[0][0]

    lines: list[str] = []
    progress = LogProgress(logging.getLogger("test"))
    progress.warning = lines.append  # type: ignore[method-assign]
    stats = sync(config, path, workspace_kwargs={"progress": progress})
    assert stats.items_rejected == 3
    rejected = [line for line in lines if "rejected" in line]
    assert len(rejected) == 3 and all("\n" not in line for line in rejected)
    assert any(f"issue iid {victim['iid']} (id {victim['id']}) rejected: title is a list, not text" in line
               for line in rejected)
    assert any("issue iid 900 rejected: id is missing" in line for line in rejected)
    assert any("id 777777 rejected: iid is 1e+23 (not an integer)" in line for line in rejected)
    assert scalar(config, "SELECT title FROM issues WHERE id = ?", [good["id"]]) == good["title"]
    assert scalar(config, "SELECT title FROM issues WHERE id = ?", [victim["id"]]) == stored  # kept as it was
    assert sync(config, path).items_rejected == 3  # still named, still nothing else wrong
    full = sync(config, path, full=True)  # listed, if unreadable: not taken for deleted
    assert (full.items_rejected, full.items_deleted) == (3, 0)
    assert scalar(config, "SELECT title FROM issues WHERE id = ?", [victim["id"]]) == stored


def test_a_note_with_a_lone_surrogate_rejects_its_thread_only(synced, sandbox) -> None:
    config = synced
    project = first_project(sandbox)
    path, pid = project["path_with_namespace"], project["id"]
    coll = sandbox.state.project(pid).collection("issues")
    iid = next(i for i, threads in coll.discussions.items()
               if sum(any(not n.get("system") for n in t["notes"]) for t in threads) >= 2)
    threads = [t for t in coll.discussions[iid] if any(not n.get("system") for n in t["notes"])]
    bad, other = threads[0], threads[1]
    note = next(n for n in bad["notes"] if not n.get("system"))
    sandbox.state.clock.advance(120)
    sandbox.state.edit_note(pid, "issues", iid, note["id"], "lone \ud800 surrogate")
    sandbox.state.add_note(pid, "issues", iid, "a fine new note")
    stats = sync(config, path)
    assert stats.items_rejected == 1
    # The rejected thread keeps its stored version; the new note of the same parent lands.
    assert scalar(config, "SELECT body FROM notes WHERE id = ?", [note["id"]]) == note["body"]
    assert scalar(config, "SELECT count(*) FROM notes WHERE body = 'a fine new note'") == 1
    assert scalar(config, "SELECT count(*) FROM discussions WHERE id = ?", [other["id"]]) == 1


def test_a_stored_bad_row_does_not_poison_later_syncs(synced, sandbox) -> None:
    from gitlab_knowledge.store.db import write_connection

    config = synced
    project = first_project(sandbox)
    path = project["path_with_namespace"]
    victim = sandbox.state.list_items(project["id"], "issues", None)[0]
    # What an older version wrote: a raw payload the normalized tables cannot hold.
    with write_connection(config.duckdb_path) as con:
        raw = json.loads(con.execute("SELECT json FROM raw_payloads WHERE resource_type = 'issue' AND gitlab_key = ?",
                                     [str(victim["id"])]).fetchone()[0])
        con.execute("UPDATE raw_payloads SET json = ?, change_seq = nextval('change_seq') "
                    "WHERE resource_type = 'issue' AND gitlab_key = ?",
                    [json.dumps({**raw, "title": {"not": "text"}}), str(victim["id"])])
    outcome = run_layers(config, [path], SYNC_LAYERS)[0]
    assert outcome.stats(NormalizeStats).rejected == 1
    assert scalar(config, "SELECT count(*) FROM issues WHERE id = ?", [victim["id"]]) == 0
    sandbox.state.update_issue(project["id"], victim["iid"], title="Fixed upstream")
    assert sync(config, path).items_fetched == 1
    assert scalar(config, "SELECT title FROM issues WHERE id = ?", [victim["id"]]) == "Fixed upstream"


# -- point 9 (second half): a project removed from the configuration -----------------------------------


def _write_config(path: Path, sb: SandboxGitLab, data_dir: Path, projects: list[str]) -> Path:
    import tomli_w

    path.write_text(tomli_w.dumps({"projects": projects, "storage": {"data_dir": str(data_dir)},
                                   "gitlab": {"url": sb.url, "rate_limit": 0}}), encoding="utf-8")
    return path


def test_a_project_removed_from_the_config_is_purged_with_yes(synced, sandbox, tmp_path, monkeypatch,
                                                               capsys) -> None:
    from gitlab_knowledge.cli import main
    from gitlab_knowledge_tests.helpers import layer_counts

    monkeypatch.chdir(tmp_path)  # no dagster.yaml here: runs go to <data>/dagster
    keep, gone = project_paths(sandbox)
    gone_id = sandbox.state.project(gone).data["id"]
    docs_before, vectors_before, lexical_before = layer_counts(synced)
    gone_docs = scalar(synced, "SELECT count(*) FROM documents WHERE project_id = ?", [gone_id])
    assert gone_docs > 0 and scalar(synced, "SELECT count(*) FROM mentions WHERE project_id = ?", [gone_id]) > 0
    config_path = _write_config(tmp_path / "gitlab_knowledge.toml", sandbox, synced.data_dir, [keep])

    # Off a terminal without --yes: nothing is removed, the warning says how.
    assert main(["--config", str(config_path), "sync", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["removed_projects"] == [
        {"project_id": gone_id, "project": gone, "documents": gone_docs, "purged": False}]
    assert f"project {gone} (id {gone_id}, {gone_docs} documents) is no longer in the configuration" in out.err
    assert "sync --yes" in out.err
    assert layer_counts(synced) == (docs_before, vectors_before, lexical_before)

    from gitlab_knowledge.defs.runner import dagster_instance

    instance = dagster_instance(synced)  # the instance the CLI records its runs in (no dagster.yaml here)
    instance.add_dynamic_partitions("gitlab_projects", [gone])
    assert main(["--config", str(config_path), "sync", "--yes", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["removed_projects"][0]["purged"] is True
    assert gone not in dagster_instance(synced).get_dynamic_partitions("gitlab_projects")
    assert keep in dagster_instance(synced).get_dynamic_partitions("gitlab_projects")
    assert layer_counts(synced) == (docs_before - gone_docs, vectors_before - gone_docs, lexical_before - gone_docs)
    for table in ("raw_payloads", "issues", "merge_requests", "discussions", "notes", "mentions", "documents",
                  "layer_state"):
        assert scalar(synced, f"SELECT count(*) FROM {table} WHERE project_id = ?", [gone_id]) == 0, table
    assert scalar(synced, "SELECT count(*) FROM documents") == docs_before - gone_docs > 0

    from gitlab_knowledge.workspace import Workspace  # search finds nothing of it any more

    results = Workspace(synced).searcher().search("the", mode="lexical", limit=50).results
    assert results and all(r.fields["project"] == keep for r in results)
    assert main(["--config", str(config_path), "sync", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["removed_projects"] == []


@pytest.mark.parametrize("answer", ["y", "n"])
def test_on_a_terminal_the_purge_asks_first(synced, sandbox, monkeypatch, capsys, answer: str) -> None:
    import argparse
    import io

    from gitlab_knowledge.cli import console, sync_cmd
    from gitlab_knowledge.workspace import Workspace

    keep, gone = project_paths(sandbox)
    config = parse_config({"gitlab": {"url": sandbox.url}, "projects": [keep],
                           "storage": {"data_dir": str(synced.data_dir)}}, synced.data_dir, {}, "test")
    before = scalar(config, "SELECT count(*) FROM documents")
    stdin = io.StringIO(answer + "\n")
    stdin.isatty = lambda: True  # type: ignore[method-assign]
    monkeypatch.setattr("sys.stdin", stdin)
    monkeypatch.setattr(console.err, "_force_terminal", True)
    out = sync_cmd.removed_projects(Workspace(config), argparse.Namespace(yes=False), interactive=True)
    assert [(e["project"], e["purged"]) for e in out] == [(gone, answer == "y")]
    assert "is no longer in the configuration. Remove it from the store and the indexes? [y/N]" in \
        capsys.readouterr().err
    left = scalar(config, "SELECT count(*) FROM documents WHERE project_path = ?", [gone])
    assert (left == 0) == (answer == "y") and scalar(config, "SELECT count(*) FROM documents") <= before
