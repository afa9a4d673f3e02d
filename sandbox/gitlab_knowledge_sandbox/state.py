"""The in-memory GitLab: projects, issues, merge requests and their discussions.

Published objects are never mutated in place: a change builds a new dict (and a new discussion
list) and swaps it in under the lock. Readers can therefore serialize what they got without holding
the lock, and a `Dataset` handed in by a caller is never modified.

Loading, lookups, lists and export are here; the project records are in `projects.py`, and the
mutations come from the mixins: issues and merge requests (`items.py`), discussions and notes
(`notes.py`), merge request diffs (`diffs.py`).
"""

import threading
from dataclasses import dataclass
from typing import Any

from .clock import SandboxClock, ts_key
from .dataset import ISSUE, MERGE_REQUEST, Dataset, Json, gc_paused
from .diffs import DiffsMixin, diff_entries, load_diffs
from .errors import BadRequest, NotFound
from .groups import GroupsMixin
from .itemcheck import check_item, id_key, source_name
from .items import ItemsMixin
from .notes import NotesMixin, user_note_count
from .projects import Project
from .releases import ReleasesMixin
from .users import Directory
from .wikis import Wikis, WikisMixin

NOT_FOUND_NAME = {"issues": "Issue", "merge_requests": "Merge Request"}
STATES = {"issues": ("opened", "closed", "all"), "merge_requests": ("opened", "closed", "locked", "merged", "all")}
ORDER_BY = ("created_at", "updated_at")


@dataclass
class ListFilters:
    state: str = "all"
    order_by: str = "created_at"
    sort: str = "desc"
    updated_after: int | None = None
    updated_before: int | None = None
    created_after: int | None = None
    created_before: int | None = None
    iids: frozenset[int] | None = None
    confidential: bool | None = None  # issues only: GitLab's `confidential=true|false`


class SandboxState(ItemsMixin, NotesMixin, DiffsMixin, GroupsMixin, WikisMixin, ReleasesMixin):
    """Thread-safe in-memory GitLab. Methods take a project id, a path or a `Project`."""

    def __init__(self, dataset: Dataset, clock: SandboxClock | None = None) -> None:
        with gc_paused():
            self._load(dataset, clock)

    def _load(self, dataset: Dataset, clock: SandboxClock | None) -> None:
        self.lock = threading.RLock()
        self.clock = clock or SandboxClock()
        self.user: Json = dataset.user
        self.description = dataset.description
        self.users = Directory(dataset.users, dataset.memberships)
        self.projects: list[Project] = []
        self._by_id: dict[int, Project] = {}
        self._by_path: dict[str, Project] = {}
        self.wikis = Wikis(dataset.wiki_pages, {int(p["id"]) for p in dataset.projects if p.get("wiki_enabled") is False})
        max_ids = {"issues": 0, "merge_requests": 0}
        max_note = 0
        seen_ids: dict[str, set[int]] = {"issues": set(), "merge_requests": set()}  # ids are global
        for raw in dataset.projects:
            project = Project(data=raw)
            self.projects.append(project)
            self._by_id[int(raw["id"])] = project
            if raw.get("path_with_namespace"):
                self._by_path[str(raw["path_with_namespace"]).lower()] = project
            for kind, source in (("issues", dataset.issues), ("merge_requests", dataset.merge_requests)):
                coll = project.collection(kind)
                where = source_name(dataset, raw["id"], kind)
                ids = seen_ids[kind]
                for line, item in enumerate(source.get(raw["id"], ()), 1):
                    check_item(item, where, line, coll.items, ids)
                    coll.items[int(item["iid"])] = item
                    coll.last_iid = max(coll.last_iid, int(item["iid"]))
                    max_ids[kind] = max(max_ids[kind], int(item["id"]))
            load_diffs(project.merge_requests, dataset.diffs.get(raw["id"], ()), f"project {raw['id']} diffs")
            for entry in dataset.discussions.get(raw["id"], ()):
                kind = "issues" if entry["noteable_type"] == ISSUE else "merge_requests"
                coll = project.collection(kind)
                iid = int(entry["noteable_iid"])
                coll.discussions[iid] = coll.discussions.get(iid, []) + entry["discussions"]
            for coll in (project.issues, project.merge_requests):
                for threads in coll.discussions.values():
                    for thread in threads:
                        for note in thread.get("notes") or ():
                            max_note = max(max_note, id_key(note.get("id")))
                for iid, item in list(coll.items.items()):
                    # Shallow copy: the count is ours to set, the caller's dict stays untouched.
                    coll.items[iid] = {**item, "user_notes_count": user_note_count(coll.discussions.get(iid, ()))}
        for old_path, pid in dataset.redirects.items():
            # A project that has the path now wins over the redirect, as in GitLab.
            if pid in self._by_id:
                self._by_path.setdefault(old_path.lower(), self._by_id[pid])
        self._load_releases(dataset.releases)
        self._next_id = {kind: value + 1 for kind, value in max_ids.items()}
        self._next_note_id = max_note + 1
        self._load_groups(dataset)  # groups.py: groups.json and the projects' namespaces

    # -- projects --------------------------------------------------------------------------------

    def rename_project(self, ref: "int | str | Project", path_with_namespace: str) -> Json:
        """Rename or transfer a project: its old path keeps answering, as GitLab's redirect routes
        make `GET /projects/:old_path` return the project under its new path."""
        proj = self.project(ref)
        with self.lock:
            old_path = str(proj.data.get("path_with_namespace") or "")
            namespace, _, path = path_with_namespace.rpartition("/")
            data = {**proj.data, "path_with_namespace": path_with_namespace, "path": path}
            if isinstance(proj.data.get("web_url"), str) and old_path:
                data["web_url"] = proj.data["web_url"].replace(old_path, path_with_namespace)
            if isinstance(proj.data.get("namespace"), dict) and namespace:
                data["namespace"] = {**proj.data["namespace"], "full_path": namespace}
            proj.data = data
            self._by_path[path_with_namespace.lower()] = proj
            return data

    def put_item(self, ref: "int | str | Project", kind: str, item: Json) -> Json:
        """Serve `item` verbatim (no checks): how tests hand a client a body no GitLab should send
        (a title that is a list, no id, an iid of 1e23). Its iid must be a number to address it."""
        proj = self.project(ref)
        with self.lock:
            coll = proj.collection(kind)
            coll.put_at(int(item["iid"]), item)
            return item

    # -- lookups -----------------------------------------------------------------------------

    def project(self, ref: "int | str | Project") -> Project:
        if isinstance(ref, Project):
            return ref
        with self.lock:
            if isinstance(ref, int) or (isinstance(ref, str) and ref.isdigit()):
                found = self._by_id.get(int(ref))
            else:
                found = self._by_path.get(str(ref).lower())
        if found is None:
            raise NotFound("404 Project Not Found")
        return found

    def list_projects(self, order_by: str = "created_at", sort: str = "desc") -> list[Json]:
        with self.lock:
            projects = [p.data for p in self.projects]
        if order_by not in ("id", "created_at", "last_activity_at", "name", "path", "updated_at"):
            raise BadRequest("order_by does not have a valid value", {"error": "order_by does not have a valid value"})
        reverse = sort != "asc"

        def key(p: Json) -> Any:
            value = p.get(order_by)
            if order_by in ("created_at", "last_activity_at", "updated_at"):
                return ts_key(value) if value else 0
            return value if value is not None else ""

        # Stable sorts: by id first so ties also come id-descending.
        projects.sort(key=lambda p: p["id"], reverse=True)
        projects.sort(key=key, reverse=reverse)
        return projects

    def get(self, project: "int | str | Project", kind: str, iid: int) -> Json:
        proj = self.project(project)
        with self.lock:
            item = proj.collection(kind).items.get(int(iid))
        if item is None:
            raise NotFound(f"404 {NOT_FOUND_NAME[kind]} Not Found")
        return item

    def list_items(self, project: "int | str | Project", kind: str, filters: ListFilters | None = None) -> list[Json]:
        """All matching items in the requested order (pagination is the caller's business)."""
        f = filters or ListFilters()
        if f.state not in STATES[kind]:
            raise BadRequest("state does not have a valid value", {"error": "state does not have a valid value"})
        if f.order_by not in ORDER_BY:
            raise BadRequest("order_by does not have a valid value", {"error": "order_by does not have a valid value"})
        if f.sort not in ("asc", "desc"):
            raise BadRequest("sort does not have a valid value", {"error": "sort does not have a valid value"})
        proj = self.project(project)
        with self.lock:
            rows = proj.collection(kind).sorted_rows(f.order_by, f.sort)
        state = None if f.state == "all" else f.state
        ua, ub, ca, cb, iids = f.updated_after, f.updated_before, f.created_after, f.created_before, f.iids
        if state is None and ua is None and ub is None and ca is None and cb is None and iids is None \
                and f.confidential is None:
            return [r[3] for r in rows]
        out = []
        for ck, uk, _id, item in rows:
            # GitLab documents all four bounds as "on or after" / "on or before": inclusive.
            if (ua is not None and uk < ua) or (ub is not None and uk > ub):
                continue
            if (ca is not None and ck < ca) or (cb is not None and ck > cb):
                continue
            if state is not None and item.get("state") != state:
                continue
            if iids is not None and item["iid"] not in iids:
                continue
            if f.confidential is not None and bool(item.get("confidential")) != f.confidential:
                continue
            out.append(item)
        return out

    def discussions(self, project: "int | str | Project", kind: str, iid: int) -> list[Json]:
        proj = self.project(project)
        with self.lock:
            self.get(proj, kind, iid)
            return list(proj.collection(kind).discussions.get(int(iid), ()))

    def counts(self) -> dict[str, int]:
        with self.lock:
            return {
                "projects": len(self.projects),
                "issues": sum(len(p.issues.items) for p in self.projects),
                "merge_requests": sum(len(p.merge_requests.items) for p in self.projects),
            }

    # -- export ------------------------------------------------------------------------------

    def snapshot(self) -> Dataset:
        """The current state as a Dataset (shares the immutable item dicts)."""
        with self.lock:
            users, memberships = self.users.export()
            data = Dataset(user=self.user, projects=[p.data for p in self.projects], description=self.description,
                           users=users, memberships=memberships, groups=self.group_snapshot())
            for proj in self.projects:
                pid = proj.data["id"]
                data.issues[pid] = sorted(proj.issues.items.values(), key=lambda i: i["iid"])
                data.merge_requests[pid] = sorted(proj.merge_requests.items.values(), key=lambda i: i["iid"])
                entries = []
                for kind, coll in (("issues", proj.issues), ("merge_requests", proj.merge_requests)):
                    noteable_type = ISSUE if kind == "issues" else MERGE_REQUEST
                    for iid in sorted(coll.discussions):
                        if coll.discussions[iid]:
                            entries.append(
                                {"noteable_type": noteable_type, "noteable_iid": iid, "discussions": coll.discussions[iid]}
                            )
                data.discussions[pid] = entries
                data.diffs[pid] = diff_entries(proj.merge_requests)
                releases = self.release_snapshot(pid)
                if releases:
                    data.releases[pid] = releases
                data.wiki_pages[pid] = self.wikis.listing(pid, True) if pid not in self.wikis.disabled else []
            return data

