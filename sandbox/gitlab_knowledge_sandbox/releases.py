"""Project releases of the in-memory GitLab: `GET /projects/:id/releases` and its mutations.

A release is keyed by its tag name within its project (GitLab's own key: `GET
/projects/:id/releases/:tag_name`); it has no numeric id and no `updated_at`, so a client cannot
list "what changed since". The list is ordered by `released_at` (GitLab's default) or
`created_at`, `desc` by default; ties go by tag name descending, so a client cannot rely on
insertion order. `releases_forbidden` holds the projects whose releases answer 403 (GitLab does
for a project whose repository and releases are not readable by the token's user).
"""

import hashlib
import threading
import zlib
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from .clock import SandboxClock, iso_ms, parse_iso, ts_key
from .dataset import DatasetError, Json
from .errors import BadRequest, Forbidden, NotFound, missing
from .projects import Project
from .shapes import author_of, project_web_url

ORDER_BY = ("released_at", "created_at")


def _checked_time(value: Any, name: str) -> str:
    try:
        return iso_ms(parse_iso(str(value)))
    except ValueError:
        raise BadRequest(f"{name} is invalid", {"error": f"{name} is invalid"}) from None


def _milestones(project: Json, titles: Any) -> list[Json]:
    """The milestone objects GitLab nests in a release, from the titles a caller names."""
    if titles is None:
        return []
    if isinstance(titles, str):
        titles = [t for t in titles.split(",") if t]
    out = []
    for title in titles:
        if isinstance(title, dict):  # a saved body's milestone object, kept as saved
            out.append(title)
            continue
        number = zlib.crc32(str(title).encode()) % 1000 + 1  # one title, one milestone
        web = project_web_url(project)
        out.append({"id": int(project["id"]) * 1000 + number, "iid": number, "project_id": project["id"],
                    "title": str(title), "description": "", "state": "closed",
                    "web_url": f"{web}/-/milestones/{number}", "issue_stats": {"total": 0, "closed": 0}})
    return out


def new_release(project: Json, user: Json, fields: Json, now: str) -> Json:
    """A release as `GET /projects/:id/releases` returns one (GitLab 16/17's entity)."""
    tag = str(fields["tag_name"])
    web = project_web_url(project)
    path = str(project.get("path_with_namespace") or project["id"])
    released_at = fields.get("released_at") or now
    tag_url = quote(tag, safe="")
    sha = hashlib.sha1(f"{project['id']}/{tag}".encode()).hexdigest()
    return {
        "name": fields.get("name") or tag,
        "tag_name": tag,
        "description": fields.get("description") or "",
        "created_at": now,
        "released_at": released_at,
        "upcoming_release": ts_key(released_at) > ts_key(now),
        "historical_release": ts_key(released_at) < ts_key(now),
        "author": author_of(user),
        "commit": {"id": sha, "short_id": sha[:8], "title": f"Release {tag}", "created_at": now,
                   "message": f"Release {tag}", "author_name": user.get("name"), "committed_date": now},
        "milestones": _milestones(project, fields.get("milestones")),
        "commit_path": f"/{path}/-/commit/{sha}",
        "tag_path": f"/{path}/-/tags/{tag_url}",
        "assets": {"count": 2, "sources": [
            {"format": fmt, "url": f"{web}/-/archive/{tag_url}/{project.get('path')}-{tag_url}.{fmt}"}
            for fmt in ("zip", "tar.gz")], "links": []},
        "evidences": [],
        "_links": {
            "closed_issues_url": f"{web}/-/issues?release_tag={tag_url}&scope=all&state=closed",
            "closed_merge_requests_url": f"{web}/-/merge_requests?release_tag={tag_url}&scope=all&state=closed",
            "edit_url": f"{web}/-/releases/{tag_url}/edit",
            "merged_merge_requests_url": f"{web}/-/merge_requests?release_tag={tag_url}&scope=all&state=merged",
            "opened_issues_url": f"{web}/-/issues?release_tag={tag_url}&scope=all&state=opened",
            "opened_merge_requests_url": f"{web}/-/merge_requests?release_tag={tag_url}&scope=all&state=opened",
            "self": f"{web}/-/releases/{tag_url}",
        },
    }


class ReleasesMixin:
    """Mixed into SandboxState: each project's releases by tag name."""

    lock: threading.RLock
    clock: SandboxClock
    user: Json
    _releases: dict[int, dict[str, Json]]
    releases_forbidden: set[int]

    if TYPE_CHECKING:

        def project(self, ref: "int | str | Project") -> Project: ...

    def _load_releases(self, releases: dict[int, list[Json]]) -> None:
        self._releases = {}
        self.releases_forbidden = set()
        for pid, rows in releases.items():
            by_tag: dict[str, Json] = {}
            for line, release in enumerate(rows, 1):
                tag = release.get("tag_name")
                if not isinstance(tag, str) or not tag or not isinstance(release.get("created_at"), str):
                    raise DatasetError(f"project {pid} releases.jsonl line {line}: a release needs a tag_name "
                                     "and created_at")
                if tag in by_tag:
                    raise DatasetError(f"project {pid} releases.jsonl line {line}: repeats tag {tag}")
                by_tag[tag] = release
            self._releases[int(pid)] = by_tag

    def _project_releases(self, proj: Project) -> dict[str, Json]:
        pid = int(proj.data["id"])
        if pid in self.releases_forbidden:
            raise Forbidden("403 Forbidden")
        return self._releases.setdefault(pid, {})

    def releases(self, project: "int | str | Project", order_by: str = "released_at", sort: str = "desc") -> list[Json]:
        """Every release of the project in the requested order (pagination is the caller's)."""
        if order_by not in ORDER_BY:
            raise BadRequest("order_by does not have a valid value", {"error": "order_by does not have a valid value"})
        if sort not in ("asc", "desc"):
            raise BadRequest("sort does not have a valid value", {"error": "sort does not have a valid value"})
        proj = self.project(project)
        with self.lock:
            rows = list(self._project_releases(proj).values())
        rows.sort(key=lambda r: r["tag_name"], reverse=True)
        rows.sort(key=lambda r: ts_key(r.get(order_by) or r["created_at"]), reverse=sort == "desc")
        return rows

    def release(self, project: "int | str | Project", tag_name: str) -> Json:
        proj = self.project(project)
        with self.lock:
            found = self._project_releases(proj).get(tag_name)
        if found is None:
            raise NotFound("404 Not Found")
        return found

    def create_release(self, project: "int | str | Project", tag_name: str, **params: Any) -> Json:
        """A new release (`POST /projects/:id/releases`); `released_at` may be past or future."""
        if not str(tag_name or "").strip():
            raise missing("tag_name")
        proj = self.project(project)
        fields: Json = {**params, "tag_name": str(tag_name)}
        if fields.get("released_at"):
            fields["released_at"] = _checked_time(fields["released_at"], "released_at")
        with self.lock:
            releases = self._project_releases(proj)
            if tag_name in releases:
                raise BadRequest("Release already exists", {"message": "Release already exists"})
            release = new_release(proj.data, self.user, fields, iso_ms(self.clock.now()))
            releases[str(tag_name)] = release
            return release

    def update_release(self, project: "int | str | Project", tag_name: str, **params: Any) -> Json:
        """Edit a release's name, notes, date or milestones (`PUT .../releases/:tag_name`): a new
        dict is swapped in. GitLab keeps no `updated_at` on it."""
        proj = self.project(project)
        with self.lock:
            old = self.release(proj, tag_name)
            new = dict(old)
            for name in ("name", "description"):
                if name in params:
                    new[name] = params[name]
            if params.get("released_at"):
                new["released_at"] = _checked_time(params["released_at"], "released_at")
                new["upcoming_release"] = ts_key(new["released_at"]) > ts_key(iso_ms(self.clock.now()))
            if "milestones" in params:
                new["milestones"] = _milestones(proj.data, params["milestones"])
            self._project_releases(proj)[tag_name] = new
            return new

    def delete_release(self, project: "int | str | Project", tag_name: str) -> Json:
        """Remove a release (the tag stays, as in GitLab); returns what it was."""
        proj = self.project(project)
        with self.lock:
            old = self.release(proj, tag_name)
            del self._project_releases(proj)[tag_name]
            return old

    def release_snapshot(self, pid: int) -> list[Json]:
        with self.lock:
            return sorted(self._releases.get(int(pid), {}).values(), key=lambda r: r["created_at"])


if TYPE_CHECKING:
    from .api import Api, Route


def release_route(api: "Api", pid: str, rest: list[str]) -> "Route | None":
    """`/projects/:id/releases` (list, create) and `/projects/:id/releases/:tag_name` (get, edit,
    delete); a tag holding `/` arrives as one encoded segment, decoded by the router."""
    from .api import ApiResponse, Route  # api.py routes here: imported when a request comes

    state = api.state
    if not rest:
        return Route("releases", {
            "GET": lambda r: api._page(r, state.releases(pid, str(r.param("order_by") or "released_at"),
                                                         str(r.param("sort") or "desc"))),
            "POST": lambda r: ApiResponse(201, state.create_release(
                pid, str(r.param("tag_name") or ""),
                **{k: v for k, v in r.params().items() if k != "tag_name"})),
        })
    if len(rest) != 1:
        return None
    tag = rest[0]
    return Route("release", {
        "GET": lambda r: ApiResponse(200, state.release(pid, tag)),
        "PUT": lambda r: ApiResponse(200, state.update_release(pid, tag, **r.params())),
        "DELETE": lambda r: ApiResponse(200, state.delete_release(pid, tag)),
    })
