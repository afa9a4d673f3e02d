"""A batch embeds its projects' documents during the fetch phase (embeddings/ahead.py), in a
worker process of its own (embeddings/ahead_worker.py): the embeddings layer then answers those
texts from memory and records what it records without it (the same LanceDB rows and vectors, each
project's same stats); a provider failing ahead, the worker killed mid-way, the cap and an
interrupted batch leave the result as before and no thread or process behind."""

import os
import signal
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tomli_w

from gitlab_knowledge.config import load_config
from gitlab_knowledge.defs import many_projects
from gitlab_knowledge.defs.many_projects import Batch, Carried, carry
from gitlab_knowledge.embeddings import ahead as ahead_module
from gitlab_knowledge.embeddings.ahead import Ahead, AheadProvider
from gitlab_knowledge.embeddings.ahead_worker import WorkerProvider
from gitlab_knowledge.embeddings.embedded import EmbeddedProvider
from gitlab_knowledge.errors import EmbeddingUnavailable
from gitlab_knowledge.layers import EMBEDDINGS
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_sandbox import SandboxGitLab, generate_dataset
from gitlab_knowledge_tests.conftest import project_paths

PROJECTS = 4
# What differs between two runs over the same documents: when, and how long.
VOLATILE_ROWS = {"embedded_at"}
VOLATILE_STATS = ("duration_s", "embed_seconds", "docs_per_second")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ahead-dataset")
    generate_dataset(out, projects=PROJECTS, issues=8, mrs=4, seed=35, threads_per_parent_mean=1.0)
    return out


@pytest.fixture(scope="module")
def sandbox_url(dataset: Path) -> Any:
    with SandboxGitLab(dataset=dataset) as sb:
        yield sb.url, project_paths(sb)


def workspace_at(data: Path, url: str, projects: list[str]) -> Workspace:
    path = data.parent / f"{data.name}.toml"
    path.write_text(tomli_w.dumps({"projects": projects, "sync": {"projects_in_flight": 2},
                                   "gitlab": {"url": url, "rate_limit": 0, "max_retries": 0, "timeout": 5},
                                   "storage": {"data_dir": str(data)}}), encoding="utf-8")
    return Workspace(load_config(str(path)))


class Texts:
    """Every text the embedded model is asked to embed, by any instance (the layer's, the work ahead's)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.asked: list[str] = []
        real = EmbeddedProvider.embed_documents

        def counting(provider: EmbeddedProvider, texts: list[str]) -> Any:
            self.asked += texts
            return real(provider, texts)

        monkeypatch.setattr(EmbeddedProvider, "embed_documents", counting)


class Seen:
    """The Ahead of each batch and the provider its embeddings layer got; the work ahead is let
    finish what it was given before the layer starts (a small batch's fetch phase is shorter than
    its embedding), so what it did is not left to timing."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ahead: list[Ahead] = []
        self.providers: list[Any] = []
        real_finish, real_stop = Ahead.finish, Ahead.stop_reading

        def stop_reading(ahead: Ahead) -> None:
            self.ahead.append(ahead)
            assert ahead.idle.wait(timeout=300)
            real_stop(ahead)

        def finish(ahead: Ahead, provider: Any) -> Any:
            out = real_finish(ahead, provider)
            self.providers.append(out)
            return out

        monkeypatch.setattr(Ahead, "stop_reading", stop_reading)
        monkeypatch.setattr(Ahead, "finish", finish)


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str) -> None:
        self.lines.append(message)

    warning = info


def run(workspace: Workspace, projects: list[str], log: Log | None = None) -> Batch:
    batch = Batch({p: Carried(p) for p in projects})
    for _ in carry(workspace, projects, batch, log=log):
        pass
    assert batch.unfinished == []
    return batch


def vector_rows(workspace: Workspace) -> list[dict[str, Any]]:
    provider = workspace.embedder()
    table = workspace.vectors(provider.provider, provider.model).table()
    assert table is not None
    rows = [{k: v for k, v in row.items() if k not in VOLATILE_ROWS} for row in table.to_arrow().to_pylist()]
    return sorted(rows, key=lambda r: (r["doc_id"], r["chunk"]))


def embed_stats(batch: Batch) -> dict[str, dict[str, Any]]:
    return {p: {k: v for k, v in c.metadata[EMBEDDINGS.asset].items() if not k.endswith(VOLATILE_STATS)}
            for p, c in batch.carried.items()}


@pytest.fixture(scope="module")
def without_ahead(sandbox_url: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], dict]:
    """The batch's vectors and embeddings stats with nothing embedded ahead."""
    url, projects = sandbox_url
    mp = pytest.MonkeyPatch()
    from gitlab_knowledge_sandbox import DEFAULT_TOKEN
    from gitlab_knowledge_tests.conftest import TOKEN_ENV

    mp.setenv(TOKEN_ENV, DEFAULT_TOKEN)
    mp.setattr(ahead_module, "AHEAD_BYTES", 0)
    try:
        workspace = workspace_at(tmp_path_factory.mktemp("without") / "data", url, projects)
        batch = run(workspace, projects)
    finally:
        mp.undo()
    return vector_rows(workspace), embed_stats(batch)


def no_thread_ahead() -> bool:
    return not any(t.name == "gk-embed-ahead" for t in threading.enumerate())


def gone(pid: int | None) -> bool:
    """The process ended and was reaped (a zombie still has its /proc entry)."""
    assert pid is not None
    return not Path(f"/proc/{pid}").exists()


def same_as_without(batch: Batch, without_ahead: tuple[list[dict[str, Any]], dict[str, dict[str, Any]]],
                    workspace: Workspace) -> dict[str, dict[str, Any]]:
    """The batch left the vector rows and per-project stats the batch without the work ahead left;
    those stats."""
    rows, stats = without_ahead
    assert vector_rows(workspace) == rows
    assert embed_stats(batch) == stats
    return stats


def test_the_layer_answers_from_what_was_embedded_ahead_and_records_the_same(sandbox_url, without_ahead, tmp_path,
                                                                             monkeypatch, token_env):
    url, projects = sandbox_url
    texts, seen, log = Texts(monkeypatch), Seen(monkeypatch), Log()
    batch = run(workspace_at(tmp_path / "data", url, projects), projects, log)
    stats = same_as_without(batch, without_ahead, workspace_at(tmp_path / "data", url, projects))
    # Every document was embedded ahead, in another process, and answered from it: no model of
    # this process was asked for a text.
    (ahead,), (provider,) = seen.ahead, seen.providers
    assert isinstance(provider, AheadProvider)
    embedded = sum(s["embeddings_embedded"] for s in stats.values())
    assert provider.answered == ahead.documents == embedded > 0
    assert provider.asked == 0
    assert texts.asked == []
    assert ahead.worker_pid not in (None, os.getpid()) and ahead.cpu_s > 0 and ahead.error is None
    assert no_thread_ahead() and gone(ahead.worker_pid)
    said = [line for line in log.lines if "during the fetch phase" in line]
    assert said == [f"embeddings: {embedded} document(s) embedded during the fetch phase "
                    f"({ahead.cpu_s:.1f} s of CPU in process {ahead.worker_pid}, {ahead.thread_cpu_s:.1f} s on the "
                    f"thread ahead, {ahead.rounds} read(s) of the store); {embedded} answered from them, 0 embedded "
                    "after it"]


def test_a_provider_failing_ahead_leaves_the_batch_as_without_it(sandbox_url, without_ahead, tmp_path, monkeypatch,
                                                                 token_env):
    url, projects = sandbox_url
    seen = Seen(monkeypatch)

    class Down(EmbeddedProvider):
        def embed_documents(self, texts: list[str]) -> Any:
            raise EmbeddingUnavailable("the model went away")

    monkeypatch.setattr(many_projects, "embedding_ahead", lambda workspace: Ahead(workspace, Down()))
    batch = run(workspace_at(tmp_path / "data", url, projects), projects)
    same_as_without(batch, without_ahead, workspace_at(tmp_path / "data", url, projects))
    (ahead,) = seen.ahead
    assert ahead.error is not None and "went away" in ahead.error
    assert ahead.documents == 0
    assert no_thread_ahead()


def test_a_worker_killed_mid_way_leaves_the_batch_as_without_it_and_no_process(sandbox_url, without_ahead, tmp_path,
                                                                              monkeypatch, token_env):
    url, projects = sandbox_url
    texts, seen = Texts(monkeypatch), Seen(monkeypatch)
    monkeypatch.setattr(ahead_module, "AHEAD_WORKER_BATCH", 2)
    real_embed = WorkerProvider.embed_documents
    calls: list[int] = []

    def embed_then_die(worker: WorkerProvider, batch: list[str]) -> Any:
        out = real_embed(worker, batch)
        calls.append(len(batch))
        if len(calls) == 2:  # after its second answer, the worker dies (as an OOM kill would end it)
            os.kill(worker.pid, signal.SIGKILL)
        return out

    monkeypatch.setattr(WorkerProvider, "embed_documents", embed_then_die)
    batch = run(workspace_at(tmp_path / "data", url, projects), projects)
    stats = same_as_without(batch, without_ahead, workspace_at(tmp_path / "data", url, projects))
    (ahead,), (provider,) = seen.ahead, seen.providers
    embedded = sum(s["embeddings_embedded"] for s in stats.values())
    assert len(calls) == 2 and ahead.documents == sum(calls) < embedded
    assert ahead.error is not None and "ended" in ahead.error and ahead.worker_exit == -signal.SIGKILL
    # What it answered before dying is used; the layer embedded the rest, each text once.
    assert provider.answered == ahead.documents and provider.asked == embedded - ahead.documents
    assert len(texts.asked) == len(set(texts.asked)) == embedded - ahead.documents
    assert no_thread_ahead() and gone(ahead.worker_pid)


def nice_of(pid: int) -> set[int]:
    """The nice value of each thread of `pid` (field 19 of its stat)."""
    return {int(Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[16])
            for tid in os.listdir(f"/proc/{pid}/task")}


def test_the_worker_gets_no_token_runs_at_lower_priority_and_ends_when_its_parent_closes_the_pipe(monkeypatch):
    monkeypatch.setenv("GITLAB_TOKEN", "glpat-not-for-the-worker")
    worker = WorkerProvider(2, 5)
    try:
        environ = Path(f"/proc/{worker.pid}/environ").read_bytes()
        assert b"glpat-not-for-the-worker" not in environ and b"GITLAB_TOKEN" not in environ
        (chunks,) = worker.embed_documents(["a text"])
        assert chunks[0].text == "a text" and chunks[0].vector.shape == (384,)
        # Loaded at this process's priority, then every thread of it (its ONNX session's) lowered.
        assert nice_of(worker.pid) == {min(19, os.getpriority(os.PRIO_PROCESS, 0) + 5)}
        # and in the idle scheduling class: a thread of the batch that wakes takes its core at once.
        assert {os.sched_getscheduler(int(tid)) for tid in os.listdir(f"/proc/{worker.pid}/task")} == {os.SCHED_IDLE}
        # The end of its stdin (a parent that died) ends it, with nothing on the pipe.
        assert worker._proc.stdin is not None and worker._proc.stdout is not None
        worker._proc.stdin.close()
        assert worker._proc.stdout.read() == b""
        assert worker._proc.wait(timeout=60) == 0
    finally:
        worker.close()
    assert gone(worker.pid)


def test_the_work_ahead_is_a_worker_process_and_none_on_one_usable_cpu(tmp_path, monkeypatch, token_env):
    workspace = workspace_at(tmp_path / "data", "http://127.0.0.1:9", ["group/project"])
    ahead = ahead_module.embedding_ahead(workspace)
    assert ahead is not None
    try:
        assert ahead.worker_pid not in (None, os.getpid())
    finally:
        ahead.close()
    assert gone(ahead.worker_pid) and no_thread_ahead()
    # No process can be started: the model on the thread ahead, as before the worker.
    from gitlab_knowledge.embeddings import ahead_worker

    def no_process(*args: Any, **kwargs: Any) -> Any:
        raise OSError("too many open files")

    monkeypatch.setattr(ahead_worker.subprocess, "Popen", no_process)
    on_thread = ahead_module.embedding_ahead(workspace)
    assert on_thread is not None and on_thread.worker_pid is None
    on_thread.close()
    assert no_thread_ahead()
    # No idle core to use: the work ahead would take the fetch phase's.
    monkeypatch.setattr(ahead_module.os, "sched_getaffinity", lambda pid: {0})
    assert ahead_module.embedding_ahead(workspace) is None


def test_the_work_ahead_stops_at_its_cap_and_the_layer_embeds_the_rest(sandbox_url, without_ahead, tmp_path,
                                                                        monkeypatch, token_env):
    url, projects = sandbox_url
    texts, seen = Texts(monkeypatch), Seen(monkeypatch)
    monkeypatch.setattr(ahead_module, "AHEAD_WORKER_BATCH", 4)
    monkeypatch.setattr(ahead_module, "AHEAD_BYTES", 5 * 384 * 4)  # about five windows' vectors
    batch = run(workspace_at(tmp_path / "data", url, projects), projects)
    stats = same_as_without(batch, without_ahead, workspace_at(tmp_path / "data", url, projects))
    (ahead,), (provider,) = seen.ahead, seen.providers
    embedded = sum(s["embeddings_embedded"] for s in stats.values())
    assert ahead.full
    # It stopped at the first call that reached the cap: at most two calls of four documents.
    assert 0 < ahead.documents <= 8 < embedded
    assert provider.answered == ahead.documents and provider.asked == embedded - ahead.documents
    assert len(texts.asked) == len(set(texts.asked)) == embedded - ahead.documents
    assert no_thread_ahead() and gone(ahead.worker_pid)


def test_an_interrupted_batch_leaves_no_thread_ahead(sandbox_url, tmp_path, monkeypatch, token_env):
    url, projects = sandbox_url
    workspace = workspace_at(tmp_path / "data", url, projects)
    started: list[Ahead] = []
    real_add = Ahead.add

    def add(ahead: Ahead, stored: Any) -> None:
        started.append(ahead)
        real_add(ahead, stored)

    monkeypatch.setattr(Ahead, "add", add)
    batch = Batch({p: Carried(p) for p in projects})
    steps = carry(workspace, projects, batch)
    for _project, layer, _metadata in steps:
        if started and layer.name == "documents":  # the work ahead has been given projects
            break
    assert not no_thread_ahead()
    pid = started[0].worker_pid
    assert pid is not None and not gone(pid)
    steps.close()  # what an interrupt of the step does to the generator
    assert no_thread_ahead() and gone(pid)
    assert started and batch.ahead is None


def test_a_text_that_changed_is_never_answered_with_the_old_vectors():
    class Fixed:
        provider, model, dims = "embedded", "m", 2

        def __init__(self) -> None:
            self.asked: list[str] = []

        def embed_documents(self, texts: list[str]) -> Any:
            self.asked += texts
            return [[ahead_module.Chunk(np.array([1.0, 0.0], dtype=np.float32), t)] for t in texts]

    inner = Fixed()
    ahead_vectors = {ahead_module.text_key("old text"): [ahead_module.Chunk(np.array([0.0, 1.0], dtype=np.float32),
                                                                            "old text")]}
    provider = AheadProvider(inner, ahead_vectors)  # type: ignore[arg-type]
    out = provider.embed_documents(["new text", "old text"])
    assert [c[0].text for c in out] == ["new text", "old text"]
    assert out[0][0].vector.tolist() == [1.0, 0.0] and out[1][0].vector.tolist() == [0.0, 1.0]
    assert inner.asked == ["new text"] and (provider.answered, provider.asked) == (1, 1)


def test_a_batch_of_one_project_does_not_embed_ahead(sandbox_url, tmp_path, monkeypatch, token_env):
    url, projects = sandbox_url
    made: list[Any] = []
    real = many_projects.embedding_ahead
    monkeypatch.setattr(many_projects, "embedding_ahead", lambda workspace: made.append(1) or real(workspace))
    run(workspace_at(tmp_path / "data", url, projects[:1]), projects[:1])
    assert made == [] and no_thread_ahead()


def test_the_store_is_read_at_most_once_an_interval_and_projects_landed_meanwhile_together(monkeypatch):
    read: list[list[str]] = []
    monkeypatch.setattr(Ahead, "_round", lambda ahead, projects: read.append(projects) or True)
    clock = [1000.0]

    class Clock:
        @staticmethod
        def monotonic() -> float:
            return clock[0]

        thread_time = staticmethod(__import__("time").thread_time)

    monkeypatch.setattr(ahead_module, "time", Clock)
    ahead = Ahead(None, None)  # type: ignore[arg-type]
    ahead.add(["a"])
    assert ahead.idle.wait(timeout=300)
    for project in ("b", "c", "d"):  # within the interval of the first read: none is read yet
        ahead.add([project])
        # The thread has the queue and its turn to run; it waits for the interval (without it,
        # it would read the project and be idle).
        assert not ahead.idle.wait(timeout=0.5) and read == [["a"]]
    clock[0] += ahead_module.ROUND_EVERY_S
    ahead.add(["e"])
    assert ahead.idle.wait(timeout=300)
    ahead.close()
    assert read == [["a"], ["b", "c", "d", "e"]] and ahead.rounds == 2
    assert no_thread_ahead()


def worker_children() -> list[int]:
    """This process's children running the worker (from /proc: their parent and command line)."""
    out = []
    for entry in Path("/proc").iterdir():
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):  # not a process, or it ended meanwhile
            continue
        if parent == os.getpid() and b"ahead_worker" in command:
            out.append(int(entry.name))
    return out


def workers_during(workspace: Workspace, projects: list[str]) -> tuple[Batch, list[int]]:
    """A batch, and the worker processes alive when its first documents had committed (while the
    work ahead, if any, is running: the embeddings layer has not started)."""
    batch = Batch({p: Carried(p) for p in projects})
    seen: list[int] = []
    for _project, layer, _metadata in carry(workspace, projects, batch):
        if layer.name == "documents" and not seen:
            seen = worker_children() or [0]
    assert batch.unfinished == []
    return batch, [pid for pid in seen if pid]


def test_a_batch_of_synced_projects_with_a_changed_note_starts_no_worker(tmp_path, token_env):
    """A sensor tick's changes (every project synced before) embed in the layer: no worker process
    loads the model for them; the first sync of the same projects did start one, and a batch with
    a project never synced, or no vector table of the configured model, would."""
    dataset = tmp_path / "dataset"
    generate_dataset(dataset, projects=2, issues=4, mrs=2, seed=37, threads_per_parent_mean=1.0)
    with SandboxGitLab(dataset=dataset) as sb:
        projects = project_paths(sb)
        workspace = workspace_at(tmp_path / "data", sb.url, projects)
        first, during = workers_during(workspace, projects)
        assert len(during) == 1 and all(gone(pid) for pid in during)
        sb.clock.advance(3600)
        issue = sb.state.list_items(projects[0], "issues")[0]
        sb.state.add_note(projects[0], "issues", issue["iid"], "one more note, after the first sync")
        assert not ahead_module.worth_working_ahead(workspace, projects)
        # A signal during its read of the store comes out of DuckDB as RuntimeError("Query
        # interrupted") (unit/test_interrupts.py): the interrupt it is, not "could not read".
        with pytest.MonkeyPatch.context() as patched:
            def interrupted(*_args: object) -> None:
                raise RuntimeError("Query interrupted")

            patched.setattr(ahead_module, "synced_paths", interrupted)
            with pytest.raises(RuntimeError, match="Query interrupted"):
                ahead_module.worth_working_ahead(workspace, projects)
        changed, during = workers_during(workspace, projects)
        assert during == [] and no_thread_ahead()
        assert changed.carried[projects[0]].metadata[EMBEDDINGS.asset]["embeddings_embedded"] >= 1
    # A path never synced: a first sync. The model's vectors gone (another model, the directory
    # removed): every document is to embed again.
    assert ahead_module.worth_working_ahead(workspace, [projects[0], "acme/never-synced"])
    (table,) = workspace.config.lancedb_dir.glob("vectors__*.lance")
    table.rename(table.with_name("elsewhere"))
    assert ahead_module.worth_working_ahead(workspace, projects)
