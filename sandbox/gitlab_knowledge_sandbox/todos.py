"""GitLab's To-Do list for the token's user (`GET /todos`), as GitLab shapes it.

GitLab keeps To-Dos per user; the sandbox has one user (the token's), so one list, empty until a
test adds one (`add_todo`). `GET /todos` serves the pending ones by default (`state=done` or
`state=all`), newest first, paginated like every other list.
"""

from typing import TYPE_CHECKING, Any

from .clock import iso_ms
from .dataset import Json

if TYPE_CHECKING:
    from .state import SandboxState

_TARGET_TYPES = {"issues": "Issue", "merge_requests": "MergeRequest"}


def todos_of(state: "SandboxState") -> list[Json]:
    """The sandbox's To-Do list (created on first use)."""
    with state.lock:
        if not hasattr(state, "todos"):
            state.todos = []  # type: ignore[attr-defined]  # the state grows it on demand
        found: list[Json] = state.todos  # type: ignore[attr-defined]
        return found


def add_todo(state: "SandboxState", project: Any, kind: str, iid: int, action: str,
             author: Json | None = None, body: str | None = None, done: bool = False) -> Json:
    """A To-Do for the token's user on an issue or MR, as GitLab's API returns it."""
    proj = state.project(project)
    target = state.get(proj, kind, iid)
    todos = todos_of(state)
    with state.lock:
        todo: Json = {
            "id": len(todos) + 1,
            "project": {key: proj.data.get(key) for key in ("id", "name", "name_with_namespace", "path",
                                                             "path_with_namespace")},
            "author": author or target.get("author"),
            "action_name": action,
            "target_type": _TARGET_TYPES[kind],
            "target": target,
            "target_url": target.get("web_url"),
            "body": body if body is not None else target.get("title"),
            "state": "done" if done else "pending",
            "created_at": iso_ms(state.clock.now()),
            "updated_at": iso_ms(state.clock.now()),
        }
        todos.append(todo)
        return todo


def list_todos(state: "SandboxState", which: str) -> list[Json]:
    """`GET /todos?state=`: pending (GitLab's default), done, or all; newest first."""
    with state.lock:
        chosen = [t for t in todos_of(state) if which == "all" or t["state"] == which]
    return sorted(chosen, key=lambda t: t["id"], reverse=True)
