"""`python -m gitlab_knowledge` as a user runs it: real subprocesses, a sandbox GitLab over sockets,
the Dagster job in-process. A first sync and a second one; every read command against a synced
store."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gitlab_knowledge_sandbox import DEFAULT_TOKEN, SandboxGitLab, generate_dataset
from gitlab_knowledge_tests.conftest import forked, subprocess_env, write_config_file

BAD_TOKEN = "glpat-THIS-IS-A-WRONG-TOKEN-123"


def cli(*args: str, cwd: Path, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    return forked(["gitlab_knowledge", *args], cwd=cwd, env=subprocess_env(**env), timeout=timeout)


@pytest.fixture(scope="module")
def first_sync(tmp_path_factory):
    """A sandbox and a project directory (gitlab_knowledge.toml + data/) after a first CLI sync of
    two projects: small ones, as the sync's size proves nothing here (the read commands below run
    on the session's synced small store)."""
    dataset, home = tmp_path_factory.mktemp("two-tiny"), tmp_path_factory.mktemp("cli-first")
    generate_dataset(dataset, projects=2, issues=4, mrs=2, seed=3, threads_per_parent_mean=2.0)
    with SandboxGitLab(dataset=dataset) as sb:
        write_config_file(home / "gitlab_knowledge.toml", sb, home / "data")
        first = cli("sync", "--json", cwd=home)
        yield sb, home, first


@pytest.fixture(scope="module")
def synced(small_dataset, small_store, tmp_path_factory):
    """A sandbox and a project directory (gitlab_knowledge.toml + data/, a copy of the session's
    synced small store) with the sandbox serving the same dataset."""
    home = tmp_path_factory.mktemp("cli-home")
    shutil.copytree(small_store, home / "data")
    with SandboxGitLab(dataset=small_dataset) as sb:
        write_config_file(home / "gitlab_knowledge.toml", sb, home / "data")
        yield sb, home, None


def test_sync_prints_a_summary_and_json(first_sync):
    sb, home, first = first_sync
    assert first.returncode == 0, first.stderr
    payload = json.loads(first.stdout)
    assert payload["success"] and len(payload["projects"]) == 2
    for project in payload["projects"]:
        assert project["fetched"] > 0 and project["new"] == project["fetched"] and project["api_calls"] > 0
        assert project["embedded"] == project["documents"] > 0
    second = cli("sync", cwd=home)
    assert second.returncode == 0, second.stderr
    assert "Sync of 2 project(s)" in second.stdout
    for line in second.stdout.splitlines():
        if line.startswith("│ acme/"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            assert cells[1:6] == ["0", "0", "0", "0", "0"]  # fetched new updated deleted threads
            # API calls: the project + one list call per resource (issues, MRs, the wiki, releases)
            assert cells[6] == "5"


def test_read_commands(synced):
    sb, home, _ = synced
    project = sb.state.list_projects(order_by="id", sort="asc")[0]["path_with_namespace"]
    issues = sb.state.list_items(project, "issues")
    count = cli("count", "issues", "--json", cwd=home)
    assert json.loads(count.stdout)["count"] == sum(len(sb.state.list_items(p["id"], "issues"))
                                                     for p in sb.state.list_projects())
    assert cli("count", "notes", cwd=home).stdout.startswith("Notes: ")
    listed = json.loads(cli("list", "issues", "--project", project, "--limit", "5", "--json", cwd=home).stdout)
    assert len(listed) == 5 and all(r["project"] == project for r in listed)
    assert [r["updated_at"] for r in listed] == sorted((r["updated_at"] for r in listed), reverse=True)
    human = cli("list", "mrs", "--limit", "3", cwd=home)
    assert human.returncode == 0 and " → " in human.stdout
    issue = next(i for i in issues if i["user_notes_count"] > 0)
    shown = json.loads(cli("show", "issue", str(issue["iid"]), "--project", project, "--json", cwd=home).stdout)
    assert shown["title"] == issue["title"] and shown["threads"]
    assert sum(len(t["notes"]) for t in shown["threads"]) == issue["user_notes_count"]
    text = cli("show", "issue", str(issue["iid"]), "--project", project, cwd=home).stdout
    assert f"Issue #{issue['iid']}" in text and "discussion thread(s)" in text
    status = json.loads(cli("sync-status", "--json", cwd=home).stdout)
    assert {r["status"] for r in status["runs"]} == {"succeeded"}
    assert len(status["cursors"]) == 4
    stats = json.loads(cli("stats", "--json", cwd=home).stdout)
    assert all(p["embedded_pct"] == 100.0 for p in stats["projects"])
    index = json.loads(cli("index", "status", "--json", cwd=home).stdout)
    for p in index["projects"]:
        assert p["vectors"]["indexed"] == p["lexical"]["indexed"] == p["documents"]
    embed = cli("embed", cwd=home)
    assert embed.returncode == 0 and "0 documents to embed" in embed.stdout
    doctor = json.loads(cli("doctor", "--json", cwd=home).stdout)
    assert doctor["success"] and {c["name"] for c in doctor["checks"]} >= {"config", "token", "gitlab", "store",
                                                                            "embeddings"}


@pytest.mark.parametrize("args,message", [
    (("show", "issue", "1"), "exists in several projects"),
    (("show", "issue", "99999"), "no issue #99999"),
    (("show", "issue", "abc"), "argument iid: expected a whole number, got 'abc'"),
    (("show", "wiki", "runbooks/nope"), "no wiki page wiki:runbooks/nope in the store"),
    (("list", "wiki", "--state", "opened"), "--state narrows issues and merge requests"),
    (("list", "issues", "--project", "no/such"), "not in the store"),
    (("list", "epics"), "invalid choice"),
    (("count",), "the following arguments are required"),
    (("sync", "--project", "not/configured"), "not in the configuration"),
])
def test_bad_input_is_one_line_and_exit_2(synced, args, message):
    _, home, _ = synced
    result = cli(*args, cwd=home)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_a_bad_token_fails_with_one_line_and_leaks_nowhere(small_dataset, tmp_path):
    with SandboxGitLab(dataset=small_dataset) as sb:
        write_config_file(tmp_path / "gitlab_knowledge.toml", sb, tmp_path / "data")
        outputs = []
        for command in (("auth-test",), ("sync",), ("doctor", "--json")):
            result = cli(*command, cwd=tmp_path, GITLAB_TOKEN=BAD_TOKEN)
            outputs.append(result.stdout + result.stderr)
            assert result.returncode != 0, command
            if command != ("doctor", "--json"):
                assert result.returncode == 3
                assert result.stderr.count("\n") == 1 and "GITLAB_TOKEN" in result.stderr, result.stderr
        assert "401" in outputs[0]
    assert all(BAD_TOKEN not in out for out in outputs)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert BAD_TOKEN.encode() not in path.read_bytes(), path


def test_the_good_token_is_stored_and_logged_nowhere(first_sync, synced):
    _, home, first = first_sync
    assert DEFAULT_TOKEN not in first.stdout + first.stderr
    for path in [*(home / "data").rglob("*"), *(synced[1] / "data").rglob("*")]:
        if path.is_file():
            assert DEFAULT_TOKEN.encode() not in path.read_bytes(), path


def test_config_goes_before_or_after_the_command(synced, tmp_path):
    from gitlab_knowledge.cli import build_parser

    parse = build_parser().parse_args
    assert parse(["--config", "a.toml", "count", "issues"]).config == "a.toml"
    assert parse(["count", "issues", "--config", "b.toml"]).config == "b.toml"
    assert parse(["--config", "a.toml", "related", "#1", "--config", "b.toml"]).config == "b.toml"
    assert parse(["models", "list"]).config is None
    _, home, _ = synced
    config = str(home / "gitlab_knowledge.toml")
    before = cli("--config", config, "count", "issues", "--json", cwd=tmp_path)
    after = cli("count", "issues", "--json", "--config", config, cwd=tmp_path)
    assert before.returncode == after.returncode == 0, before.stderr + after.stderr
    assert json.loads(before.stdout) == json.loads(after.stdout) and json.loads(after.stdout)["count"] > 0


def test_missing_token_and_config_are_one_line(tmp_path):
    none = cli("count", "issues", cwd=tmp_path)
    assert none.returncode == 2 and "no configuration" in none.stderr and none.stderr.count("\n") == 1
    (tmp_path / "gitlab_knowledge.toml").write_text('projects = ["a/b"]\n[gitlab]\nurl = "http://127.0.0.1:9"\n')
    env = {k: v for k, v in subprocess_env().items() if k != "GITLAB_TOKEN"}
    missing = subprocess.run([sys.executable, "-m", "gitlab_knowledge", "sync"], cwd=tmp_path, capture_output=True,
                             text=True, env=env, timeout=120)
    assert missing.returncode == 2 and "GITLAB_TOKEN is not set" in missing.stderr
    nothing = cli("count", "issues", cwd=tmp_path)
    assert nothing.returncode == 1 and "run `python -m gitlab_knowledge sync` first" in nothing.stderr
    unreachable = cli("auth-test", cwd=tmp_path, timeout=120)
    assert unreachable.returncode == 1 and unreachable.stderr.count("\n") == 1 and "Traceback" not in unreachable.stderr
