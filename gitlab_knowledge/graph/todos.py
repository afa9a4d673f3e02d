"""GitLab's To-Do list for the token's user, asked live (`me --live`).

GitLab keeps a To-Do per user for what it decided needs them (assigned, mentioned, review
requested, a failed pipeline, "add a to-do"); only the token's own user's list can be read
(`GET /todos`, pending ones by default), and the store never holds it: it is asked when `me
--live` runs. Each To-Do keeps GitLab's `action_name` and says it as a reason.
"""

import asyncio
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.graph.queries import excerpt, iso
from gitlab_knowledge.timeutil import parse_time
from gitlab_knowledge.workspace import Workspace

TODO_LIMIT = 100  # one page of GitLab's list: the newest pending To-Dos
# GitLab's action names, as a person says them (an action not listed reads as its own words).
REASONS = {
    "assigned": "assigned", "mentioned": "mentioned", "directly_addressed": "directly addressed",
    "review_requested": "review requested", "approval_required": "approval required",
    "build_failed": "pipeline failed", "marked": "added as a to-do", "unmergeable": "cannot be merged",
    "merge_train_removed": "removed from the merge train", "member_access_requested": "access requested",
    "review_submitted": "review submitted",
}
_TARGETS = {k.noteable_type: k for k in kinds.ITEM_KINDS}


def pending_todos(workspace: Workspace, user: str | None) -> list[dict[str, Any]]:
    """The token's user's pending To-Dos, newest first. `user`: who `me` was asked about, when
    named; GitLab shows only the token's own user's list, so another user is refused."""
    async def fetch() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        async with workspace.gitlab() as client:
            me = await client.current_user()
            if user is not None and str(me.get("username") or "").lower() != user.lower():
                return me, []
            page = await client.get_page("/todos", {"state": "pending", "per_page": TODO_LIMIT})
            return me, page.items

    me, items = asyncio.run(fetch())
    if user is not None and str(me.get("username") or "").lower() != user.lower():
        raise UsageError(f"GitLab shows only the token's own To-Dos (@{me.get('username')}), not @{user}'s: "
                         "drop --user, or drop --live")
    return [todo(t) for t in items if isinstance(t, dict)]


def _object(value: Any) -> dict[str, Any]:
    """A JSON object GitLab sent, or an empty one for anything else (a null target, a string)."""
    return value if isinstance(value, dict) else {}


def todo(raw: dict[str, Any]) -> dict[str, Any]:
    """One To-Do as `me --json` lists it (cli/schemas/me.json `todo`)."""
    target, project, author = (_object(raw.get(key)) for key in ("target", "project", "author"))
    kind = _TARGETS.get(str(raw.get("target_type")))
    path = project.get("path_with_namespace")
    iid = target.get("iid")
    action = str(raw.get("action_name") or "unknown")
    created = parse_time(raw["created_at"]) if isinstance(raw.get("created_at"), str) else None
    return {
        "reason": REASONS.get(action, action.replace("_", " ")),
        "action": action,
        "target_type": str(raw.get("target_type") or "unknown"),
        "reference": kind.ref(iid, path) if kind and isinstance(iid, int) and path else None,
        "title": target.get("title") if isinstance(target.get("title"), str) else None,
        "state": target.get("state") if isinstance(target.get("state"), str) else None,
        "confidential": bool(target.get("confidential")),
        "project": path if isinstance(path, str) else None,
        "author": author.get("username") if isinstance(author.get("username"), str) else None,
        "created_at": iso(created),
        "excerpt": excerpt(raw.get("body") if isinstance(raw.get("body"), str) else ""),
        "url": raw.get("target_url") if isinstance(raw.get("target_url"), str) else target.get("web_url"),
    }
