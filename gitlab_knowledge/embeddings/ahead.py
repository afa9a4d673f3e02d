"""Embedding ahead: a batch's vectors computed during its fetch phase, on the core it leaves idle.

A batch of many projects (defs/many_projects.py) fetches and stores them on one core (its Python
is GIL-bound) and embeds only after every project's documents are built (measured at 300
projects: ~31 s of fetch phase with the second core idle, then ~32 s of embedding). Here, as each
group of projects' documents commit, a thread plans them as the embeddings layer will
(`refresh.plan_many`, `stage_documents`: the same plan and the same input texts) and has the
documents to embed embedded by a worker process of its own (embeddings/ahead_worker.py: the
model's Python there does not take turns with the fetch phase's for this process's GIL), keeping
each text's chunks in memory keyed by a digest of the exact text
handed to the provider: a text that changed after it was embedded ahead can only miss, never get
another text's vectors. The layer then runs as it always does (one plan, one LanceDB write, one
commit, its stats, failures and retries) through `AheadProvider`, which answers the texts
embedded ahead and asks the real provider for the rest.

- Never fails the batch: any error ahead (a provider failing, the worker dying or answering
  nonsense, the store busy) ends the work ahead and leaves its documents to the layer, which
  retries them and records failures as it does now.
- Never outlives the batch: `close` (in the batch's `finally`, and when the layer starts) kills
  the worker, joins the thread and reaps the worker: a stop waits for no call in progress.
- Bounded: at most `AHEAD_BYTES` of chunks (vectors and covered texts) are held; past it the work
  ahead stops and the layer embeds the rest.
- The store is read through `write_connection`, taking its turn with the batch's commits
  (`store.db.one_writer`) for one short read a round, as the fetches' own reads do, and only
  during the fetch phase (`stop_reading`): after it, the batch's layers open the store read-only,
  and DuckDB refuses a read-only open in a process that has it open for writing. Nothing writes
  LanceDB while the batch holds its pool, so the vector-table scan of the plan is stable.
- Only a batch with bulk to embed works ahead (`worth_working_ahead`: a project's first sync among
  its projects, or no vector table yet): a change sensor's tick of synced projects has a few
  documents a project, which the layer embeds in less than the worker costs to start.
- Only the embedded provider works ahead: its vectors are the same whatever the batch (tested)
  and a call lasts a fraction of a second, so stopping the thread never waits long. Ollama's work
  happens in its server (its own threads, often a GPU), and a hung server would hold the stop up
  to `embedding.timeout`.
"""

import contextlib
import hashlib
import logging
import os
import threading
import time
from collections.abc import Sequence

import numpy as np

from gitlab_knowledge.documents.stage import iter_documents, stage_documents
from gitlab_knowledge.embeddings.ahead_worker import WorkerGone, WorkerProvider, lower_priority
from gitlab_knowledge.embeddings.embedded import EmbeddedProvider
from gitlab_knowledge.embeddings.provider import Chunk, EmbeddingProvider
from gitlab_knowledge.embeddings.refresh import plan_many, vectors_problem
from gitlab_knowledge.embeddings.vectors import table_name
from gitlab_knowledge.errors import is_interrupt
from gitlab_knowledge.store.projects import synced_paths
from gitlab_knowledge.workspace import Workspace

log = logging.getLogger(__name__)
# The chunks held at most (vectors and the text each covers): ~40,000 windows of 384 dimensions.
# A first sync of 100K documents stops embedding ahead there and the layer embeds the rest.
AHEAD_BYTES = 128 * 2**20
# ONNX threads of the worker process: the fetch phase's Python holds one core (docs/ARCHITECTURE.md,
# "Embedding during the fetch phase", has the measurements that chose 1).
AHEAD_THREADS = 1
# Documents a call to an in-process provider: small, so that stopping (the embeddings layer
# starting, an interrupt) waits for one short call at most.
AHEAD_BATCH = 16
# Documents a call to the worker process: stopping kills it, so a call's length costs no wait, and
# a longer call sorts more windows by length (less padding): 1 ONNX thread, 320 documents of the
# 300-project dataset, 19-20 documents a CPU-second in calls of 16, 23 of 32, 30 of 64, 33 of 128
# (runs of 8 windows then; with runs of 2, embedded.py `BATCH`, the worker did 45).
# What a kill loses is the call in progress (the layer embeds it): 64 is about 2 s of CPU.
AHEAD_WORKER_BATCH = 64
# A round's documents are read this many at a time and sorted by length before they are cut into
# calls, so a call's windows pad less: calls of 64 went from 28.5 to 34.4-35.6 documents a
# CPU-second (the same 320 documents, 1 ONNX thread, runs of 8 windows: runs of 2 pad little in any
# order, not measured apart). Bounds the texts a round holds at once.
AHEAD_SORTED = 1024
# How much lower the priority of the worker process (or an in-process provider's thread) is: the
# lowest. The batch's process wants more than one core at moments (its GIL-bound thread and
# DuckDB's threads): at +10 the worker still took a share of those (300 projects, quiet machine,
# four pairs of runs: the fetch phase 0.3-1.5 s shorter at +19 in every pair, the whole sync's
# median 35.9 -> 35.1 s), while it takes the same of a core the batch leaves idle. The worker
# process's threads are in Linux's idle scheduling class too (ahead_worker._lower_priority).
AHEAD_NICE = 19
# A read of the store at most this often: each takes its turn among the batch's connections
# (~60 ms through the held store, ~150 ms opening it, at load 7-10), and the projects that land
# meanwhile are read together.
ROUND_EVERY_S = 2.0
CHUNK_OVERHEAD = 200  # bytes a chunk costs beyond its vector and text (the objects around them)


def text_key(text: str) -> bytes:
    """What a vector computed ahead is found by: the exact text given to the provider."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _size(chunks: list[Chunk]) -> int:
    return sum(int(c.vector.nbytes) + len(c.text) + CHUNK_OVERHEAD for c in chunks)


class Ahead:
    """The thread embedding ahead: `add` the projects whose documents committed, `finish` when the
    embeddings layer starts (the thread stops and is joined; what it computed is handed over),
    `close` in any case (idempotent)."""

    def __init__(self, workspace: Workspace, provider: EmbeddingProvider, *, cap_bytes: int | None = None,
                 batch_size: int | None = None) -> None:
        self._workspace, self._provider = workspace, provider
        self._cap = AHEAD_BYTES if cap_bytes is None else cap_bytes
        worker = isinstance(provider, WorkerProvider)
        self._batch_size = batch_size or (AHEAD_WORKER_BATCH if worker else AHEAD_BATCH)
        self._queue: list[str] = []
        self._wake = threading.Condition()
        self._stopping = False
        self._reading = threading.Lock()  # held through a read of the store
        self.idle = threading.Event()  # set while it waits with nothing queued (all it was given is done)
        self._may_read = True
        self.computed: dict[bytes, list[Chunk]] = {}
        self.held_bytes = 0
        self.full = False  # the cap was reached: the rest is the layer's
        self.error: str | None = None  # what ended the work ahead early (the layer retries it all)
        self.documents = 0  # documents embedded ahead
        self.cpu_s = 0.0  # the model's CPU time: the worker process's, or the thread's (an in-process provider)
        self.thread_cpu_s = 0.0  # the thread ahead's own CPU time (planning, hashing; the model's too in-process)
        self.worker_pid = provider.pid if isinstance(provider, WorkerProvider) else None
        self.worker_exit: int | None = None  # the worker's exit code, once reaped
        self.rounds = 0  # reads of the store
        self._last_round = float("-inf")
        self._thread = threading.Thread(target=self._run, name="gk-embed-ahead", daemon=True)
        self._thread.start()

    def add(self, projects: Sequence[str]) -> None:
        """Projects whose documents layer committed: theirs may be embedded ahead."""
        if not projects:
            return
        with self._wake:
            self._queue.extend(projects)
            if self._thread.is_alive():
                self.idle.clear()
            self._wake.notify()

    def stop_reading(self) -> None:
        """The fetch phase is over (one_writer no longer orders this process's connections): no
        more reads of the store; a read in progress is waited for. What was staged is still embedded."""
        with self._reading:
            self._may_read = False

    def close(self) -> None:
        """Stop: the worker process is killed (a call in progress is lost: at most AHEAD_WORKER_BATCH
        documents, which the layer embeds, sooner than waiting for it), the thread joined, the
        worker reaped. An in-process provider's call in progress is waited for."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        worker = self._provider if isinstance(self._provider, WorkerProvider) else None
        if worker is not None:
            worker.kill()  # the thread's wait on its pipe ends at once
        self._thread.join()
        if worker is not None:
            self.worker_exit = worker.close()
            self.cpu_s = worker.cpu_s

    def finish(self, provider: EmbeddingProvider) -> EmbeddingProvider:
        """Stop, and `provider` answering from what was computed ahead (itself if nothing was)."""
        self.close()
        self._provider = None  # type: ignore[assignment]  # its ONNX session is freed
        if not self.computed:
            return provider
        return AheadProvider(provider, self.computed)

    def summary(self, provider: EmbeddingProvider) -> str:
        """What the work ahead did, for the run's log; `provider` is what `finish` returned."""
        stopped = (" up to its cap" if self.full else "") + (f", then stopped: {self.error}" if self.error else "")
        used = (f"{provider.answered} answered from them, {provider.asked} embedded after it"
                if isinstance(provider, AheadProvider) else "every document embedded after it")
        where = (f"in process {self.worker_pid}, {self.thread_cpu_s:.1f} s on the thread ahead"
                 if self.worker_pid is not None else "on the thread ahead")
        return (f"{self.documents} document(s) embedded during the fetch phase ({self.cpu_s:.1f} s of CPU {where}, "
                f"{self.rounds} read(s) of the store{stopped}); {used}")

    def _next(self) -> list[str] | None:
        with self._wake:
            while not self._stopping:
                if not self._queue:
                    self.idle.set()
                    self._wake.wait()
                    continue
                early = self._last_round + ROUND_EVERY_S - time.monotonic()
                if early <= 0:
                    break
                self._wake.wait(early)
            self.idle.clear()
            if self._stopping:
                return None
            taken, self._queue = self._queue, []
            self._last_round = time.monotonic()
            self.rounds += 1
            return taken

    def _run(self) -> None:
        in_process = self.worker_pid is None
        if in_process:  # the model computes on this thread; a worker process lowers its own priority
            _lower_priority()
        started = time.thread_time()
        try:
            while (projects := self._next()) is not None:
                if not self._round(projects):
                    return
        except Exception as exc:  # noqa: BLE001 - the work ahead never fails the batch: the layer does it all
            if not (self._stopping and isinstance(exc, WorkerGone)):  # not the worker killed by `close`
                self.error = f"{type(exc).__name__}: {exc}"
                log.info("embedding ahead stopped: %s", self.error)
        finally:
            self.thread_cpu_s = time.thread_time() - started
            if in_process:
                self.cpu_s = self.thread_cpu_s
            self.idle.set()

    def _round(self, projects: list[str]) -> bool:
        """Plan `projects` as the layer will and embed their documents to embed; False: stop."""
        store = self._workspace.vectors(self._provider.provider, self._provider.model)
        with self._workspace.scratch("gk-ahead-") as tmp:
            staged = tmp / "documents.parquet"
            with self._reading:
                if not self._may_read:
                    return False
                # Its turn among the batch's connections (one_writer): one short read, through the
                # store the batch holds or an open of its own, as a fetch's read is.
                with self._workspace.write() as con:
                    plans = plan_many(con, store, projects, False)
                    wanted = [doc for p in projects for doc in plans[p].to_embed]
                    if wanted:
                        stage_documents(con, wanted, staged)
            if not wanted:
                return True
            for docs in iter_documents(staged, AHEAD_SORTED):
                block = sorted((t for t in dict.fromkeys(d["content_text"] for d in docs)
                                if text_key(t) not in self.computed), key=len)
                for start in range(0, len(block), self._batch_size):
                    if self._stopping:
                        return False
                    if not self._embed(block[start:start + self._batch_size]):
                        return False
        return True

    def _embed(self, texts: list[str]) -> bool:
        chunks = self._provider.embed_documents(texts)
        problem = vectors_problem(chunks, len(texts), self._provider.dims)
        if problem is not None:
            raise ValueError(f"{self._provider.provider}/{self._provider.model} {problem}")
        for text, doc_chunks in zip(texts, chunks, strict=True):
            self.computed[text_key(text)] = doc_chunks
            self.held_bytes += _size(doc_chunks)
        self.documents += len(texts)
        if self.held_bytes >= self._cap:
            self.full = True
            log.info("embedding ahead stopped at its cap: %d documents, %d bytes", self.documents, self.held_bytes)
            return False
        return True


class AheadProvider:
    """The layer's provider for a batch that embedded ahead: a text embedded ahead is answered from
    memory, the others by `inner` (one call per batch, as without it); its failures are the
    layer's as before. `answered` and `asked` count documents."""

    def __init__(self, inner: EmbeddingProvider, computed: dict[bytes, list[Chunk]]) -> None:
        self.provider, self.model = inner.provider, inner.model
        self._inner, self._computed = inner, computed
        self.answered = 0
        self.asked = 0

    @property
    def dims(self) -> int:
        return self._inner.dims

    def embed_documents(self, texts: list[str]) -> list[list[Chunk]]:
        keys = [text_key(t) for t in texts]
        missing = [t for t, k in zip(texts, keys, strict=True) if k not in self._computed]
        fresh = self._inner.embed_documents(missing) if missing else []
        self.asked += len(missing)
        known = [self._computed[k] for k in keys if k in self._computed]
        if len(fresh) != len(missing):  # a nonsense answer stays one: the layer's check fails the batch
            return known + fresh
        self.answered += len(known)
        answers, out = iter(fresh), []
        for k in keys:
            out.append(self._computed[k] if k in self._computed else next(answers))
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self._inner.embed_query(text)

    def check(self) -> str:
        return self._inner.check()


def worth_working_ahead(workspace: Workspace, projects: Sequence[str]) -> bool:
    """Whether a batch of `projects` will have documents to embed in bulk, worth a worker process:
    one of them has never completed a sync (its first: every document of it is new), or the
    configured model has no vector table yet (every document is to embed: the first sync, another
    model, the vectors removed). A batch of synced projects (a change sensor's tick, however many
    projects) embeds its changed documents in the layer and starts no process: with a note in each
    of 10, 30 and 100 projects, the worker cost more CPU than it saved (docs/ARCHITECTURE.md,
    "Embedding during the fetch phase"). One read of the store (through the connection the batch
    holds at the start of its fetch phase); a store or provider that cannot be read answers yes,
    as every batch did before."""
    try:
        configured = workspace.embedder()
        if not isinstance(configured, EmbeddedProvider):  # no other provider works ahead (`embedding_ahead`)
            return False
        if not (workspace.config.lancedb_dir / f"{table_name(configured.provider, configured.model)}.lance").exists():
            return True
        if not workspace.config.duckdb_path.exists():
            return True
        with workspace.write(wait=1.0) as con:
            synced = synced_paths(con, list(projects))
    except Exception as exc:  # noqa: BLE001 - the work ahead is an optimization: without the answer, work ahead
        if is_interrupt(exc):
            raise
        log.info("embedding ahead: what the store holds could not be read (%s)", exc)
        return True
    return any(p not in synced for p in projects)


def embedding_ahead(workspace: Workspace) -> Ahead | None:
    """The work ahead of a batch, started; None where the configured provider does not work ahead
    (Ollama, a provider a test sets), the cap is 0 or this process may run on one CPU only (no
    core is idle to use: the work ahead would take the fetch phase's)."""
    if AHEAD_BYTES <= 0 or _usable_cpus() < 2:
        return None
    try:
        configured = workspace.embedder()
    except Exception:  # noqa: BLE001 - a provider the config gets wrong is the embeddings layer's failure to report
        return None
    if not isinstance(configured, EmbeddedProvider):
        return None
    # The model in a process of its own (its Python does not take turns with the fetch phase's
    # for the GIL), started now so that it loads while the batch starts. Where no process can be
    # started, an instance on the thread ahead (its ONNX session made there, at its lower priority).
    try:
        return Ahead(workspace, WorkerProvider(AHEAD_THREADS, AHEAD_NICE))
    except OSError as exc:
        log.info("embedding ahead on a thread: no worker process (%s)", exc)
        return Ahead(workspace, EmbeddedProvider(threads=AHEAD_THREADS))


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _lower_priority() -> None:
    """The calling thread (and the threads it starts: an ONNX session's) yields the CPU to the
    batch's own threads: the work ahead is to use a core the fetch phase leaves idle, not to slow
    the fetch phase on a machine whose cores are all busy (Linux nice is per thread)."""
    with contextlib.suppress(AttributeError, OSError):  # no per-thread priority here: the work ahead runs as it is
        lower_priority(threading.get_native_id(), AHEAD_NICE)
