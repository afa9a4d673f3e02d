"""Resolve the configured groups to their projects: the one code path of `sync`, `doctor` and the
discovery sensor (what GitLab documents and what this relies on: docs/gitlab-api-groups.md).

For each configured group:

1. `GET /groups/:id` with the path as configured (GitLab finds it in any case) or its id. GitLab's
   API does not follow a renamed or transferred group's old path (404), unlike a project's, so a
   group the record knows is asked again by the id its last listing found: the configured path
   keeps working as a project's old path does, and the new path is said once per listing.
2. `GET /groups/:id/projects?include_subgroups=true&archived=false&with_shared=false&order_by=id
   &sort=asc`, every page. Shared projects belong to other groups and are left out; ascending ids
   put a project created while the pages are read at the end instead of shifting the rest.
3. A project the last complete listing had and this one lacks is asked for by id
   (`GET /projects/:id`): it has left when GitLab answers 404 (deleted, or the token lost it), shows
   it archived (unless `include_archived`), or in a namespace outside the group. Anything else (it is
   still there: a listing that skipped it, a failed call) keeps it: a project is purged only on
   positive evidence.

A listing counts only when complete (gitlab/client.py `iter_pages`: GitLab marked its last page
as the last) and every row has an integer id and a path; otherwise the group keeps the projects of
its last complete listing and the error is recorded and reported.
"""

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from gitlab_knowledge.config import GroupSettings
from gitlab_knowledge.errors import AuthError, ConfigError, GitLabError, KnowledgeError, NotFoundError
from gitlab_knowledge.gitlab.client import GitLabClient, encode_project
from gitlab_knowledge.store import groups as record_store
from gitlab_knowledge.timeutil import utcnow
from gitlab_knowledge.workspace import Workspace

log = logging.getLogger(__name__)


@dataclass
class GroupListing:
    configured: str
    group_id: int | None = None
    full_path: str | None = None
    projects: list[dict[str, Any]] = field(default_factory=list)  # {"id", "path", "archived"}
    complete: bool = False
    error: str | None = None
    renamed: bool = False  # the configured path is gone: found by the id the last listing knew
    left: list[dict[str, Any]] = field(default_factory=list)  # {"id", "path", "why"}

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.configured, "group_id": self.group_id, "full_path": self.full_path,
                "listed": len(self.projects), "complete": self.complete, "error": self.error}


@dataclass
class Discovery:
    listings: list[GroupListing] = field(default_factory=list)
    new: list[str] = field(default_factory=list)  # member paths no earlier listing had
    left: list[dict[str, Any]] = field(default_factory=list)  # projects shown to have left every group
    api_calls: int = 0

    @property
    def complete(self) -> bool:
        return all(listing.complete for listing in self.listings)

    @property
    def errors(self) -> list[str]:
        return [f"group {g.configured}: {g.error}" for g in self.listings if g.error]


def belongs(project: dict[str, Any], full_path: str, include_subgroups: bool) -> bool:
    namespace = project.get("namespace")
    ns = str(namespace.get("full_path") or "") if isinstance(namespace, dict) else ""
    top = full_path.casefold()
    return ns.casefold() == top or (include_subgroups and ns.casefold().startswith(top + "/"))


def _row(project: Any) -> dict[str, Any] | None:
    if not isinstance(project, dict):
        return None
    pid, path = project.get("id"), project.get("path_with_namespace")
    if not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(path, str) or not path:
        return None
    return {"id": pid, "path": path, "archived": project.get("archived") is True}


async def _find_group(client: GitLabClient, configured: str, known_id: int | None) -> tuple[dict[str, Any], bool]:
    try:
        return await client.get(f"/groups/{encode_project(configured)}"), False
    except NotFoundError:
        if known_id is None or configured.isdigit():
            raise NotFoundError(f"GitLab group {configured!r} not found at {client.settings.display_url} (or the "
                                "token cannot see it)", status=404) from None
    return await client.get(f"/groups/{known_id}"), True


async def list_group(client: GitLabClient, groups: GroupSettings, configured: str,
                     before: dict[str, Any] | None = None) -> GroupListing:
    """One group's projects as GitLab lists them now (`before`: its last recorded listing)."""
    listing = GroupListing(configured)
    known_id = (before or {}).get("group_id")
    try:
        group, listing.renamed = await _find_group(client, configured, known_id if isinstance(known_id, int) else None)
        if not isinstance(group, dict) or not isinstance(group.get("id"), int):
            raise GitLabError(f"GitLab answered GET /groups/{configured} with something that is not a group")
        listing.group_id, listing.full_path = group["id"], str(group.get("full_path") or configured)
        params = {"include_subgroups": str(groups.include_subgroups).lower(), "with_shared": "false",
                  "order_by": "id", "sort": "asc", "archived": None if groups.include_archived else "false"}
        rows, bad = [], 0
        async for page in client.iter_pages(f"/groups/{group['id']}/projects", params):
            for project in page.items:
                row = _row(project)
                if row is None:
                    bad += 1
                else:
                    rows.append(row)
        if bad:
            raise GitLabError(f"{bad} project(s) in the listing have no usable id or path: nothing was removed")
        listing.projects = list({r["id"]: r for r in rows}.values())
        await _check_departures(client, groups, listing, before)
        listing.complete = True
    except (AuthError, ConfigError):
        raise
    except KnowledgeError as exc:
        listing.error = str(exc)
    return listing


async def _check_departures(client: GitLabClient, groups: GroupSettings, listing: GroupListing,
                            before: dict[str, Any] | None) -> None:
    """Each project the last listing had and this one lacks: gone only on GitLab's own word."""
    listed = {r["id"] for r in listing.projects}
    for old in (before or {}).get("projects", ()):
        if not isinstance(old.get("id"), int) or old["id"] in listed:
            continue
        try:
            now = await client.project(old["id"])
        except NotFoundError:
            listing.left.append({**old, "why": "deleted, or no longer visible to the token"})
            continue
        except GitLabError as exc:
            log.warning("group %s: kept project %s, which its listing left out (%s)", listing.configured,
                        old.get("path"), exc)
            listing.projects.append(old)
            continue
        row = _row(now) or old
        if not isinstance(now, dict):
            listing.projects.append(old)
            continue
        if now.get("archived") is True and not groups.include_archived:
            listing.left.append({**row, "why": "archived"})
        elif not belongs(now, listing.full_path or listing.configured, groups.include_subgroups):
            namespace = now.get("namespace")
            where = namespace.get("full_path") if isinstance(namespace, dict) else None
            listing.left.append({**row, "why": f"moved to {where or 'another namespace'}"})
        else:  # GitLab still has it in the group: the listing skipped it (pages shifted under it)
            log.warning("group %s: project %s is still in the group though its listing left it out; kept",
                        listing.configured, row["path"])
            listing.projects.append(row)


async def _list_all(workspace: Workspace, record: dict[str, Any]) -> tuple[list[GroupListing], int]:
    config = workspace.config
    async with workspace.gitlab() as client:
        out = [await list_group(client, config.groups, g, record["groups"].get(record_store.group_key(g)))
               for g in config.groups.paths]
        return out, client.stats.requests


def discover(workspace: Workspace) -> Discovery:
    """List every configured group and record what each resolved to (complete listings only).
    Raises AuthError/ConfigError (nothing else would work either); a group's own failure is in
    its listing's `error`."""
    config = workspace.config
    discovery = Discovery()
    if not config.groups.paths:
        return discovery
    record = record_store.load_record(config.data_dir)
    before = {m.project_id for m in record_store.members(config, record)}
    discovery.listings, discovery.api_calls = asyncio.run(_list_all(workspace, record))
    now = utcnow().isoformat() + "Z"
    for listing in discovery.listings:
        key = record_store.group_key(listing.configured)
        entry = dict(record["groups"].get(key) or {})
        if listing.complete:
            entry = {"configured": listing.configured, "group_id": listing.group_id, "full_path": listing.full_path,
                     "options": record_store.options(config.groups), "listed_at": now, "projects": listing.projects,
                     "error": None}
            if listing.renamed:
                log.warning("group %s is now %s (GitLab keeps no redirect for a group's old path): found by its "
                            "id %s; update the configuration", listing.configured, listing.full_path, listing.group_id)
        else:
            entry.update(configured=listing.configured, error=listing.error, error_at=now)
        record["groups"][key] = entry
    after = record_store.members(config, record)
    kept = {m.project_id for m in after}
    for listing in discovery.listings:
        for gone in listing.left:
            if gone["id"] not in kept:
                record["left"][str(gone["id"])] = {"path": gone["path"], "why": gone["why"], "at": now}
                discovery.left.append(gone)
    for pid in kept:  # back in a group (unarchived, moved back): not to be purged
        record["left"].pop(str(pid), None)
    discovery.new = [m.path for m in after if m.project_id not in before]
    record_store.save_record(config.data_dir, record)
    return discovery
