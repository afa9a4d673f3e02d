"""Groups and subgroups of the in-memory GitLab, and the project changes a group sees: a project
added, transferred to another group, archived or deleted.

What GitLab does and the sandbox copies (docs/gitlab-api-groups.md in the product repository):

- `GET /groups/:id` takes a numeric id or the URL-encoded full path, found in any case. Unlike
  `GET /projects/:id`, a group's old path after a rename answers 404: GitLab's API looks groups up
  with `find_by_full_path` *without* following redirect routes. The projects under a renamed group
  do keep answering at their old paths (a project's redirect routes are followed).
- `GET /groups/:id/projects`: the group's own projects, and with `include_subgroups=true` those of
  every descendant group; `archived=true|false` filters (absent: both); ordered by `order_by`
  (`created_at` by default, `id`, `name`, `path`, `updated_at`, `last_activity_at`) and `sort`
  (`desc` by default), offset-paginated like every list (`Link`, `x-next-page`, ...).
  `with_shared` is accepted; the sandbox has no shared projects, so it changes nothing.
- `GET /groups/:id/subgroups` (direct children) and `GET /groups/:id/descendant_groups` (all).
- A project's `namespace` names its group: `id`, `name`, `path`, `kind` "group", `full_path`,
  `parent_id`.

Groups come from the dataset's optional `groups.json` (GET /groups/:id objects) and from the
`namespace` of every project: a namespace or parent path no group object names becomes a group with
the next free id, so a dataset written before groups existed serves its groups too.
"""

import copy
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from .clock import iso_ms
from .dataset import Dataset, Json
from .errors import BadRequest, NotFound
from .projects import Project

if TYPE_CHECKING:
    from .state import SandboxState

HOST = "https://gitlab.example.com"
GROUP_ORDER = ("id", "name", "path", "created_at", "updated_at", "last_activity_at")
GROUP_CREATED = "2019-01-07T09:00:00.000Z"


def group_object(group_id: int, full_path: str, parent_id: int | None, name: str | None = None) -> Json:
    """A GET /groups/:id object for a group the dataset does not describe itself."""
    path = full_path.rsplit("/", 1)[-1]
    shown = name or path.replace("-", " ").title()
    return {
        "id": group_id, "web_url": f"{HOST}/groups/{full_path}", "name": shown, "path": path,
        "description": "", "visibility": "private", "full_name": shown, "full_path": full_path,
        "parent_id": parent_id, "created_at": GROUP_CREATED, "avatar_url": None,
    }


def namespace_of(group: Json) -> Json:
    """The `namespace` object a project in `group` carries."""
    return {"id": group["id"], "name": group["name"], "path": group["path"], "kind": "group",
            "full_path": group["full_path"], "parent_id": group.get("parent_id"), "avatar_url": None,
            "web_url": group.get("web_url") or f"{HOST}/groups/{group['full_path']}"}


class GroupsMixin:
    """The groups half of `SandboxState` (which holds `lock`, `projects`, `_by_id`, `_by_path`)."""

    lock: Any
    projects: list[Project]
    _by_id: dict[int, Project]
    _by_path: dict[str, Project]
    clock: Any

    def _load_groups(self, dataset: Dataset) -> None:
        self.groups: dict[int, Json] = {}
        self._group_paths: dict[str, int] = {}
        for raw in dataset.groups:
            self._put_group(dict(raw))
        for project in dataset.projects:
            ns = project.get("namespace")
            if isinstance(ns, dict) and ns.get("kind", "group") == "group" and ns.get("full_path"):
                known = self._group_paths.get(str(ns["full_path"]).lower())
                if known is None and isinstance(ns.get("id"), int) and ns["id"] not in self.groups:
                    self._ensure_parents(str(ns["full_path"]))
                    parent = self._group_paths.get(str(ns["full_path"]).rpartition("/")[0].lower())
                    self._put_group(group_object(ns["id"], str(ns["full_path"]), parent, ns.get("name")))
                else:
                    self._ensure_group(str(ns["full_path"]))

    # -- lookups -------------------------------------------------------------------------------

    def _put_group(self, group: Json) -> None:
        self.groups[int(group["id"])] = group
        self._group_paths[str(group["full_path"]).lower()] = int(group["id"])

    def _ensure_parents(self, full_path: str) -> None:
        parent = full_path.rpartition("/")[0]
        if parent:
            self._ensure_group(parent)

    def _ensure_group(self, full_path: str) -> Json:
        found = self._group_paths.get(full_path.lower())
        if found is not None:
            return self.groups[found]
        self._ensure_parents(full_path)
        parent = self._group_paths.get(full_path.rpartition("/")[0].lower())
        group = group_object(max(self.groups, default=0) + 1, full_path, parent)
        self._put_group(group)
        return group

    def group(self, ref: "int | str") -> Json:
        """A group by id or full path (any case); its old paths are not followed, as in GitLab."""
        with self.lock:
            if isinstance(ref, int) or str(ref).isdigit():
                found = self.groups.get(int(ref))
            else:
                gid = self._group_paths.get(str(ref).lower())
                found = self.groups.get(gid) if gid is not None else None
        if found is None:
            raise NotFound("404 Group Not Found")
        return found

    def descendant_groups(self, ref: "int | str") -> list[Json]:
        top = self.group(ref)
        prefix = str(top["full_path"]).lower() + "/"
        with self.lock:
            found = [g for g in self.groups.values() if str(g["full_path"]).lower().startswith(prefix)]
        return sorted(found, key=lambda g: str(g["full_path"]).lower())

    def subgroups(self, ref: "int | str") -> list[Json]:
        top = self.group(ref)
        return [g for g in self.descendant_groups(ref) if g.get("parent_id") == top["id"]]

    def group_projects(self, ref: "int | str", *, include_subgroups: bool = False, archived: bool | None = None,
                       order_by: str = "created_at", sort: str = "desc") -> list[Json]:
        top = self.group(ref)
        if order_by not in GROUP_ORDER:
            raise BadRequest("order_by does not have a valid value", {"error": "order_by does not have a valid value"})
        ids = {top["id"]} | ({g["id"] for g in self.descendant_groups(ref)} if include_subgroups else set())
        with self.lock:
            found = [p.data for p in self.projects
                     if isinstance(p.data.get("namespace"), dict) and p.data["namespace"].get("id") in ids]
        if archived is not None:
            found = [p for p in found if bool(p.get("archived")) == archived]
        key = "last_activity_at" if order_by == "updated_at" else order_by
        found.sort(key=lambda p: p["id"], reverse=True)  # ties id-descending, as the other lists
        found.sort(key=lambda p: (p.get(key) is not None, p.get(key) or ""), reverse=sort != "asc")
        return found

    # -- mutations (tests and the control routes) ------------------------------------------------

    def create_group(self, full_path: str, name: str | None = None) -> Json:
        full_path = full_path.strip("/")
        with self.lock:
            group = self._ensure_group(full_path)
            if name:
                group = {**group, "name": name, "full_name": name}
                self._put_group(group)
            return group

    def add_project(self, namespace: str, path: str, name: str | None = None) -> Json:
        """A new, empty project in the group `namespace` (created with its parents if missing)."""
        with self.lock:
            group = self._ensure_group(namespace.strip("/"))
            full = f"{group['full_path']}/{path}"
            if full.lower() in self._by_path and self._by_path[full.lower()].data.get("path_with_namespace", "").lower() \
                    == full.lower():
                raise BadRequest("path has already been taken", {"message": {"path": ["has already been taken"]}})
            pid = max(self._by_id, default=100) + 1
            now = iso_ms(self.clock.now())
            shown = name or path.replace("-", " ").title()
            data: Json = {
                "id": pid, "description": "", "name": shown, "name_with_namespace": f"{group['name']} / {shown}",
                "path": path, "path_with_namespace": full, "created_at": now, "default_branch": "main",
                "tag_list": [], "topics": [], "ssh_url_to_repo": f"git@gitlab.example.com:{full}.git",
                "http_url_to_repo": f"{HOST}/{full}.git", "web_url": f"{HOST}/{full}", "readme_url": None,
                "avatar_url": None, "forks_count": 0, "star_count": 0, "last_activity_at": now,
                "namespace": namespace_of(group), "visibility": "private", "issues_enabled": True,
                "merge_requests_enabled": True, "archived": False, "owner": None, "open_issues_count": 0,
            }
            project = Project(data=data)
            self.projects.append(project)
            self._by_id[pid] = project
            self._by_path[full.lower()] = project
            return data

    def transfer_project(self, ref: "int | str | Project", namespace: str) -> Json:
        """Move a project to another group: its old path keeps answering (GitLab's redirect)."""
        state: SandboxState = self  # type: ignore[assignment]
        proj = state.project(ref)
        with self.lock:
            group = self._ensure_group(namespace.strip("/"))
            data = state.rename_project(proj, f"{group['full_path']}/{proj.data.get('path')}")
            proj.data = {**data, "namespace": namespace_of(group),
                         "name_with_namespace": f"{group['name']} / {data.get('name')}"}
            return proj.data

    def archive_project(self, ref: "int | str | Project", archived: bool = True) -> Json:
        state: SandboxState = self  # type: ignore[assignment]
        proj = state.project(ref)
        with self.lock:
            proj.data = {**proj.data, "archived": bool(archived)}
            return proj.data

    def delete_project(self, ref: "int | str | Project") -> None:
        """Remove a project and every path that led to it (GitLab: 404 from then on)."""
        state: SandboxState = self  # type: ignore[assignment]
        proj = state.project(ref)
        with self.lock:
            self.projects = [p for p in self.projects if p is not proj]
            self._by_id = {k: p for k, p in self._by_id.items() if p is not proj}
            self._by_path = {k: p for k, p in self._by_path.items() if p is not proj}

    def rename_group(self, ref: "int | str", path: str) -> Json:
        """Give a group a new last path segment. Its subgroups and projects move with it; the
        projects' old paths keep answering (redirect routes), the group's old path does not."""
        state: SandboxState = self  # type: ignore[assignment]
        group = self.group(ref)
        with self.lock:
            old = str(group["full_path"])
            parent = old.rpartition("/")[0]
            new = f"{parent}/{path}" if parent else path
            if new.lower() in self._group_paths:
                raise BadRequest("path has already been taken", {"message": {"path": ["has already been taken"]}})
            moved = [g for g in self.groups.values()
                     if str(g["full_path"]).lower() == old.lower() or str(g["full_path"]).lower().startswith(old.lower() + "/")]
            for g in moved:
                del self._group_paths[str(g["full_path"]).lower()]
                full = new + str(g["full_path"])[len(old):]
                renamed = {**g, "full_path": full, "web_url": f"{HOST}/groups/{full}"}
                if g["id"] == group["id"]:
                    renamed["path"] = path
                self._put_group(renamed)
            for proj in list(self.projects):
                ns = proj.data.get("namespace")
                if isinstance(ns, dict) and ns.get("id") in {g["id"] for g in moved}:
                    target = self.groups[int(ns["id"])]
                    state.rename_project(proj, f"{target['full_path']}/{proj.data.get('path')}")
                    proj.data = {**proj.data, "namespace": namespace_of(target)}
            return self.groups[int(group["id"])]

    def group_snapshot(self) -> list[Json]:
        with self.lock:
            return [copy.deepcopy(g) for g in sorted(self.groups.values(), key=lambda g: g["id"])]


# -- HTTP ------------------------------------------------------------------------------------------


def query_bool(value: Any, name: str) -> bool | None:
    if value in (None, ""):
        return None
    text = str(value).lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise BadRequest(f"{name} is invalid", {"error": f"{name} is invalid"})


def control(state: "SandboxState", method: str, route: str, body: Json) -> tuple[int, Any]:
    """`/-/sandbox/groups...` and `/-/sandbox/projects...`: change what the groups hold.

    POST groups {"full_path", "name"?}            create a group (and its missing parents)
    POST groups/:id/rename {"path"}               rename a group's last segment (its projects move)
    POST projects {"namespace", "path", "name"?}  add an empty project to a group
    POST projects/:id/transfer {"namespace"}      move a project to another group
    POST projects/:id/archive {"archived"?}       archive (or, with false, unarchive) a project
    DELETE projects/:id                           delete a project
    (`:id` is an id or a URL-encoded path)"""
    seg = [unquote(s) for s in route.split("/")]
    try:
        if seg == ["groups"] and method == "POST":
            return 201, state.create_group(_text(body, "full_path"), body.get("name"))
        if len(seg) == 3 and seg[0] == "groups" and seg[2] == "rename" and method == "POST":
            return 200, state.rename_group(seg[1], _text(body, "path"))
        if seg == ["projects"] and method == "POST":
            return 201, state.add_project(_text(body, "namespace"), _text(body, "path"), body.get("name"))
        if len(seg) == 2 and seg[0] == "projects" and method == "DELETE":
            state.delete_project(seg[1])
            return 200, {"deleted": seg[1]}
        if len(seg) == 3 and seg[0] == "projects" and method == "POST":
            if seg[2] == "transfer":
                return 200, state.transfer_project(seg[1], _text(body, "namespace"))
            if seg[2] == "archive":
                return 200, state.archive_project(seg[1], body.get("archived", True) is not False)
    except (NotFound, BadRequest) as exc:
        return exc.status, exc.body
    return 404, {"error": "404 Not Found"}


def _text(body: Json, name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value.strip("/ "):
        raise BadRequest(f"{name} is required", {"message": f"{name} is required"})
    return value


def project_subset(projects: Iterable[Json], simple: bool) -> list[Json]:
    """`simple=true` answers with the basic fields only, as GitLab's BasicProjectDetails."""
    if not simple:
        return list(projects)
    keep = ("id", "description", "name", "name_with_namespace", "path", "path_with_namespace", "created_at",
            "default_branch", "tag_list", "topics", "ssh_url_to_repo", "http_url_to_repo", "web_url", "readme_url",
            "forks_count", "avatar_url", "star_count", "last_activity_at", "namespace")
    return [{k: p[k] for k in keep if k in p} for p in projects]
