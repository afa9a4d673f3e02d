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
from gitlab_knowledge.errors import AmbiguousReference, BadReference, ItemNotFound, UsageError
from gitlab_knowledge.explain_keyed import keyed_document, live_keyed
from gitlab_knowledge.freshness import EntryState, document_hashes, state_of
from gitlab_knowledge.store.projects import project_id_for
from gitlab_knowledge.store.watermarks import get_watermark
from gitlab_knowledge.workspace import Workspace

_DOC = re.compile(r"^(" + "|".join(map(re.escape, kinds.SOURCE_TYPES)) + r"):\S+$")


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


_RAW_SQL = """
    SELECT r.id, r.resource_type, r.gitlab_key, r.updated_at, r.fetched_at, r.discussions_fetched_at,
           r.payload_hash, r.change_seq, r.deleted_at, r.sync_run_id, r.dagster_run_id,
           s.status AS sync_status, s.mode AS sync_mode, s.started_at AS sync_started_at
    FROM raw_payloads r LEFT JOIN sync_runs s ON s.id = r.sync_run_id """


class NoteNotStored(UsageError):
    """A URL names a note the store does not hold (yet): `explain` asks GitLab about it."""

    def __init__(self, message: str, project: str, kind: kinds.Kind, iid: int, note: int) -> None:
        super().__init__(message)
        self.project, self.kind, self.iid, self.note = project, kind, iid, note


def resolve(con: duckdb.DuckDBPyConnection, ref: str, project: str | None, command: str = "explain") -> str:
    """A document id for a reference (#234, group/p!847, a URL, or a document id); `command`: the
    one the reference was typed for, as an unreadable reference's message names it."""
    ref = ref.strip()
    keyed = keyed_document(con, ref, project)
    if keyed is not None:
        return keyed
    if _DOC.match(ref):
        if not con.execute("SELECT 1 FROM documents WHERE id = ?", [ref]).fetchone():
            raise UsageError(f"no document {ref} in the store")
        return ref
    parts = urlsplit(ref)
    # A GitLab URL (with or without the `/-/` scope GitLab before 12.x left out of the web_urls that
    # stored payloads still carry): its path names the project; the host is whatever the instance is called.
    parsed = kinds.parse_reference(ref)
    url = parsed is not None and "://" in ref
    if parsed is None:
        raise BadReference(command, ref, "#IID, !IID, group/project#IID, a GitLab URL or a document id "
                                         "(issue:…, merge_request:…, discussion:…)")
    kind, iid, project, note = parsed.kind, parsed.iid, parsed.project or project, parsed.note
    if note is not None:
        found = con.execute("SELECT 'discussion:' || discussion_id FROM notes WHERE id = ?", [note]).fetchone()
        if not found:
            raise NoteNotStored(f"no note {note} in the store", parsed.project or "", kind, iid, note)
        return str(found[0])
    # A path as typed or as an older URL has it: GitLab resolves paths case-insensitively and
    # through renames, so the project is found by the id that path resolved to.
    project_id = project_id_for(con, project) if project else None
    where = " AND p.id = ?" if project else ""
    rows = con.execute(f"SELECT t.id, p.path_with_namespace FROM {kind.table} t JOIN projects p ON p.id = t.project_id "
                       f"WHERE t.iid = ?{where}", [iid, *([project_id] if project else [])]).fetchall()
    if not rows and url:
        # A GitLab under a relative root (`https://host/gitlab/group/p/-/issues/5`): the stored
        # web_url, with or without the `/-/` scope, names the item.
        bare = f"{parts.scheme}://{parts.netloc}{parts.path}".rstrip("/").replace("/-/", "/")
        rows = con.execute(f"SELECT t.id, p.path_with_namespace FROM {kind.table} t JOIN projects p "
                           f"ON p.id = t.project_id WHERE replace(t.web_url, '/-/', '/') = ?", [bare]).fetchall()
    label = kind.ref(iid)
    if not rows:
        raise ItemNotFound(label, kind.name, iid, project)
    if len(rows) > 1:
        raise AmbiguousReference(label, [r[1] for r in rows], qualified="group/project" + label)
    return f"{kind.name}:{rows[0][0]}"


def explain(workspace: Workspace, ref: str, project: str | None = None, live: bool = False) -> Explanation:
    with workspace.read() as con:
        try:
            doc_id = resolve(con, ref, project)
        except NoteNotStored as missing:
            behind = _note_in_raw(con, missing)
            if behind is not None:
                return behind
            return _missing_note(workspace, missing)
        out = Explanation(doc_id)
        doc = _row(con, "SELECT * EXCLUDE (content_text) FROM documents WHERE id = ?", [doc_id])
        if doc is None:
            raise UsageError(f"no document {doc_id} in the store")
        kind, parent_id = doc["parent_type"], doc["parent_id"]
        keyed = kinds.keyed(kind)
        # A keyed kind (a wiki page) has no iid, timestamps or notes count.
        columns = "id, iid, updated_at, change_seq, raw_payload_id, user_notes_count" if keyed is None else \
            "id, NULL::INTEGER AS iid, NULL::TIMESTAMP AS updated_at, change_seq, raw_payload_id, " \
            "NULL::INTEGER AS user_notes_count"
        table = keyed.table if keyed is not None else kinds.kind(kind).table
        parent = _row(con, f"SELECT {columns} FROM {table} WHERE id = ?", [parent_id])
        raws = [_row(con, _RAW_SQL + "WHERE r.id = ?", [rid]) for rid in doc["raw_payload_ids"] or []]
        out.chain["raw_payloads"] = [r for r in raws if r]
        normalized = {"table": table, "row": parent}
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
        raw_parent = _row(con, """
            SELECT updated_at, CAST(json_extract(json, '$.user_notes_count') AS INTEGER) AS user_notes_count
            FROM raw_payloads WHERE resource_type = ? AND gitlab_key = ? AND deleted_at IS NULL""",
                          [kind, str(parent_id)]) if live and keyed is None else None
        raw_thread = _row(con, "SELECT json FROM raw_payloads WHERE resource_type = 'discussion' AND gitlab_key = ? "
                               "AND deleted_at IS NULL", [doc["source_id"]]) \
            if live and doc["source_type"] == "discussion" else None
    _index_chain(workspace, out, doc, project_path)
    if live and kinds.keyed(doc["parent_type"]) is not None:
        out.chain["gitlab"], reasons = live_keyed(workspace, doc, out.chain["raw_payloads"])
        out.reasons += reasons
    elif live:
        _live(workspace, out, doc, raw_parent, _user_notes(raw_thread["json"]) if raw_thread else None)
    out.verdict = "stale" if out.reasons else "fresh"
    return out


def _index_chain(workspace: Workspace, out: Explanation, doc: dict[str, Any], project: str) -> None:
    from gitlab_knowledge.embeddings.vectors import sql_str
    from gitlab_knowledge.errors import StoreError

    provider = workspace.embedder()
    from gitlab_knowledge.documents.build import document_version

    # The comparison index status makes: a document of another builder version is stale everywhere.
    current = document_version()
    hashes = document_hashes(doc["content_hash"], doc["meta_hash"], doc.get("builder_version"), current)
    if doc.get("builder_version") != current:
        out.reasons.append(f"the document was built by builder version {doc.get('builder_version')}, this code "
                           f"builds {current}: the next sync rebuilds it, then re-embeds and re-indexes it")
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


def _note_in_raw(con: duckdb.DuckDBPyConnection, missing: NoteNotStored) -> Explanation | None:
    """A note the normalized layer lacks but a stored thread payload holds: normalization is behind
    (or left it out), and no sync has to fetch anything. None when no live raw thread holds it."""
    # The text match only narrows the candidates; the thread's parsed notes decide.
    candidates = con.execute(
        "SELECT id, project_id, json FROM raw_payloads WHERE resource_type = 'discussion' AND deleted_at IS NULL "
        "AND json LIKE ?", [f"%{missing.note}%"]).fetchall()
    found = next(((rid, pid) for rid, pid, text in candidates if missing.note in _user_notes(text)), None)
    if found is None:
        return None
    raw = _row(con, _RAW_SQL + "WHERE r.id = ?", [found[0]])
    assert raw is not None  # the row just read
    watermark = get_watermark(con, found[1], "normalized")
    out = Explanation(f"note:{missing.note}", verdict="stale")
    out.chain["raw_payloads"] = [raw]
    out.chain["watermarks"] = {"normalized": watermark}
    where = f"the raw payload of discussion {raw['gitlab_key']} (fetched {raw['fetched_at']}) holds note {missing.note}"
    if raw["change_seq"] > watermark:
        out.reasons.append(f"{where}, but the normalized layer is behind (seq {raw['change_seq']}, normalized "
                           f"watermark {watermark}): the normalized step of the next sync (`sync`, or the "
                           "normalized_gitlab asset) stores it, without asking GitLab")
    else:
        out.reasons.append(f"{where}, but the normalized layer does not, although its watermark ({watermark}) "
                           f"is past that payload (seq {raw['change_seq']}): normalization left the note out")
    return out


def _missing_note(workspace: Workspace, missing: NoteNotStored) -> Explanation:
    """A note the store lacks: does GitLab have it? Then the raw layer is behind (a note inside
    GitLab's 60 s touch window is the usual reason); if not, the URL names nothing."""
    import asyncio

    from gitlab_knowledge.errors import NotFoundError
    from gitlab_knowledge.gitlab.client import encode_project

    path = f"/projects/{encode_project(missing.project)}/{missing.kind.api_path}/{missing.iid}/notes/{missing.note}"

    async def fetch() -> dict[str, Any] | None:
        async with workspace.gitlab() as client:
            try:
                stored = await client.get(path)
            except NotFoundError:
                return None
            return _one_object(path, stored)

    note = asyncio.run(fetch())
    if note is None or note.get("system"):
        raise UsageError(f"no note {missing.note} in the store, and GitLab has no such user note on "
                         f"{missing.kind.ref(missing.iid, missing.project)}")
    out = Explanation(f"note:{missing.note}", verdict="stale")
    author = (note.get("author") or {}).get("username") or "?"
    out.chain["gitlab"] = {"exists": True, "note_id": missing.note, "author": author,
                           "created_at": note.get("created_at"), "updated_at": note.get("updated_at")}
    out.reasons.append(f"GitLab has note {missing.note} (by @{author}, {note.get('created_at')}) on "
                       f"{missing.kind.ref(missing.iid, missing.project)} that the store lacks: the next sync "
                       "fetches it (a note inside GitLab's 60 s touch window waits for the thread recheck)")
    return out


def _user_notes(thread_json: str | dict[str, Any]) -> dict[int, Any]:
    """A thread payload's user notes: note id -> updated_at (system notes are never stored)."""
    import json

    from gitlab_knowledge.timeutil import parse_time

    thread = json.loads(thread_json) if isinstance(thread_json, str) else thread_json
    return {int(n["id"]): parse_time(n.get("updated_at")) for n in thread.get("notes") or []
            if isinstance(n, dict) and not n.get("system") and "id" in n}


def _live(workspace: Workspace, out: Explanation, doc: dict[str, Any], raw_parent: dict[str, Any] | None,
          raw_notes: dict[int, Any] | None) -> None:
    """What GitLab says now against the raw layer (the first stored layer: the layers after it are
    compared with their upstream by watermarks above): the item's updated_at *and* its
    user_notes_count (a note added inside GitLab's 60 s touch window does not move updated_at),
    and for a thread, its notes by id."""
    import asyncio

    from gitlab_knowledge.errors import NotFoundError
    from gitlab_knowledge.gitlab.client import encode_project
    from gitlab_knowledge.timeutil import parse_time

    base = f"/projects/{encode_project(doc['project_path'])}/{kinds.kind(doc['parent_type']).api_path}/" \
           f"{doc['parent_iid']}"

    async def fetch() -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        async with workspace.gitlab() as client:
            try:
                item = _one_object(base, await client.get(base))
            except NotFoundError:
                return None, None
            thread = None
            if raw_notes is not None:
                path = f"{base}/discussions/{doc['source_id']}"
                try:
                    thread = _one_object(path, await client.get(path))
                except NotFoundError:
                    thread = {"notes": []}
            return item, thread

    item, thread = asyncio.run(fetch())
    if item is None:
        out.chain["gitlab"] = {"exists": False}
        out.reasons.append("GitLab no longer has it (404): a full sync (`sync --full`) removes it")
        return
    live_updated = parse_time(item.get("updated_at"))
    live_count = item.get("user_notes_count")
    out.chain["gitlab"] = {"exists": True, "updated_at": live_updated, "user_notes_count": live_count}
    if raw_parent is None:
        out.reasons.append("the raw layer has no payload of the item: the next sync fetches it")
        return
    if live_updated and raw_parent["updated_at"] and live_updated > raw_parent["updated_at"]:
        out.reasons.append(f"GitLab has a newer version (updated {live_updated}, raw payload {raw_parent['updated_at']}):"
                           " the next sync fetches it")
    elif isinstance(live_count, int) and raw_parent["user_notes_count"] is not None \
            and live_count != raw_parent["user_notes_count"]:
        out.reasons.append(f"GitLab counts {live_count} user notes, the raw payload {raw_parent['user_notes_count']} "
                           "(a note inside GitLab's 60 s touch window does not move updated_at): the next sync "
                           "rechecks its threads")
    if thread is not None and raw_notes is not None:
        live_notes = _user_notes(thread)
        out.chain["gitlab"]["thread_notes"] = len(live_notes)
        missing = sorted(set(live_notes) - set(raw_notes))
        gone = sorted(set(raw_notes) - set(live_notes))
        edited = sorted(n for n in set(live_notes) & set(raw_notes)
                        if live_notes[n] and raw_notes[n] and live_notes[n] > raw_notes[n])
        for what, ids in (("has note(s) the store lacks", missing), ("no longer has note(s)", gone),
                          ("has newer edits of note(s)", edited)):
            if ids:
                out.reasons.append(f"GitLab {what} {', '.join(map(str, ids))} in this thread: the next sync "
                                   "refetches its threads")


def _one_object(path: str, data: Any) -> dict[str, Any]:
    """GitLab's answer to a GET of one item, thread or note; its text is untrusted, so an answer of
    the wrong shape is one line, not a traceback."""
    from gitlab_knowledge.errors import GitLabError

    if not isinstance(data, dict):
        raise GitLabError(f"GitLab answered GET {path} with a {type(data).__name__} where an object belongs")
    return data
