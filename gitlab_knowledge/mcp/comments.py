"""`gitlab_get_mr_comments`: the review feedback on one merge request (docs/mr-comments.md).

Both sources hand over GitLab's own discussion payloads: live mode fetches them now, store mode
reads them as the last sync stored them (`raw_payloads`, every thread GitLab returned, system-only
ones included), so one mapping turns a GitLab note into a comment, authors, positions and
resolution are GitLab's objects, and the filters (system notes too) work the same in either mode.
Internal notes: store mode reads through the workspace's lens, which cuts them from the payloads
(store/visibility.py); what GitLab answers live can only be filtered here, by `envelope`.
"""

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import NotFoundError, UsageError
from gitlab_knowledge.mcp.bounds import BODY_CHARS, cut
from gitlab_knowledge.store.reader import store_stamp
from gitlab_knowledge.store.visibility import hidden_notes_column
from gitlab_knowledge.workspace import Workspace


@dataclass(frozen=True)
class CommentsRequest:
    project: str
    mr: int
    include_system: bool = False
    include_overview: bool = True
    only_resolved: bool = False
    only_unresolved: bool = False
    per_page: int = 100
    markdown: bool = False
    live: bool = False

    @classmethod
    def from_arguments(cls, args: dict[str, Any]) -> "CommentsRequest":
        """The tool's arguments (camelCase, as the contract names them), validated."""
        project = str(args.get("project") or "").strip().strip("/")
        if not project:
            raise UsageError("project is required: a numeric id or a group/project path")
        mr = args.get("mr")
        if isinstance(mr, bool) or not isinstance(mr, int) or mr < 1:
            raise UsageError(f"mr must be the merge request's IID (a number >= 1), got {mr!r}")
        per_page = args.get("perPage", 100)
        if isinstance(per_page, bool) or not isinstance(per_page, int) or not 1 <= per_page <= 100:
            raise UsageError(f"perPage must be a whole number from 1 to 100, got {per_page!r}")
        fmt = args.get("format", "json")
        if fmt not in ("json", "markdown"):
            raise UsageError(f"format must be json or markdown, got {fmt!r}")
        request = cls(project=project, mr=mr, include_system=bool(args.get("includeSystem", False)),
                      include_overview=bool(args.get("includeOverviewNotes", True)),
                      only_resolved=bool(args.get("onlyResolved", False)),
                      only_unresolved=bool(args.get("onlyUnresolved", False)), per_page=per_page,
                      markdown=fmt == "markdown", live=bool(args.get("live", False)))
        if request.only_resolved and request.only_unresolved:
            raise UsageError("onlyResolved and onlyUnresolved exclude each other: pass at most one of them")
        return request


@dataclass
class Source:
    """What one read produced: GitLab's threads of the MR and where to link to."""

    threads: list[dict[str, Any]]
    fetched_at: datetime
    web_url: str | None
    title: str | None
    reference: str
    # Store mode: the MR's threads were stored by a sync older than the store's schema 5, which
    # kept no system-only threads, and no sync has fetched them again since (the upgrade asks it to).
    before_system_notes: bool = False
    # Store mode: the internal notes the read's lens cut from the threads (live mode: envelope does).
    hidden_internal: int = 0


# -- one GitLab note → one comment ---------------------------------------------------------------


def person(user: Any) -> dict[str, Any] | None:
    if not isinstance(user, dict):
        return None
    return {"id": user.get("id") if isinstance(user.get("id"), int) else None,
            "username": user.get("username"), "name": user.get("name")}


def is_internal(note: dict[str, Any]) -> bool:
    # `confidential` was the name before GitLab 15.x; `internal` wins when both are there.
    flag = note.get("internal")
    return bool(note.get("confidential") if flag is None else flag)


def comment(note: dict[str, Any], thread_id: str | None, web_url: str | None,
            source: str = "discussion") -> dict[str, Any]:
    position = note.get("position") if isinstance(note.get("position"), dict) else None
    resolvable = bool(note.get("resolvable"))
    note_id = int(note["id"])
    link = kinds.note_url(web_url, note_id) if web_url else None
    return {
        "source": source,
        "thread_id": thread_id,
        "note_id": note_id,
        "author": person(note.get("author")),
        "body": cut(note.get("body") or "", BODY_CHARS, link),
        "created_at": note.get("created_at") or "",
        "updated_at": note.get("updated_at") or None,
        "system": bool(note.get("system")),
        "resolvable": resolvable,
        "resolved": bool(note.get("resolved")) if resolvable else None,
        "resolved_by": person(note.get("resolved_by")),
        "position": position,
        "file_path": (position.get("new_path") or position.get("old_path") or None) if position else None,
    }


def keep(c: dict[str, Any], request: CommentsRequest) -> bool:
    if c["system"] and not request.include_system:
        return False
    if c["position"] is None and not request.include_overview:
        return False
    if request.only_resolved and not (c["resolvable"] and c["resolved"]):
        return False
    return not (request.only_unresolved and not (c["resolvable"] and not c["resolved"]))


def envelope(request: CommentsRequest, source: Source, include_internal: bool) -> tuple[dict[str, Any], int]:
    """The contract's output (without the digest) and how many internal notes were left out."""
    comments: list[dict[str, Any]] = []
    seen_notes, hidden = 0, source.hidden_internal
    for thread in source.threads:
        thread_id = str(thread["id"]) if thread.get("id") is not None else None
        for note in thread.get("notes") or []:
            if is_internal(note) and not include_internal:
                hidden += 1
                continue
            seen_notes += 1
            c = comment(note, thread_id, source.web_url)
            if keep(c, request):
                comments.append(c)
    out = {
        "project": request.project,
        "mr": request.mr,
        "fetchedAt": iso(source.fetched_at),
        "counts": {"comments": len(comments), "discussions": len({c["thread_id"] for c in comments}),
                   "notes": seen_notes},
        "comments": comments,
    }
    return out, hidden


def iso(value: datetime) -> str:
    aware = value if value.tzinfo else value.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


# -- the store -----------------------------------------------------------------------------------


_CACHE: OrderedDict[tuple[str, str, str, int], tuple[Any, Source]] = OrderedDict()
_CACHE_SIZE = 64
_CACHE_LOCK = threading.Lock()


def from_store(workspace: Workspace, request: CommentsRequest) -> Source:
    """The MR's threads as the last sync stored them, as the workspace's lens shows them. An agent
    asks for the same MR several times (unresolved first, then the digest): while the store's files
    are unchanged, the last read answers without reading DuckDB again."""
    path = workspace.config.duckdb_path
    key = (str(path), workspace.lens.schema if workspace.lens else "", request.project, request.mr)
    stamp = store_stamp(path)  # taken before the read: a write during it invalidates the entry
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None and hit[0] == stamp:
            _CACHE.move_to_end(key)
            return hit[1]
    source = _read_store(workspace, request)
    with _CACHE_LOCK:
        _CACHE[key] = (stamp, source)
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return source


def _project_id(con: Any, project: str) -> int | None:
    """The stored project `project` names: an id, its path, or (as the read commands resolve it) a
    path in another case or from before a rename."""
    if project.isdigit():
        row = con.execute("SELECT id FROM projects WHERE id = ?", [int(project)]).fetchone()
        return int(row[0]) if row else None
    row = con.execute("SELECT id FROM projects WHERE path_with_namespace = ?", [project]).fetchone()
    if row:
        return int(row[0])
    from gitlab_knowledge.store.projects import project_id_for

    found = project_id_for(con, project)
    return found if found is not None and con.execute("SELECT 1 FROM projects WHERE id = ?", [found]).fetchone() \
        else None


_MR_SQL = f"""
    SELECT m.id, m.web_url, m.title, p.path_with_namespace, coalesce(r.discussions_fetched_at, r.fetched_at),
           r.id IS NOT NULL AND r.discussions_fetched_at IS NULL
    FROM {kinds.MERGE_REQUEST.table} m JOIN projects p ON p.id = m.project_id
    LEFT JOIN raw_payloads r ON r.id = m.raw_payload_id
    WHERE m.iid = ? AND """


def _read_store(workspace: Workspace, request: CommentsRequest) -> Source:
    """Two queries on one short read of DuckDB: the MR, then its stored thread payloads. (One query
    joining both scans raw_payloads as a whole and takes three times as long in DuckDB.)"""
    mr_kind = kinds.MERGE_REQUEST
    with workspace.read() as con:
        # The project as named (its id or exact path) in the MR's own query; other spellings
        # (another case, a path from before a rename) take the slower resolution below.
        exact = "p.id = ?" if request.project.isdigit() else "p.path_with_namespace = ?"
        found = con.execute(_MR_SQL + exact, [request.mr, int(request.project) if request.project.isdigit()
                                                else request.project]).fetchone()
        if found is None:
            project_id = _project_id(con, request.project)
            if project_id is None:
                known = [r[0] for r in con.execute("SELECT path_with_namespace FROM projects ORDER BY 1").fetchall()]
                raise UsageError(f"unknown project {request.project!r}: it is not in the local store (synced: "
                                 f"{', '.join(known) or 'none yet'}); add it to the config and sync, or pass live: true")
            found = con.execute(_MR_SQL + "m.project_id = ?", [request.mr, project_id]).fetchone()
        if found is None:
            raise UsageError(f"no MR !{request.mr} in {request.project} in the local store: check the IID, "
                             "or pass live: true if it is newer than the last sync")
        mr_id, web_url, title, path, fetched_at, refetch_due = found
        rows = con.execute(f"""
            SELECT json, {hidden_notes_column(workspace.lens)} FROM raw_payloads
            WHERE resource_type = ? AND parent_type = ? AND parent_id = ? AND deleted_at IS NULL
            ORDER BY position, gitlab_key
        """, [kinds.DISCUSSION, mr_kind.name, mr_id]).fetchall()
    threads = [json.loads(r[0]) for r in rows]
    # Threads stored while the MR awaits a refetch of them: only the schema 5 upgrade leaves that.
    return Source(threads=threads, fetched_at=fetched_at or datetime.now(UTC), web_url=web_url, title=title,
                  reference=mr_kind.ref(request.mr, path), before_system_notes=bool(refetch_due and threads),
                  hidden_internal=sum(r[1] for r in rows))


# -- GitLab, now ---------------------------------------------------------------------------------


async def from_gitlab(workspace: Workspace, request: CommentsRequest) -> Source:
    """Every page of the MR's discussions from GitLab (GET only)."""
    from gitlab_knowledge.gitlab.client import encode_project

    project = int(request.project) if request.project.isdigit() else request.project
    base = f"/projects/{encode_project(project)}/{kinds.MERGE_REQUEST.api_path}/{request.mr}"
    fetched_at = datetime.now(UTC)
    async with workspace.gitlab() as client:
        try:
            mr = await client.get(base)
        except NotFoundError:
            # Tell a missing project from a missing MR: the fix differs.
            await client.project(project)
            raise NotFoundError(f"GitLab has no MR !{request.mr} in {request.project} (404): check that "
                                f"{request.mr} is the MR's IID (the number after !), not its global id",
                                status=404) from None
        threads: list[dict[str, Any]] = []
        async for page in client.iter_pages(f"{base}/discussions", {"per_page": request.per_page}):
            threads.extend(page.items)
    mr = mr if isinstance(mr, dict) else {}
    path = ((mr.get("references") or {}).get("full") or "").split("!")[0] or request.project
    return Source(threads=threads, fetched_at=fetched_at, web_url=mr.get("web_url"), title=mr.get("title"),
                  reference=kinds.MERGE_REQUEST.ref(request.mr, path))
