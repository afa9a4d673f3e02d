"""The Markdown digest of an MR's review comments: what a person (or an agent) reads first.

Threads are grouped Unresolved, Resolved, then Comments (not resolvable); within a group by file
(overview notes last) and line. Every comment carries its author, time, file and line when it has
one, and a link to the note.
"""

from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.timeutil import parse_time

GROUPS = ("Unresolved", "Resolved", "Comments")


def when(stamp: str | None) -> str:
    parsed = parse_time(stamp)
    return parsed.strftime("%Y-%m-%d %H:%M UTC") if parsed else (stamp or "?")


def who(author: dict[str, Any] | None) -> str:
    if not author:
        return "unknown author"
    name = f" ({author['name']})" if author.get("name") and author.get("name") != author.get("username") else ""
    return f"@{author.get('username') or author.get('id') or '?'}{name}"


def line_of(c: dict[str, Any]) -> int | None:
    position = c.get("position") or {}
    line = position.get("new_line") or position.get("old_line")
    return line if isinstance(line, int) else None


def _threads(comments: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    by_thread: dict[Any, list[dict[str, Any]]] = {}
    for c in comments:
        by_thread.setdefault(c["thread_id"] or f"note:{c['note_id']}", []).append(c)
    return list(by_thread.values())


def _group(thread: list[dict[str, Any]]) -> str:
    resolvable = [c for c in thread if c["resolvable"]]
    if not resolvable:
        return GROUPS[2]
    return GROUPS[1] if all(c["resolved"] for c in resolvable) else GROUPS[0]


def _place(thread: list[dict[str, Any]]) -> tuple[str, int]:
    first = next((c for c in thread if c["file_path"]), None)
    if first is None:
        return "", 0
    return first["file_path"], line_of(first) or 0


def render(result: dict[str, Any], *, title: str | None, reference: str, web_url: str | None, live: bool,
           hidden_internal: int, system_notes_missing: bool = False) -> str:
    counts = result["counts"]
    threads = _threads(result["comments"])
    unresolved = sum(1 for t in threads if _group(t) == GROUPS[0])
    source = "read from GitLab just now" if live else "from the local store, as the last sync fetched it"
    lines = [f"# Review comments on {reference}" + (f": {title}" if title else ""), "",
             f"{counts['comments']} comment(s) in {counts['discussions']} thread(s), {unresolved} unresolved "
             f"thread(s); {counts['notes']} note(s) before filters; {source} ({result['fetchedAt']})."]
    if web_url:
        lines.append(f"MR: {web_url}")
    if hidden_internal:
        lines.append(f"{hidden_internal} internal note(s) left out ([mcp] include_internal is off).")
    if system_notes_missing:
        lines.append("System notes of this MR may be missing: its threads were stored before the store kept "
                     "them; the next sync fetches them, or pass live: true.")
    if not threads:
        lines += ["", "No comments match."]
        return "\n".join(lines) + "\n"
    for group in GROUPS:
        members = [t for t in threads if _group(t) == group]
        if not members:
            continue
        # Files first (by path, then line), overview notes last; stable within a place.
        members.sort(key=lambda t: (_place(t)[0] == "", _place(t)))
        lines += ["", f"## {group} ({len(members)} thread(s))"]
        current: str | None = None
        for thread in members:
            path, line = _place(thread)
            heading = f"`{path}`" if path else "Overview (not on a diff line)"
            if heading != current:
                lines += ["", f"### {heading}"]
                current = heading
            lines.append("")
            lines.append(f"**Line {line}**" if line else "**Thread**")
            for c in thread:
                lines.append(_comment_line(c, web_url))
                body = c["body"].strip() or "(empty)"
                lines += [f"  > {text}" if text else "  >" for text in body.splitlines()]
    return "\n".join(lines) + "\n"


def _comment_line(c: dict[str, Any], web_url: str | None) -> str:
    parts = [who(c["author"]), when(c["created_at"])]
    if c["file_path"]:
        line = line_of(c)
        parts.append(f"`{c['file_path']}" + (f":{line}`" if line else "`"))
    if c["system"]:
        parts.append("system note")
    elif c["resolvable"]:
        parts.append("resolved" + (f" by {who(c['resolved_by'])}" if c["resolved_by"] else "")
                     if c["resolved"] else "unresolved")
    if web_url:
        parts.append(f"[note {c['note_id']}]({kinds.note_url(web_url, c['note_id'])})")
    return "- " + " · ".join(parts)
