"""Users, their tokens, project visibility and memberships, and GitLab's rules for what a token reads.

The tokens the sandbox is started with (`SandboxGitLab(token=...)`) belong to the dataset's user
and read as an administrator: everything, unfiltered, as the sync's token always has. Every other
token belongs to a user of the directory (the dataset's `users`, or `add_user`), and the API answers
it as GitLab answers that user (docs/gitlab-api-permissions.md in the product repository):

- a project is readable to an admin, a member (Guest or above), anyone when it is `public`, and any
  non-external user when it is `internal`; any other project is `404 Project Not Found`;
- a confidential issue is readable to its author, its assignees, members with Planner or above,
  and admins; to anyone else it is `404 Issue Not Found` and absent from lists;
- internal notes (`internal` or the older `confidential` flag) are shown to members with Planner
  or above and admins only;
- a private project's merge requests are readable to members with Planner or above and admins
  only (a Guest reads them in public and internal projects, unless external): to anyone else the
  project's MR list and each MR (its diffs, changes, ...) are `403 Forbidden`, its notes and
  threads `404`, and a system note elsewhere that references one ("mentioned in merge request
  !12") is left out of notes and threads, as GitLab leaves out a system note whose references the
  reader cannot all see;
- `/projects?membership=true&min_access_level=N` lists the projects the user is a member of at N
  or above; `/projects/:id` carries the user's own `permissions`.
"""

import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from .dataset import Json
from .errors import BadRequest, Forbidden, NotFound
from .shapes import author_of

if TYPE_CHECKING:
    from .state import SandboxState

API_PREFIX = "/api/v4"
GUEST, PLANNER, REPORTER, DEVELOPER, MAINTAINER, OWNER = 10, 15, 20, 30, 40, 50
ACCESS_LEVELS = (5, GUEST, PLANNER, REPORTER, DEVELOPER, MAINTAINER, OWNER)
SEES_CONFIDENTIAL = PLANNER  # confidential issues and internal notes
VISIBILITIES = ("private", "internal", "public")


@dataclass(frozen=True)
class Principal:
    """Who a token is: the /user body, and whether GitLab's rules apply to it at all."""

    user: Json
    admin: bool = False
    external: bool = False
    sync: bool = False  # one of the sandbox's own tokens: its levels are the projects' `permissions`

    @property
    def id(self) -> int:
        return int(self.user["id"])


class Directory:
    """The sandbox's users, tokens and memberships (project id → user id → access level)."""

    def __init__(self, users: list[Json] | None = None, memberships: list[Json] | None = None) -> None:
        self.lock = threading.RLock()
        self.users: dict[int, Json] = {}
        self.tokens: dict[str, int] = {}
        self.trusted: dict[str, Json] = {}  # the sandbox's own tokens → the dataset's user (admin)
        self.members: dict[int, dict[int, int]] = {}
        for raw in users or ():
            user = {k: v for k, v in raw.items() if k != "tokens"}
            self.users[int(user["id"])] = user
            for token in raw.get("tokens") or ():
                self.tokens[str(token)] = int(user["id"])
        for entry in memberships or ():
            self.members.setdefault(int(entry["project_id"]), {})[int(entry["user_id"])] = int(entry["access_level"])

    # -- mutations (tests) --------------------------------------------------------------------

    def trust(self, tokens: "frozenset[str]", user: Json) -> None:
        with self.lock:
            self.trusted = {token: user for token in tokens}

    def add_user(self, username: str, token: str | None = None, *, user_id: int | None = None, admin: bool = False,
                 external: bool = False, name: str | None = None) -> Json:
        with self.lock:
            uid = user_id if user_id is not None else max([1000, *self.users]) + 1
            user = {"id": uid, "username": username, "name": name or username, "state": "active",
                    "avatar_url": f"https://gitlab.example.com/uploads/{username}.png",
                    "web_url": f"https://gitlab.example.com/{username}", "external": external, "bot": False}
            if admin:
                user["is_admin"] = True
            self.users[uid] = user
            if token:
                self.tokens[token] = uid
            return user

    def add_token(self, user_id: int, token: str) -> None:
        with self.lock:
            self.tokens[token] = user_id

    def revoke(self, token: str) -> None:
        """The token stops working (GitLab answers it 401), as a revoked or expired PAT does."""
        with self.lock:
            self.tokens.pop(token, None)
            self.trusted.pop(token, None)

    def set_member(self, project_id: int, user_id: int, access_level: int | None) -> None:
        """Add, change (`access_level`) or remove (None) a user's membership of a project."""
        if access_level is not None and access_level not in ACCESS_LEVELS:
            raise ValueError(f"access level {access_level} is not one of GitLab's {ACCESS_LEVELS}")
        with self.lock:
            members = self.members.setdefault(int(project_id), {})
            if access_level is None:
                members.pop(int(user_id), None)
            else:
                members[int(user_id)] = access_level

    # -- who and what -------------------------------------------------------------------------

    def principal(self, token: str | None) -> Principal | None:
        """The token's owner, or None (GitLab: 401)."""
        if not token:
            return None
        with self.lock:
            if token in self.trusted:
                return Principal(self.trusted[token], admin=True, sync=True)
            uid = self.tokens.get(token)
            user = self.users.get(uid) if uid is not None else None
        if user is None:
            return None
        return Principal(user, admin=bool(user.get("is_admin")), external=bool(user.get("external")))

    def level(self, who: Principal, project_id: int) -> int:
        with self.lock:
            return self.members.get(int(project_id), {}).get(who.id, 0)

    def reads_project(self, who: Principal, project: Json) -> bool:
        if who.admin or self.level(who, int(project["id"])) >= GUEST:
            return True
        visibility = project.get("visibility") or "private"
        return visibility == "public" or (visibility == "internal" and not who.external)

    def reads_issue(self, who: Principal, project_id: int, issue: Json) -> bool:
        if not issue.get("confidential") or who.admin or self.level(who, project_id) >= SEES_CONFIDENTIAL:
            return True
        author = issue.get("author") or {}
        assignees = [a.get("id") for a in issue.get("assignees") or () if isinstance(a, dict)]
        if isinstance(issue.get("assignee"), dict):
            assignees.append(issue["assignee"].get("id"))
        return author.get("id") == who.id or who.id in assignees

    def reads_merge_requests(self, who: Principal, project: Json) -> bool:
        """GitLab's `read_merge_request` on a project the user reads."""
        level = self.level(who, int(project["id"]))
        if who.admin or level >= PLANNER:
            return True
        visibility = project.get("visibility") or "private"
        return visibility == "public" or (visibility == "internal" and not who.external)

    def reads_internal(self, who: Principal, project_id: int) -> bool:
        return who.admin or self.level(who, project_id) >= SEES_CONFIDENTIAL

    def permissions(self, who: Principal, project_id: int) -> Json:
        level = self.level(who, project_id)
        return {"project_access": {"access_level": level, "notification_level": 3} if level else None,
                "group_access": None}

    def member(self, project_id: int, user_id: int) -> Json | None:
        with self.lock:
            level = self.members.get(int(project_id), {}).get(int(user_id))
            user = self.users.get(int(user_id))
        if level is None or user is None:
            return None
        return {**author_of(user), "access_level": level, "created_at": "2024-01-01T00:00:00.000Z",
                "expires_at": None, "membership_state": "active"}

    def project_members(self, project_id: int) -> list[Json]:
        with self.lock:
            ids = sorted(self.members.get(int(project_id), {}))
        return [m for m in (self.member(project_id, uid) for uid in ids) if m is not None]

    def export(self) -> tuple[list[Json], list[Json]]:
        """(users with their tokens, memberships) in the dataset's shapes."""
        with self.lock:
            users = [{**user, "tokens": sorted(t for t, uid in self.tokens.items() if uid == user_id)}
                     for user_id, user in sorted(self.users.items())]
            members = [{"project_id": pid, "user_id": uid, "access_level": level}
                       for pid, by_user in sorted(self.members.items()) for uid, level in sorted(by_user.items())]
        return users, members


# -- the API's per-token answers ----------------------------------------------------------------


def segments(path: str) -> list[str]:
    raw = path[len(API_PREFIX) + 1:].rstrip("/") if path.startswith(API_PREFIX + "/") else ""
    return [unquote(s) for s in raw.split("/")] if raw else []


def _limited(who: Principal | None) -> bool:
    return who is not None and not who.admin


def check_access(state: "SandboxState", who: Principal | None, path: str) -> None:
    """Refuse what the path addresses when `who` may not read it, as GitLab does: 404."""
    if not _limited(who):
        return
    assert who is not None
    seg = segments(path)
    if len(seg) < 2 or seg[0] != "projects":
        return
    project = state.project(seg[1])
    if not state.users.reads_project(who, project.data):
        raise NotFound("404 Project Not Found")
    if len(seg) >= 4 and seg[2] == "issues" and seg[3].isdigit():
        issue = state.get(project, "issues", int(seg[3]))
        if not state.users.reads_issue(who, int(project.data["id"]), issue):
            raise NotFound("404 Issue Not Found")
    if len(seg) >= 3 and seg[2] == "merge_requests" and not state.users.reads_merge_requests(who, project.data):
        if len(seg) >= 5 and seg[4] in ("notes", "discussions"):
            raise NotFound("404 Not found")  # the notes API finds the MR through a finder that skips it
        raise Forbidden("403 Forbidden")  # the list and each MR's endpoints `authorize!` read_merge_request


def screen_list(state: "SandboxState", who: Principal | None, path: str, query: dict[str, list[str]],
                items: list[Json]) -> list[Json]:
    """A list as `who` gets it, before it is paginated."""
    seg = segments(path)
    if seg == ["projects"]:
        return _projects(state, who, query, items)
    if not _limited(who):
        return items
    assert who is not None
    if seg == ["todos"]:
        return []  # the sandbox's To-Dos are the dataset user's
    if len(seg) < 3 or seg[0] != "projects":
        return items
    pid = int(state.project(seg[1]).data["id"])
    users = state.users
    if seg[-1] in ("notes", "discussions"):
        items = _without_hidden_mr_references(state, who, seg[1], items, threads=seg[-1] == "discussions")
    if len(seg) == 3 and seg[2] == "issues":
        return [i for i in items if users.reads_issue(who, pid, i)]
    if users.reads_internal(who, pid):
        return items
    if seg[-1] == "notes":
        return [n for n in items if not _internal(n)]
    if seg[-1] == "discussions":
        return [t for t in (_public_thread(t) for t in items) if t is not None]
    return items


def screen_one(state: "SandboxState", who: Principal | None, path: str, body: Any) -> Any:
    """A single object as `who` gets it (404 for an internal note they may not read)."""
    if not _limited(who) or not isinstance(body, dict):
        return body
    assert who is not None
    seg = segments(path)
    if len(seg) == 2 and seg[0] == "projects":
        return {**body, "permissions": state.users.permissions(who, int(body["id"]))}
    if len(seg) < 6 or seg[0] != "projects" or state.users.reads_internal(who, int(state.project(seg[1]).data["id"])):
        return body
    if seg[4] == "discussions" and len(seg) == 6:
        thread = _public_thread(body)
        if thread is None:
            raise NotFound("404 Discussion Not Found")
        return thread
    if seg[-2] == "notes" and _internal(body):
        raise NotFound("404 Note Not Found")
    return body


def _projects(state: "SandboxState", who: Principal | None, query: dict[str, list[str]],
              projects: list[Json]) -> list[Json]:
    membership = (query.get("membership") or ["false"])[-1].lower() in ("true", "1")
    raw_level = (query.get("min_access_level") or [""])[-1]
    try:
        min_level = int(raw_level) if raw_level else None
    except ValueError:
        raise BadRequest("min_access_level is invalid", {"error": "min_access_level is invalid"}) from None
    if min_level is not None and min_level not in ACCESS_LEVELS:
        raise BadRequest("min_access_level does not have a valid value",
                         {"error": "min_access_level does not have a valid value"})
    if who is None or (who.admin and not membership and min_level is None):
        return projects
    users = state.users
    out = []
    for project in projects:
        level = _saved_level(project) if who.sync else users.level(who, int(project["id"]))
        if (membership or min_level is not None) and level < max(GUEST, min_level or 0):
            continue
        if not users.reads_project(who, project):
            continue
        out.append(project if who.admin else {**project, "permissions": users.permissions(who, int(project["id"]))})
    return out


def _saved_level(project: Json) -> int:
    """The dataset user's level in a project: what the saved `permissions` say."""
    permissions = project.get("permissions") or {}
    levels = [int(a.get("access_level") or 0) for a in (permissions.get("project_access"),
                                                          permissions.get("group_access")) if isinstance(a, dict)]
    return max(levels, default=0)


# A reference to a merge request in a system note: `!12`, `group/project!12`.
_MR_REFERENCE = re.compile(r"(?<![\w!])((?:[\w.-]+/)+[\w.-]+)?!(\d+)\b")


def _names_hidden_mr(state: "SandboxState", who: Principal, here: str, note: Json) -> bool:
    if not note.get("system"):
        return False
    for path, _iid in _MR_REFERENCE.findall(str(note.get("body") or "")):
        try:
            project = state.project(path or here)
        except NotFound:
            continue  # a project this GitLab does not hold
        if not state.users.reads_merge_requests(who, project.data):
            return True
    return False


def _without_hidden_mr_references(state: "SandboxState", who: Principal, here: str, items: list[Json],
                                  threads: bool) -> list[Json]:
    """Notes (or threads' notes) less the system notes naming a merge request `who` may not read."""
    if not threads:
        return [n for n in items if not _names_hidden_mr(state, who, here, n)]
    out = []
    for thread in items:
        notes = [n for n in thread.get("notes") or () if not _names_hidden_mr(state, who, here, n)]
        if notes or not thread.get("notes"):
            out.append(thread if len(notes) == len(thread.get("notes") or ()) else {**thread, "notes": notes})
    return out


def _internal(note: Json) -> bool:
    return bool(note.get("internal") or note.get("confidential"))


def _public_thread(thread: Json) -> Json | None:
    notes = [n for n in thread.get("notes") or () if not _internal(n)]
    if not notes:
        return None
    return thread if len(notes) == len(thread.get("notes") or ()) else {**thread, "notes": notes}


def set_visibility(state: "SandboxState", project: Any, visibility: str) -> Json:
    """Make a project private, internal or public (a new dict swapped in, as every change is)."""
    if visibility not in VISIBILITIES:
        raise ValueError(f"visibility must be one of {VISIBILITIES}, got {visibility!r}")
    proj = state.project(project)
    with state.lock:
        proj.data = {**proj.data, "visibility": visibility}
        return proj.data


def handle_users_control(state: "SandboxState", body: Json) -> tuple[int, Any]:
    """`POST /-/sandbox/users`, one change per request, for tests driving a sandbox in another
    process: {"add": {"username", "token", "id"?, "admin"?, "external"?}}, {"revoke": token},
    {"member": {"project_id", "user_id", "access_level" (null removes)}},
    {"visibility": {"project_id", "visibility"}}."""
    users = state.users
    try:
        if isinstance(body.get("add"), dict):
            add = body["add"]
            return 200, users.add_user(str(add["username"]), add.get("token"), user_id=add.get("id"),
                                       admin=bool(add.get("admin")), external=bool(add.get("external")))
        if isinstance(body.get("revoke"), str):
            users.revoke(body["revoke"])
            return 200, {"revoked": True}
        if isinstance(body.get("member"), dict):
            m = body["member"]
            users.set_member(int(m["project_id"]), int(m["user_id"]), m.get("access_level"))
            return 200, {"member": users.member(int(m["project_id"]), int(m["user_id"]))}
        if isinstance(body.get("visibility"), dict):
            v = body["visibility"]
            return 200, {"visibility": set_visibility(state, int(v["project_id"]), str(v["visibility"]))["visibility"]}
    except (KeyError, TypeError, ValueError, NotFound) as exc:
        return 400, {"message": f"bad users change: {exc}"}
    return 400, {"message": "send one of add, revoke, member, visibility"}
