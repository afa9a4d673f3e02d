"""`get_issue` / `get_merge_request`: an item with its threads and notes, bounded for an agent.

The item comes from `store.queries.show_item`, the function `show` uses; this module only decides
what an agent may see (confidential issues and internal notes need the config's opt-in) and how
much (descriptions and bodies cut with a marker, at most ITEM_NOTES notes).
"""

from datetime import UTC, datetime
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.config import Config
from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.mcp.bounds import BODY_CHARS, DESCRIPTION_CHARS, ITEM_NOTES, cut
from gitlab_knowledge.mcp.digest import when

SCHEMA_VERSION = 1


def iso(value: Any) -> str | None:
    if not isinstance(value, datetime):
        return None
    aware = value if value.tzinfo else value.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat().replace("+00:00", "Z")


def get_item(config: Config, kind: kinds.Kind, iid: int, project: str | None, *, include_confidential: bool,
             include_internal: bool) -> dict[str, Any]:
    from gitlab_knowledge.store.queries import show_item

    try:
        item = show_item(config, kind, iid, project)
    except UsageError as exc:
        # show_item words its hints for the command line; an agent passes an argument instead.
        raise UsageError(exc.message.replace("add --project", "pass project")) from None
    if item.get("confidential") and not include_confidential:
        raise UsageError(f"{kind.ref(iid, item['project'])} is confidential and the MCP server leaves confidential "
                         "issues out: set [mcp] include_confidential = true in the config to let agents read them")
    return shape(kind, item, include_internal)


def shape(kind: kinds.Kind, item: dict[str, Any], include_internal: bool) -> dict[str, Any]:
    web_url = item.get("web_url")
    budget = ITEM_NOTES
    hidden = over = total = 0
    threads = []
    for thread in item["threads"]:
        notes = []
        for note in thread["notes"]:
            if note["internal"] and not include_internal:
                hidden += 1
                continue
            total += 1
            if budget <= 0:
                over += 1
                continue
            budget -= 1
            link = f"{web_url}#note_{note['id']}" if web_url else None
            notes.append({
                "id": note["id"], "type": note["type"], "author": note["author"],
                "body": cut(note["body"] or "", BODY_CHARS, link), "created_at": iso(note["created_at"]),
                "updated_at": iso(note["updated_at"]), "internal": bool(note["internal"]),
                "resolved": bool(note["resolved"]), "file_path": note["new_path"] or note["old_path"],
                "line": note["new_line"] or note["old_line"], "url": link,
            })
        if notes:
            threads.append({"id": thread["id"], "individual_note": bool(thread["individual_note"]),
                            "resolvable": bool(thread["resolvable"]), "resolved": bool(thread["resolved"]),
                            "notes": notes})
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "type": kind.name, "project": item["project"], "iid": item["iid"],
        "reference": kind.ref(item["iid"], item["project"]), "title": item["title"], "state": item["state"],
        "author": item["author_username"], "labels": list(item.get("labels") or []),
        "assignees": list(item.get("assignees") or []), "milestone": item.get("milestone"),
        "created_at": iso(item["created_at"]), "updated_at": iso(item["updated_at"]),
        "closed_at": iso(item.get("closed_at")), "web_url": web_url, "confidential": bool(item.get("confidential")),
        "description": cut(item.get("description") or "", DESCRIPTION_CHARS, web_url),
        "threads": threads,
        "counts": {"threads": len(threads), "notes": total, "notes_shown": total - over},
        "omitted": {"internal_notes": hidden, "notes_over_limit": over},
    }
    if kind is kinds.MERGE_REQUEST:
        out.update(source_branch=item.get("source_branch"), target_branch=item.get("target_branch"),
                   draft=bool(item.get("draft")), merged_at=iso(item.get("merged_at")),
                   merged_by=item.get("merged_by"), reviewers=list(item.get("reviewers") or []))
    return out


def render(item: dict[str, Any]) -> str:
    """The short text an agent reads: Markdown with the item, then each thread's notes."""
    kind = kinds.kind(item["type"])
    facts = [item["state"] or "?", f"@{item['author'] or '?'}", f"created {when(item['created_at'])}",
             f"updated {when(item['updated_at'])}"]
    if kind is kinds.MERGE_REQUEST:
        facts.append(f"{item['source_branch']} → {item['target_branch']}")
    if item["labels"]:
        facts.append("labels: " + ", ".join(item["labels"]))
    if item["confidential"]:
        facts.append("confidential")
    lines = [f"# {kind.display} {item['reference']}: {item['title'] or ''}", " · ".join(facts)]
    if item["web_url"]:
        lines.append(item["web_url"])
    lines += ["", item["description"] or "(no description)", "", f"## {item['counts']['threads']} thread(s)"]
    for i, thread in enumerate(item["threads"], 1):
        state = " (resolved)" if thread["resolved"] else (" (unresolved)" if thread["resolvable"] else "")
        lines += ["", f"### Thread {i}{state}"]
        for note in thread["notes"]:
            where = f" · `{note['file_path']}" + (f":{note['line']}`" if note["line"] else "`") if note["file_path"] else ""
            flag = " · internal" if note["internal"] else ""
            lines.append(f"- @{note['author'] or '?'} · {when(note['created_at'])}{where}{flag}")
            lines += [f"  > {text}" if text else "  >" for text in (note["body"] or "").splitlines()]
    omitted = item["omitted"]
    if omitted["notes_over_limit"]:
        lines += ["", f"[{omitted['notes_over_limit']} more note(s) not shown: the first {ITEM_NOTES} are; "
                      "gitlab_get_mr_comments or `python -m gitlab_knowledge show` give them all]"]
    if omitted["internal_notes"]:
        lines += ["", f"[{omitted['internal_notes']} internal note(s) left out: [mcp] include_internal is off]"]
    return "\n".join(lines) + "\n"
