"""Test helpers: run the pipeline (the Dagster job itself, in-process) and read the store."""

from collections.abc import Sequence
from typing import Any

import dagster as dg

from gitlab_knowledge.config import Config
from gitlab_knowledge.defs.runner import ProjectOutcome, run_sync
from gitlab_knowledge.documents.refresh import DocumentStats
from gitlab_knowledge.embeddings.refresh import EmbedStats
from gitlab_knowledge.lexical.refresh import LexicalStats
from gitlab_knowledge.store.db import read_connection
from gitlab_knowledge.sync.stats import RawStats
from gitlab_knowledge.workspace import Workspace

SYNC_LAYERS = ("raw_gitlab_payloads", "normalized_gitlab", "knowledge_graph")
INDEX_LAYERS = ("search_documents", "document_embeddings", "lexical_index")
# What a reference store for `snapshot` and the document count of `layer_counts` needs.
REFERENCE_LAYERS = (*SYNC_LAYERS, "search_documents")
_instance: dg.DagsterInstance | None = None


def shared_instance() -> dg.DagsterInstance:
    """One in-memory Dagster instance per test process: runs are recorded, nothing is written."""
    global _instance
    if _instance is None:
        _instance = dg.DagsterInstance.ephemeral()
    return _instance


def workspace(config: Config, provider: Any = None, **kwargs: Any) -> Workspace:
    """The config as a workspace; `provider` replaces the embedder (every model name asks for it)."""
    if provider is not None:
        kwargs["embedder_factory"] = lambda _config, _name=None, _model=None: provider
    return Workspace(config, **kwargs)


def run_layers(config: Config, projects: Sequence[str], layers: Sequence[str] | None, *, provider: Any = None,
               workspace_kwargs: dict[str, Any] | None = None, **options: Any) -> list[ProjectOutcome]:
    """Run the sync job (the asset graph's `layers`, or all of them) for each project; a failure
    raises what the failing step raised."""
    outcomes = run_sync(workspace(config, provider, **(workspace_kwargs or {})), projects, instance=shared_instance(),
                        selection=layers, **options)
    for outcome in outcomes:
        if outcome.error is not None:
            raise outcome.error
    return outcomes


def sync(config: Config, project: str, **options: Any) -> RawStats:
    """GitLab → raw → normalized for one project, through the Dagster job."""
    return run_layers(config, [project], SYNC_LAYERS, **options)[0].stats(RawStats)


def sync_all(config: Config, **options: Any) -> dict[str, RawStats]:
    return {p: sync(config, p, **options) for p in config.projects}


def index_all(config: Config, provider: Any = None) -> dict[str, dict[str, Any]]:
    """documents → embeddings + lexical index for every project, through the Dagster job."""
    outcomes = run_layers(config, list(config.projects), INDEX_LAYERS, provider=provider)
    return {o.project: {"documents": o.stats(DocumentStats), "embeddings": o.stats(EmbedStats),
                        "lexical": o.stats(LexicalStats)} for o in outcomes}


def rows(config: Config, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with read_connection(config.duckdb_path) as con:
        return con.execute(sql, params or []).fetchall()


def scalar(config: Config, sql: str, params: list[Any] | None = None) -> Any:
    return rows(config, sql, params)[0][0]


NORMALIZED_SNAPSHOT = {
    "issues": "SELECT id, project_id, iid, title, description, state, labels, updated_at FROM issues ORDER BY id",
    "merge_requests": "SELECT id, project_id, iid, title, description, state, labels, updated_at FROM merge_requests ORDER BY id",
    "discussions": "SELECT id, noteable_type, issue_id, merge_request_id, individual_note, note_count, position "
                   "FROM discussions ORDER BY id",
    "notes": "SELECT id, discussion_id, author_username, body, created_at, updated_at, position, internal FROM notes ORDER BY id",
    "labels": "SELECT project_id, name FROM labels ORDER BY 1, 2",
    "issue_labels": "SELECT * FROM issue_labels ORDER BY 1, 2",
    "note_positions": "SELECT * FROM note_positions ORDER BY 1",
    "raw": "SELECT resource_type, gitlab_key, payload_hash, deleted_at IS NULL FROM raw_payloads ORDER BY 1, 2",
}


def snapshot(config: Config) -> dict[str, list[tuple[Any, ...]]]:
    """The store's content without run-specific columns (ids of runs, fetch times)."""
    return {name: rows(config, sql) for name, sql in NORMALIZED_SNAPSHOT.items()}


def layer_counts(config: Config) -> tuple[int, int, int]:
    """(documents, documents with vectors, lexical entries)."""
    from gitlab_knowledge.embeddings.vectors import VectorStore
    from gitlab_knowledge.lexical.index import LexicalIndex

    documents = scalar(config, "SELECT count(*) FROM documents")
    vectors = VectorStore(config.lancedb_dir, "embedded", "all-MiniLM-L6-v2-int8").count()[0]
    return documents, vectors, LexicalIndex(config.tantivy_dir).count()


def change_gitlab(sb: Any, rng: Any, attempt: int) -> None:
    """A few changes in the sandbox's first project: new notes, an edit, a new issue."""
    project = sb.state.list_projects()[0]["id"]
    issues = sb.state.list_items(project, "issues")
    for issue in rng.sample(issues, 3):
        sb.state.add_note(project, "issues", issue["iid"], f"attempt {attempt}: a note on #{issue['iid']}")
    threads = [t for t in sb.state.discussions(project, "issues", issues[0]["iid"]) if not t["notes"][0]["system"]]
    if threads:
        sb.state.edit_note(project, "issues", issues[0]["iid"], threads[0]["notes"][0]["id"], f"edited in {attempt}")
    sb.state.create_issue(project, f"Issue created before attempt {attempt}", description="websocket reconnects")


def run_checks(config_path: Any, only: set[str] | None = None) -> dict[str, Any]:
    """Every asset check (or those named in `only`) through Dagster, in-process: the per-project
    checks once per project partition, the store-wide ones once. Per check name, a failing
    evaluation wins over passing ones (which project failed is in its metadata's scope)."""
    import dagster as dg

    from gitlab_knowledge.config import load_config
    from gitlab_knowledge.defs import defs
    from gitlab_knowledge.defs.partitions import PARTITIONS_NAME

    chosen = [(c, k) for c in defs.asset_checks for k in c.check_keys if only is None or k.name in only]
    partitioned = [k for c, k in chosen if c.partitions_def is not None]
    store_wide = [k for c, k in chosen if c.partitions_def is None]
    jobs = [dg.define_asset_job("project_checks", selection=dg.AssetSelection.checks(*partitioned),
                                executor_def=dg.in_process_executor),
            dg.define_asset_job("store_checks", selection=dg.AssetSelection.checks(*store_wide),
                                executor_def=dg.in_process_executor)]
    merged = dg.Definitions.merge(defs, dg.Definitions(jobs=jobs))
    run_config = {"resources": {"workspace": {"config": {"config_path": str(config_path)}}}}
    projects = list(load_config(config_path).projects)
    evaluations: dict[str, Any] = {}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(PARTITIONS_NAME, projects)
        runs = ([("project_checks", p) for p in projects] if partitioned else []) + \
            ([("store_checks", None)] if store_wide else [])
        for job_name, partition in runs:
            result = merged.resolve_job_def(job_name).execute_in_process(
                instance=instance, raise_on_error=False, run_config=run_config,
                tags={"dagster/partition": partition} if partition else None)
            assert result.success
            for event in result.all_events:
                if event.event_type_value == "ASSET_CHECK_EVALUATION":
                    evaluation = event.event_specific_data
                    previous = evaluations.get(evaluation.check_name)
                    if previous is None or previous.passed:
                        evaluations[evaluation.check_name] = evaluation
    return evaluations


def kill_at_random_points(spawn: Any, sb: Any, rng: Any, kills: int, full_run: float) -> dict[str, int]:
    """Start `spawn()` (a sync subprocess) again and again and SIGKILL it, alternating "after N
    API requests" (inside fetching and page commits) and "after T seconds" (anywhere, index writes
    included), with GitLab changing before each attempt, until `kills` kills have landed while it
    was running. Returns how many landed of each kind."""
    import contextlib
    import os
    import signal
    import subprocess
    import time

    landed = {"requests": 0, "time": 0}
    window = full_run  # how long an attempt runs: then how long the last one that ended on its own ran
    for attempt in range(kills * 3):
        if sum(landed.values()) >= kills:
            break
        change_gitlab(sb, rng, attempt)
        sb.reset_stats()
        child = spawn()
        started = time.monotonic()
        kind = "requests" if attempt % 2 == 0 else "time"
        try:
            if kind == "requests":
                threshold, deadline = rng.randint(1, 14), time.monotonic() + 60
                while child.poll() is None and sb.stats()["requests"] < threshold and time.monotonic() < deadline:
                    time.sleep(0.001)
            else:  # a wait on the child's exit, not a 1 ms poll that takes the sandbox's GIL
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(rng.uniform(0.05, window))
            if child.poll() is None:
                os.kill(child.pid, signal.SIGKILL)
                landed[kind] += 1
                child.communicate(timeout=60)
                assert child.returncode in (-signal.SIGKILL, 0), f"attempt {attempt}: exit {child.returncode}"
            else:  # an attempt after a small change is shorter than the first, full sync
                window = time.monotonic() - started
                _out, err = child.communicate(timeout=60)
                # Shown with a failed drill: why the attempts that ended on their own did.
                print(f"attempt {attempt} ({kind}): ended on its own after {window:.2f}s with exit "
                      f"{child.returncode}, {sb.stats()['requests']} requests served"
                      + (f": {err.decode(errors='replace')[-1500:]}" if child.returncode else ""))
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(30)
    return landed


class Clock:
    """A clock a test moves by hand (`clock.now += 300`): injected where code asks the time."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
