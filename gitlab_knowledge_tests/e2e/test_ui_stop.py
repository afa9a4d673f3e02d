"""Stopping `ui` while a run it launched is in progress: the run ends CANCELED (Dagster's own run
termination), not FAILURE, and one line says so. The real webserver, daemon and run worker, with
the sandbox GitLab answering slowly so the run is still fetching when the UI stops.

Each test stops its own server (that is what it tests), so the two cannot share one; they are
started together instead, and the second test's server is ready while the first test runs."""

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import dagster as dg
import pytest

from gitlab_knowledge.cli.ui import stop
from gitlab_knowledge_sandbox import SAMPLE_DATASET, SandboxGitLab
from gitlab_knowledge_tests.conftest import subprocess_env, write_config_file
from gitlab_knowledge_tests.support.dagster_dev import DagsterDev


@dataclass
class Server:
    dagster: DagsterDev
    sb: SandboxGitLab

    def ready(self) -> DagsterDev:
        try:
            self.dagster.wait_ready()
        except BaseException:
            self.dagster.stop()
            raise
        return self.dagster


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    """A slow sandbox GitLab and a `dagster dev` per test, all started at once."""
    with contextlib.ExitStack() as stack:
        made = {}
        for name in ("run", "batch"):
            workdir = tmp_path_factory.mktemp(f"ui-stop-{name}")
            sb = stack.enter_context(SandboxGitLab(dataset=SAMPLE_DATASET, faults="latency:ms=1500"))
            config = write_config_file(workdir / "gitlab_knowledge.toml", sb, workdir / "data")
            env = subprocess_env(GITLAB_KNOWLEDGE_CONFIG=str(config), GITLAB_KNOWLEDGE_AUTOMATION="off")
            dagster = DagsterDev(workdir, env)
            stack.callback(dagster.__exit__)  # a test that failed before its stop: end the group
            dagster.start()
            made[name] = Server(dagster, sb)
        yield made


def step_started(dagster: DagsterDev, run_id: str, step: str, timeout: float = 240) -> bool:
    """Wait until the run's `step` has started (the run still in progress all along)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = dagster.timings(run_id)
        assert run["status"] not in ("SUCCESS", "FAILURE", "CANCELED"), run
        if any(s["stepKey"] == step and s["startTime"] for s in run["stepStats"]):
            return True
        time.sleep(0.5)
    return False


def what_became_of(dagster: DagsterDev, run_id: str) -> str:
    """A failure's evidence: the run's status and its last events (the interrupt, the step's end)."""
    with dg.DagsterInstance.from_config(str(dagster.home)) as instance:
        run = instance.get_run_by_id(run_id)
        lines = [f"run {run_id}: {getattr(run, 'status', None)}"]
        for record in instance.all_logs(run_id)[-25:]:
            lines.append(f"  {record.timestamp:.2f} {record.dagster_event_type} {(record.message or '')[:300]}")
    return "\n".join(lines)


def test_stopping_the_ui_cancels_the_run_in_progress(servers, capsys):
    dagster = servers["run"].ready()
    project = "acme/platform"
    dagster.add_partition(project)
    run_id = dagster.launch("sync_project", project)
    assert step_started(dagster, run_id, "raw_gitlab_payloads"), "the run never started its first step"
    canceled = stop(dagster, wait_s=120)
    assert canceled == [run_id], what_became_of(dagster, run_id)
    with dg.DagsterInstance.from_config(str(dagster.home)) as instance:
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.CANCELED
    err = capsys.readouterr().err
    assert f"Canceled 1 run(s) in progress, as the UI stopped: {run_id[:8]}" in err


def test_stopping_the_ui_cancels_a_batch_run_in_progress_and_keeps_its_record(servers):
    dagster = servers["batch"].ready()
    batch_id = dagster.launch("sync_projects", None)  # every configured project, one run
    assert step_started(dagster, batch_id, "sync_each_project"), "the batch never started its step"
    canceled = stop(dagster, wait_s=120)
    assert canceled == [batch_id], what_became_of(dagster, batch_id)
    with dg.DagsterInstance.from_config(str(dagster.home)) as instance:
        batch = instance.get_run_by_id(batch_id)
        assert batch.status == dg.DagsterRunStatus.CANCELED
        assert instance.get_runs(dg.RunsFilter(job_name="sync_project")) == []  # no run per project
        # The projects it did not finish are recorded: the sensor's history counts them.
        assert json.loads(batch.tags["gitlab_knowledge/unfinished"])
