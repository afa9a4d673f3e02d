"""Has a project changed since its last sync? Three cheap API calls per project.

For issues and for MRs: the newest item updated at or after the cursor
(`order_by=updated_at&sort=desc&per_page=1&updated_after=<cursor>`). It is a change unless that
item is already stored at exactly that version. For releases, which GitLab lists without an update
time: the newest created one (`order_by=created_at&sort=desc&per_page=1`), a change unless stored
at that version. That catches a new release, the change that matters ("what shipped?"); an edit of
an older one is taken by the next sync any other change starts (every sync lists all releases). What the store itself has left to do (rechecks,
layers behind, failed embeddings) is defs/due.py's `backlog`. Nothing is written: the cursor
moves only when a sync commits.
"""

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import GitLabError, KnowledgeError
from gitlab_knowledge.gitlab.client import GitLabClient, encode_project
from gitlab_knowledge.store.raw import canonical_json, payload_hash
from gitlab_knowledge.sync.known import RESOURCES
from gitlab_knowledge.workspace import Workspace


@dataclass
class Probe:
    project: str
    changed: bool
    reasons: list[str] = field(default_factory=list)
    fingerprint: str = ""  # what GitLab looked like: equal fingerprints describe the same change
    api_calls: int = 0
    error: KnowledgeError | None = None  # the probe itself failed (GitLab down, token rejected)
    gitlab_now: datetime | None = None  # GitLab's clock (Date header) when it answered


def _stored_state(workspace: Workspace, projects: list[str]) -> dict[str, dict[str, Any]]:
    """Per configured path whose project is stored: its id and cursors. The project is the one the
    path resolved to (GitLab resolves paths case-insensitively and through renames)."""
    from gitlab_knowledge.store.projects import project_id_for

    if not workspace.config.duckdb_path.exists():
        return {}
    out: dict[str, dict[str, Any]] = {}
    with workspace.read() as con:
        for path in projects:
            project_id = project_id_for(con, path)
            if project_id is None:
                continue
            cursors = dict(((r, (c, t)) for r, c, t in con.execute(
                "SELECT resource_type, updated_at_cursor, tie_breaker_id FROM sync_cursors WHERE project_id = ?",
                [project_id]).fetchall()))
            out[path] = {"project_id": project_id, "cursors": cursors}
    return out


def _is_stored(workspace: Workspace, kind: str, item: dict[str, Any]) -> bool:
    with workspace.read() as con:
        row = con.execute("SELECT payload_hash FROM raw_payloads WHERE resource_type = ? AND gitlab_key = ? "
                          "AND deleted_at IS NULL", [kind, str(item["id"])]).fetchone()
    return row is not None and row[0] == payload_hash(canonical_json(item))


async def _probe_project(client: GitLabClient, workspace: Workspace, project: str,
                         state: dict[str, Any] | None) -> Probe:
    probe = Probe(project, changed=False)
    parts = []
    if state is None:
        probe.changed = True
        probe.reasons.append("never synced")
    for resource, kind in RESOURCES:
        cursor = (state or {}).get("cursors", {}).get(kind)
        params = {"order_by": "updated_at", "sort": "desc", "per_page": 1,
                  "updated_after": cursor[0] if cursor else None}
        page = await client.get_page(f"/projects/{encode_project(project)}/{resource}", params)
        probe.api_calls += 1
        probe.gitlab_now = page.server_time or probe.gitlab_now
        newest = page.items[0] if page.items else None
        parts.append(f"{resource}={newest['updated_at']}#{newest['id']}" if newest else f"{resource}=-")
        if state is not None and newest is not None and not _is_stored(workspace, kind, newest):
            probe.changed = True
            probe.reasons.append(f"{resource.replace('_', ' ')} updated (newest {newest['updated_at']})")
    parts.append(await _probe_releases(client, workspace, project, state, probe))
    probe.fingerprint = "|".join(parts)
    return probe


async def _probe_releases(client: GitLabClient, workspace: Workspace, project: str, state: dict[str, Any] | None,
                          probe: Probe) -> str:
    """The newest release, compared with the stored one; a project whose releases the token
    cannot read (403/404) has nothing to say."""
    release = kinds.RELEASE
    try:
        page = await client.get_page(f"/projects/{encode_project(project)}/{release.api_path}",
                                     {"order_by": "created_at", "sort": "desc", "per_page": 1})
    except GitLabError as exc:
        if exc.status not in (403, 404):
            raise
        probe.api_calls += 1
        return f"{release.api_path}=unreadable"
    probe.api_calls += 1
    newest = page.items[0] if page.items and isinstance(page.items[0], dict) else None
    tag = newest.get("tag_name") if newest else None
    if state is not None and isinstance(tag, str):
        with workspace.read() as con:
            row = con.execute("SELECT payload_hash FROM raw_payloads WHERE resource_type = ? AND gitlab_key = ? "
                              "AND deleted_at IS NULL", [release.name, release.raw_key(state["project_id"], tag)]
                              ).fetchone()
        assert newest is not None
        if row is None or row[0] != payload_hash(canonical_json(newest)):
            probe.changed = True
            probe.reasons.append(f"release {tag} new or changed")
    return f"{release.api_path}={tag or '-'}"


async def _probe_all(workspace: Workspace, projects: list[str], state: dict[str, dict[str, Any]]) -> list[Probe]:
    async with workspace.gitlab() as client:
        out = []
        for project in projects:
            try:
                out.append(await _probe_project(client, workspace, project, state.get(project)))
            except KnowledgeError as exc:
                out.append(Probe(project, changed=False, reasons=[f"probe failed: {exc}"], error=exc))
        return out


def probe_projects(workspace: Workspace, projects: list[str] | None = None) -> list[Probe]:
    """Probe every configured project (or the given ones). Raises StoreError when the store is
    busy for longer than the configured wait (a sync is writing it: nothing to decide now)."""
    projects = list(projects or workspace.config.projects)
    return asyncio.run(_probe_all(workspace, projects, _stored_state(workspace, projects)))
