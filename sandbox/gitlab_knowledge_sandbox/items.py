"""Issue and merge request mutations of the in-memory GitLab: create, edit (with the system notes
GitLab records for title and description edits), state events and delete."""

import threading
from typing import TYPE_CHECKING, Any

from .clock import SandboxClock, iso_ms, parse_iso
from .dataset import Json
from .errors import BadRequest, missing
from .itemcheck import add_labels, label_name
from .params import as_bool, as_labels
from .projects import Project
from .shapes import author_of, new_issue, new_merge_request, new_system_note, noteable_type_of


class ItemsMixin:
    """Mixed into SandboxState; relies on the attributes and lookups declared below."""

    lock: threading.RLock
    clock: SandboxClock
    user: Json
    _next_id: dict[str, int]

    if TYPE_CHECKING:

        def project(self, ref: "int | str | Project") -> Project: ...

        def get(self, project: "int | str | Project", kind: str, iid: int) -> Json: ...

        def _take_note_id(self) -> int: ...

        def _append_thread(self, proj: Project, kind: str, iid: int, note: Json, *, individual: bool) -> Json: ...

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


def iso_ms_from_text(text: str) -> str:
    return iso_ms(parse_iso(text))
