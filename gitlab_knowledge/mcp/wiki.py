"""`get_wiki_page`: one wiki page, its text bounded, and the issues and MRs it links to.

The page comes from `store.keyed_queries.show_keyed`, the function `show wiki SLUG` uses, read
through the workspace's lens like every item: a page of a project the lens hides is not read.
"""

import asyncio
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.mcp.bounds import DESCRIPTION_CHARS, ITEM_LINKS, cut
from gitlab_knowledge.mcp.context import Context

SCHEMA_VERSION = 1
KIND = kinds.WIKI_PAGE

WIKI_INPUT: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["slug"],
    "properties": {
        "slug": {"type": "string", "minLength": 1,
                 "description": "The page's slug as search results name it after `wiki:` (e.g. runbooks/deploy), "
                                "or the whole `wiki:<slug>`."},
        "project": {"type": "string", "description": "group/project; needed when several synced wikis have the slug "
                                                     "(every wiki has a `home`)."},
    },
}


def get_wiki_page(workspace: Any, slug: str, project: str | None) -> dict[str, Any]:
    from gitlab_knowledge.store.keyed_queries import show_keyed

    page = show_keyed(workspace, KIND, slug, project)
    text = page[KIND.text_column] or ""
    return {
        "schema_version": SCHEMA_VERSION, "project": page["project"], "slug": page["slug"],
        "reference": page["reference"], "title": page["title"], "format": page["format"], "url": page["web_url"],
        "content": cut(text, DESCRIPTION_CHARS, page["web_url"]), "content_chars": len(text),
        "truncated": len(text) > DESCRIPTION_CHARS,
        "links": [{k: link[k] for k in ("reference", "type", "kind")} for link in page["links"][:ITEM_LINKS]],
    }


def render(page: dict[str, Any]) -> str:
    lines = [f"{KIND.display} {page['reference']} ({page['project']}): {page['title']}", page["url"] or "", "",
             page["content"]]
    if page["links"]:
        lines += ["", "Links to: " + ", ".join(link["reference"] for link in page["links"])]
    return "\n".join(lines)


async def handler(ctx: Context, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    slug = args.get("slug")
    if not isinstance(slug, str) or not slug.strip():
        raise UsageError(f"slug must be a wiki page's slug, got {slug!r}")
    page = await asyncio.to_thread(get_wiki_page, ctx.workspace(visible_only=True), slug, args.get("project") or None)
    return render(page), page
