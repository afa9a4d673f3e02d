"""End to end, as a user runs it: the real Dagster webserver and daemon against the sandbox GitLab.
Launch the sync over GraphQL, wait for it, check the asset checks; add a note in GitLab, start the
sensor, watch it launch a run for the changed project; find the note with the search CLI.

The store starts as a copy of the session's synced sample (conftest `sample`): what this test adds
to the in-process ones is the webserver, the daemon and their run workers, not a first sync and
embedding of the sample again (test_concurrency.py syncs from scratch through the daemon)."""

import json
import shutil
import subprocess
import sys
import time

from gitlab_knowledge_sandbox import DEFAULT_TOKEN, SAMPLE_DATASET, SandboxGitLab
from gitlab_knowledge_tests.conftest import subprocess_env, write_config_file
from gitlab_knowledge_tests.support.dagster_dev import DagsterDev

NOTE = "Decision: we cap Redis memory at 2 GB with allkeys-lfu eviction (zebrafish canary)"


def test_sync_checks_sensor_and_search_through_the_real_dagster(sample, tmp_path):
    shutil.copytree(sample.config.data_dir, tmp_path / "data")
    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        config = write_config_file(tmp_path / "gitlab_knowledge.toml", sb, tmp_path / "data")
        env = subprocess_env(GITLAB_KNOWLEDGE_CONFIG=str(config), GITLAB_KNOWLEDGE_AUTOMATION="off",
                             GITLAB_KNOWLEDGE_SENSOR_INTERVAL="2")
        project = "acme/platform"
        with DagsterDev(tmp_path, env) as dagster:
            dagster.add_partition(project)
            run_id = dagster.launch("sync_project", project)
            assert dagster.wait_run(run_id) == "SUCCESS", dagster.log.read_text()[-5000:]
            checks = dagster.check_results(run_id)
            assert len(checks) == 14
            failing = {name for name, ok in checks.items() if not ok}
            # Both projects synced, every layer current: all green. (A never-synced project's
            # warning is integration/test_dagster_defs.py's, in process.)
            assert failing == set(), checks

            issue = next(i for i in sb.state.list_items(project, "issues") if i["iid"] == 196)
            sb.state.add_note(project, "issues", issue["iid"], NOTE)
            dagster.start_sensor("gitlab_change_sensor")
            deadline = time.monotonic() + 120
            sensor_runs: list = []
            while time.monotonic() < deadline and not sensor_runs:
                sensor_runs = [r for r in dagster.runs("gitlab_knowledge/trigger", "sensor")
                               if {"key": "dagster/partition", "value": project} in r["tags"]]
                time.sleep(1)
            assert sensor_runs, "the sensor did not launch a run for the changed project"
            assert dagster.wait_run(sensor_runs[0]["runId"]) == "SUCCESS"

    # The token reached every process through the environment and must have been written nowhere:
    # not in Dagster's run and event storage, the daemon's log, the store or the indexes.
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert DEFAULT_TOKEN.encode() not in path.read_bytes(), path

    search = subprocess.run([sys.executable, "-m", "gitlab_knowledge.search", "zebrafish canary redis memory cap",
                             "--json", "--config", str(config)], capture_output=True, text=True,
                            env=subprocess_env(), timeout=120)
    assert search.returncode == 0, search.stderr
    top = json.loads(search.stdout)["results"][0]
    assert top["url"].startswith("https://gitlab.example.com/acme/platform/-/issues/196#note_")
    assert "zebrafish" in top["snippet"]
