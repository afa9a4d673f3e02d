"""Routing and handlers for `/api/v4`, independent of the HTTP plumbing in server.py."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from .clock import parse_iso, ts_key
from .dataset import Json
from .diffs import NO_ROUTE_BODY
from .errors import BadRequest, SandboxError
from .groups import project_subset, query_bool
from .pagination import DEFAULT_PER_PAGE, page_params, paginate
from .projects import KINDS
from .releases import release_route
from .state import ListFilters, SandboxState
from .todos import list_todos
from .users import Principal, check_access, screen_list, screen_one
from .wikis import wiki_route

API_PREFIX = "/api/v4"
MUTATING = ("POST", "PUT", "DELETE", "PATCH")
SINGULAR = {"issues": "issue", "merge_requests": "merge_request"}


@dataclass
class ApiRequest:
    method: str
    path: str  # without the query string, still percent-encoded
    query: dict[str, list[str]]
    query_pairs: list[tuple[str, str]]
    body: dict[str, Any]
    base_url: str  # scheme://host[:port] as the client addressed us, for Link headers
    viewer: Principal | None = None  # whose token asks (users.py: what GitLab shows them)

    def param(self, name: str, default: Any = None) -> Any:
        """Body first, then the query string (GitLab accepts attributes in either)."""
        if name in self.body:
            return self.body[name]
        values = self.query.get(name)
        return values[-1] if values else default

    def params(self) -> dict[str, Any]:
        merged: dict[str, Any] = {k: v[-1] for k, v in self.query.items() if v}
        merged.update(self.body)
        return merged


@dataclass
class ApiResponse:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[ApiRequest], ApiResponse]


@dataclass
class Route:
    name: str  # the stats bucket for GETs; mutations are counted as "mutation"
    handlers: dict[str, Handler]

    def stats_name(self, method: str) -> str:
        return "mutation" if method in MUTATING else self.name


class Api:
    def __init__(self, state: SandboxState) -> None:
        self.state = state

    # -- routing -----------------------------------------------------------------------------

    def resolve(self, path: str) -> Route | None:
        """The route for an `/api/v4/...` path (percent-encoded), or None."""
        if not path.startswith(API_PREFIX + "/"):
            return None
        raw = path[len(API_PREFIX) + 1 :].rstrip("/")
        # Split before decoding so an encoded `group%2Fproject` stays one segment.
        seg = [unquote(s) for s in raw.split("/")] if raw else []
        n = len(seg)
        if seg == ["user"]:
            return Route("user", {"GET": self._user})
        if seg == ["todos"]:
            return Route("todos", {"GET": lambda r: self._page(r, list_todos(self.state, str(r.param("state") or "pending")))})
        if seg and seg[0] == "groups" and n >= 2:
            return self._group_route(seg[1], seg[2:])
        if not seg or seg[0] != "projects":
            return None
        if n == 1:
            return Route("projects", {"GET": self._projects})
        pid = seg[1]
        if n == 2:
            return Route("project", {"GET": lambda r: ApiResponse(200, self.state.project(pid).data)})
        kind = seg[2]
        if kind == "members" and n in (4, 5) and seg[3] == "all":
            return self._members_route(pid, seg[4] if n == 5 else None)
        if kind == "releases":
            return release_route(self, pid, seg[3:])
        if kind == "wikis":
            return wiki_route(self.state, seg[3:], pid)
        if kind not in KINDS:
            return None
        one = SINGULAR[kind]
        if n == 3:
            return Route(kind, {"GET": lambda r: self._list(r, pid, kind), "POST": lambda r: self._create(r, pid, kind)})
        if not seg[3].isdigit():
            return None
        iid = int(seg[3])
        if n == 4:
            return Route(one, {
                "GET": lambda r: ApiResponse(200, self.state.get(pid, kind, iid)),
                "PUT": lambda r: ApiResponse(200, self.state.update(pid, kind, iid, r.params())),
                "DELETE": lambda r: self._deleted(self.state.delete(pid, kind, iid)),
            })
        sub = seg[4]
        if sub == "discussions":
            return self._discussion_route(seg[5:], pid, kind, iid)
        if sub == "notes":
            return self._note_route(seg[5:], pid, kind, iid)
        if kind == "merge_requests" and n == 5 and sub in ("diffs", "changes"):
            return self._diff_route(sub, pid, iid)
        return None

    def _discussion_route(self, rest: list[str], pid: str, kind: str, iid: int) -> Route | None:
        one = SINGULAR[kind]
        if not rest:
            return Route(f"{one}_discussions", {
                "GET": lambda r: self._page(r, self.state.discussions(pid, kind, iid)),
                "POST": lambda r: ApiResponse(201, self.state.create_discussion(
                    pid, kind, iid, r.param("body"), _position(r.param("position")), r.param("internal"))),
            })
        did = rest[0]
        if len(rest) == 1:
            return Route(f"{one}_discussion", {"GET": lambda r: ApiResponse(200, self.state.discussion(pid, kind, iid, did))})
        if rest[1] != "notes":
            return None
        if len(rest) == 2:
            return Route(f"{one}_discussion_notes", {
                "POST": lambda r: ApiResponse(201, self.state.reply(pid, kind, iid, did, r.param("body"), r.param("internal"))),
            })
        if len(rest) == 3 and rest[2].isdigit():
            return self._single_note(f"{one}_discussion_note", pid, kind, iid, int(rest[2]))
        return None

    def _note_route(self, rest: list[str], pid: str, kind: str, iid: int) -> Route | None:
        one = SINGULAR[kind]
        if not rest:
            return Route(f"{one}_notes", {
                "GET": lambda r: self._page(r, self.state.notes(
                    pid, kind, iid, str(r.param("order_by", "created_at")), str(r.param("sort", "desc")))),
                "POST": lambda r: ApiResponse(201, self.state.add_note(pid, kind, iid, r.param("body"), r.param("internal"))),
            })
        if len(rest) == 1 and rest[0].isdigit():
            return self._single_note(f"{one}_note", pid, kind, iid, int(rest[0]))
        return None

    def _members_route(self, pid: str, user_id: str | None) -> Route | None:
        users = self.state.users
        if user_id is None:
            return Route("project_members", {"GET": lambda r: self._page(r, users.project_members(
                int(self.state.project(pid).data["id"])))})
        if not user_id.isdigit():
            return None

        def one(r: ApiRequest) -> ApiResponse:
            found = users.member(int(self.state.project(pid).data["id"]), int(user_id))
            return ApiResponse(200, found) if found is not None else ApiResponse(404, {"message": "404 Not found"})

        return Route("project_member", {"GET": one})

    def _diff_route(self, sub: str, pid: str, iid: int) -> Route:
        if sub == "changes":
            return Route("merge_request_changes", {"GET": lambda r: ApiResponse(200, self.state.changes(pid, iid))})
        return Route("merge_request_diffs", {"GET": lambda r: self._diffs(r, pid, iid)})

    def _diffs(self, request: ApiRequest, pid: str, iid: int) -> ApiResponse:
        # Decided per request, so a test can flip the switch on a running sandbox. Still counted
        # as merge_request_diffs in the stats, so tests can see how often a client tried it.
        if self.state.legacy_diffs:
            return ApiResponse(404, dict(NO_ROUTE_BODY))
        return self._page(request, self.state.diffs(pid, iid))

    def _single_note(self, name: str, pid: str, kind: str, iid: int, note_id: int) -> Route:
        return Route(name, {
            "GET": lambda r: ApiResponse(200, self.state.note(pid, kind, iid, note_id)),
            "PUT": lambda r: ApiResponse(200, self.state.edit_note(pid, kind, iid, note_id, r.param("body"))),
            "DELETE": lambda r: self._deleted(self.state.delete_note(pid, kind, iid, note_id)),
        })

    def _group_route(self, gid: str, rest: list[str]) -> Route | None:
        """`/groups/:id`, `.../projects`, `.../subgroups`, `.../descendant_groups` (groups.py)."""
        if not rest:
            return Route("group", {"GET": lambda r: ApiResponse(200, self.state.group(gid))})
        if rest == ["projects"]:
            return Route("group_projects", {"GET": lambda r: self._page(r, project_subset(self.state.group_projects(
                gid, include_subgroups=bool(query_bool(r.param("include_subgroups"), "include_subgroups")),
                archived=query_bool(r.param("archived"), "archived"),
                order_by=str(r.param("order_by") or "created_at"), sort=str(r.param("sort") or "desc")),
                bool(query_bool(r.param("simple"), "simple"))))})
        if rest == ["subgroups"]:
            return Route("group_subgroups", {"GET": lambda r: self._page(r, self.state.subgroups(gid))})
        if rest == ["descendant_groups"]:
            return Route("group_descendants", {"GET": lambda r: self._page(r, self.state.descendant_groups(gid))})
        return None

    def handle(self, route: Route, request: ApiRequest) -> ApiResponse:
        handler = route.handlers.get(request.method)
        if handler is None:
            allow = ", ".join(sorted(route.handlers))
            return ApiResponse(405, {"error": "405 Not Allowed"}, {"Allow": allow})
        try:
            check_access(self.state, request.viewer, request.path)
            response = handler(request)
            if request.method == "GET" and response.status == 200:
                response.body = screen_one(self.state, request.viewer, request.path, response.body)
            return response
        except SandboxError as exc:
            return ApiResponse(exc.status, exc.body)

    # -- handlers ----------------------------------------------------------------------------

    def _user(self, request: ApiRequest) -> ApiResponse:
        return ApiResponse(200, request.viewer.user if request.viewer is not None else self.state.user)

    def _projects(self, request: ApiRequest) -> ApiResponse:
        projects = self.state.list_projects(str(request.param("order_by", "created_at")), str(request.param("sort", "desc")))
        return self._page(request, projects)

    def _list(self, request: ApiRequest, pid: str, kind: str) -> ApiResponse:
        filters = ListFilters(
            state=str(request.param("state") or "all"),
            order_by=str(request.param("order_by") or "created_at"),
            sort=str(request.param("sort") or "desc"),
            updated_after=_time_param(request, "updated_after"),
            updated_before=_time_param(request, "updated_before"),
            created_after=_time_param(request, "created_after"),
            created_before=_time_param(request, "created_before"),
            iids=_iids(request),
            # GitLab filters issues by it; the merge request list has no such parameter.
            confidential=query_bool(request.param("confidential"), "confidential") if kind == "issues" else None,
        )
        return self._page(request, self.state.list_items(pid, kind, filters))

    def _create(self, request: ApiRequest, pid: str, kind: str) -> ApiResponse:
        return ApiResponse(201, self.state.create(pid, kind, request.params()))

    def _page(self, request: ApiRequest, items: list[Json], default_per_page: int = DEFAULT_PER_PAGE) -> ApiResponse:
        page, per_page = page_params(request.query, default_per_page)
        items = screen_list(self.state, request.viewer, request.path, request.query, items)
        chunk, headers = paginate(items, page, per_page, request.base_url + request.path, request.query_pairs)
        return ApiResponse(200, chunk, headers)

    @staticmethod
    def _deleted(_: None) -> ApiResponse:
        return ApiResponse(204, None)


def _time_param(request: ApiRequest, name: str) -> int | None:
    value = request.param(name)
    if value in (None, ""):
        return None
    try:
        return ts_key(parse_iso(str(value)).isoformat())
    except ValueError:
        raise BadRequest(f"{name} is invalid", {"error": f"{name} is invalid"}) from None


def _iids(request: ApiRequest) -> frozenset[int] | None:
    values = request.query.get("iids[]") or request.query.get("iids")
    if not values:
        return None
    try:
        return frozenset(int(v) for raw in values for v in str(raw).split(",") if v)
    except ValueError:
        raise BadRequest("iids is invalid", {"error": "iids is invalid"}) from None


def _position(value: Any) -> Json | None:
    if value is None or value == "":
        return None
    if not isinstance(value, dict):
        raise BadRequest("position is invalid", {"error": "position is invalid"})
    return value
