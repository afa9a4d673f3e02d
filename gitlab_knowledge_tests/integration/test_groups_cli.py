"""`sync` with `groups` in the config, through the CLI: the groups are listed first (the discovery
sensor's code path), their projects synced; a failed listing fails the command and removes
nothing; a project archived in GitLab is purged with `--yes` saying why; `sync-status --project`
finds one project's state and `doctor` says what each group resolves to. JSON checked against the
published schemas."""

import asyncio
import json
from pathlib import Path

import pytest
import tomli_w

from gitlab_knowledge.cli import main
from gitlab_knowledge.config import load_config
from gitlab_knowledge_sandbox import SandboxGitLab, generate_dataset
from gitlab_knowledge_tests.helpers import scalar
from gitlab_knowledge_tests.integration.test_cli_schemas import validate


@pytest.fixture(scope="module")
def two_groups(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("two-groups")
    generate_dataset(out, projects=2, issues=4, mrs=1, seed=4, threads_per_parent_mean=0.5, group_depth=1,
                     group_fanout=1)
    return out


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict, str]:
    code = main(list(args))
    out = capsys.readouterr()
    payload = json.loads(out.out) if out.out.strip() else {}
    if payload:
        validate(args[2], payload)
    return code, payload, out.err


def test_sync_lists_the_groups_syncs_their_projects_and_purges_an_archived_one(two_groups, tmp_path, token_env,
                                                                               monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)  # no dagster.yaml here: runs go to <data>/dagster
    with SandboxGitLab(dataset=two_groups) as sb:
        path = tmp_path / "gitlab_knowledge.toml"
        path.write_text(tomli_w.dumps({"groups": ["Acme"], "gitlab": {"url": sb.url, "rate_limit": 0, "max_retries": 1,
                                                                      "timeout": 5},
                                       "storage": {"data_dir": str(tmp_path / "data")}}), encoding="utf-8")
        config = load_config(path)
        members = sorted(p["path_with_namespace"] for p in sb.state.group_projects("acme", include_subgroups=True))
        code, first, _ = run(capsys, "--config", str(path), "sync", "--json")
        assert code == 0 and first["success"]
        assert first["groups"] == [{"group": "Acme", "group_id": 10, "full_path": "acme", "listed": 2,
                                    "complete": True, "error": None}]
        assert sorted(p["project"] for p in first["projects"]) == members

        gone, kept = members
        gone_id = sb.state.project(gone).data["id"]
        sb.state.archive_project(gone)
        sb.set_faults("503:path=/groups/")
        # --project takes a group's member (the last complete listing's, GitLab failing to list now).
        code, failed, err = run(capsys, "--config", str(path), "sync", "--yes", "--project", kept, "--json")
        assert code == 1 and not failed["success"] and failed["removed_projects"] == []
        assert not failed["groups"][0]["complete"] and "group Acme:" in err and "nothing is removed" in err
        assert scalar(config, "SELECT count(*) FROM documents WHERE project_id = ?", [gone_id]) > 0

        sb.set_faults(None)
        code, purged, err = run(capsys, "--config", str(path), "sync", "--yes", "--json")
        assert code == 0 and [p["project"] for p in purged["projects"]] == [kept]
        assert [(r["project"], r["purged"]) for r in purged["removed_projects"]] == [(gone, True)]
        assert f"Project {gone} left the configured groups (archived)" in err
        assert "no longer in the configuration (archived)" in err
        assert scalar(config, "SELECT count(*) FROM documents WHERE project_id = ?", [gone_id]) == 0

        code, status, _ = run(capsys, "--config", str(path), "sync-status", "--project", kept.upper(), "--json")
        assert code == 0 and [(p["configured"], p["group"]) for p in status["projects"]] == [(kept, "Acme")]
        assert {r["project_path"] for r in status["runs"]} == {kept}
        assert status["groups"][0]["projects"] == 1 and status["groups"][0]["full_path"] == "acme"
        assert main(["--config", str(path), "sync-status", "--project", kept]) == 0
        human = capsys.readouterr().out
        assert "Group Acme: 1 project(s), listed " in human and kept in human
        assert main(["--config", str(path), "sync-status", "--project", gone]) == 2
        assert "neither configured nor in a configured group" in capsys.readouterr().err

        from gitlab_knowledge.cli.doctor import _gitlab_checks

        checks = {c.name: c for c in asyncio.run(_gitlab_checks(config))}
        assert checks["group Acme"].status == "ok"
        assert checks["group Acme"].detail.startswith("id 10 (acme): 1 project(s) (subgroups included")
