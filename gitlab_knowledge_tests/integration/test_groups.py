"""Configured groups resolved against the sandbox GitLab over 127.0.0.1 (sync/groups.py): nested
subgroups, exclude patterns, archived projects, pagination, a path in another case, a renamed
group, and the rule that a project leaves only on positive evidence (a complete listing without
it, then its own GET), never on a failed or partial listing."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitlab_knowledge.config import parse_config
from gitlab_knowledge.store import groups as record_store
from gitlab_knowledge.sync.groups import discover
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_sandbox import SandboxGitLab, generate_dataset


@pytest.fixture(scope="module")
def nested_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """acme, 2 subgroups, 4 below them: 9 projects dealt over the 7 groups, one issue each."""
    out = tmp_path_factory.mktemp("nested-groups")
    generate_dataset(out, projects=9, issues=9, mrs=0, seed=7, threads_per_parent_mean=0.3, group_depth=2,
                     group_fanout=2)
    return out


@pytest.fixture
def gl(nested_dataset: Path) -> Iterator[SandboxGitLab]:
    with SandboxGitLab(dataset=nested_dataset) as sb:
        yield sb


def workspace(sb: SandboxGitLab, tmp_path: Path, groups: list[Any], **top: Any) -> Workspace:
    doc = {"groups": groups, **top, "gitlab": {"url": sb.url, "rate_limit": 0, "per_page": 2, "max_retries": 1,
                                              "timeout": 5},
           "storage": {"data_dir": str(tmp_path / "data")}}
    return Workspace(parse_config(doc, tmp_path, {}, "test"))


def all_paths(sb: SandboxGitLab, under: str = "acme") -> list[str]:
    return sorted(p["path_with_namespace"] for p in sb.state.group_projects(under, include_subgroups=True))


def member_paths(ws: Workspace) -> list[str]:
    return sorted(record_store.project_paths(ws.config))


def test_a_group_resolves_to_every_project_of_its_subgroups_page_by_page(gl, tmp_path, token_env) -> None:
    ws = workspace(gl, tmp_path, ["ACME"])  # another case: GitLab finds the group anyway
    found = discover(ws)
    assert found.complete and found.listings[0].full_path == "acme"
    assert member_paths(ws) == all_paths(gl) and len(all_paths(gl)) == 9
    assert gl.stats()["by_route"]["group_projects"] == 5  # per_page 2: five pages, all read
    assert found.new == record_store.project_paths(ws.config)  # the first listing: every one is new
    only_top = workspace(gl, tmp_path / "top", ["acme"], include_subgroups=False)
    discover(only_top)
    assert member_paths(only_top) == [p for p in all_paths(gl) if p.count("/") == 1]


def test_exclude_archived_and_a_second_group_overlapping_the_first(gl, tmp_path, token_env) -> None:
    sub = gl.state.subgroups("acme")[0]["full_path"]
    archived = all_paths(gl, sub)[0]
    gl.state.archive_project(archived)
    ws = workspace(gl, tmp_path, ["acme", sub], exclude=[f"{sub}/*/*"])
    discover(ws)
    expected = [p for p in all_paths(gl) if p != archived and not (p.startswith(sub + "/") and p.count("/") == 3)]
    assert member_paths(ws) == expected
    summary = {g["group"]: g for g in record_store.summary(ws.config)}
    assert summary["acme"]["projects"] == len(expected) and summary[sub]["projects"] == 0  # each project once
    with_archived = workspace(gl, tmp_path / "all", ["acme"], include_archived=True)
    discover(with_archived)
    assert archived in member_paths(with_archived)


def test_explicit_projects_come_first_and_are_not_repeated(gl, tmp_path, token_env) -> None:
    first = all_paths(gl)[0]
    ws = workspace(gl, tmp_path, ["acme"], projects=[first.upper()])
    discover(ws)
    paths = record_store.project_paths(ws.config)
    assert paths[0] == first.upper() and first not in paths and len(paths) == 9


def test_a_renamed_group_is_found_by_the_id_its_last_listing_recorded(gl, tmp_path, token_env, caplog) -> None:
    sub = gl.state.subgroups("acme")[0]
    ws = workspace(gl, tmp_path, [sub["full_path"]])
    discover(ws)
    before = member_paths(ws)
    gl.state.rename_group(sub["id"], "renamed-team")
    found = discover(ws)  # GitLab answers 404 for the old path; the id still finds the group
    assert found.complete and found.listings[0].renamed and found.listings[0].full_path == "acme/renamed-team"
    assert member_paths(ws) == sorted(p.replace(sub["full_path"], "acme/renamed-team", 1) for p in before)
    assert found.left == [] and "update the configuration" in caplog.text
    fresh = workspace(gl, tmp_path / "fresh", [sub["full_path"]])  # never listed: nothing to fall back on
    failed = discover(fresh)
    assert not failed.complete and "not found" in failed.errors[0]


def test_a_project_leaves_on_a_complete_listing_and_its_own_word(gl, tmp_path, token_env) -> None:
    ws = workspace(gl, tmp_path, ["acme"])
    discover(ws)
    deleted, archived, moved, kept = all_paths(gl)[:4]
    gl.state.delete_project(deleted)
    gl.state.archive_project(archived)
    gl.state.transfer_project(moved, "elsewhere")
    added = gl.state.add_project("acme", "brand-new")
    found = discover(ws)
    assert found.complete and found.new == ["acme/brand-new"]
    why = {g["path"]: g["why"] for g in found.left}
    assert why == {deleted: "deleted, or no longer visible to the token", archived: "archived",
                   "elsewhere/" + moved.rsplit("/", 1)[1]: "moved to elsewhere"}
    assert set(record_store.left(ws.config)) == {g["id"] for g in found.left}
    assert kept in member_paths(ws) and added["path_with_namespace"] in member_paths(ws)
    gl.state.archive_project(archived, False)  # unarchived: back in the group, no longer to be purged
    discover(ws)
    assert archived in member_paths(ws) and archived not in [v["path"] for v in record_store.left(ws.config).values()]


def test_a_failed_or_partial_listing_changes_nothing(gl, tmp_path, token_env) -> None:
    ws = workspace(gl, tmp_path, ["acme"])
    discover(ws)
    before = member_paths(ws)
    gl.state.delete_project(all_paths(gl)[0])
    gl.set_faults("503:path=/groups/10/projects")  # GitLab down for the listing: retried, then failed
    failed = discover(ws)
    assert not failed.complete and failed.left == [] and member_paths(ws) == before
    assert "503" in failed.errors[0] and record_store.summary(ws.config)[0]["error"]
    # A page that lost its pagination headers on the way: a listing not marked complete.
    gl.set_faults(None)
    partial = _listing_without_headers(gl, ws)
    assert not partial.complete and partial.left == [] and member_paths(ws) == before
    assert record_store.left(ws.config) == {}
    gl.set_faults(None)
    done = discover(ws)
    assert done.complete and len(done.left) == 1 and len(member_paths(ws)) == len(before) - 1


def _listing_without_headers(gl: SandboxGitLab, ws: Workspace) -> Any:
    """The second page of the listing answered full, with neither next link nor x-next-page:
    whether more follows is unknown, so the listing is not complete."""
    from gitlab_knowledge_sandbox import api as sandbox_api

    original = sandbox_api.Api._page

    def cut(self, request, items, default_per_page=20):  # type: ignore[no-untyped-def]
        response = original(self, request, items, default_per_page)
        if "/groups/" in request.path and request.param("page") == "2":
            response.headers = {}
        return response

    sandbox_api.Api._page = cut  # type: ignore[method-assign]
    try:
        return discover(ws)
    finally:
        sandbox_api.Api._page = original  # type: ignore[method-assign]


def test_a_project_a_complete_listing_skipped_but_gitlab_still_has_in_the_group_stays(gl, tmp_path, token_env,
                                                                                     monkeypatch) -> None:
    """Offset pages shift when a project leaves while they are read: a complete-looking listing can
    miss one that never moved. Its own GET says it is still there, so it stays."""
    ws = workspace(gl, tmp_path, ["acme"])
    discover(ws)
    skipped = all_paths(gl)[3]
    original = type(gl.state).group_projects

    def shifted(self, ref, **kwargs):  # type: ignore[no-untyped-def]
        return [p for p in original(self, ref, **kwargs) if p["path_with_namespace"] != skipped]

    monkeypatch.setattr(type(gl.state), "group_projects", shifted)
    found = discover(ws)
    assert found.complete and found.left == [] and skipped in member_paths(ws)
    assert gl.stats()["by_route"]["project"] == 1  # one GET for the one project the listing lacked


def test_sync_project_takes_a_group_member_and_refuses_others_before_dagster(gl, tmp_path, token_env,
                                                                             monkeypatch, capsys) -> None:
    import sys

    import tomli_w

    from gitlab_knowledge.cli import main

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "gitlab_knowledge.toml"
    path.write_text(tomli_w.dumps({"groups": ["acme"], "gitlab": {"url": gl.url, "rate_limit": 0},
                                   "storage": {"data_dir": str(tmp_path / "data")}}), encoding="utf-8")
    loaded = "dagster" in sys.modules
    assert main(["--config", str(path), "sync", "--project", "acme/nope"]) == 2
    err = capsys.readouterr().err
    assert "'acme/nope' is not in the configuration (configured: " in err and all_paths(gl)[0] in err
    assert loaded or "dagster" not in sys.modules
