"""What the store says is left to do for a project: the change sensor's backlog (defs/due.py
decides on it) and what `sync-status` shows. Read from the stores alone, without Dagster: a status
command must not wait for the job definitions to load.
"""

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.layers import DOCUMENTS, GRAPH, NORMALIZED
from gitlab_knowledge.store.projects import project_ids_for
from gitlab_knowledge.sync.known import THROTTLE_WINDOW_SECONDS
from gitlab_knowledge.timeutil import naive_utc
from gitlab_knowledge.workspace import Workspace


@dataclass(frozen=True)
class Backlog:
    """What the store says is left to do for one project."""

    pending: int = 0  # parents whose threads were fetched inside GitLab's 60 s touch window
    pending_identity: str = ""  # which ones, at which fetch: moves with every recheck
    pending_due: datetime | None = None  # when the earliest of them can be settled (GitLab's clock)
    behind: tuple[str, ...] = ()  # "normalized: raw seq 120 > watermark 100", …
    failed_embeddings: int = 0
    failed_identity: str = ""  # moves with every new attempt (failed_at)
    failed_at: datetime | None = None  # the newest failed attempt (UTC, this machine's clock)
    provider_unavailable: bool = False  # some failed because the provider could not be reached

    @property
    def empty(self) -> bool:
        return not (self.pending or self.behind or self.failed_embeddings)


def digest(values: list[str]) -> str:
    """A short stable name for a set of facts (a run key's part)."""
    return hashlib.sha1("\n".join(sorted(values)).encode()).hexdigest()[:12] if values else ""


_ITEM_NAMES = tuple(k.name for k in kinds.ITEM_KINDS)
_ITEM_SLOTS = ", ".join("?" for _ in kinds.ITEM_KINDS)
_IDS = "project_id IN (SELECT unnest(?::BIGINT[]))"
_ITEM_SEQS = " UNION ALL ".join(f"SELECT project_id, change_seq FROM {table} WHERE {_IDS}"
                                for table in (*(k.table for k in kinds.ITEM_KINDS), *(k.table for k in kinds.KEYED_KINDS)))
_ITEM_TABLES = len(kinds.ITEM_KINDS) + len(kinds.KEYED_KINDS)


def backlog(workspace: Workspace, projects: list[str], status: dict[str, Any] | None = None) -> dict[str, Backlog]:
    """The backlog of each stored project (a project never synced has none: its probe says so).

    The store is read in a fixed number of statements for all of `projects` (grouped by project),
    and the indexes once (`status`: an `index_status` of at least these projects, if the caller
    has one): one set of reads per project made the checks of a batch of 300 projects ~3 s."""
    if not workspace.config.duckdb_path.exists():
        return {}
    from gitlab_knowledge.index_status import index_status

    out: dict[str, Backlog] = {}
    with workspace.read() as con:
        ids = {p: pid for p, pid in project_ids_for(con, list(projects)).items() if pid is not None}
        wanted = sorted(set(ids.values()))
        pending: dict[int, list[tuple[Any, ...]]] = {}
        for pid, *row in con.execute(f"""
            SELECT project_id, gitlab_key, discussions_fetched_at,
                   updated_at + INTERVAL {THROTTLE_WINDOW_SECONDS} SECOND
            FROM raw_payloads
            WHERE {_IDS} AND resource_type IN ({_ITEM_SLOTS}) AND deleted_at IS NULL
              AND (discussions_fetched_at IS NULL
                   OR discussions_fetched_at <= updated_at + INTERVAL {THROTTLE_WINDOW_SECONDS} SECOND)
        """, [wanted, *_ITEM_NAMES]).fetchall():
            pending.setdefault(pid, []).append(tuple(row))
        raw_seqs = dict(con.execute(f"SELECT project_id, max(change_seq) FROM raw_payloads WHERE {_IDS} GROUP BY 1",
                                    [wanted]).fetchall())
        item_seqs = dict(con.execute(f"SELECT project_id, max(change_seq) FROM ({_ITEM_SEQS}) GROUP BY 1",
                                     [wanted] * _ITEM_TABLES).fetchall())
        marks: dict[int, dict[str, int]] = {}
        for pid, layer, watermark in con.execute(f"SELECT project_id, layer, watermark FROM layer_state WHERE {_IDS}",
                                                 [wanted]).fetchall():
            marks.setdefault(pid, {})[layer] = watermark
    facts = {}
    for project, pid in ids.items():  # in the order of `projects`
        raw_seq, normalized_seq, marked = raw_seqs.get(pid) or 0, item_seqs.get(pid) or 0, marks.get(pid, {})
        behind = []
        # Each watermarked layer against the one upstream of it.
        for layer, upstream, seq in ((NORMALIZED, "raw", raw_seq), (GRAPH, "raw", raw_seq),
                                     (DOCUMENTS, "items", normalized_seq)):
            mark = marked.get(layer.state, 0)
            if seq > mark:
                behind.append(f"{layer.name}: {upstream} seq {seq} > watermark {mark}")
        facts[project] = ([tuple(r) for r in pending.get(pid, [])], behind, marked.get(DOCUMENTS.state, 0))
    if status is None:
        status = index_status(workspace, projects_only=list(facts)) if facts else {"projects": []}
    entries = {p["project"]: p for p in status["projects"]}
    failed = {project: entries[project]["vectors"]["failed"] if project in entries else 0 for project in facts}
    failures = _failures(workspace, [p for p, n in failed.items() if n])
    for project, (rows, behind, documents_mark) in facts.items():
        entry = entries.get(project)
        if entry is not None:
            for index in ("vectors", "lexical"):
                counts = entry[index]
                off = counts["stale"] + counts["unindexed"] + counts["orphaned"]
                if off:
                    behind.append(f"{index}: {off} entr{'y' if off == 1 else 'ies'} behind documents "
                                  f"(documents watermark {documents_mark})")
        mine = failures.get(project, {})
        dues = [due for _key, fetched, due in rows if fetched is not None]
        times = [f["failed_at"] for f in mine.values() if f.get("failed_at") is not None]
        out[project] = Backlog(
            pending=len(rows), pending_identity=digest([f"{k}@{f}" for k, f, _d in rows]),
            pending_due=min(dues) if dues else None, behind=tuple(behind), failed_embeddings=failed[project],
            failed_identity=digest([f"{doc_id}@{f['failed_at']}" for doc_id, f in mine.items()]),
            failed_at=naive_utc(max(times)) if times else None,
            provider_unavailable=any(str(f.get("error") or "").startswith("unavailable") for f in mine.values()))
    return out


def _failures(workspace: Workspace, projects: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
    if not projects:
        return {}
    provider = workspace.embedder()
    store = workspace.vectors(provider.provider, provider.model)
    return store.failures_of(projects)
