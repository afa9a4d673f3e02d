"""The in-memory GitLab: projects, issues, merge requests and their discussions.

Published objects are never mutated in place: a change builds a new dict (and a new discussion
list) and swaps it in under the lock. Readers can therefore serialize what they got without holding
the lock, and a `Dataset` handed in by a caller is never modified.
"""

import threading
from dataclasses import dataclass, field
from typing import Any

from .clock import SandboxClock, iso_ms, parse_iso, ts_key
from .dataset import ISSUE, MERGE_REQUEST, Dataset, Json, gc_paused
from .diffs import DiffsMixin, diff_entries, load_diffs
from .errors import BadRequest, NotFound, missing
from .itemcheck import add_labels, check_item, id_key, label_name, source_name, time_key
from .notes import NotesMixin, user_note_count
from .params import as_bool, as_labels
from .shapes import author_of, new_issue, new_merge_request, new_system_note, noteable_type_of

KINDS = ("issues", "merge_requests")
NOT_FOUND_NAME = {"issues": "Issue", "merge_requests": "Merge Request"}
STATES = {"issues": ("opened", "closed", "all"), "merge_requests": ("opened", "closed", "locked", "merged", "all")}
ORDER_BY = ("created_at", "updated_at")


@dataclass
class Collection:
    """One project's issues or merge requests, with their discussions."""

    items: dict[int, Json] = field(default_factory=dict)
    discussions: dict[int, list[Json]] = field(default_factory=dict)
    diffs: dict[int, list[Json]] = field(default_factory=dict)  # merge requests only
    # GitLab never reuses an iid, even after the item with the highest one is deleted.
    last_iid: int = 0
    # (created key, updated key, id, item) per item, built lazily and dropped on any change.
    _rows: list[tuple[int, int, int, Json]] | None = None
    _sorted: dict[tuple[str, str], list[tuple[int, int, int, Json]]] = field(default_factory=dict)

    def put(self, item: Json) -> None:
        self.items[item["iid"]] = item
        self.invalidate()

    def put_at(self, iid: int, item: Json) -> None:
        # last_iid stays: a hostile iid (1e23) must not decide the iids of items created later.
        self.items[iid] = item
        self.invalidate()

    def invalidate(self) -> None:
        self._rows = None
        self._sorted = {}

    def sorted_rows(self, order_by: str, sort: str) -> list[tuple[int, int, int, Json]]:
        cached = self._sorted.get((order_by, sort))
        if cached is not None:
            return cached
        if self._rows is None:
            self._rows = [
                (time_key(i.get("created_at")), time_key(i.get("updated_at")), id_key(i.get("id")), i)
                for i in self.items.values()
            ]
        col = 0 if order_by == "created_at" else 1
        # Ties go id-descending in both directions on purpose (DATASET.md): clients must not rely
        # on ties arriving in id order.
        if sort == "asc":
            rows = sorted(self._rows, key=lambda r: (r[col], -r[2]))
        else:
            rows = sorted(self._rows, key=lambda r: (-r[col], -r[2]))
        self._sorted[(order_by, sort)] = rows
        return rows


@dataclass
class Project:
    data: Json
    issues: Collection = field(default_factory=Collection)
    merge_requests: Collection = field(default_factory=Collection)

    def collection(self, kind: str) -> Collection:
        return self.issues if kind == "issues" else self.merge_requests


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


class SandboxState(NotesMixin, DiffsMixin):
    """Thread-safe in-memory GitLab. Methods take a project id, a path or a `Project`."""

    def __init__(self, dataset: Dataset, clock: SandboxClock | None = None) -> None:
        with gc_paused():
            self._load(dataset, clock)

    def _load(self, dataset: Dataset, clock: SandboxClock | None) -> None:
        self.lock = threading.RLock()
        self.clock = clock or SandboxClock()
        self.user: Json = dataset.user
        self.description = dataset.description
        self.projects: list[Project] = []
        self._by_id: dict[int, Project] = {}
        self._by_path: dict[str, Project] = {}
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
        self._next_id = {kind: value + 1 for kind, value in max_ids.items()}
        self._next_note_id = max_note + 1

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
        if state is None and ua is None and ub is None and ca is None and cb is None and iids is None:
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

    # -- issue / merge request mutations -----------------------------------------------------

    def create(self, project: "int | str | Project", kind: str, params: Json) -> Json:
        proj = self.project(project)
        required = ("title",) if kind == "issues" else ("title", "source_branch", "target_branch")
        for name in required:
            if not str(params.get(name) or "").strip():
                raise missing(name)
        fields: Json = {
            "title": str(params["title"]),
            "description": params.get("description"),
            "labels": as_labels(params.get("labels")),
            "confidential": as_bool(params.get("confidential")),
            "due_date": params.get("due_date"),
        }
        if kind == "merge_requests":
            fields.update(
                source_branch=str(params["source_branch"]),
                target_branch=str(params["target_branch"]),
                remove_source_branch=as_bool(params.get("remove_source_branch")),
                squash=as_bool(params.get("squash")),
            )
        with self.lock:
            coll = proj.collection(kind)
            now = self._created_at(params)
            coll.last_iid += 1
            iid = coll.last_iid
            item_id = self._next_id[kind]
            self._next_id[kind] += 1
            build = new_issue if kind == "issues" else new_merge_request
            item = build(proj.data, self.user, item_id, iid, fields, now)
            coll.put(item)
            return item

    def create_issue(self, project: "int | str | Project", title: str, **params: Any) -> Json:
        return self.create(project, "issues", {"title": title, **params})

    def create_merge_request(
        self, project: "int | str | Project", title: str, source_branch: str, target_branch: str, **params: Any
    ) -> Json:
        fields = {"title": title, "source_branch": source_branch, "target_branch": target_branch, **params}
        return self.create(project, "merge_requests", fields)

    def update(self, project: "int | str | Project", kind: str, iid: int, params: Json) -> Json:
        """A direct edit: always sets updated_at to now (no ThrottledTouch on the parent's own save)."""
        proj = self.project(project)
        with self.lock:
            old = self.get(proj, kind, iid)
            new = dict(old)
            now = iso_ms(self.clock.now())
            system_bodies: list[str] = []
            if "title" in params:
                title = str(params["title"] or "").strip()
                if not title:
                    raise missing("title")
                if title != old.get("title"):
                    system_bodies.append(f"changed title from **{old.get('title')}** to **{title}**")
                new["title"] = title
            if "description" in params and params["description"] != old.get("description"):
                new["description"] = params["description"]
                system_bodies.append("changed the description")
            if "labels" in params:
                new["labels"] = as_labels(params["labels"])
            if "add_labels" in params:
                new["labels"] = add_labels(new.get("labels") or [], as_labels(params["add_labels"]))
            if "remove_labels" in params:
                drop = set(as_labels(params["remove_labels"]))
                new["labels"] = [label for label in new.get("labels") or [] if label_name(label) not in drop]
            for flag in ("confidential", "discussion_locked"):
                if flag in params:
                    new[flag] = as_bool(params[flag])
            for text in ("due_date", "target_branch"):
                if text in params:
                    new[text] = params[text]
            if "state_event" in params:
                self._apply_state_event(kind, new, str(params["state_event"]), now)
            new["updated_at"] = now
            coll = proj.collection(kind)
            coll.put(new)
            # GitLab records title/description edits as system notes (state changes are resource
            # events, which the notes API does not show).
            for body in system_bodies:
                self._append_system_note(proj, kind, new["iid"], body, now)
            return coll.items[new["iid"]]

    def update_issue(self, project: "int | str | Project", iid: int, **params: Any) -> Json:
        return self.update(project, "issues", iid, params)

    def update_merge_request(self, project: "int | str | Project", iid: int, **params: Any) -> Json:
        return self.update(project, "merge_requests", iid, params)

    def delete(self, project: "int | str | Project", kind: str, iid: int) -> None:
        proj = self.project(project)
        with self.lock:
            self.get(proj, kind, iid)
            coll = proj.collection(kind)
            del coll.items[int(iid)]
            coll.discussions.pop(int(iid), None)
            coll.diffs.pop(int(iid), None)
            coll.invalidate()

    def _apply_state_event(self, kind: str, item: Json, event: str, now: str) -> None:
        allowed = ("close", "reopen", "merge") if kind == "merge_requests" else ("close", "reopen")
        if event not in allowed:
            raise BadRequest("state_event does not have a valid value", {"error": "state_event does not have a valid value"})
        if event == "close":
            item.update(state="closed", closed_at=now, closed_by=author_of(self.user))
        elif event == "reopen":
            item.update(state="opened", closed_at=None, closed_by=None)
        else:
            author = author_of(self.user)
            item.update(state="merged", merged_at=now, merged_by=author, merge_user=author)

    def _created_at(self, params: Json) -> str:
        # GitLab lets admins back-date created_at; tests use it to build histories.
        if params.get("created_at"):
            try:
                return iso_ms_from_text(str(params["created_at"]))
            except ValueError as exc:
                raise BadRequest("created_at is invalid", {"error": "created_at is invalid"}) from exc
        return iso_ms(self.clock.now())

    def _append_system_note(self, proj: Project, kind: str, iid: int, body: str, now: str) -> None:
        coll = proj.collection(kind)
        note = new_system_note(
            note_id=self._take_note_id(),
            parent=coll.items[iid],
            noteable_type=noteable_type_of(kind),
            user=self.user,
            body=body,
            now=now,
        )
        self._append_thread(proj, kind, iid, note, individual=True)

    # -- export ------------------------------------------------------------------------------

    def snapshot(self) -> Dataset:
        """The current state as a Dataset (shares the immutable item dicts)."""
        with self.lock:
            data = Dataset(user=self.user, projects=[p.data for p in self.projects], description=self.description)
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
            return data


def iso_ms_from_text(text: str) -> str:
    return iso_ms(parse_iso(text))
