"""Fetch one project's wiki pages into the raw layer (docs/gitlab-api-wikis.md says what GitLab
serves and what this relies on).

GitLab's wiki API has no timestamps and no `updated_after`: change detection is a content hash.
Each sync asks for the whole listing with content (`GET /projects/:id/wikis?with_content=1`, one
call: GitLab does not paginate it), and the raw layer's upsert rewrites only the pages whose
payload hash changed, so an unchanged page costs nothing downstream. A no-op sync of a project's
wiki is therefore one call, and so is a sync after one page was added, edited, renamed or deleted.

A page's raw row is keyed `<project id>:<slug>` (kinds.WIKI_PAGE.raw_key): a renamed page is a new
slug, so a new row, and the old slug's row is tombstoned. Nothing is removed on doubt: a page is
tombstoned only when a complete listing leaves it out (GitLab's answer is one array without
pagination headers, or its paging headers mark the last page), and a listing with a row the store
cannot read (no slug) removes nothing. A wiki that is turned off (or that the token may not read)
answers 404 or 403: one line, the stored pages stay, and the sync goes on.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import GitLabError
from gitlab_knowledge.gitlab.client import GitLabClient
from gitlab_knowledge.gitlab.paging import says_last
from gitlab_knowledge.store import raw
from gitlab_knowledge.sync.stats import ResourceStats

KIND = kinds.WIKI_PAGE
RESOURCE = KIND.api_path  # the stats bucket: result.resources["wikis"]
MAX_LISTING_PAGES = 1000  # a paginating GitLab: a bound on a listing that never ends


@dataclass
class WikiListing:
    pages: list[dict[str, Any]] = field(default_factory=list)
    complete: bool = False
    rejected: int = 0
    calls: int = 0
    disabled: str | None = None  # GitLab's refusal, said in one line


async def list_wiki(client: GitLabClient, project_id: int) -> WikiListing:
    """Every page of the project's wiki, with content, and whether the listing is complete."""
    out = WikiListing()
    path: str = f"/projects/{project_id}/{KIND.api_path}"
    params: dict[str, Any] | None = {"with_content": 1}
    read: set[str] = set()
    for _ in range(MAX_LISTING_PAGES):
        out.calls += 1
        try:
            data, response = await client.request("GET", path, params)
        except GitLabError as exc:
            if exc.status in (403, 404):
                out.disabled = f"{exc.status}"
                return out
            raise
        if not isinstance(data, list):
            raise GitLabError(f"GitLab answered the wiki listing of project {project_id} with a non-list body")
        for page in data:
            if isinstance(page, dict) and isinstance(page.get("slug"), str) and page["slug"]:
                out.pages.append(page)
            else:
                out.rejected += 1
        url = str(response.url)
        if url in read:
            raise GitLabError(f"GitLab led the wiki listing of project {project_id} back to a page already read")
        read.add(url)
        headers = response.headers
        nxt = response.links.get("next", {}).get("url") or (
            client.url(url, {"page": headers["x-next-page"].strip()}) if headers.get("x-next-page", "").strip() else None)
        if nxt and data:
            path, params = nxt, None
            continue
        paged = any(h in headers for h in ("x-next-page", "x-page", "x-total-pages", "x-total"))
        # GitLab answers the wiki listing in one array without paging headers: that is all of it.
        out.complete = not nxt and (says_last(headers, len(data), None) if paged else True)
        return out
    raise GitLabError(f"the wiki listing of project {project_id} did not end after {MAX_LISTING_PAGES} pages")


def raw_rows(project_id: int, pages: list[dict[str, Any]]) -> list[raw.RawRow]:
    """The pages' raw rows: the payload as GitLab sent it, keyed by project and slug."""
    return [raw.RawRow(resource_type=KIND.name, gitlab_key=KIND.raw_key(project_id, p["slug"]),
                       json=raw.canonical_json(p), updated_at=None) for p in pages]


def write(con: Any, prov: raw.Provenance, listing: WikiListing, stats: ResourceStats) -> None:
    """Upsert the listed pages; with a complete listing, tombstone the stored pages it lacks."""
    rows = raw_rows(prov.project_id, listing.pages)
    counts = raw.upsert_rows(con, rows, prov)
    stats.new += counts.new
    stats.updated += counts.updated
    stats.fetched += counts.new + counts.updated
    if listing.complete and not listing.rejected and not prov.fresh:  # fresh: no page stored before these
        keys = [r.gitlab_key for r in rows]
        stats.deleted += raw.tombstone(
            con, "project_id = ? AND resource_type = ? AND NOT list_contains(?::TEXT[], gitlab_key)",
            [prov.project_id, KIND.name, keys])


async def sync_wiki(client: GitLabClient, project_id: int, project_path: str, stats: ResourceStats,
                    commit: Callable[..., Any], say: Callable[[str], None]) -> None:
    """The wiki step of a project's sync: one listing, one transaction (`commit(work)`)."""
    listing = await list_wiki(client, project_id)
    stats.list_calls += listing.calls
    if listing.disabled is not None:
        say(f"{project_path}: no wiki (GitLab answered {listing.disabled}: turned off, or not readable "
            "with this token); skipped, stored pages kept")
        return
    stats.listed += len(listing.pages)
    stats.rejected += listing.rejected
    if listing.rejected:
        say(f"{project_path}: {listing.rejected} wiki page(s) without a slug skipped; nothing removed on this run")
    elif not listing.complete:
        say(f"{project_path}: the wiki listing is not marked complete; no page removed on this run")
    commit(lambda con, prov: write(con, prov, listing, stats))
