"""What the store says before a project's listings, read in one transaction (sync/engine.py): each
open of a store not held open is a load of its catalog and a checkpoint at its close, and a small
project's sync used to read these one open at a time, on the fetch loop's thread."""

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.store import raw
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


def read_known(con: duckdb.DuckDBPyConnection, project_id: int, *, full: bool, configured: Iterable[str]) -> Known:
    """Each kind's cursor and stored hashes, the parents to recheck and their stored threads, the
    MRs without a file list, the project paths already known. Read before the listings write: a
    parent a listing writes is left out of the rechecks and the file lists (its threads and files
    were just fetched), and the rest are rows the sync does not touch."""
    known = Known(project_id=project_id)
    for _resource, kind in RESOURCES:
        known.states[kind] = listing.load_state(con, project_id, kind, full)
        if not full:
            known.rechecks[kind] = raw.recheck_candidates(con, project_id, kind, THROTTLE_WINDOW_SECONDS)
            known.signatures[kind] = raw.stored_thread_signatures(
                con, kind, [gid for gid, _iid in known.rechecks[kind]])
    known.without_files = files.missing_file_lists(con, project_id)
    known.paths = redirects.known_paths(con, configured)
    return known
