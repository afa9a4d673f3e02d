"""Ctrl-C or SIGTERM to `sync`/`embed` before the Dagster run starts: one line, exit 130, and no
run left NOT_STARTED in the Dagster instance (a kill -9 at that moment leaves one, which the
reaper cancels).

The CLI runs under a small driver that stops it at the moment under test and says so with a
marker file: while Dagster loads (its first import), or just after the run was created and before
it starts (`create_run_for_job` returned). The test signals it only then: no timing luck."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from gitlab_knowledge.defs.run_slots import reap_dead_runs
from gitlab_knowledge_tests.conftest import subprocess_env

DRIVER = '''
import os, signal, sys

marker, where = os.environ["GK_TEST_MARKER"], os.environ["GK_TEST_STOP_AT"]

def stop_here():
    open(marker, "w").close()
    signal.pause()  # until the test's signal: SIGTERM/SIGINT raise here, SIGKILL ends the process

if where == "dagster-import":
    class StopAtDagster:
        def find_spec(self, name, path=None, target=None):
            if name == "dagster":
                sys.meta_path.remove(self)
                stop_here()
            return None
    sys.meta_path.insert(0, StopAtDagster())
else:  # "run-created"
    import dagster
    created = dagster.DagsterInstance.create_run_for_job
    def create_then_stop(self, *args, **kwargs):
        run = created(self, *args, **kwargs)
        stop_here()
        return run
    dagster.DagsterInstance.create_run_for_job = create_then_stop

from gitlab_knowledge.cli import main
sys.exit(main(sys.argv[1:]))
'''


def stopped(tmp_path: Path, command: str, where: str, sig: int) -> tuple[subprocess.CompletedProcess, Path]:
    data = tmp_path / "data"
    config = tmp_path / "gitlab_knowledge.toml"
    # GitLab is never reached: everything under test happens before the run's first step.
    config.write_text(f'projects = ["acme/platform"]\n[gitlab]\nurl = "http://127.0.0.1:9"\n'
                      f'[storage]\ndata_dir = "{data}"\n')
    driver, marker = tmp_path / "driver.py", tmp_path / "stopped"
    driver.write_text(DRIVER)
    env = subprocess_env(GK_TEST_MARKER=str(marker), GK_TEST_STOP_AT=where,
                         PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, str(driver), "--config", str(config), command], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while not marker.exists():  # the driver says when it reached the moment
            assert child.poll() is None, child.communicate()
            time.sleep(0.05)
        child.send_signal(sig)
        out, err = child.communicate(timeout=300)
    finally:
        if child.poll() is None:
            child.kill()
    return subprocess.CompletedProcess(child.args, child.returncode, out, err), data


def instance_of(data: Path) -> dg.DagsterInstance | None:
    """The instance the child used: <data_dir>/dagster (its cwd held no dagster.yaml)."""
    home = data / "dagster"
    return dg.DagsterInstance.from_config(str(home)) if (home / "dagster.yaml").exists() else None


def runs_by_status(data: Path) -> dict[str, list[str]]:
    instance = instance_of(data)
    out: dict[str, list[str]] = {}
    for run in instance.get_runs() if instance is not None else []:
        out.setdefault(run.status.value, []).append(run.run_id)
    return out


def assert_one_line(result: subprocess.CompletedProcess, text: str) -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 130, result.stderr[-2000:]
    assert lines == [f"error: {text}"], lines
    assert result.stdout == ""


@pytest.mark.parametrize(("command", "sig"), [("sync", signal.SIGTERM), ("embed", signal.SIGINT)])
def test_stopped_while_dagster_loads_says_so_in_one_line(tmp_path, command, sig):
    result, data = stopped(tmp_path, command, "dagster-import", sig)
    assert_one_line(result, "stopped before the run started; nothing changed")
    assert runs_by_status(data) == {}


def test_stopped_after_the_run_was_created_cancels_it(tmp_path):
    result, data = stopped(tmp_path, "sync", "run-created", signal.SIGTERM)
    assert_one_line(result, "stopped before the run started; nothing changed")
    runs = runs_by_status(data)
    assert list(runs) == ["CANCELED"] and len(runs["CANCELED"]) == 1, runs


def test_a_run_whose_process_was_killed_before_it_started_is_reaped(tmp_path):
    result, data = stopped(tmp_path, "embed", "run-created", signal.SIGKILL)
    assert result.returncode == -signal.SIGKILL
    assert list(runs_by_status(data)) == ["NOT_STARTED"]
    instance = instance_of(data)
    assert instance is not None
    reaped = reap_dead_runs(instance)  # what the reaper sensor and the next command call
    runs = runs_by_status(data)
    assert list(runs) == ["CANCELED"] and runs["CANCELED"] == reaped, runs
