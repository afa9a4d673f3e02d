"""Many projects through the layers in one step: what a batch run (defs/batch.py) does.

A `sync_project` partition run per project paid Dagster's fixed cost of a run (run and step
events, a step per asset and per check group, ~8 s under load) once per project, and inside the
layers a Tantivy commit, a LanceDB write, version and compaction, and a part-filled embedding batch
once per project too (docs/ARCHITECTURE.md, "One run per tick", has the measurements). Here each
project's fetch is its own (sync/many.py, several at once); the projects whose fetches have landed
meanwhile go through the store layers together, one pass per layer (`refresh_together`: the
statements of a pass, ~110, do not grow with its projects, where one project at a time paid them
per project), each project with its own rows and stats as a partition run's `refresh(workspace,
project, ...)` would leave them; and the two index layers take every project at once
(`refresh_many`: one plan, full embedding batches across projects, one commit each).

`carry` yields `(project, layer, metadata)` as each layer of each project commits, so the caller
records a materialization per partition as it happens (an interrupted batch keeps the record of
what it committed). A project failing in a layer skips its later layers and the others go on; a
failure that is not about one project (auth, config, a store that cannot be written) stops the
rest, which are reported as not attempted.
"""

import contextlib
import importlib
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from gitlab_knowledge.defs.batch_indexes import embeddings_layer as _embeddings
from gitlab_knowledge.defs.batch_indexes import lexical_layer as _lexical
from gitlab_knowledge.defs.failures import original, said_plainly
from gitlab_knowledge.embeddings.ahead import Ahead, embedding_ahead, worth_working_ahead
from gitlab_knowledge.errors import KnowledgeError, is_interrupt
from gitlab_knowledge.layers import DOCUMENTS, EMBEDDINGS, GRAPH, LAYERS, LEXICAL, NORMALIZED, RAW, Layer
from gitlab_knowledge.progress import SyncProgress
from gitlab_knowledge.store.db import holding_open, kept_open, one_writer
from gitlab_knowledge.store.projects import project_ids_for
from gitlab_knowledge.store.queries import project_counts, project_counts_of
from gitlab_knowledge.sync.many import STOP_ALL, Fetches, Landed
from gitlab_knowledge.sync.stats import RawStats
from gitlab_knowledge.workspace import Workspace

# The batches this process ran, by run id, for the in-process runner (`run_batch`) to read each
# project's outcome with its error as raised (the event log has only its text).
FINISHED: dict[str, "Batch"] = {}
# STOP_ALL (sync/many.py): failures that are not about one project; the next would fail the same way.
NOT_ATTEMPTED = "not attempted: the batch stopped on an earlier failure"
# At most this many landed projects in one pass of the store layers: the store is held open, and
# so closed to other processes (a search, the MCP server), for the pass.
TOGETHER_MOST = 64
# At least this many landed projects in a pass while more are being fetched: a pass costs ~110
# statements whatever its size (~0.17 s of CPU on the step's thread), and the step's thread has
# nothing else to do meanwhile (the store is kept open through the waits, `kept_open`). 64 rather
# than 32 (300 projects: 6 passes instead of 10, ~2 s less CPU in six alternating pairs) once the
# first pass was small (below): the work ahead then always has documents queued, and a pass of 64
# held the store 0.3-1.5 s, which a reader in another process waits out within its read wait.
TOGETHER_LEAST = 64
# The first pass waits for fewer: the work ahead (embeddings/ahead.py) can embed only documents
# that committed, and its worker sat idle ~4 s while the first 32 landed (300 projects).
TOGETHER_FIRST = 8


@dataclass
class Carried:
    """One project's part of a batch: each layer's materialization metadata, or where it failed."""

    project: str
    metadata: dict[str, dict[str, Any]] = field(default_factory=dict)  # asset key -> metadata (as Dagster gets it)
    error: BaseException | None = None
    failed_layer: str = ""  # the layer that raised (its later layers did not run)
    attempted: bool = True  # False: a failure of another project stopped the batch before it finished
    duration_s: float = 0.0  # this project's layers' own time (its share of the shared index steps)

    @property
    def done(self) -> set[str]:
        return set(self.metadata)


@dataclass
class Batch:
    """What `carry` did, filled in as it goes."""

    carried: dict[str, Carried]
    stopped: BaseException | None = None  # the failure that stopped the rest
    ahead: Ahead | None = None  # embedding the stored projects' documents during the fetch phase
    bulk: bool = False  # bulk to embed (`worth_working_ahead`): the embeddings layer will be long

    @property
    def failed(self) -> list[Carried]:
        """The projects whose layers failed (not those left unattempted)."""
        return [c for c in self.carried.values() if c.error is not None and c.attempted]

    @property
    def unfinished(self) -> list[str]:
        """Every project whose layers did not all commit: failed, or not attempted."""
        return [c.project for c in self.carried.values() if c.error is not None]


def carry(workspace: Workspace, projects: Sequence[str], batch: Batch, *, full: bool = False, force: bool = False,
          run_id: str | None = None, progress: SyncProgress | None = None,
          log: Any = None) -> Iterator[tuple[str, Layer, dict[str, Any]]]:
    """Run every layer for `projects`, yielding each (project, layer, metadata) once committed."""
    in_flight = workspace.config.sync.projects_in_flight
    fetching_ahead = len(projects) > 1 and in_flight > 1
    # The work ahead, if `_fetching_ahead` starts it (`batch.ahead`): its thread and worker
    # process are ended however the batch ends.
    try:
        yield from _carry(workspace, projects, batch, in_flight if fetching_ahead else None, full=full, force=force,
                          run_id=run_id, progress=progress, log=log)
    finally:
        if batch.ahead is not None:
            batch.ahead.close()
            batch.ahead = None


def _carry(workspace: Workspace, projects: Sequence[str], batch: Batch, in_flight: int | None, *, full: bool,
           force: bool, run_id: str | None, progress: SyncProgress | None, log: Any) -> Iterator[tuple[str, Layer, dict[str, Any]]]:
    if in_flight is not None:  # several projects, fetched `in_flight` at once; else one after another
        yield from _fetching_ahead(workspace, projects, batch, in_flight, full=full, force=force, run_id=run_id,
                                   progress=progress, log=log)
        if batch.ahead is not None:  # the store is no longer one writer's: the layers below open it read-only
            batch.ahead.stop_reading()
    else:
        for project in projects:
            if batch.stopped is not None:
                break
            yield from _duckdb_layers(workspace, batch.carried[project], batch, full=full, force=force,
                                      run_id=run_id, progress=progress, log=log)
    if batch.stopped is not None:
        _not_attempted(batch)
        return
    # The keyword index first, as in a partition run: an embedding outage must not leave it behind.
    live = [p for p in projects if batch.carried[p].error is None]
    yield from _index_layer(workspace, LEXICAL, live, batch, lambda ps: _lexical(workspace, ps))
    if batch.stopped is None:
        yield from _index_layer(workspace, EMBEDDINGS, live, batch,
                                lambda ps: _embeddings(workspace, ps, progress, log, ahead=batch.ahead))
    if batch.stopped is not None:
        _not_attempted(batch)


def _fetching_ahead(workspace: Workspace, projects: Sequence[str], batch: Batch, in_flight: int, *, full: bool,
                    force: bool, run_id: str | None, progress: SyncProgress | None,
                    log: Any) -> Iterator[tuple[str, Layer, dict[str, Any]]]:
    """Up to `in_flight` projects' fetches at once (sync/many.py), each project's raw layer
    recorded as its fetch lands and the store layers here for the projects that landed meanwhile,
    together; the store written by one of them at a time (`one_writer`), and kept open in this
    process meanwhile, with a gap for other processes every `store.db.KEEP_S` (`kept_open`)."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(one_writer())
        stack.enter_context(kept_open(workspace.config.duckdb_path))
        # The projects' documents embedded during the fetch phase, on the core its Python leaves
        # idle (embeddings/ahead.py), where there is bulk to embed: decided by one read through
        # the store now held, and started before the fetches so that its model loads meanwhile.
        batch.bulk = worth_working_ahead(workspace, projects)
        if batch.bulk:
            batch.ahead = embedding_ahead(workspace)
        fetches = stack.enter_context(Fetches(workspace, projects, in_flight=in_flight, full=full, force=force,
                                              run_id=run_id, progress=progress))
        least = TOGETHER_FIRST
        for landed in fetches.landed():
            # Waiting for TOGETHER_LEAST to land: the store is kept open through the wait
            # (`kept_open`), so the fetches' commits meanwhile are cursors of the held connection.
            # (Before it was, a group of 16 every 16 landings left the store unheld through the
            # waits: the fetch threads' opens and closes took +53 s over 100 projects.)
            waiting = [landed, *fetches.landed_meanwhile()]
            waiting += fetches.landed_more(least - len(waiting))
            least = TOGETHER_LEAST
            while waiting:
                group, waiting = waiting[:TOGETHER_MOST], waiting[TOGETHER_MOST:]
                yield from _landed_together(workspace, group, batch, run_id=run_id, log=log)
                if batch.stopped is not None:
                    fetches.close()
        # The fetching itself failed (no one project's fault: the client, the store): the first
        # project it left unfetched fails with it, and the rest are not attempted.
        first = next((p for p in projects if not batch.carried[p].metadata and batch.carried[p].error is None), None)
        if fetches.error is not None and batch.stopped is None and first is not None:
            yield from _duckdb_layers(workspace, batch.carried[first], batch, full=full, force=force, run_id=run_id,
                                      progress=progress, log=log, fetched=Landed(first, error=fetches.error))
            batch.stopped = batch.stopped or batch.carried[first].error


def _raw_metadata(result: Any) -> dict[str, Any]:
    stats = RawStats.of(result)
    return {"summary": dg.MetadataValue.md(stats.summary_markdown(result)), **stats.to_metadata()}


def _landed_together(workspace: Workspace, group: list[Landed], batch: Batch, *, run_id: str | None,
                     log: Any) -> Iterator[tuple[str, Layer, dict[str, Any]]]:
    """Landed projects: each one's raw layer, then the store layers of all of them together."""
    fetched: list[Carried] = []
    for landed in group:
        carried = yield from _raw_landed(workspace, landed, batch)
        if carried is not None:
            fetched.append(carried)
    yield from _stored_together(workspace, fetched, batch, run_id=run_id, log=log)


def _raw_landed(workspace: Workspace, landed: Landed,
                batch: Batch) -> Generator[tuple[str, Layer, dict[str, Any]], None, Carried | None]:
    """A landed project's raw layer, recorded; the project if its store layers are to run."""
    carried = batch.carried[landed.project]
    if batch.stopped is not None:
        if landed.result is not None:  # fetched before the stop: its raw layer did commit
            carried.metadata[RAW.asset] = _raw_metadata(landed.result)
            yield landed.project, RAW, carried.metadata[RAW.asset]
        return None
    try:
        with said_plainly(None, RAW, workspace):
            if landed.result is None:
                raise landed.error or KnowledgeError(f"{landed.project}: its fetch ended without a result")
            metadata = _raw_metadata(landed.result)
    except Exception as exc:
        if is_interrupt(exc):
            raise
        _fail(batch, carried, RAW, original(exc))
        return None
    carried.duration_s += landed.result.duration_s  # its fetch's own time, spent on the fetch thread
    carried.metadata[RAW.asset] = metadata
    yield landed.project, RAW, metadata
    return carried


def _stored_together(workspace: Workspace, fetched: list[Carried], batch: Batch, *, run_id: str | None,
                     log: Any) -> Iterator[tuple[str, Layer, dict[str, Any]]]:
    """The store layers of fetched projects in one pass per layer (store/watermarks.py
    `run_together`), with the store held open across the three (one open and one checkpoint for
    the group, not per project). Each layer's materializations are recorded as it commits; those
    of normalized and graph inside the hold, as one project at a time did: the fetches' page
    commits meanwhile are cursors of the held connection, where an unheld store is opened and
    checkpointed for each."""
    if not fetched or batch.stopped is not None:
        return
    with contextlib.ExitStack() as held:  # closed however the generator ends
        held.enter_context(holding_open(workspace.config.duckdb_path))
        with workspace.write() as con:
            ids = project_ids_for(con, [c.project for c in fetched])
        for layer in (NORMALIZED, GRAPH, DOCUMENTS):
            fetched = [c for c in fetched if c.error is None]
            if not fetched or batch.stopped is not None:
                return
            done = _layer_together(workspace, layer, fetched, ids, batch, run_id=run_id, log=log)
            if layer is DOCUMENTS:
                held.close()  # before the materializations are recorded: the store is committed and free
                if batch.ahead is not None:
                    batch.ahead.add([carried.project for carried, _ in done])
            for carried, metadata in done:
                yield carried.project, layer, metadata


def _layer_together(workspace: Workspace, layer: Layer, group: list[Carried], ids: dict[str, int | None],
                    batch: Batch, *, run_id: str | None, log: Any) -> list[tuple[Carried, dict[str, Any]]]:
    """One store layer of `group` in one pass and one transaction; the projects the pass left out
    (too many rows for one pass, not stored yet) or, should the pass fail, every one of them, one
    by one as a partition run does, so that one project's failure spares the others."""
    known = {c.project: pid for c in group if (pid := ids.get(c.project)) is not None}
    started = time.monotonic()
    stats: dict[str, Any] = {}
    counts: dict[str, dict[str, int]] = {}
    if known:
        try:
            with workspace.write() as con:
                stats, _left = _together(layer, con, workspace, known, run_id)
                if layer is NORMALIZED:
                    counts = project_counts_of(con, {p: known[p] for p in stats})
        except Exception as exc:  # noqa: BLE001 - rolled back: each project is redone on its own below
            if is_interrupt(exc):
                raise
            stats, counts = {}, {}
    share = (time.monotonic() - started) / max(len(stats), 1)
    done: list[tuple[Carried, dict[str, Any]]] = []
    for carried in group:
        if batch.stopped is not None:
            break
        if carried.project in stats:
            carried.duration_s += share
            metadata = _store_metadata(carried.project, layer, stats[carried.project], counts.get(carried.project),
                                       log)
        else:
            one_started = time.monotonic()
            try:
                with said_plainly(None, layer, workspace):
                    metadata = _store_layer(workspace, carried.project, layer, run_id=run_id, log=log)
            except Exception as exc:
                if is_interrupt(exc):
                    raise
                _fail(batch, carried, layer, original(exc))
                continue
            finally:
                carried.duration_s += time.monotonic() - one_started
        carried.metadata[layer.asset] = metadata
        done.append((carried, metadata))
    return done


def _together(layer: Layer, con: Any, workspace: Workspace, known: dict[str, int], run_id: str | None) -> Any:
    """A store layer's pass over several projects: (stats by path, the paths it left out)."""
    module: Any = importlib.import_module(layer.module)
    if layer is GRAPH:  # links resolve against the configured GitLab's URL
        return module.refresh_together(con, workspace, known, dagster_run_id=run_id)
    return module.refresh_together(con, known, dagster_run_id=run_id)


def _store_layer(workspace: Workspace, project: str, layer: Layer, *, run_id: str | None,
                 log: Any) -> dict[str, Any]:
    """One store layer of one project, as a partition run's asset runs it: its metadata."""
    done = layer.refresh(workspace, project, dagster_run_id=run_id)
    counts = project_counts(workspace, project) if layer is NORMALIZED else None
    return _store_metadata(project, layer, done, counts, log)


def _store_metadata(project: str, layer: Layer, done: Any, counts: dict[str, int] | None,
                    log: Any) -> dict[str, Any]:
    if layer is DOCUMENTS and done.truncated and log is not None:
        log.warning(f"{project}: {done.truncated} document(s) exceeded ~8,000 tokens and were cut "
                    "from the middle")
    metadata: dict[str, Any] = done.to_metadata()
    if layer is NORMALIZED:
        metadata.update({f"count_{k}": v for k, v in (counts or {}).items()})
    return metadata


def _duckdb_layers(workspace: Workspace, carried: Carried, batch: Batch, *, full: bool, force: bool,
                   run_id: str | None, progress: SyncProgress | None, log: Any,
                   fetched: Landed | None = None) -> Iterator[tuple[str, Layer, dict[str, Any]]]:
    """A project's DuckDB layers: its fetch (or, `fetched`, how its fetch elsewhere ended), then
    its store layers."""
    project = carried.project
    with contextlib.ExitStack() as held:  # closed however the generator ends
        for layer in (RAW, NORMALIZED, GRAPH, DOCUMENTS):
            started = time.monotonic()
            try:
                if layer is NORMALIZED:  # the store layers after the fetch: one open of the file, not a dozen
                    held.enter_context(holding_open(workspace.config.duckdb_path))
                with said_plainly(None, layer, workspace):
                    if layer is RAW and fetched is not None:
                        if fetched.result is None:
                            raise fetched.error or KnowledgeError(f"{project}: its fetch ended without a result")
                        metadata = _raw_metadata(fetched.result)
                        started -= fetched.result.duration_s  # its fetch's own time, spent on the fetch thread
                    elif layer is RAW:
                        metadata = _raw_metadata(RAW.refresh(workspace, project, full=full, force=force,
                                                             dagster_run_id=run_id, progress=progress))
                    else:
                        metadata = _store_layer(workspace, project, layer, run_id=run_id, log=log)
            except BaseException as exc:
                held.close()
                if not isinstance(exc, Exception) or is_interrupt(exc):
                    raise
                _fail(batch, carried, layer, original(exc))
                return
            finally:
                carried.duration_s += time.monotonic() - started
            carried.metadata[layer.asset] = metadata
            if layer is DOCUMENTS:
                held.close()  # before the materialization is recorded: the store is committed and free
            yield project, layer, metadata


def _index_layer(workspace: Workspace, layer: Layer, projects: list[str], batch: Batch,
                 run: Any) -> Iterator[tuple[str, Layer, dict[str, Any]]]:
    """One call of an index layer for every project in `projects`; `run` returns, per project, its
    metadata or the error that project's part ended with."""
    if not projects:
        return
    started = time.monotonic()
    try:
        with said_plainly(None, layer, workspace):
            results: dict[str, dict[str, Any] | BaseException] = run(projects)
    except Exception as exc:  # noqa: BLE001 - a failure of the shared step is every project's
        if is_interrupt(exc):
            raise
        error = original(exc)
        for project in projects:
            _fail(batch, batch.carried[project], layer, error)
        return
    share = (time.monotonic() - started) / len(projects)
    for project in projects:
        carried = batch.carried[project]
        carried.duration_s += share
        outcome = results[project]
        if isinstance(outcome, BaseException):
            _fail(batch, carried, layer, outcome)
            continue
        carried.metadata[layer.asset] = outcome
        yield project, layer, outcome


def _fail(batch: Batch, carried: Carried, layer: Layer, error: BaseException) -> None:
    carried.error, carried.failed_layer = error, layer.name
    if isinstance(error, STOP_ALL) and batch.stopped is None:
        batch.stopped = error


def _not_attempted(batch: Batch) -> None:
    """The projects whose layers a stopping failure left unfinished."""
    for carried in batch.carried.values():
        if carried.error is None and len(carried.metadata) < len(LAYERS):
            carried.error, carried.attempted = KnowledgeError(NOT_ATTEMPTED), False
