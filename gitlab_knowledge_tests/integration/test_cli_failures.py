"""Failures of the machine and of the operator, through the real CLI: each is one line and a
documented exit code. Ctrl-C is `interrupted` (130); Dagster's SQLite storage on a full disk is
exit 1; `doctor` never prints a password from the URL; `sync --json` reports the API calls of a
project that failed; the data directory is its owner's alone, and scratch directories left by a
killed process are removed by the next one."""

import io
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from gitlab_knowledge.cli import main as cli_main
from gitlab_knowledge.defs.runner import instance_yaml
from gitlab_knowledge.sync.runs import pipeline_lock
from gitlab_knowledge_sandbox import SandboxGitLab
from gitlab_knowledge_tests.conftest import subprocess_env, write_config_file
from gitlab_knowledge_tests.support.tmpfs import mounted_tmpfs


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    umask = os.umask(0o022)  # the CLI sets its own; this process keeps the one it had
    os.umask(umask)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = cli_main(argv)
    finally:
        os.umask(umask)
    return code, out.getvalue(), err.getvalue()


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err
    return lines[0]


def threads_fetched(sb: SandboxGitLab) -> int:
    return sum(n for route, n in sb.stats()["by_route"].items() if route.endswith("_discussions"))


def test_ctrl_c_during_a_sync_says_interrupted_and_exits_130(small_dataset, tmp_path, token_env):
    with SandboxGitLab(dataset=small_dataset, latency_ms=50) as sb:
        config = write_config_file(tmp_path / "gitlab_knowledge.toml", sb, tmp_path / "data", per_page=5)
        child = subprocess.Popen([sys.executable, "-m", "gitlab_knowledge", "--config", str(config), "sync"],
                                 cwd=tmp_path, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
        try:
            deadline = time.monotonic() + 60
            # Threads are fetched inside the run's raw step (the checks before Dagster loads also
            # call GitLab, and a signal then is "stopped before the run started").
            while child.poll() is None and not threads_fetched(sb) and time.monotonic() < deadline:
                time.sleep(0.01)
            child.send_signal(signal.SIGINT)
            _out, err = child.communicate(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(30)
    assert child.returncode == 130, err[-2000:]
    assert one_error_line(err) == "error: interrupted"


def test_a_full_disk_under_dagsters_storage_is_one_line_and_exit_1(small_dataset, tmp_path, token_env):
    with mounted_tmpfs(tmp_path / "mnt", "1m") as mount:
        home = mount / "dagster"
        home.mkdir()
        (home / "dagster.yaml").write_text(instance_yaml(home))
        fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            for _ in range(1024):  # 1 MB at most: the filesystem is full well before
                os.write(fd, b"x" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        with SandboxGitLab(dataset=small_dataset) as sb:
            config = write_config_file(tmp_path / "gitlab_knowledge.toml", sb, tmp_path / "data")
            result = subprocess.run([sys.executable, "-m", "gitlab_knowledge", "--config", str(config), "sync"],
                                    cwd=tmp_path, env=subprocess_env(DAGSTER_HOME=str(home)), capture_output=True,
                                    text=True, timeout=300)
    assert result.returncode == 1, result.stderr[-2000:]
    line = one_error_line(result.stderr)
    assert "Dagster's run storage cannot write" in line and "no space left on device" in line, line


def test_doctor_never_prints_a_password_from_the_url(tmp_path, token_env):
    path = tmp_path / "gitlab_knowledge.toml"
    path.write_text('projects = ["a/b"]\n[gitlab]\nurl = "http://operator:s3cr3t-pw@127.0.0.1:9"\n'
                    f'[storage]\ndata_dir = "{tmp_path / "data"}"\n')
    code, out, err = run_cli(["--config", str(path), "doctor", "--json"])
    assert code == 1  # nothing listens on port 9
    assert "s3cr3t-pw" not in out + err
    assert "http://127.0.0.1:9" in out


def test_sync_json_reports_the_api_calls_of_a_project_that_failed(sandbox, tmp_path, token_env, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = write_config_file(tmp_path / "gitlab_knowledge.toml", sandbox, tmp_path / "data", max_retries=0,
                               per_page=5)
    # One project fetched at a time, so that the 7th request is the first project's: with two in
    # flight, which project a request belongs to depends on how their fetches interleave.
    config.write_text(config.read_text(encoding="utf-8") + "\n[sync]\nprojects_in_flight = 1\n", encoding="utf-8")
    sandbox.set_faults("500:after=6")
    code, out, err = run_cli(["--config", str(config), "sync", "--json"])
    assert code == 1
    first = json.loads(out)["projects"][0]
    assert not first["success"] and first["api_calls"] >= 7, first


def test_the_data_directory_is_private_and_a_killed_processs_scratch_is_removed(tiny_sandbox, tmp_path,
                                                                                token_env, monkeypatch):
    # A whole sync on the tiny dataset: what is checked is every file it creates, not how many.
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    leftovers = [data / f"gk-embed-{dead.pid}-abcd1234", data / "gk-lexical-oldstyle"]
    for leftover in leftovers:
        leftover.mkdir(parents=True)
        (leftover / "documents.parquet").write_bytes(b"confidential text")
    two_hours_ago = time.time() - 7200
    os.utime(leftovers[1], (two_hours_ago, two_hours_ago))
    in_use = data / f"gk-embed-{os.getpid()}-inuse123"  # a live process's: kept
    in_use.mkdir()
    before = {p for p in data.rglob("*")}
    config = write_config_file(tmp_path / "gitlab_knowledge.toml", tiny_sandbox, data)
    code, _out, err = run_cli(["--config", str(config), "sync"])
    assert code == 0, err
    assert sorted(p.name for p in data.glob("gk-*")) == [in_use.name]
    created = [p for p in data.rglob("*") if p not in before]
    assert len(created) > 10  # the store, the indexes, Dagster's storage
    for path in created:
        assert path.stat().st_mode & 0o077 == 0, f"{path} is readable by others"
    assert data.stat().st_mode & 0o777 == 0o700  # made 0755 above, as a clone's data/ is; ours, so tightened
    fresh = tmp_path / "fresh" / "data"
    run_cli(["--config", str(write_config_file(tmp_path / "other.toml", tiny_sandbox, fresh)), "doctor", "--json"])
    assert fresh.stat().st_mode & 0o777 == 0o700


def without_dagster(config: Path, *argv: str) -> subprocess.CompletedProcess:
    """A CLI process that must not load Dagster: its import log (`-X importtime`) says whether it
    did; its stderr comes back without the log."""
    child = subprocess.run([sys.executable, "-X", "importtime", "-m", "gitlab_knowledge", "--config", str(config),
                            *argv], env=subprocess_env(), capture_output=True, text=True, timeout=300)
    imported = [line.split("|")[-1].strip() for line in child.stderr.splitlines() if line.startswith("import time:")]
    assert imported and not [m for m in imported if m.split(".")[0] in ("dagster", "dagster_shared")], \
        [m for m in imported if "dagster" in m][:5]
    child.stderr = "\n".join(line for line in child.stderr.splitlines() if not line.startswith("import time:"))
    return child


def refusal_without_dagster(config: Path, *argv: str) -> tuple[int, str]:
    """A CLI process's exit code and its one error line, refused before Dagster was loaded."""
    child = without_dagster(config, *argv)
    said = [line for line in child.stderr.splitlines() if line.strip()]
    assert len(said) == 1 and said[0].startswith("error: "), said
    return child.returncode, said[0]


@pytest.mark.parametrize("command", ["sync", "embed"])
def test_an_unknown_project_is_refused_before_dagster_loads(sandbox, tmp_path, token_env, command):
    config = write_config_file(tmp_path / "gitlab_knowledge.toml", sandbox, tmp_path / "data")
    code, line = refusal_without_dagster(config, command, "--project", "nope/nope")
    assert code == 2 and "'nope/nope' is not in the configuration" in line, line


@pytest.mark.parametrize("command", ["sync", "embed"])
def test_a_command_while_a_sync_runs_is_refused_before_dagster_loads(sandbox, tmp_path, token_env, command):
    data = tmp_path / "data"
    config = write_config_file(tmp_path / "gitlab_knowledge.toml", sandbox, data)
    with pipeline_lock(data, "sync"):  # what a running sync in another process holds
        code, line = refusal_without_dagster(config, command)
    assert code == 5 and "another process" in line and "running a sync" in line, line


def test_sync_status_shows_the_backlog_without_loading_dagster(sandbox, synced, tmp_path):
    config = write_config_file(tmp_path / "gitlab_knowledge.toml", sandbox, synced.data_dir)
    child = without_dagster(config, "sync-status", "--json")
    assert child.returncode == 0, child.stderr
    backlog = json.loads(child.stdout)["backlog"]
    assert {entry["project"] for entry in backlog} == set(synced.projects)
