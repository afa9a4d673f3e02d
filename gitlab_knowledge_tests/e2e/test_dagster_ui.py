"""End to end, as a user runs it: the real Dagster webserver and daemon against the sandbox GitLab.

Both tests here share one `dagster dev` (starting it is most of what each paid alone): its
environment names the sample's config, served by a sandbox for the module; a test with a GitLab
and store of its own names its config in the run config of what it launches.

The Dagster UI test launches the sync over GraphQL, waits for it, checks the asset checks; adds a
note in GitLab, starts the sensor, watches it launch a run for the changed project; finds the note
with the search CLI. Its store starts as a copy of the session's synced sample (conftest `sample`):
what it adds to the in-process tests is the webserver, the daemon and their run workers, not a
first sync of the sample again (the concurrency test syncs from scratch through the daemon)."""

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import pytest

from gitlab_knowledge.config import load_config
from gitlab_knowledge.layers import DUCKDB_POOL
from gitlab_knowledge_sandbox import DEFAULT_TOKEN, SAMPLE_DATASET, SandboxGitLab
from gitlab_knowledge_tests.conftest import SampleStore, subprocess_env, write_config_file
from gitlab_knowledge_tests.helpers import rows
from gitlab_knowledge_tests.support.dagster_dev import DagsterDev
from gitlab_knowledge_tests.support.fake_ollama import FakeOllama

NOTE = "Decision: we cap Redis memory at 2 GB with allkeys-lfu eviction (zebrafish canary)"
DUCKDB_STEPS = {"raw_gitlab_payloads", "normalized_gitlab", "search_documents"}


@dataclass
class SampleDagster:
    dagster: DagsterDev
    sb: SandboxGitLab  # serves the sample; the server's own config points at it
    config: Path
    workdir: Path  # the server's instance and log, and the store its config names


@pytest.fixture(scope="module")
def sample_dagster(sample: SampleStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SampleDagster]:
    workdir = tmp_path_factory.mktemp("dagster-dev")
    shutil.copytree(sample.config.data_dir, workdir / "data")
    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        config = write_config_file(workdir / "gitlab_knowledge.toml", sb, workdir / "data")
        env = subprocess_env(GITLAB_KNOWLEDGE_CONFIG=str(config), GITLAB_KNOWLEDGE_AUTOMATION="off",
                             GITLAB_KNOWLEDGE_SENSOR_INTERVAL="2")
        with DagsterDev(workdir, env) as dagster:
            yield SampleDagster(dagster, sb, config, workdir)


def test_sync_checks_sensor_and_search_through_the_real_dagster(sample_dagster):
    dagster, sb, config = sample_dagster.dagster, sample_dagster.sb, sample_dagster.config
    project = "acme/platform"
    dagster.add_partition(project)
    run_id = dagster.launch("sync_project", project)
    assert dagster.wait_run(run_id) == "SUCCESS", dagster.log.read_text()[-5000:]
    checks = dagster.check_results(run_id)
    assert len(checks) == 14
    failing = {name for name, ok in checks.items() if not ok}
    # Both projects synced, every layer current: all green. (A never-synced project's warning is
    # integration/test_dagster_defs.py's, in process.)
    assert failing == set(), checks

    issue = next(i for i in sb.state.list_items(project, "issues") if i["iid"] == 196)
    sb.state.add_note(project, "issues", issue["iid"], NOTE)
    dagster.start_sensor("gitlab_change_sensor")
    try:
        deadline = time.monotonic() + 120
        sensor_runs: list = []
        while time.monotonic() < deadline and not sensor_runs:
            # One batch run per tick (defs/batch.py), naming the projects it carries.
            sensor_runs = [r for r in dagster.runs("gitlab_knowledge/trigger", "sensor")
                           if {"key": "gitlab_knowledge/project", "value": project} in r["tags"]]
            time.sleep(0.5)
        assert sensor_runs, "the sensor did not launch a run for the changed project"
        assert dagster.wait_run(sensor_runs[0]["runId"]) == "SUCCESS"
    finally:
        dagster.reset_sensor("gitlab_change_sensor")  # the other test's runs are its own

    # The token reached every process through the environment and must have been written nowhere:
    # not in Dagster's run and event storage, the daemon's log, the store or the indexes.
    for path in sample_dagster.workdir.rglob("*"):
        if path.is_file():
            assert DEFAULT_TOKEN.encode() not in path.read_bytes(), path

    search = subprocess.run([sys.executable, "-m", "gitlab_knowledge.search", "zebrafish canary redis memory cap",
                             "--json", "--config", str(config)], capture_output=True, text=True,
                            env=subprocess_env(), timeout=120)
    assert search.returncode == 0, search.stderr
    top = json.loads(search.stdout)["results"][0]
    assert top["url"].startswith("https://gitlab.example.com/acme/platform/-/issues/196#note_")
    assert "zebrafish" in top["snippet"]


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_runs_launched_at_once_never_double_a_project_or_share_the_duckdb_writer(sample_dagster, small_dataset,
                                                                                 tmp_path):
    """Two runs launched at once through the real daemon: a project's sync is never doubled (one
    run per partition at a time), and steps that write DuckDB never overlap across runs (the pool)."""
    assert DUCKDB_POOL == "gitlab_knowledge_duckdb"
    dagster = sample_dagster.dagster
    # Embeddings from the fake Ollama: the model's CPU is not what runs contend for here (the
    # embedded model runs in a daemon's run worker in the test above, on the note the sensor syncs).
    with SandboxGitLab(dataset=small_dataset, latency_ms=20) as sb, FakeOllama() as ollama:
        config = write_config_file(tmp_path / "gitlab_knowledge.toml", sb, tmp_path / "data")
        with config.open("a") as f:
            f.write(f'[embedding]\nprovider = "ollama"\nollama_host = "{ollama.url}"\ntimeout = 5\n')
        first, second = [p["path_with_namespace"] for p in sb.state.list_projects(order_by="id", sort="asc")]
        for project in (first, second):
            dagster.add_partition(project)
        runs = {"a1": dagster.launch("sync_project", first, config), "a2": dagster.launch("sync_project", first, config),
                "b1": dagster.launch("sync_project", second, config)}
        statuses = {name: dagster.wait_run(run_id, timeout=300) for name, run_id in runs.items()}
        assert set(statuses.values()) == {"SUCCESS"}, (statuses, dagster.log.read_text()[-4000:])
        timings = {name: dagster.timings(run_id) for name, run_id in runs.items()}
    # The runs read the config their run config named (this test's GitLab and store), not the
    # server's: both projects are in this store.
    assert len(rows(load_config(config), "SELECT DISTINCT project_id FROM issues")) == 2
    a1, a2 = timings["a1"], timings["a2"]
    assert not overlap((a1["startTime"], a1["endTime"]), (a2["startTime"], a2["endTime"])), "a project synced twice at once"
    steps = [(name, s["stepKey"], (s["startTime"], s["endTime"])) for name, t in timings.items()
             for s in t["stepStats"] if s["stepKey"] in DUCKDB_STEPS]
    assert len(steps) == 9
    for (r1, k1, w1), (r2, k2, w2) in combinations(steps, 2):
        if r1 != r2:
            assert not overlap(w1, w2), f"{r1}.{k1} and {r2}.{k2} wrote DuckDB at the same time"
