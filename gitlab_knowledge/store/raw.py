"""Writes of the raw layer: GitLab payloads as fetched, one row per object.

A row changes (new `change_seq`) only when its content hash changes, so refetching an unchanged
object costs nothing downstream. Objects that vanish are tombstoned, never deleted, so the
normalized layer can follow. All functions take an open connection inside the caller's
transaction: a page of items, their discussions and the cursor commit together or not at all.
"""

import contextlib
import hashlib
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import duckdb
import pyarrow as pa

from gitlab_knowledge.timeutil import parse_time

DISCUSSION = "discussion"
log = logging.getLogger(__name__)

_ROW_SCHEMA = pa.schema([
    ("resource_type", pa.string()),
    ("gitlab_key", pa.string()),
    ("parent_type", pa.string()),
    ("parent_id", pa.int64()),
    ("position", pa.int32()),
    ("updated_at", pa.timestamp("us")),
    ("payload_hash", pa.string()),
    ("json", pa.string()),
    ("discussions_fetched_at", pa.timestamp("us")),
])


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


HASH_CHUNK = 1 << 20


def payload_hash(text: str) -> str:
    """SHA-256 of the UTF-8 text, encoded a slice at a time: the digest of the whole encoding
    without a second copy of a payload that may be 128 MB."""
    digest = hashlib.sha256()
    for start in range(0, len(text), HASH_CHUNK):
        digest.update(text[start:start + HASH_CHUNK].encode("utf-8"))
    return digest.hexdigest()


def thread_key(discussion: dict[str, Any]) -> str:
    """A thread's key in `raw_payloads`: its GitLab id."""
    return str(discussion["id"])


@dataclass
class RawRow:
    resource_type: str
    gitlab_key: str
    json: str
    updated_at: datetime | None
    parent_type: str | None = None
    parent_id: int | None = None
    position: int | None = None
    discussions_fetched_at: datetime | None = None

    @property
    def payload_hash(self) -> str:
        return payload_hash(self.json)

    @classmethod
    def for_item(cls, resource_type: str, item: dict[str, Any],
                 discussions_fetched_at: datetime | None = None) -> "RawRow":
        return cls(resource_type=resource_type, gitlab_key=str(item["id"]), json=canonical_json(item),
                   updated_at=parse_time(item.get("updated_at")), discussions_fetched_at=discussions_fetched_at)

    @classmethod
    def for_discussion(cls, parent_type: str, parent_id: int, position: int, discussion: dict[str, Any]) -> "RawRow":
        parsed = [parse_time(n.get("updated_at") or n.get("created_at")) for n in discussion.get("notes") or []]
        stamps = [s for s in parsed if s is not None]
        return cls(resource_type=DISCUSSION, gitlab_key=thread_key(discussion), json=canonical_json(discussion),
                   updated_at=max(stamps) if stamps else None, parent_type=parent_type, parent_id=parent_id,
                   position=position)


@dataclass
class UpsertCounts:
    new: int = 0
    updated: int = 0
    unchanged: int = 0


@dataclass
class Provenance:
    project_id: int
    sync_run_id: int | None
    dagster_run_id: str | None
    fetched_at: datetime
    # The store held no row of the project when its sync began (a first sync): no wiki page or
    # release of it is stored but what this sync writes, so their tombstone passes are not run.
    # (Inserting first, `ON CONFLICT DO NOTHING`, instead of the look-up was measured: no cheaper.)
    fresh: bool = False


@contextlib.contextmanager
def registered(con: duckdb.DuckDBPyConnection, **tables: pa.Table) -> Iterator[None]:
    """Arrow tables visible to SQL under the given names for the block.

    When the block fails, DuckDB has usually aborted the transaction, and unregistering then
    raises "Current transaction is aborted": cleanup must never replace the error that matters,
    so that one is swallowed (the caller rolls back, which drops the views anyway)."""
    for name, table in tables.items():
        con.register(name, table)
    try:
        yield
    except BaseException:
        for name in tables:
            with contextlib.suppress(duckdb.Error):
                con.unregister(name)
        raise
    for name in tables:
        con.unregister(name)


def dedupe(rows: Sequence[RawRow]) -> list[RawRow]:
    """One row per object: GitLab can list one object twice in one response (a page boundary
    moving under an edit, a thread repeated). The newest `updated_at` wins, then the later one."""
    chosen: dict[tuple[str, str], int] = {}
    for i, row in enumerate(rows):
        key = (row.resource_type, row.gitlab_key)
        j = chosen.get(key)
        if j is None:
            chosen[key] = i
            continue
        old = rows[j]
        log.warning("%s %s appears more than once in one response; keeping the %s copy", row.resource_type,
                    row.gitlab_key, "newest" if old.updated_at != row.updated_at else "last")
        if old.updated_at is None or row.updated_at is None or row.updated_at >= old.updated_at:
            chosen[key] = i
    if len(chosen) == len(rows):
        return list(rows)
    keep = set(chosen.values())
    return [row for i, row in enumerate(rows) if i in keep]


_LEAVE_STORED = "ANTI JOIN raw_payloads r ON r.resource_type = i.resource_type AND r.gitlab_key = i.gitlab_key"
_INSERT = """
    INSERT INTO raw_payloads (id, project_id, resource_type, gitlab_key, parent_type, parent_id,
        position, updated_at, payload_hash, json, fetched_at, discussions_fetched_at,
        sync_run_id, dagster_run_id, change_seq, deleted_at)
    SELECT nextval('raw_payload_ids'), ?, i.resource_type, i.gitlab_key, i.parent_type, i.parent_id,
        i.position, i.updated_at, i.payload_hash, i.json, ?, i.discussions_fetched_at,
        ?, ?, nextval('change_seq'), NULL
    FROM gk_incoming i {leave_out}
"""
# `_INSERT` of rows given as list parameters, one per column of `_ROW_SCHEMA`, unnested side by side.
_SQL_TYPES = {pa.string(): "VARCHAR", pa.int64(): "BIGINT", pa.int32(): "INTEGER", pa.timestamp("us"): "TIMESTAMP"}
_INSERT_LISTED = _INSERT.replace("FROM gk_incoming i", "FROM (SELECT " + ", ".join(
    f"unnest(?::{_SQL_TYPES[f.type]}[]) AS {f.name}" for f in _ROW_SCHEMA) + ") i")


def upsert_rows(con: duckdb.DuckDBPyConnection, rows: Sequence[RawRow], prov: Provenance) -> UpsertCounts:
    """Insert new objects, rewrite changed ones, leave identical ones alone (but record a
    discussions refetch time when one is given)."""
    return upsert_groups(con, [rows], prov)[0]


def upsert_groups(con: duckdb.DuckDBPyConnection, groups: Sequence[Sequence[RawRow]],
                  prov: Provenance) -> list[UpsertCounts]:
    """`upsert_rows` of each group (a page's items, their file lists, their threads), with each
    group's counts. In a first sync (`prov.fresh`) the rows of every group are inserted in one
    statement: a small project's first sync writes its items, files and threads in a few rows
    each, and each statement is a turn of the one writer that a batch's hundreds of projects
    share (see `_insert_new`)."""
    groups = [dedupe(g) if g else [] for g in groups]
    inserted: set[tuple[str, str]] = set()
    if prov.fresh:
        everything = [r for g in groups for r in g]
        # One statement for all unless two groups hold the same object: it would then be inserted
        # twice (each group alone leaves the other's row out, as the store holds it by then).
        if len({(r.resource_type, r.gitlab_key) for r in everything}) == len(everything):
            inserted = _insert_new(con, everything, prov)
    return [_upsert(con, g, prov, inserted) for g in groups]


def _incoming(rows: Sequence[RawRow]) -> pa.Table:
    return pa.Table.from_pylist([{
        "resource_type": r.resource_type, "gitlab_key": r.gitlab_key, "parent_type": r.parent_type,
        "parent_id": r.parent_id, "position": r.position, "updated_at": r.updated_at,
        "payload_hash": r.payload_hash, "json": r.json, "discussions_fetched_at": r.discussions_fetched_at,
    } for r in rows], schema=_ROW_SCHEMA)


def _insert_new(con: duckdb.DuckDBPyConnection, rows: Sequence[RawRow], prov: Provenance) -> set[tuple[str, str]]:
    """A first sync's rows inserted, unless the store holds one (under another project): those are
    left out, for `_upsert` to take the usual way. Which were inserted (type, key). One statement
    where a look-up then an insert is two (~0.7 ms of CPU less an upsert)."""
    if not rows:
        return set()
    # The rows as list parameters, one per column: a view of an Arrow table (what the look-up
    # path's several statements read) would be two statements more for this one.
    params = [prov.project_id, prov.fetched_at, prov.sync_run_id, prov.dagster_run_id,
              *([getattr(r, column) for r in rows] for column in _ROW_SCHEMA.names)]
    return {(kind, key) for kind, key in con.execute(
        _INSERT_LISTED.format(leave_out=_LEAVE_STORED) + " RETURNING resource_type, gitlab_key", params).fetchall()}


def _upsert(con: duckdb.DuckDBPyConnection, rows: Sequence[RawRow], prov: Provenance,
            new: set[tuple[str, str]]) -> UpsertCounts:
    """`upsert_rows` of deduplicated rows, those in `new` inserted already (`_insert_new`)."""
    counts = UpsertCounts()
    if not rows:
        return counts
    inserted = {r.gitlab_key for r in rows if (r.resource_type, r.gitlab_key) in new}
    if len(inserted) == len(rows):
        counts.new = len(rows)
        return counts
    params = [prov.project_id, prov.fetched_at, prov.sync_run_id, prov.dagster_run_id]
    with registered(con, gk_incoming=_incoming(rows)):
        existing = con.execute("""
            SELECT i.gitlab_key, r.id, r.payload_hash = i.payload_hash
                   AND r.deleted_at IS NULL
                   AND r.position IS NOT DISTINCT FROM i.position AS same
            FROM gk_incoming i JOIN raw_payloads r
              ON r.resource_type = i.resource_type AND r.gitlab_key = i.gitlab_key
        """).fetchall()
        known = {key: (rid, same) for key, rid, same in existing if key not in inserted}
        counts.unchanged = sum(1 for _, same in known.values() if same)
        counts.updated = len(known) - counts.unchanged
        counts.new = len(rows) - len(known)
        if counts.new and not inserted:
            # None stored yet (a first sync's rows, just looked up in this transaction): no
            # second pass over raw_payloads to leave the stored ones out.
            con.execute(_INSERT.format(leave_out=_LEAVE_STORED if known else ""), params)
        if counts.updated:
            con.execute("""
                UPDATE raw_payloads SET json = i.json, payload_hash = i.payload_hash, updated_at = i.updated_at,
                    position = i.position, parent_type = i.parent_type, parent_id = i.parent_id,
                    fetched_at = ?, sync_run_id = ?, dagster_run_id = ?,
                    discussions_fetched_at = COALESCE(i.discussions_fetched_at, raw_payloads.discussions_fetched_at),
                    change_seq = nextval('change_seq'), deleted_at = NULL
                FROM gk_incoming i
                WHERE raw_payloads.resource_type = i.resource_type AND raw_payloads.gitlab_key = i.gitlab_key
                  AND (raw_payloads.payload_hash <> i.payload_hash OR raw_payloads.deleted_at IS NOT NULL
                       OR raw_payloads.position IS DISTINCT FROM i.position)
            """, params[1:])
        # An unchanged parent whose discussions were refetched still moves its refetch time:
        # that is what settles the ThrottledTouch recheck (only parents carry one: threads,
        # file lists, projects, wiki pages and releases skip the statement).
        if counts.unchanged and any(r.discussions_fetched_at is not None for r in rows):
            con.execute("""
                UPDATE raw_payloads SET discussions_fetched_at = i.discussions_fetched_at
                FROM gk_incoming i
                WHERE raw_payloads.resource_type = i.resource_type AND raw_payloads.gitlab_key = i.gitlab_key
                  AND i.discussions_fetched_at IS NOT NULL AND raw_payloads.payload_hash = i.payload_hash
                  AND raw_payloads.discussions_fetched_at IS DISTINCT FROM i.discussions_fetched_at
            """)
    return counts


def tombstone(con: duckdb.DuckDBPyConnection, where_sql: str, params: Sequence[Any]) -> int:
    """Mark live rows matching `where_sql` deleted; returns how many."""
    row = con.execute(f"""
        UPDATE raw_payloads SET deleted_at = now()::TIMESTAMP, change_seq = nextval('change_seq')
        WHERE deleted_at IS NULL AND ({where_sql})
        RETURNING 1
    """, list(params)).fetchall()
    return len(row)


@dataclass
class ParentDiscussions:
    parent_type: str
    parent_id: int
    threads: list[dict[str, Any]]  # every thread, system-only ones included, in GitLab's order
    # Threads GitLab sent but the store could not take (store/payloads.py): their stored versions
    # stay; with `keep_all` (a rejected thread without a usable id) no thread of the parent goes.
    kept: set[str] = field(default_factory=set)
    keep_all: bool = False


@dataclass
class DiscussionCounts:
    new: int = 0
    updated: int = 0
    deleted: int = 0


def discussion_rows(parents: Sequence[ParentDiscussions]) -> list[RawRow]:
    """The rows of the parents' threads, in GitLab's order."""
    return [RawRow.for_discussion(p.parent_type, p.parent_id, i, d) for p in parents for i, d in enumerate(p.threads)]


def replace_discussions(con: duckdb.DuckDBPyConnection, parents: Sequence[ParentDiscussions],
                        prov: Provenance, *, new_parents: bool = False,
                        upserted: UpsertCounts | None = None) -> DiscussionCounts:
    """Make the stored threads of each parent exactly `threads` (vanished ones tombstoned).
    `new_parents`: every parent was stored for the first time in this transaction, so none has a
    stored thread to tombstone (a thread is stored only with its parent): no statement for it.
    `upserted`: the caller upserted `discussion_rows(parents)` already, with these counts."""
    counts = DiscussionCounts()
    if not parents:
        return counts
    if upserted is None:
        upserted = upsert_rows(con, discussion_rows(parents), prov)
    counts.new, counts.updated = upserted.new, upserted.updated
    if new_parents:
        return counts
    # The threads' keys, not their rows again: a row is the thread's canonical JSON, made once
    # by whoever upserted it.
    keep = pa.table({"gitlab_key": pa.array([thread_key(d) for p in parents for d in p.threads]
                                            + [k for p in parents for k in p.kept], pa.string())})
    replaced = [p for p in parents if not p.keep_all]
    touched = pa.table({
        "parent_type": pa.array([p.parent_type for p in replaced], pa.string()),
        "parent_id": pa.array([p.parent_id for p in replaced], pa.int64()),
    })
    with registered(con, gk_keep=keep, gk_touched=touched):
        counts.deleted = len(con.execute("""
            UPDATE raw_payloads SET deleted_at = now()::TIMESTAMP, change_seq = nextval('change_seq')
            WHERE resource_type = 'discussion' AND deleted_at IS NULL
              AND (parent_type, parent_id) IN (SELECT parent_type, parent_id FROM gk_touched)
              AND gitlab_key NOT IN (SELECT gitlab_key FROM gk_keep)
            RETURNING 1
        """).fetchall())
    return counts


def thread_signature(threads: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """(discussion id, content hash) in GitLab's order: equal iff the stored threads are current."""
    return [(thread_key(d), payload_hash(canonical_json(d))) for d in threads]


def stored_thread_signatures(con: duckdb.DuckDBPyConnection, parent_type: str,
                             parent_ids: Sequence[int]) -> dict[int, list[tuple[str, str]]]:
    out: dict[int, list[tuple[str, str]]] = {int(i): [] for i in parent_ids}
    for parent_id, key, digest in con.execute("""
        SELECT parent_id, gitlab_key, payload_hash FROM raw_payloads
        WHERE resource_type = 'discussion' AND deleted_at IS NULL AND parent_type = ?
          AND parent_id IN (SELECT unnest(?::BIGINT[]))
        ORDER BY parent_id, position
    """, [parent_type, list(parent_ids)]).fetchall():
        out[int(parent_id)].append((key, digest))
    return out


def recheck_candidates(con: duckdb.DuckDBPyConnection, project_id: int, resource_type: str,
                       window_seconds: float) -> list[tuple[int, int]]:
    """Parents whose last discussions fetch may predate a throttled note: fetched no later than
    `window_seconds` after the parent's updated_at (GitLab's ThrottledTouch interval + margin)."""
    return [(int(key), int(iid)) for key, iid in con.execute(f"""
        SELECT gitlab_key, CAST(json_extract(json, '$.iid') AS BIGINT)
        FROM raw_payloads
        WHERE project_id = ? AND resource_type = ? AND deleted_at IS NULL
          AND (discussions_fetched_at IS NULL
               OR discussions_fetched_at <= updated_at + INTERVAL {float(window_seconds)} SECOND)
        ORDER BY updated_at, gitlab_key
    """, [project_id, resource_type]).fetchall()]


def live_parent_ids(con: duckdb.DuckDBPyConnection, project_id: int, resource_type: str) -> set[int]:
    return {int(k) for (k,) in con.execute(
        "SELECT gitlab_key FROM raw_payloads WHERE project_id = ? AND resource_type = ? AND deleted_at IS NULL",
        [project_id, resource_type]).fetchall()}


def tombstone_parents(con: duckdb.DuckDBPyConnection, resource_type: str, ids: Sequence[int]) -> int:
    """Tombstone parents and every thread under them."""
    if not ids:
        return 0
    keys = [str(i) for i in ids]
    deleted = tombstone(con, "resource_type = ? AND gitlab_key IN (SELECT unnest(?::TEXT[]))", [resource_type, keys])
    # Its threads and, for an MR, its file list go with it.
    tombstone(con, "resource_type IN ('discussion', 'merge_request_diffs') AND parent_type = ? "
              "AND parent_id IN (SELECT unnest(?::BIGINT[]))", [resource_type, list(ids)])
    return deleted
