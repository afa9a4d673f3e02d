"""What the store says before a project's listings, read in one transaction (sync/engine.py): each
open of a store not held open is a load of its catalog and a checkpoint at its close, and a small
project's sync used to read these one open at a time, on the fetch loop's thread."""

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.store import raw
from gitlab_knowledge.store.db import one_row
from gitlab_knowledge.sync import files, listing, redirects

RESOURCES = tuple((k.api_path, k.name) for k in kinds.ITEM_KINDS)  # (GitLab collection, store kind)
THROTTLE_WINDOW_SECONDS = 60 + 2  # GitLab's ThrottledTouch interval and a margin (sync/engine.py)


@dataclass
class Known:
    project_id: int | None = None  # whose
    states: dict[str, listing.ListingState] = field(default_factory=dict)  # by kind
    rechecks: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # by kind: (id, iid)
    signatures: dict[str, dict[int, Any]] = field(default_factory=dict)  # by kind: the rechecks' stored threads
    without_files: list[dict[str, Any]] = field(default_factory=list)  # stored MRs with no file list
    paths: redirects.KnownPaths = field(default_factory=redirects.KnownPaths)
    fresh: bool = False  # the store held no row of the project (raw.Provenance.fresh)


@dataclass
class BatchKnown:
    """What the store says for every project of a batch (sync/many.py), read once when the batch
    starts instead of at each project's begin: the project paths known (shared: a path one
    project's sync looks up counts as known for the projects that begin after it) and the projects
    the store holds a payload or a cursor of. Both were one statement a project, each scanning a
    table the whole store's history is in (300 projects: 600 statements, ~1.4 s of the one
    writer's turn, counted at load ~3); nothing but a project's own sync writes its rows, so a project none
    of whose rows were there when the batch started has none at its begin either."""

    paths: redirects.KnownPaths
    holding: set[int]


def read_batch_known(con: duckdb.DuckDBPyConnection, configured: Iterable[str]) -> BatchKnown:
    holding = {int(pid) for (pid,) in con.execute("""
        SELECT DISTINCT project_id FROM raw_payloads WHERE project_id IS NOT NULL
        UNION SELECT DISTINCT project_id FROM sync_cursors WHERE project_id IS NOT NULL
    """).fetchall()}
    return BatchKnown(paths=redirects.known_paths(con, configured), holding=holding)


def read_known(con: duckdb.DuckDBPyConnection, project_id: int, *, full: bool, configured: Iterable[str],
               batch: BatchKnown | None = None) -> Known:
    """Each kind's cursor and stored hashes, the parents to recheck and their stored threads, the
    MRs without a file list, the project paths already known. Read before the listings write: a
    parent a listing writes is left out of the rechecks and the file lists (its threads and files
    were just fetched), and the rest are rows the sync does not touch. A project the store holds
    nothing of (its first sync, a group's new project) is two statements, not thirteen: in a batch
    these are a few milliseconds of each project's share of the one core its fetches run on; and
    none with what its batch read once for all (`batch`, `read_batch_known`)."""
    known = Known(project_id=project_id)
    known.paths = batch.paths if batch is not None else redirects.known_paths(con, configured)
    if not (project_id in batch.holding if batch is not None else _holds_any(con, project_id)):
        known.fresh = True
        for _resource, kind in RESOURCES:
            known.states[kind] = listing.ListingState(anchor=None, best=None, known={})
            if not full:
                known.rechecks[kind], known.signatures[kind] = [], {}
        return known
    return read_stored(con, known, full=full)


def read_stored(con: duckdb.DuckDBPyConnection, known: Known, *, full: bool) -> Known:
    """`read_known`'s reads of what the store holds of `known.project_id`."""
    project_id = known.project_id
    assert project_id is not None
    for _resource, kind in RESOURCES:
        known.states[kind] = listing.load_state(con, project_id, kind, full)
        if not full:
            known.rechecks[kind] = raw.recheck_candidates(con, project_id, kind, THROTTLE_WINDOW_SECONDS)
            known.signatures[kind] = raw.stored_thread_signatures(
                con, kind, [gid for gid, _iid in known.rechecks[kind]])
    known.without_files = files.missing_file_lists(con, project_id)
    return known


def _holds_any(con: duckdb.DuckDBPyConnection, project_id: int) -> bool:
    """Whether the store has a row of the project that `read_stored` reads: a payload or a cursor."""
    return bool(one_row(con.execute("""
        SELECT EXISTS (SELECT 1 FROM raw_payloads WHERE project_id = ?)
            OR EXISTS (SELECT 1 FROM sync_cursors WHERE project_id = ?)
    """, [project_id, project_id]))[0])
