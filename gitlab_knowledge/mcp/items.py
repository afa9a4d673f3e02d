"""`get_issue` / `get_merge_request`: an item with its threads, notes, links and files, bounded.

The item comes from `store.queries.show_item`, the function `show` uses, its links from the
function `related` uses (`graph.queries.links_of`), and an MR's files from `mr_files`, all read
through the workspace's lens (store/visibility.py): a confidential issue or an internal note the
config leaves out never reaches this module, and the lens's own lists say that one was left out.
This module decides how much an agent sees (descriptions and bodies cut with a marker, at most
ITEM_NOTES notes, ITEM_LINKS links per group, ITEM_FILES files).
"""

from datetime import UTC, datetime
from typing import Any

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import AmbiguousReference, UsageError
from gitlab_knowledge.mcp.bounds import (
    BODY_CHARS,
    DESCRIPTION_CHARS,
    GRAPH_LIST,
    ITEM_FILES,
    ITEM_LINKS,
    ITEM_NOTES,
    cut,
)
from gitlab_knowledge.mcp.context import confidential_refusal
from gitlab_knowledge.mcp.digest import when
from gitlab_knowledge.mcp.graph_tools import GROUP_TITLES
from gitlab_knowledge.store.alongside import read_alongside
from gitlab_knowledge.store.reader import Lens
from gitlab_knowledge.store.visibility import hidden_issue_projects, hidden_note_count
from gitlab_knowledge.workspace import Workspace

SCHEMA_VERSION = 1


def iso(value: Any) -> str | None:
    if not isinstance(value, datetime):
        return None
    aware = value if value.tzinfo else value.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat().replace("+00:00", "Z")


def get_item(workspace: Workspace, kind: kinds.Kind, iid: int, project: str | None) -> dict[str, Any]:
    """The item as an agent may see it: what `workspace`'s lens hides is not read at all."""
    from gitlab_knowledge.store.queries import item_row, with_threads

    # One read for the item, its threads, links and files: each read attaches the store anew.
    # Once the item's row is known, its links and files are read on a second connection while its
    # threads are (on 2 cores the call takes the longer of the two instead of their sum).
    with workspace.read() as con:
        try:
            item = item_row(con, kind, iid, project, workspace)
        except UsageError:
            if kind is kinds.ISSUE:
                _refuse_hidden(con, workspace.lens, iid, project)
            raise
        row = dict(item)  # (its own copy: the threads are added to `item` meanwhile)
        with read_alongside(con, lambda other: graph_of(other, workspace, kind, row)) as later:
            item = with_threads(con, kind, item)
            links, files, hidden = later.result()
    out = shape(kind, item, hidden)
    out["links"] = {group: [{k: link[k] for k in ("reference", "type", "title", "state")}
                            for link in entries[:ITEM_LINKS]] for group, entries in links.items()}
    out["counts"]["links"] = sum(len(entries) for entries in links.values())
    out["omitted"]["links_over_limit"] = sum(max(0, len(entries) - ITEM_LINKS) for entries in links.values())
    if kind is kinds.MERGE_REQUEST:
        out["files"] = files[:ITEM_FILES]
        out["counts"]["files"] = len(files)
        out["omitted"]["files_over_limit"] = max(0, len(files) - ITEM_FILES)
    return out


def _refuse_hidden(con: duckdb.DuckDBPyConnection, lens: Lens | None, iid: int, project: str | None) -> None:
    """The issue the lens hid is confidential: say so (and how to let agents read it)."""
    from gitlab_knowledge.store.queries import check_project

    try:
        project_id = check_project(con, project)
    except UsageError:
        return  # show_item's own message says the project is unknown
    hidden = hidden_issue_projects(con, lens, iid, project_id)
    if len(hidden) == 1:
        raise confidential_refusal(kinds.ISSUE.ref(iid, hidden[0]))
    if hidden:
        raise AmbiguousReference(f"issue {kinds.ISSUE.ref(iid)}", hidden)


def graph_of(con: duckdb.DuckDBPyConnection, workspace: Workspace, kind: kinds.Kind,
             item: dict[str, Any]) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]], int]:
    """The item's links, grouped as `related` groups them, an MR's changed files in GitLab's order,
    and how many of its notes the lens hides (read on `con`, the item's own read)."""
    from gitlab_knowledge.graph.queries import links_of
    from gitlab_knowledge.store.queries import project_paths

    links = links_of(con, workspace.config, kind, item, project_paths(workspace, con))
    files: list[dict[str, Any]] = []
    if kind is kinds.MERGE_REQUEST:
        rows = con.execute("""
            SELECT old_path, new_path, new_file, renamed_file, deleted_file FROM mr_files
            WHERE merge_request_id = ? ORDER BY position""", [item["id"]]).fetchall()
        files = [{"old_path": o, "new_path": n, "new_file": bool(nf), "renamed_file": bool(rf),
                  "deleted_file": bool(df)} for o, n, nf, rf, df in rows]
    hidden = hidden_note_count(con, workspace.lens, kind.noteable_type, item["id"])
    return links, files, hidden


def shape(kind: kinds.Kind, item: dict[str, Any], hidden: int) -> dict[str, Any]:
    """The item within the bounds; `hidden`: the internal notes its read left out."""
    web_url = item.get("web_url")
    budget = ITEM_NOTES
    over = total = 0
    threads = []
    for thread in item["threads"]:
        notes = []
        for note in thread["notes"]:
            total += 1
            if budget <= 0:
                over += 1
                continue
            budget -= 1
            link = kinds.note_url(web_url, note['id']) if web_url else None
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
    lines += ["", item["description"] or "(no description)"]
    lines += _links_and_files(item)
    lines += ["", f"## {item['counts']['threads']} thread(s)"]
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


def _links_and_files(item: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    groups = [(title, item["links"][group]) for group, title in GROUP_TITLES.items() if item["links"][group]]
    if groups:
        lines += ["", f"## Links ({item['counts']['links']})"]
        for title, links in groups:
            shown = ", ".join(f"{link['reference']}" + (f" {link['title']}" if link["title"] else "")
                              + (f" ({link['state']})" if link["state"] else "") for link in links)
            lines.append(f"- {title}: {shown}")
        if item["omitted"]["links_over_limit"]:
            lines.append(f"[{item['omitted']['links_over_limit']} more link(s) not shown: `related` lists up to "
                         f"{GRAPH_LIST} per group]")
    if "files" in item:
        lines += ["", f"## Files changed ({item['counts']['files']})"]
        for f in item["files"]:
            change = " (new)" if f["new_file"] else " (deleted)" if f["deleted_file"] else \
                f" (renamed from `{f['old_path']}`)" if f["renamed_file"] else ""
            lines.append(f"- `{f['new_path'] or f['old_path']}`{change}")
        if item["omitted"]["files_over_limit"]:
            lines.append(f"[{item['omitted']['files_over_limit']:,} more file(s) not shown: the first {ITEM_FILES} are]")
        if not item["files"]:
            lines.append("(none stored: a sync fetches an MR's file list)")
    return lines
