"""`explain` of a kind keyed by a string (kinds.KEYED_KINDS: a wiki page): which document a
reference names, and what GitLab serves now for it (`--live`)."""

from typing import TYPE_CHECKING, Any

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import UsageError

if TYPE_CHECKING:
    from gitlab_knowledge.workspace import Workspace


def keyed_document(con: duckdb.DuckDBPyConnection, ref: str, project: str | None) -> str | None:
    """The document a keyed kind's reference names: a section's URL (a search hit's `url`), a
    page's URL or `wiki:<slug>` (its first document); None when `ref` is neither."""
    for kind in kinds.KEYED_KINDS:
        if "://" in ref and kind.key_from_url(ref) is not None:
            found = con.execute("SELECT id FROM documents WHERE parent_type = ? AND url = ? ORDER BY id",
                                [kind.name, ref]).fetchall() or con.execute(
                "SELECT id FROM documents WHERE parent_type = ? AND split_part(url, '#', 1) = ? ORDER BY id",
                [kind.name, ref.partition("#")[0]]).fetchall()
        elif ref.startswith(f"{kind.prefix}:"):
            from gitlab_knowledge.store.keyed_queries import keyed_row

            row = keyed_row(con, kind, ref, project)
            found = con.execute("SELECT id FROM documents WHERE parent_type = ? AND parent_id = ? ORDER BY id",
                                [kind.name, row["id"]]).fetchall()
        else:
            continue
        if not found:
            raise UsageError(f"no document of {ref} in the store")
        return str(found[0][0])
    return None


def live_keyed(workspace: "Workspace", doc: dict[str, Any], raws: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """What GitLab serves now for a keyed kind's page (GET /projects/:id/wikis/:slug, the slug
    URL-encoded) against its raw payload: the same text, or a newer one the next sync fetches."""
    import asyncio
    import json
    from urllib.parse import quote

    from gitlab_knowledge.errors import NotFoundError
    from gitlab_knowledge.gitlab.client import encode_project

    kind = kinds.keyed(doc["parent_type"])
    assert kind is not None
    key = kind.key_from_url(doc["url"]) or ""
    stored = [r for r in raws if r["resource_type"] == kind.name]

    async def fetch() -> dict[str, Any] | None:
        async with workspace.gitlab() as client:
            try:
                page: dict[str, Any] = await client.get(
                    f"/projects/{encode_project(doc['project_path'])}/{kind.api_path}/{quote(key, safe='')}")
                return page
            except NotFoundError:
                return None

    page = asyncio.run(fetch())
    if page is None:
        return {"exists": False}, [f"GitLab no longer serves {kind.ref(key)} (404): the next sync's complete "
                                   "listing removes it"]
    with workspace.read() as con:
        text = con.execute("SELECT json FROM raw_payloads WHERE id = ?", [stored[0]["id"]]).fetchall() if stored else []
    before = json.loads(text[0][0]).get(kind.text_column) if text else None
    reasons = [f"GitLab's {kind.noun} has another text than the raw payload: the next sync fetches it"] \
        if before != page.get(kind.text_column) else []
    return {"exists": True, "updated_at": None, "user_notes_count": None}, reasons
