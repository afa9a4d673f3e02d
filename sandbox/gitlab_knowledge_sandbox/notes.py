"""Discussion and note mutations of the in-memory GitLab, including GitLab's ThrottledTouch.

GitLab's Note model touches its noteable `after_save` (create and edit, not destroy), and Issue and
MergeRequest include ThrottledTouch: `return unless (Time.zone.now - last_updated_at) > 1.minute`.
"""

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .clock import SandboxClock, iso_ms, ts_key
from .dataset import Json
from .errors import BadRequest, Forbidden, NotFound, missing
from .params import as_bool
from .shapes import new_discussion, new_note, normalize_position, noteable_type_of

if TYPE_CHECKING:
    from .projects import Project

TOUCH_INTERVAL_US = 60 * 1_000_000


def user_note_count(threads: Iterable[Json]) -> int:
    return sum(1 for t in threads for n in t.get("notes") or () if not n.get("system"))


class NotesMixin:
    """Mixed into SandboxState; relies on the attributes and lookups declared below."""

    lock: threading.RLock
    clock: SandboxClock
    user: Json
    _next_note_id: int

    if TYPE_CHECKING:

        def project(self, ref: "int | str | Project") -> "Project": ...

        def get(self, project: "int | str | Project", kind: str, iid: int) -> Json: ...

    # -- reads -------------------------------------------------------------------------------

    def discussion(self, project: "int | str | Project", kind: str, iid: int, discussion_id: str) -> Json:
        proj = self.project(project)
        with self.lock:
            self.get(proj, kind, iid)
            for thread in proj.collection(kind).discussions.get(int(iid), ()):
                if thread["id"] == discussion_id:
                    return thread
        raise NotFound("404 Discussion Not Found")

    def notes(self, project: "int | str | Project", kind: str, iid: int, order_by: str = "created_at",
              sort: str = "desc") -> list[Json]:
        """Every note of a parent, flattened as GET .../notes returns them."""
        proj = self.project(project)
        with self.lock:
            self.get(proj, kind, iid)
            flat = [n for t in proj.collection(kind).discussions.get(int(iid), ()) for n in t.get("notes") or ()]
        field = "updated_at" if order_by == "updated_at" else "created_at"
        flat.sort(key=lambda n: _id_key(n.get("id")), reverse=True)
        flat.sort(key=lambda n: _time_key(n, field), reverse=sort != "asc")
        return flat

    def note(self, project: "int | str | Project", kind: str, iid: int, note_id: int) -> Json:
        proj = self.project(project)
        with self.lock:
            self.get(proj, kind, iid)
            _, _, note = self._find_note(proj, kind, iid, note_id)
            return note

    # -- mutations ---------------------------------------------------------------------------

    def add_note(self, project: "int | str | Project", kind: str, iid: int, body: Any,
                 internal: Any = False) -> Json:
        """POST .../notes: a new single-note thread (`individual_note: true`)."""
        proj = self.project(project)
        with self.lock:
            parent = self.get(proj, kind, iid)
            now = iso_ms(self.clock.now())
            note = self._user_note(parent, kind, _body(body), now, None, as_bool(internal))
            self._append_thread(proj, kind, parent["iid"], note, individual=True)
            self._after_save(proj, kind, parent["iid"], now)
            return note

    def create_discussion(self, project: "int | str | Project", kind: str, iid: int, body: Any,
                          position: Any = None, internal: Any = False) -> Json:
        """POST .../discussions: a new thread; a `position` on an MR makes it a DiffNote."""
        proj = self.project(project)
        with self.lock:
            parent = self.get(proj, kind, iid)
            now = iso_ms(self.clock.now())
            pos = None
            if position is not None and kind == "merge_requests":
                try:
                    pos = normalize_position(position)
                except ValueError as exc:
                    raise _bad("position is invalid") from exc
            note_type = "DiffNote" if pos is not None else "DiscussionNote"
            note = self._user_note(parent, kind, _body(body), now, note_type, as_bool(internal), pos)
            thread = self._append_thread(proj, kind, parent["iid"], note, individual=False)
            self._after_save(proj, kind, parent["iid"], now)
            return thread

    def reply(self, project: "int | str | Project", kind: str, iid: int, discussion_id: str, body: Any,
              internal: Any = False) -> Json:
        """POST .../discussions/:id/notes: append to a thread (turning a single note into a thread)."""
        proj = self.project(project)
        with self.lock:
            parent = self.get(proj, kind, iid)
            text = _body(body)
            threads = proj.collection(kind).discussions.get(parent["iid"], [])
            index = next((i for i, t in enumerate(threads) if t["id"] == discussion_id), None)
            if index is None:
                raise NotFound("404 Discussion Not Found")
            thread = threads[index]
            now = iso_ms(self.clock.now())
            notes = list(thread["notes"])
            first = notes[0]
            position = first.get("position") if first.get("type") == "DiffNote" else None
            note_type = "DiffNote" if position is not None else "DiscussionNote"
            note = self._user_note(parent, kind, text, now, note_type, as_bool(internal), position)
            if thread.get("individual_note") and not first.get("system"):
                # GitLab converts a single comment into a discussion when someone replies to it.
                notes[0] = {**first, "type": "DiscussionNote"}
            notes.append(note)
            new_threads = list(threads)
            new_threads[index] = {**thread, "individual_note": False, "notes": notes}
            self._set_threads(proj, kind, parent["iid"], new_threads)
            self._after_save(proj, kind, parent["iid"], now)
            return note

    def edit_note(self, project: "int | str | Project", kind: str, iid: int, note_id: int, body: Any) -> Json:
        proj = self.project(project)
        with self.lock:
            parent = self.get(proj, kind, iid)
            t_index, n_index, note = self._find_note(proj, kind, iid, note_id)
            if note.get("system"):
                raise Forbidden("403 Forbidden")
            now = iso_ms(self.clock.now())
            edited = {**note, "body": _body(body), "updated_at": now}
            threads = list(proj.collection(kind).discussions[parent["iid"]])
            notes = list(threads[t_index]["notes"])
            notes[n_index] = edited
            threads[t_index] = {**threads[t_index], "notes": notes}
            self._set_threads(proj, kind, parent["iid"], threads)
            self._after_save(proj, kind, parent["iid"], now)
            return edited

    def delete_note(self, project: "int | str | Project", kind: str, iid: int, note_id: int) -> None:
        """Remove a note; an emptied thread vanishes. The parent is NOT touched (note.rb touches
        only after_save) but its user_notes_count drops."""
        proj = self.project(project)
        with self.lock:
            parent = self.get(proj, kind, iid)
            t_index, n_index, _ = self._find_note(proj, kind, iid, note_id)
            threads = list(proj.collection(kind).discussions[parent["iid"]])
            notes = list(threads[t_index]["notes"])
            del notes[n_index]
            if notes:
                threads[t_index] = {**threads[t_index], "notes": notes}
            else:
                del threads[t_index]
            self._set_threads(proj, kind, parent["iid"], threads)
            self._refresh_count(proj, kind, parent["iid"])

    # -- helpers -----------------------------------------------------------------------------

    def _take_note_id(self) -> int:
        note_id = self._next_note_id
        self._next_note_id += 1
        return note_id

    def _user_note(self, parent: Json, kind: str, body: str, now: str, note_type: str | None,
                   internal: bool, position: Json | None = None) -> Json:
        return new_note(
            note_id=self._take_note_id(),
            parent=parent,
            noteable_type=noteable_type_of(kind),
            user=self.user,
            body=body,
            now=now,
            note_type=note_type,
            internal=internal,
            position=position,
        )

    def _find_note(self, proj: "Project", kind: str, iid: int, note_id: int) -> tuple[int, int, Json]:
        wanted = int(note_id)
        for t_index, thread in enumerate(proj.collection(kind).discussions.get(int(iid), ())):
            for n_index, note in enumerate(thread.get("notes") or ()):
                if _id_key(note.get("id")) == wanted:
                    return t_index, n_index, note
        raise NotFound("404 Note Not Found")

    def _append_thread(self, proj: "Project", kind: str, iid: int, note: Json, *, individual: bool) -> Json:
        thread = new_discussion(note, individual=individual)
        threads = [*proj.collection(kind).discussions.get(iid, ()), thread]
        self._set_threads(proj, kind, iid, threads)
        self._refresh_count(proj, kind, iid)
        return thread

    def _set_threads(self, proj: "Project", kind: str, iid: int, threads: list[Json]) -> None:
        # A new list, never an in-place edit, so readers holding the old one stay consistent.
        coll = proj.collection(kind)
        if threads:
            coll.discussions[iid] = threads
        else:
            coll.discussions.pop(iid, None)

    def _refresh_count(self, proj: "Project", kind: str, iid: int) -> None:
        coll = proj.collection(kind)
        count = user_note_count(coll.discussions.get(iid, ()))
        item = coll.items[iid]
        if item.get("user_notes_count") != count:
            coll.put({**item, "user_notes_count": count})

    def _after_save(self, proj: "Project", kind: str, iid: int, now: str) -> None:
        """Note saved: recount, then ThrottledTouch the parent."""
        self._refresh_count(proj, kind, iid)
        coll = proj.collection(kind)
        item = coll.items[iid]
        if ts_key(now) - ts_key(item["updated_at"]) > TOUCH_INTERVAL_US:
            coll.put({**item, "updated_at": now})


def _id_key(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _time_key(note: Json, field: str) -> int:
    """Saved notes from older GitLabs may lack `updated_at` (never edited): created_at stands in,
    and a note without either sorts first rather than failing the request."""
    for name in (field, "created_at"):
        value = note.get(name)
        if isinstance(value, str):
            try:
                return ts_key(value)
            except ValueError:
                continue
    return 0


def _body(value: Any) -> str:
    text = "" if value is None else str(value)
    if not text.strip():
        raise missing("body")
    return text


def _bad(message: str) -> BadRequest:
    return BadRequest(message, {"error": message})
