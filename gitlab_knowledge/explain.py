"""Why does search show what it shows? The provenance chain of one document, layer by layer.

GitLab (optionally, live) → raw payload (fetched when, by which sync run and Dagster run) →
normalized row → document (hash, build run) → vector (model, hash) → lexical entry, and a verdict:
fresh, or stale with the layer that is behind and what brings it up to date.
"""

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.freshness import EntryState, state_of
from gitlab_knowledge.store.normalize import get_watermark
from gitlab_knowledge.workspace import Workspace

_URL = re.compile(r"^/(?P<project>[^/]+(?:/[^/]+)*)/-/(?P<kind>issues|merge_requests)/(?P<iid>\d+)(?:#note_(?P<note>\d+))?")
_REF = re.compile(r"^(?P<project>[\w.\-]+(?:/[\w.\-]+)+)?(?P<sigil>[#!])(?P<iid>\d+)$")
_DOC = re.compile(r"^(issue|merge_request|discussion):\S+$")


@dataclass
class Explanation:
    document_id: str
    chain: dict[str, Any] = field(default_factory=dict)
    verdict: str = "fresh"
    reasons: list[str] = field(default_factory=list)
    related: list[str] = field(default_factory=list)  # the parent's other documents

    def as_dict(self) -> dict[str, Any]:
        return {"document_id": self.document_id, "verdict": self.verdict, "reasons": self.reasons,
                "chain": self.chain, "related_documents": self.related}


def _row(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> dict[str, Any] | None:
    cur = con.execute(sql, params)
    row = cur.fetchone()
    return dict(zip([d[0] for d in cur.description], row, strict=True)) if row else None


def resolve(con: duckdb.DuckDBPyConnection, ref: str, project: str | None) -> str:
    """A document id for a reference (#234, group/p!847, a URL, or a document id)."""
    ref = ref.strip()
    if _DOC.match(ref):
        if not con.execute("SELECT 1 FROM documents WHERE id = ?", [ref]).fetchone():
            raise UsageError(f"no document {ref} in the store")
        return ref
    parts = urlsplit(ref)
    # A GitLab URL: its path names the project; the host is whatever the instance is called.
    url = _URL.search(parts.path + (f"#{parts.fragment}" if parts.fragment else "")) if parts.scheme else None
    if url:
        kind, iid, project, note = kinds.by_api_path(url["kind"]), int(url["iid"]), url["project"], url["note"]
        if note:
            found = con.execute("SELECT 'discussion:' || discussion_id FROM notes WHERE id = ?", [int(note)]).fetchone()
            if not found:
                raise UsageError(f"no note {note} in the store")
            return found[0]
    else:
        match = _REF.match(ref)
        if not match:
            raise UsageError(f"explain expects #IID, !IID, group/project#IID, a GitLab URL or a document id "
                             f"(issue:…, merge_request:…, discussion:…), got {ref!r}")
        kind, iid = kinds.by_sigil(match["sigil"]), int(match["iid"])
        project = match["project"] or project
    where = " AND p.path_with_namespace = ?" if project else ""
    rows = con.execute(f"SELECT t.id, p.path_with_namespace FROM {kind.table} t JOIN projects p ON p.id = t.project_id "
                       f"WHERE t.iid = ?{where}", [iid, *([project] if project else [])]).fetchall()
    label = kind.ref(iid)
    if not rows:
        raise UsageError(f"no {label} in the store" + (f" for {project}" if project else ""))
    if len(rows) > 1:
        raise UsageError(f"{label} exists in several projects ({', '.join(sorted(r[1] for r in rows))}): "
                         "add --project or write group/project" + label)
    return f"{kind.name}:{rows[0][0]}"


def explain(workspace: Workspace, ref: str, project: str | None = None, live: bool = False) -> Explanation:
    with workspace.read() as con:
        doc_id = resolve(con, ref, project)
        out = Explanation(doc_id)
        doc = _row(con, "SELECT * EXCLUDE (content_text) FROM documents WHERE id = ?", [doc_id])
        if doc is None:
            raise UsageError(f"no document {doc_id} in the store")
        kind, parent_id = doc["parent_type"], doc["parent_id"]
        parent = _row(con, f"SELECT id, iid, updated_at, change_seq, raw_payload_id, user_notes_count "
                           f"FROM {kinds.kind(kind).table} WHERE id = ?", [parent_id])
        raws = [_row(con, """
            SELECT r.id, r.resource_type, r.gitlab_key, r.updated_at, r.fetched_at, r.discussions_fetched_at,
                   r.payload_hash, r.change_seq, r.deleted_at, r.sync_run_id, r.dagster_run_id,
                   s.status AS sync_status, s.mode AS sync_mode, s.started_at AS sync_started_at
            FROM raw_payloads r LEFT JOIN sync_runs s ON s.id = r.sync_run_id WHERE r.id = ?""", [rid])
                for rid in doc["raw_payload_ids"] or []]
        out.chain["raw_payloads"] = [r for r in raws if r]
        normalized = {"table": kinds.kind(kind).table, "row": parent}
        if doc["source_type"] == "discussion":
            thread_id = doc["source_id"]
            normalized["discussion"] = _row(con, "SELECT id, note_count, first_note_at, last_note_at, raw_payload_id "
                                                 "FROM discussions WHERE id = ?", [thread_id])
        out.chain["normalized"] = normalized
        out.chain["document"] = {k: doc[k] for k in ("id", "source_type", "content_hash", "meta_hash", "built_at",
                                                     "dagster_run_id", "sync_run_id", "truncated", "token_count",
                                                     "url", "change_seq")}
        project_id = doc["project_id"]
        watermarks = {"normalized": get_watermark(con, project_id, "normalized"),
                      "documents": get_watermark(con, project_id, "documents")}
        out.chain["watermarks"] = watermarks
        out.related = [r[0] for r in con.execute(
            "SELECT id FROM documents WHERE parent_type = ? AND parent_id = ? AND id <> ? ORDER BY id",
            [kind, parent_id, doc_id]).fetchall()]
        for raw in out.chain["raw_payloads"]:
            if raw["deleted_at"] is not None:
                out.reasons.append(f"raw {raw['resource_type']} {raw['gitlab_key']} was deleted in GitLab "
                                   f"({raw['deleted_at']}) but the document remains: the next sync removes it")
            elif raw["change_seq"] > watermarks["normalized"]:
                out.reasons.append(f"raw {raw['resource_type']} changed (seq {raw['change_seq']}) after the last "
                                   f"normalization (watermark {watermarks['normalized']}): the next sync normalizes it")
        if parent is None:
            out.reasons.append(f"the parent {kind} {parent_id} no longer exists: the next sync removes this document")
        elif parent["change_seq"] > watermarks["documents"]:
            out.reasons.append(f"the {kind} changed (seq {parent['change_seq']}) after documents were last built "
                               f"(watermark {watermarks['documents']}): the next sync rebuilds this document")
        project_path = doc["project_path"]
    _index_chain(workspace, out, doc, project_path)
    if live:
        _live(workspace, out, doc, parent)
    out.verdict = "stale" if out.reasons else "fresh"
    return out


def _index_chain(workspace: Workspace, out: Explanation, doc: dict[str, Any], project: str) -> None:
    from gitlab_knowledge.embeddings.vectors import sql_str
    from gitlab_knowledge.errors import StoreError

    provider = workspace.embedder()
    hashes = (doc["content_hash"], doc["meta_hash"])
    vector: dict[str, Any] = {"model": f"{provider.provider}/{provider.model}", "present": False}
    if workspace.config.lancedb_dir.exists():
        store = workspace.vectors(provider.provider, provider.model)
        table = store.table()
        if table is not None:
            rows = table.search().where(f"doc_id = {sql_str(doc['id'])}").select(
                ["chunk", "content_hash", "meta_hash", "embedded_at", "dims"]).limit(None).to_arrow().to_pylist()
            if rows:
                vector.update(present=True, chunks=len(rows), content_hash=rows[0]["content_hash"],
                              meta_hash=rows[0]["meta_hash"], embedded_at=rows[0]["embedded_at"],
                              dims=rows[0]["dims"])
        failure = store.failures(project).get(doc["id"])
        if failure:
            vector["failure"] = {k: failure[k] for k in ("error", "attempts", "failed_at")}
    out.chain["vector"] = vector
    if not vector["present"]:
        out.reasons.append(f"no vector in {vector['model']}" + (f" (embedding failed: {vector['failure']['error']})"
                           if vector.get("failure") else "") + ": the next sync (or `embed`) embeds it; keyword "
                           "search finds it meanwhile")
    else:
        state = state_of(hashes, (vector["content_hash"], vector["meta_hash"]))
        if state is EntryState.TEXT_CHANGED:
            out.reasons.append("the vector was embedded from an older text (hash "
                               f"{vector['content_hash'][:12]} ≠ {doc['content_hash'][:12]}): the next sync re-embeds it")
        elif state is EntryState.METADATA_CHANGED:
            out.reasons.append("the vector's metadata (labels, state, title…) is older than the document's: "
                               "the next sync rewrites it")
    lexical: dict[str, Any] = {"present": False}
    try:
        entry = workspace.lexical().state(project).get(doc["id"])
    except StoreError:
        entry = None
    if entry:
        lexical.update(present=True, content_hash=entry[0], meta_hash=entry[1])
    out.chain["lexical"] = lexical
    state = state_of(hashes, entry)
    if state is EntryState.MISSING:
        out.reasons.append("not in the lexical index: the next sync indexes it")
    elif not state.is_current:
        out.reasons.append("the lexical entry is from an older version: the next sync re-indexes it")


def _live(workspace: Workspace, out: Explanation, doc: dict[str, Any], parent: dict[str, Any] | None) -> None:
    import asyncio

    from gitlab_knowledge.errors import NotFoundError
    from gitlab_knowledge.gitlab.client import encode_project
    from gitlab_knowledge.timeutil import parse_time

    resource = kinds.kind(doc["parent_type"]).api_path

    async def fetch() -> dict[str, Any] | None:
        async with workspace.gitlab() as client:
            try:
                return await client.get(f"/projects/{encode_project(doc['project_path'])}/{resource}/{doc['parent_iid']}")
            except NotFoundError:
                return None

    item = asyncio.run(fetch())
    if item is None:
        out.chain["gitlab"] = {"exists": False}
        out.reasons.append("GitLab no longer has it (404): a full sync (`sync --full`) removes it")
        return
    live_updated = parse_time(item.get("updated_at"))
    out.chain["gitlab"] = {"exists": True, "updated_at": live_updated, "user_notes_count": item.get("user_notes_count")}
    if parent is not None and live_updated and parent["updated_at"] and live_updated > parent["updated_at"]:
        out.reasons.append(f"GitLab has a newer version (updated {live_updated}, stored {parent['updated_at']}): "
                           "the next sync fetches it")
