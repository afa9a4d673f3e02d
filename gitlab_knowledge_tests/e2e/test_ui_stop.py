"""Stopping `ui` while a run it launched is in progress: the run ends CANCELED (Dagster's own run
termination), not FAILURE, and one line says so. The real webserver, daemon and run worker, with
the sandbox GitLab answering slowly so the run is still fetching when the UI stops."""

import json
import time

import dagster as dg

from gitlab_knowledge.cli.ui import stop
from gitlab_knowledge_sandbox import SAMPLE_DATASET, SandboxGitLab
from gitlab_knowledge_tests.conftest import subprocess_env, write_config_file
from gitlab_knowledge_tests.support.dagster_dev import DagsterDev


def test_stopping_the_ui_cancels_the_run_in_progress(tmp_path, capsys):
    with SandboxGitLab(dataset=SAMPLE_DATASET, faults="latency:ms=1500") as sb:
        config = write_config_file(tmp_path / "gitlab_knowledge.toml", sb, tmp_path / "data")
        env = subprocess_env(GITLAB_KNOWLEDGE_CONFIG=str(config), GITLAB_KNOWLEDGE_AUTOMATION="off")
        project = "acme/platform"
        with DagsterDev(tmp_path, env) as dagster:
            dagster.add_partition(project)
            run_id = dagster.launch("sync_project", project)
            deadline = time.monotonic() + 240
            steps: list = []
            while time.monotonic() < deadline and not steps:  # the raw step has started fetching
                run = dagster.timings(run_id)
                assert run["status"] not in ("SUCCESS", "FAILURE", "CANCELED"), run
                steps = [s for s in run["stepStats"] if s["stepKey"] == "raw_gitlab_payloads" and s["startTime"]]
                time.sleep(0.5)
            assert steps, "the run never started its first step"
            canceled = stop(dagster, wait_s=120)
        assert canceled == [run_id]
        with dg.DagsterInstance.from_config(str(dagster.home)) as instance:
            assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.CANCELED
    err = capsys.readouterr().err
    assert f"Canceled 1 run(s) in progress, as the UI stopped: {run_id[:8]}" in err


def test_stopping_the_ui_cancels_a_batch_run_in_progress_and_keeps_its_record(tmp_path, capsys):
    with SandboxGitLab(dataset=SAMPLE_DATASET, faults="latency:ms=1500") as sb:
        config = write_config_file(tmp_path / "gitlab_knowledge.toml", sb, tmp_path / "data")
        env = subprocess_env(GITLAB_KNOWLEDGE_CONFIG=str(config), GITLAB_KNOWLEDGE_AUTOMATION="off")
        with DagsterDev(tmp_path, env) as dagster:
            batch_id = dagster.launch("sync_projects", None)  # every configured project, one run
            deadline = time.monotonic() + 240
            steps: list = []
            while time.monotonic() < deadline and not steps:  # its step is carrying the projects
                run = dagster.timings(batch_id)
                assert run["status"] not in ("SUCCESS", "FAILURE", "CANCELED"), run
                steps = [s for s in run["stepStats"] if s["stepKey"] == "sync_each_project" and s["startTime"]]
                time.sleep(0.5)
            assert steps, "the batch never started its step"
            canceled = stop(dagster, wait_s=120)
        assert canceled == [batch_id]
        with dg.DagsterInstance.from_config(str(dagster.home)) as instance:
            batch = instance.get_run_by_id(batch_id)
            assert batch.status == dg.DagsterRunStatus.CANCELED
            assert instance.get_runs(dg.RunsFilter(job_name="sync_project")) == []  # no run per project
            # The projects it did not finish are recorded: the sensor's history counts them.
            assert json.loads(batch.tags["gitlab_knowledge/unfinished"])
