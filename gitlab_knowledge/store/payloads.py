"""Is a GitLab payload storable? Pure checks, each answering with one line naming the item.

GitLabs of every version, proxies and hand-made fixtures send bodies the store cannot hold: a
title that is a list, a lone UTF-16 surrogate (`\\ud800`, valid JSON, not encodable as UTF-8), an
item without an `id`, an iid of `1e23`. Such an item is rejected before it is written, with a line
saying which and why, and the rest of its page is kept; the normalized layer runs the same checks
on stored rows, so a bad row written by an older version is skipped instead of failing every
later run.

What is checked is what the store and its consumers rely on (the ids and iids it keys rows by,
the timestamps the cursor moves on, the text columns, UTF-8), not every field GitLab documents:
unknown and missing optional fields are the normal case across GitLab versions.
"""

import re
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1  # iid and line columns are INTEGER

_ITEM_TEXT = ("title", "description", "state", "web_url", "source_branch", "target_branch")
_NOTE_TEXT = ("body", "type")
_LINE_FIELDS = ("old_line", "new_line")


class PayloadError(ValueError):
    """An item the store cannot hold; the message names the item and the field."""


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float):
        return f"{value!r} (not an integer)"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    if value is None:
        return "missing"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _int_ok(value: Any, limit: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= limit


def _check_int(payload: dict[str, Any], key: str, limit: int, required: bool = True) -> str | None:
    value = payload.get(key)
    if value is None and not required:
        return None
    if _int_ok(value, limit):
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{key} {value} is out of range"
    return f"{key} is {_describe(value)}"


def _check_text(payload: dict[str, Any], keys: Iterable[str]) -> str | None:
    for key in keys:
        value = payload.get(key)
        if value is not None and not isinstance(value, str):
            return f"{key} is {_describe(value)}, not text"
    return None


def _check_time(payload: dict[str, Any], key: str, required: bool) -> str | None:
    value = payload.get(key)
    if value is None:
        return f"{key} is missing" if required else None
    if not isinstance(value, str):
        return f"{key} is {_describe(value)}, not a timestamp"
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return f"{key} {_describe(value)} is not an ISO 8601 timestamp"
    return None


# A lone surrogate is what UTF-8 cannot encode; searching for one copies nothing, where encoding
# a 120 MB description to find out would make a 120 MB copy (and dumping the payload another).
_SURROGATE = re.compile("[\ud800-\udfff]")


def _unencodable(obj: Any, path: str = "") -> str | None:
    """The path of the first string that is not valid Unicode (a lone surrogate)."""
    if isinstance(obj, str):
        return (path or "a value") if _SURROGATE.search(obj) else None
    if isinstance(obj, dict):
        for key, value in obj.items():
            found = _unencodable(key, f"{path}.{key}" if path else "a key") or _unencodable(
                value, f"{path}.{key}" if path else str(key))
            if found:
                return found
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            found = _unencodable(value, f"{path}[{i}]")
            if found:
                return found
    return None


def _not_json(obj: Any, depth: int = 0) -> str | None:
    """Why `obj` is not JSON as json.dumps would say it, or None (walked, not dumped)."""
    if obj is None or isinstance(obj, (str, bool, int, float)):
        return None
    if depth > 500:
        return "nested too deeply"
    if isinstance(obj, dict):
        for key, value in obj.items():
            if not (key is None or isinstance(key, (str, bool, int, float))):
                return f"keys must be str, int, float, bool or None, not {type(key).__name__}"
            found = _not_json(value, depth + 1)
            if found:
                return found
        return None
    if isinstance(obj, (list, tuple)):
        for value in obj:
            found = _not_json(value, depth + 1)
            if found:
                return found
        return None
    return f"Object of type {type(obj).__name__} is not JSON serializable"


def _check_utf8(payload: Any) -> str | None:
    problem = _not_json(payload)  # NaN is accepted by json; anything else is not JSON
    if problem is not None:
        return f"not JSON-serializable ({problem})"
    where = _unencodable(payload)
    if where is not None:
        return f"{where} holds a lone UTF-16 surrogate (not valid Unicode)"
    return None


def _check_labels(payload: dict[str, Any]) -> str | None:
    labels = payload.get("labels")
    if labels is None:
        return None
    if not isinstance(labels, list):
        return f"labels is {_describe(labels)}, not a list"
    for label in labels:
        name = label.get("name") if isinstance(label, dict) else label
        if not isinstance(name, str):
            return f"a label is {_describe(name)}, not a name"
    return None


def item_problem(payload: Any, utf8: bool = True) -> str | None:
    """Why an issue or MR payload cannot be stored, or None. `utf8=False` skips the Unicode
    check, for text read back from the store (which holds only valid UTF-8)."""
    if not isinstance(payload, dict):
        return f"the item is {_describe(payload)}, not an object"
    checks: tuple[Callable[[], str | None], ...] = (
        lambda: _check_int(payload, "id", INT64_MAX), lambda: _check_int(payload, "iid", INT32_MAX),
        lambda: _check_int(payload, "project_id", INT64_MAX),
        lambda: _check_time(payload, "updated_at", True), lambda: _check_time(payload, "created_at", False),
        lambda: _check_text(payload, _ITEM_TEXT), lambda: _check_labels(payload),
        lambda: _check_utf8(payload) if utf8 else None)
    for check in checks:
        problem = check()
        if problem:
            return problem
    return None


def item_name(kind_display: str, payload: Any, index: int | None = None) -> str:
    """`issue iid 7 (id 123)` as far as the payload says; its place on the page otherwise."""
    if isinstance(payload, dict):
        iid, gid = payload.get("iid"), payload.get("id")
        parts = []
        if _int_ok(iid, INT64_MAX):
            parts.append(f"iid {iid}")
        if _int_ok(gid, INT64_MAX):
            parts.append(f"id {gid}" if not parts else f"(id {gid})")
        if parts:
            return f"{kind_display} {' '.join(parts)}"
    return f"{kind_display} #{index + 1} of its page" if index is not None else kind_display


def _lines_problem(point: dict[str, Any], where: str) -> str | None:
    for key in _LINE_FIELDS:
        problem = _check_int(point, key, INT32_MAX, required=False)
        if problem:
            return f"{where} {problem}"
    return None


def _position_problem(position: Any) -> str | None:
    """A DiffNote position and the two ends of its line_range carry the same line fields."""
    if position is None:
        return None
    if not isinstance(position, dict):
        return f"position is {_describe(position)}"
    problem = _lines_problem(position, "position")
    line_range = position.get("line_range")
    if problem or line_range is None:
        return problem
    if not isinstance(line_range, dict):
        return f"position.line_range is {_describe(line_range)}"
    for end in ("start", "end"):
        point = line_range.get(end)
        if point is None:
            continue
        if not isinstance(point, dict):
            return f"position.line_range.{end} is {_describe(point)}"
        problem = _lines_problem(point, f"position.line_range.{end}")
        if problem:
            return problem
    return None


def thread_problem(thread: Any, utf8: bool = True) -> str | None:
    """Why a discussion (a thread of notes) cannot be stored, or None (`utf8` as for items)."""
    if not isinstance(thread, dict):
        return f"the discussion is {_describe(thread)}, not an object"
    tid = thread.get("id")
    if not isinstance(tid, (str, int)) or isinstance(tid, bool) or tid == "":
        return f"id is {_describe(tid)}"
    notes = thread.get("notes")
    if not isinstance(notes, list):
        return f"notes is {_describe(notes)}, not a list"
    for i, note in enumerate(notes):
        if not isinstance(note, dict):
            return f"note #{i + 1} is {_describe(note)}, not an object"
        problem = (_check_int(note, "id", INT64_MAX) or _check_text(note, _NOTE_TEXT)
                   or _check_time(note, "created_at", False) or _check_time(note, "updated_at", False)
                   or _position_problem(note.get("position")))
        if problem:
            name = f"note {note['id']}" if _int_ok(note.get("id"), INT64_MAX) else f"note #{i + 1}"
            return f"{name}: {problem}"
    return _check_utf8(thread) if utf8 else None


def thread_key(thread: Any) -> str | None:
    """The discussion's id as the store keys it, if it has a usable one."""
    if isinstance(thread, dict):
        tid = thread.get("id")
        if isinstance(tid, (str, int)) and not isinstance(tid, bool) and tid != "":
            return str(tid)
    return None


Reject = Callable[[str], None]


def screen_items(kind_display: str, items: Iterable[Any], reject: Reject) -> list[dict[str, Any]]:
    """The storable items, in order; `reject` gets one line for each of the others."""
    out = []
    for i, item in enumerate(items):
        problem = item_problem(item)
        if problem:
            reject(f"{item_name(kind_display, item, i)} rejected: {problem}")
        else:
            out.append(item)
    return out


def screen_threads(parent: str, threads: Iterable[Any], reject: Reject) -> tuple[list[dict[str, Any]], set[str], bool]:
    """(storable threads, ids of rejected threads, whether a rejected thread had no usable id).

    A rejected thread's stored version is kept (never tombstoned for being unreadable now); when
    its id is unknown, none of the parent's stored threads can be told apart from it, so the
    caller keeps them all."""
    ok: list[dict[str, Any]] = []
    rejected: set[str] = set()
    anonymous = False
    for i, thread in enumerate(threads):
        problem = thread_problem(thread)
        if not problem:
            ok.append(thread)
            continue
        key = thread_key(thread)
        if key is None:
            anonymous = True
        else:
            rejected.add(key)
        reject(f"{parent}: discussion {key or f'#{i + 1}'} rejected: {problem}")
    return ok, rejected, anonymous


_RELEASE_TEXT = ("tag_name", "name", "description")


def release_problem(payload: Any, utf8: bool = True) -> str | None:
    """Why a release payload cannot be stored, or None: its tag is its key (GitLab leaves it out
    for users without code access), and its text columns must be text."""
    if not isinstance(payload, dict):
        return f"the release is {_describe(payload)}, not an object"
    tag = payload.get("tag_name")
    if not isinstance(tag, str) or not tag.strip():
        return f"tag_name is {_describe(tag)} (GitLab sends none to users without code access)"
    checks: tuple[Callable[[], str | None], ...] = (
        lambda: _check_text(payload, _RELEASE_TEXT), lambda: _check_time(payload, "created_at", False),
        lambda: _check_time(payload, "released_at", False), lambda: _check_utf8(payload) if utf8 else None)
    for check in checks:
        problem = check()
        if problem:
            return problem
    return None


def release_name(payload: Any, index: int | None = None) -> str:
    """`release v1.2` as far as the payload says; its place on the page otherwise."""
    tag = payload.get("tag_name") if isinstance(payload, dict) else None
    if isinstance(tag, str) and tag.strip() and len(tag) <= 200:
        return f"release {tag}"
    return f"release #{index + 1} of its page" if index is not None else "a release"
