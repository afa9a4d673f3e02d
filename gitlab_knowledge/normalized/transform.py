"""GitLab payloads to normalized rows (pure functions, no I/O).

Optional fields are read defensively: self-managed GitLabs of different versions omit or rename
fields (`internal` was `confidential` on notes before 15.x; `draft` was `work_in_progress`;
`merge_user` replaced `merged_by`; `assignees` was a single `assignee`; labels are objects with
`with_labels_details`). Payloads reach these functions checked by store/payloads.py.
"""

from collections.abc import Callable
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.timeutil import parse_time

RowBuilder = Callable[[dict[str, Any], int], dict[str, Any]]
# Each item kind's payload → row function, by kind name; a kind registers its own beside it.
ROW_BUILDERS: dict[str, RowBuilder] = {}


def row_builder(kind: kinds.Kind) -> Callable[[RowBuilder], RowBuilder]:
    """Register the decorated function as the row builder of `kind`'s table."""
    def register(function: RowBuilder) -> RowBuilder:
        ROW_BUILDERS[kind.name] = function
        return function
    return register


def _username(user: Any) -> str | None:
    return user.get("username") if isinstance(user, dict) else None


def _name(user: Any) -> str | None:
    return user.get("name") if isinstance(user, dict) else None


def _usernames(users: Any) -> list[str]:
    return [u["username"] for u in users or [] if isinstance(u, dict) and u.get("username")]


def _assignees(payload: dict[str, Any]) -> list[str]:
    # Before multiple assignees (and on old MRs) there is only the singular `assignee`.
    if isinstance(payload.get("assignees"), list):
        return _usernames(payload["assignees"])
    return _usernames([payload.get("assignee")])


def _labels(payload: dict[str, Any]) -> list[str]:
    out = []
    for label in payload.get("labels") or []:
        # with_labels_details=true returns objects instead of names
        name = label.get("name") if isinstance(label, dict) else label
        if isinstance(name, str) and name and name not in out:
            out.append(name)
    return out


def _reference(payload: dict[str, Any]) -> str | None:
    refs = payload.get("references")
    return refs.get("full") if isinstance(refs, dict) else None


def _milestone(payload: dict[str, Any]) -> str | None:
    milestone = payload.get("milestone")
    return milestone.get("title") if isinstance(milestone, dict) else None


@row_builder(kinds.ISSUE)
def issue_row(payload: dict[str, Any], raw_payload_id: int) -> dict[str, Any]:
    return {
        "id": int(payload["id"]), "project_id": int(payload["project_id"]), "iid": int(payload["iid"]),
        "title": payload.get("title"), "description": payload.get("description"), "state": payload.get("state"),
        "author_username": _username(payload.get("author")), "author_name": _name(payload.get("author")),
        "assignees": _assignees(payload), "milestone": _milestone(payload),
        "labels": _labels(payload), "confidential": bool(payload.get("confidential")),
        "created_at": parse_time(payload.get("created_at")), "updated_at": parse_time(payload.get("updated_at")),
        "closed_at": parse_time(payload.get("closed_at")),
        "user_notes_count": int(payload.get("user_notes_count") or 0),
        "web_url": payload.get("web_url"), "reference": _reference(payload), "raw_payload_id": raw_payload_id,
    }


@row_builder(kinds.MERGE_REQUEST)
def merge_request_row(payload: dict[str, Any], raw_payload_id: int) -> dict[str, Any]:
    draft = payload.get("draft")
    if draft is None:
        draft = payload.get("work_in_progress")
    return {
        "id": int(payload["id"]), "project_id": int(payload["project_id"]), "iid": int(payload["iid"]),
        "title": payload.get("title"), "description": payload.get("description"), "state": payload.get("state"),
        "draft": bool(draft), "author_username": _username(payload.get("author")),
        "author_name": _name(payload.get("author")), "assignees": _assignees(payload),
        "reviewers": _usernames(payload.get("reviewers")), "milestone": _milestone(payload),
        "labels": _labels(payload), "source_branch": payload.get("source_branch"),
        "target_branch": payload.get("target_branch"),
        "created_at": parse_time(payload.get("created_at")), "updated_at": parse_time(payload.get("updated_at")),
        "merged_at": parse_time(payload.get("merged_at")), "closed_at": parse_time(payload.get("closed_at")),
        "merged_by": _username(payload.get("merged_by") or payload.get("merge_user")),
        "user_notes_count": int(payload.get("user_notes_count") or 0),
        "web_url": payload.get("web_url"), "reference": _reference(payload), "raw_payload_id": raw_payload_id,
    }


def project_row(payload: dict[str, Any], raw_payload_id: int) -> dict[str, Any]:
    return {
        "id": int(payload["id"]), "path_with_namespace": payload["path_with_namespace"],
        "name": payload.get("name"), "description": payload.get("description"),
        "default_branch": payload.get("default_branch"), "web_url": payload.get("web_url"),
        "created_at": parse_time(payload.get("created_at")),
        "last_activity_at": parse_time(payload.get("last_activity_at")), "raw_payload_id": raw_payload_id,
    }


def _line_code_lines(line_code: Any) -> tuple[int | None, int | None]:
    """(old, new) line from a line code `<sha1 of the path>_<old>_<new>` (0: no such side)."""
    parts = line_code.rsplit("_", 2) if isinstance(line_code, str) else []
    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
        old, new = int(parts[1]), int(parts[2])
        return (old if 0 < old < 2**31 else None), (new if 0 < new < 2**31 else None)
    return None, None


def _line_range(line_range: Any) -> dict[str, Any]:
    """A multi-line DiffNote's first and last line. GitLab sends `line_code` and `type` for both
    ends and, since 13.x, `old_line`/`new_line`; older ones are read from the line code."""
    out: dict[str, Any] = {}
    for end in ("start", "end"):
        point = line_range.get(end) if isinstance(line_range, dict) else None
        point = point if isinstance(point, dict) else {}
        if "old_line" in point or "new_line" in point:
            old, new = point.get("old_line"), point.get("new_line")
        else:
            old, new = _line_code_lines(point.get("line_code"))
        out.update({
            f"line_range_{end}_line_code": point.get("line_code"), f"line_range_{end}_type": point.get("type"),
            f"line_range_{end}_old_line": old, f"line_range_{end}_new_line": new,
        })
    return out


def system_note_rows(thread: dict[str, Any], *, parent_type: str, parent_id: int, project_id: int,
                     raw_payload_id: int) -> list[dict[str, Any]]:
    """The thread's system notes (GitLab's own record: "mentioned in merge request !847", "closed
    via merge request !119", "changed this line in version 2 of the diff"), for the
    `system_notes` table. `position` counts every note of the thread, so the two tables interleave."""
    noteable_type = kinds.kind(parent_type).noteable_type
    rows = []
    for position, note in enumerate(thread.get("notes") or []):
        if not note.get("system"):
            continue
        internal = note.get("internal")
        rows.append({
            "id": int(note["id"]), "discussion_id": str(thread["id"]), "project_id": project_id,
            "noteable_type": noteable_type, "noteable_id": parent_id,
            "author_username": _username(note.get("author")), "author_name": _name(note.get("author")),
            "body": note.get("body") or "", "created_at": parse_time(note.get("created_at")),
            "position": position, "internal": bool(note.get("confidential") if internal is None else internal),
            "raw_payload_id": raw_payload_id,
        })
    return rows


def thread_rows(thread: dict[str, Any], *, parent_type: str, parent_id: int, project_id: int, position: int,
                raw_payload_id: int) -> tuple[dict[str, Any] | None, list[dict[str, Any]], list[dict[str, Any]]]:
    """(discussion row, note rows, DiffNote position rows) with system notes left out (they go to
    `system_note_rows`); the discussion row is None when the thread holds no user note."""
    parent_kind = kinds.kind(parent_type)
    noteable_type = parent_kind.noteable_type
    notes: list[dict[str, Any]] = []
    positions: list[dict[str, Any]] = []
    for note in thread.get("notes") or []:
        if note.get("system"):
            continue
        internal = note.get("internal")
        if internal is None:
            internal = note.get("confidential")
        note_id = int(note["id"])
        notes.append({
            "id": note_id, "discussion_id": str(thread["id"]), "project_id": project_id,
            "noteable_type": noteable_type, "noteable_id": parent_id, "type": note.get("type"),
            "author_username": _username(note.get("author")), "author_name": _name(note.get("author")),
            "body": note.get("body") or "", "created_at": parse_time(note.get("created_at")),
            "updated_at": parse_time(note.get("updated_at")), "position": len(notes),
            "resolvable": bool(note.get("resolvable")), "resolved": bool(note.get("resolved")),
            "resolved_by": _username(note.get("resolved_by")), "resolved_at": parse_time(note.get("resolved_at")),
            "internal": bool(internal), "raw_payload_id": raw_payload_id,
        })
        pos = note.get("position")
        if isinstance(pos, dict):
            positions.append({
                "note_id": note_id, "old_path": pos.get("old_path"), "new_path": pos.get("new_path"),
                "old_line": pos.get("old_line"), "new_line": pos.get("new_line"),
                "position_type": pos.get("position_type"), "base_sha": pos.get("base_sha"),
                "start_sha": pos.get("start_sha"), "head_sha": pos.get("head_sha"),
                **_line_range(pos.get("line_range")),
            })
    if not notes:
        return None, [], []
    created = [n["created_at"] for n in notes if n["created_at"] is not None]
    resolvable = [n for n in notes if n["resolvable"]]
    discussion = {
        "id": str(thread["id"]), "project_id": project_id, "noteable_type": noteable_type,
        **{k.thread_column: parent_id if k is parent_kind else None for k in kinds.ITEM_KINDS},
        "individual_note": bool(thread.get("individual_note")),
        "first_note_at": min(created) if created else None, "last_note_at": max(created) if created else None,
        "resolvable": bool(resolvable), "resolved": bool(resolvable) and all(n["resolved"] for n in resolvable),
        "note_count": len(notes), "position": position, "raw_payload_id": raw_payload_id,
    }
    return discussion, notes, positions
