"""A batch's fetch phase keeps the DuckDB store open in its process (`store.db.kept_open`): its
projects' commits and store-layer passes are cursors of one connection, so the file is not opened
(its catalog loaded) and checkpointed for each commit that came while no pass held it; and every
`KEEP_S` the hold gives way for a moment, so a reader in another process (a search, `count`, the
MCP server) gets in while the batch still runs. Against the sandbox over 127.0.0.1, real files."""

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

import gitlab_knowledge.store.db as db
from gitlab_knowledge.defs import many_projects
from gitlab_knowledge.defs.many_projects import Batch, Carried
from gitlab_knowledge.sync import releases
from gitlab_knowledge_sandbox import SandboxGitLab, generate_dataset
from gitlab_knowledge_tests.conftest import forked, project_paths, subprocess_env
from gitlab_knowledge_tests.integration.test_store_layers_together import workspace_at

PROJECTS = 6


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("kept")
    generate_dataset(out, projects=PROJECTS, issues=12, mrs=6, seed=35, threads_per_parent_mean=1.0)
    return out


@pytest.fixture
def only_store_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The index layers do nothing: they are not what these tests are about."""
    monkeypatch.setattr(many_projects, "_lexical", lambda workspace, ps: {p: {} for p in ps})
    monkeypatch.setattr(many_projects, "_embeddings", lambda workspace, ps, progress, log, **_: {p: {} for p in ps})
    monkeypatch.setattr(many_projects, "embedding_ahead", lambda workspace: None)


def test_a_batch_opens_the_store_once_however_many_projects_it_fetches(dataset, tmp_path, monkeypatch, token_env,
                                                                       only_store_layers):
    monkeypatch.setattr(db, "KEEP_S", 600.0)  # no gap falls inside these short batches: the count is exact
    opens: list[bool] = []
    real_open = db._open

    def counting(path: Path, read_only: bool, wait: float) -> Any:
        opens.append(read_only)
        return real_open(path, read_only, wait)

    counts = {}
    with SandboxGitLab(dataset=dataset) as sb:
        projects = project_paths(sb)
        for n in (2, PROJECTS):
            workspace = workspace_at(tmp_path / f"n{n}", sb.url, in_flight=3)
            with db.write_connection(workspace.config.duckdb_path):
                pass  # the store exists, its schema current
            opens.clear()
            with monkeypatch.context() as patched:
                patched.setattr(db, "_open", counting)
                batch = Batch({p: Carried(p) for p in projects[:n]})
                assert len(list(many_projects.carry(workspace, projects[:n], batch))) == n * 6
            assert batch.unfinished == []
            counts[n] = len(opens)
    # The old code opened it for each commit that came while no store-layer pass held it: a few a
    # project (two opens a project in the 300-project profile).
    assert counts == {2: 1, PROJECTS: 1}, counts


def test_a_reader_in_another_process_gets_in_while_a_batch_runs(dataset, tmp_path, monkeypatch, token_env,
                                                                only_store_layers):
    """The last project's fetch waits (its releases listing) until the reader has answered: the
    batch is running, its store kept open, and `count` (its default wait) still reads."""
    reached, go = threading.Event(), threading.Event()
    real = releases.sync_releases

    async def held_back(client: Any, project_id: int, project_path: str, *args: Any, **kwargs: Any) -> Any:
        if project_path == last:
            reached.set()
            await asyncio.to_thread(go.wait)
        return await real(client, project_id, project_path, *args, **kwargs)

    monkeypatch.setattr(releases, "sync_releases", held_back)
    with SandboxGitLab(dataset=dataset) as sb:
        projects = project_paths(sb)[:3]
        last = projects[-1]
        workspace = workspace_at(tmp_path / "data", sb.url, in_flight=3)
        batch = Batch({p: Carried(p) for p in projects})
        outcome: list[Any] = []

        def run() -> None:
            try:
                outcome.extend(many_projects.carry(workspace, projects, batch))
            except BaseException as exc:  # noqa: BLE001 - reported by the assertions below
                outcome.append(exc)
            finally:
                reached.set()

        batch_thread = threading.Thread(target=run)
        batch_thread.start()
        try:
            assert reached.wait(300)
            assert batch_thread.is_alive()
            assert any(t.name == "store-keeper" for t in threading.enumerate()), "the store is kept open"
            config = tmp_path / "data.toml"  # workspace_at's
            read = forked(["gitlab_knowledge", "--config", str(config), "count", "issues", "--json"],
                          env=subprocess_env(), timeout=300)
            still_running = batch_thread.is_alive()
        finally:
            go.set()
            batch_thread.join()
    assert read.returncode == 0, read.stderr
    assert still_running
    assert len(outcome) == len(projects) * 6 and batch.unfinished == []
