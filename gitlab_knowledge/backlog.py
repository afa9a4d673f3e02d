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
from gitlab_knowledge.store.db import one_row
from gitlab_knowledge.store.projects import project_id_for
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
_ITEM_SEQS = " UNION ALL ".join(f"SELECT change_seq FROM {table} WHERE project_id = $1"
                                for table in (*(k.table for k in kinds.ITEM_KINDS), *(k.table for k in kinds.KEYED_KINDS)))


def backlog(workspace: Workspace, projects: list[str]) -> dict[str, Backlog]:
    """The backlog of each stored project (a project never synced has none: its probe says so)."""
    if not workspace.config.duckdb_path.exists():
        return {}
    from gitlab_knowledge.index_status import index_status

    out: dict[str, Backlog] = {}
    with workspace.read() as con:
        facts = {}
        for project in projects:
            pid = project_id_for(con, project)  # the project the configured path resolves to
            if pid is None:
                continue
            pending = con.execute(f"""
                SELECT gitlab_key, discussions_fetched_at, updated_at + INTERVAL {THROTTLE_WINDOW_SECONDS} SECOND
                FROM raw_payloads
                WHERE project_id = ? AND resource_type IN ({_ITEM_SLOTS}) AND deleted_at IS NULL
                  AND (discussions_fetched_at IS NULL
                       OR discussions_fetched_at <= updated_at + INTERVAL {THROTTLE_WINDOW_SECONDS} SECOND)
            """, [pid, *_ITEM_NAMES]).fetchall()
            raw_seq, normalized_seq, = one_row(con.execute(f"""
                SELECT (SELECT coalesce(max(change_seq), 0) FROM raw_payloads WHERE project_id = $1),
                       (SELECT coalesce(max(change_seq), 0) FROM ({_ITEM_SEQS}))
            """, [pid]))
            marks = dict(con.execute("SELECT layer, watermark FROM layer_state WHERE project_id = ?", [pid]).fetchall())
            behind = []
            # Each watermarked layer against the one upstream of it.
            for layer, upstream, seq in ((NORMALIZED, "raw", raw_seq), (GRAPH, "raw", raw_seq),
                                         (DOCUMENTS, "items", normalized_seq)):
                mark = marks.get(layer.state, 0)
                if seq > mark:
                    behind.append(f"{layer.name}: {upstream} seq {seq} > watermark {mark}")
            facts[project] = (pending, behind, marks.get(DOCUMENTS.state, 0))
    status = {p["project"]: p for p in index_status(workspace, projects_only=list(facts))["projects"]} if facts else {}
    for project, (pending, behind, documents_mark) in facts.items():
        entry = status.get(project)
        failed = 0
        if entry is not None:
            for index in ("vectors", "lexical"):
                counts = entry[index]
                off = counts["stale"] + counts["unindexed"] + counts["orphaned"]
                if off:
                    behind.append(f"{index}: {off} entr{'y' if off == 1 else 'ies'} behind documents "
                                  f"(documents watermark {documents_mark})")
            failed = entry["vectors"]["failed"]
        failures = _failures(workspace, project) if failed else {}
        dues = [due for _key, fetched, due in pending if fetched is not None]
        times = [f["failed_at"] for f in failures.values() if f.get("failed_at") is not None]
        out[project] = Backlog(
            pending=len(pending), pending_identity=digest([f"{k}@{f}" for k, f, _d in pending]),
            pending_due=min(dues) if dues else None, behind=tuple(behind), failed_embeddings=failed,
            failed_identity=digest([f"{doc_id}@{f['failed_at']}" for doc_id, f in failures.items()]),
            failed_at=naive_utc(max(times)) if times else None,
            provider_unavailable=any(str(f.get("error") or "").startswith("unavailable") for f in failures.values()))
    return out


def _failures(workspace: Workspace, project: str) -> dict[str, dict[str, Any]]:
    provider = workspace.embedder()
    store = workspace.vectors(provider.provider, provider.model)
    return store.failures(project)
