"""`get_release`: one release, its notes bounded, when it shipped, and the issues and MRs it names.

The release comes from `store.keyed_queries.show_keyed`, the function `show release TAG` uses,
read through the workspace's lens like every item: a release of a project the lens hides is not
read.
"""

import asyncio
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.mcp.bounds import DESCRIPTION_CHARS, ITEM_LINKS, cut
from gitlab_knowledge.mcp.context import Context
from gitlab_knowledge.mcp.tools import plain

SCHEMA_VERSION = 1
KIND = kinds.RELEASE

RELEASE_INPUT: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["tag"],
    "properties": {
        "tag": {"type": "string", "minLength": 1,
                "description": "The release's tag as search results name it after `release:` (e.g. v2.4.0), "
                               "or the whole `release:<tag>`."},
        "project": {"type": "string", "description": "group/project; needed when several synced projects have "
                                                     "a release with that tag."},
    },
}


def get_release(workspace: Any, tag: str, project: str | None) -> dict[str, Any]:
    from gitlab_knowledge.store.keyed_queries import show_keyed

    release = show_keyed(workspace, KIND, tag, project)
    notes = release[KIND.text_column] or ""
    return {
        "schema_version": SCHEMA_VERSION, "project": release["project"], "tag": release["tag_name"],
        "reference": release["reference"], "name": release["title"], "url": release["web_url"],
        "released_at": plain(release["released_at"]), "upcoming": bool(release["upcoming_release"]),
        "author": release["author_username"], "milestones": list(release["milestones"] or []),
        "notes": cut(notes, DESCRIPTION_CHARS, release["web_url"]), "notes_chars": len(notes),
        "truncated": len(notes) > DESCRIPTION_CHARS,
        "links": [{k: link[k] for k in ("reference", "type", "kind")} for link in release["links"][:ITEM_LINKS]],
    }


def render(release: dict[str, Any]) -> str:
    when = (release["released_at"] or "?")[:10]
    shipped = f"upcoming, planned for {when}" if release["upcoming"] else f"shipped {when}"
    lines = [f"{KIND.display} {release['tag']} ({release['project']}): {release['name']}", shipped,
             release["url"] or ""]
    if release["milestones"]:
        lines.insert(2, "Milestones: " + ", ".join(release["milestones"]))
    lines += ["", release["notes"]]
    if release["links"]:
        lines += ["", "Names: " + ", ".join(link["reference"] for link in release["links"])]
    return "\n".join(lines)


async def handler(ctx: Context, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    tag = args.get("tag")
    if not isinstance(tag, str) or not tag.strip():
        raise UsageError(f"tag must be a release's tag, got {tag!r}")
    release = await asyncio.to_thread(get_release, ctx.workspace(visible_only=True), tag, args.get("project") or None)
    return render(release), release
