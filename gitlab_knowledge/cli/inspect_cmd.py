"""Read commands: `list`, `count`, `show`, `sync-status` (DuckDB, read-only, short waits).

`show` prints at most SHOW_BODY_CHARS characters of the description and of each note, each cut
ending with a line saying how much was left out; `--full` prints every body whole, and `--json`
always carries the full text (it is the data, for programs; the bound is for a reader's terminal).
"""

import argparse
from datetime import datetime
from typing import Any

from rich.markup import escape
from rich.table import Table

from gitlab_knowledge import kinds
from gitlab_knowledge.cli import console
from gitlab_knowledge.config import Config
from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.store import keyed_queries, queries
from gitlab_knowledge.workspace import Workspace

# A few screens: a 50 MB note printed line by line through rich took hours, and nobody reads it there.
SHOW_BODY_CHARS = 20_000


def _item_kind(word: str) -> kinds.Kind:
    kind = kinds.from_cli(word)
    if kind is None:
        raise UsageError(f"{word!r} is not an issue or merge request kind")
    return kind


# `list`'s filters that only an issue or MR has: a keyed kind (a wiki page) refuses them.
_ITEM_FILTERS = ("state", "label", "author", "assignee", "reviewer", "milestone", "updated_since", "created_since",
                 "path", "participant")


def list_cmd(args: argparse.Namespace, config: Config) -> int:
    keyed = kinds.keyed_from_cli(args.what)
    if keyed is not None:
        return _list_keyed(args, config, keyed)
    kind = _item_kind(args.what)
    state = kinds.check_state(args.state) if args.state is not None else None  # as search checks its --state
    filters = queries.ListFilters(
        state=state, labels=tuple(args.label), author=args.author, assignee=args.assignee, reviewer=args.reviewer,
        milestone=args.milestone, updated_since=args.updated_since, created_since=args.created_since, path=args.path,
        participant=args.participant, sort=args.sort)
    rows = queries.list_items(Workspace(config), kind, args.project, args.limit, filters=filters)
    if args.json:
        console.print_json(rows)
        return 0
    if not rows:
        console.out.print(f"No {args.what} in the store" + (f" for {args.project}" if args.project else "") + ".")
        return 0
    table = Table(box=None, pad_edge=False)
    for column in ("project", "iid", "title", "state", "author", "updated"):
        table.add_column(column, overflow="ellipsis", no_wrap=column != "title", max_width=60 if column == "title" else None)
    if kind is kinds.MERGE_REQUEST:
        table.add_column("branch", overflow="ellipsis", max_width=40)
    for r in rows:
        cells = [r["project"], kind.ref(r["iid"]), escape(r["title"] or ""), r["state"] or "",
                 escape(queries.author_label(r["author"], r.get("author_name"))),
                 console.when(r["updated_at"])]
        if kind is kinds.MERGE_REQUEST:
            cells.append(f"{r['source_branch']} → {r['target_branch']}")
        table.add_row(*cells)
    console.out.print(table)
    return 0


def _list_keyed(args: argparse.Namespace, config: Config, kind: kinds.KeyedKind) -> int:
    given = [name for name in _ITEM_FILTERS if getattr(args, name, None) not in (None, [], ())]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise UsageError(f"{flag} narrows issues and merge requests; {kind.plural_display.lower()} are listed by "
                         "--project alone")
    rows = keyed_queries.list_keyed(Workspace(config), kind, args.project, args.limit)
    if args.json:
        console.print_json(rows)
        return 0
    if not rows:
        console.out.print(f"No {kind.plural_display.lower()} in the store" + (f" for {args.project}" if args.project else "") + ".")
        return 0
    table = Table(box=None, pad_edge=False)
    for column in ("project", kind.key_column, "title", "format"):
        table.add_column(column, overflow="ellipsis", no_wrap=column != "title", max_width=60 if column == "title" else None)
    for r in rows:
        table.add_row(r["project"], escape(r["key"]), escape(r["title"] or ""), r["format"] or "")
    console.out.print(table)
    return 0


def count_cmd(args: argparse.Namespace, config: Config) -> int:
    n = queries.count(Workspace(config), args.what, args.project)
    kind = kinds.from_cli(args.what) or kinds.keyed_from_cli(args.what)
    label = kind.plural_display if kind else args.what.capitalize()
    if args.json:
        console.print_json({"what": args.what, "project": args.project, "count": n})
    else:
        console.out.print(f"{label}: {n:,}")
    return 0


def show_cmd(args: argparse.Namespace, config: Config) -> int:
    keyed = kinds.keyed_from_cli(args.what)
    if keyed is not None:
        return _show_keyed(args, config, keyed)
    kind = _item_kind(args.what)
    if not isinstance(args.iid, int):
        raise UsageError(f"argument iid: expected a whole number, got {args.iid!r}")
    item = queries.show_item(Workspace(config), kind, args.iid, args.project)
    if args.json:
        console.print_json(item)
        return 0
    o = console.out
    title = escape(item["title"] or "")
    o.print(f"[bold]{kind.display} {kind.ref(item['iid'])}: {title}[/]")
    facts = [item["project"], item["state"] or "", escape(queries.author_label(item["author_username"],
                                                                                item.get("author_name"))),
             f"created {console.when(item['created_at'])}", f"updated {console.when(item['updated_at'])}"]
    if kind is kinds.MERGE_REQUEST:
        facts.append(f"{item['source_branch']} → {item['target_branch']}")
        if item.get("merged_at"):
            facts.append(f"merged {console.when(item['merged_at'])}")
    if item.get("confidential"):
        facts.append("[red]confidential[/]")
    o.print(" · ".join(facts))
    if item.get("labels"):
        o.print("labels: " + ", ".join(escape(label) for label in item["labels"]))
    o.print(item["web_url"] or "", style="cyan", markup=False)
    o.print()
    full = bool(getattr(args, "full", False))
    o.print(_bounded(item["description"] or "(no description)", full, args), markup=False)
    threads = item["threads"]
    o.print()
    o.print(f"[bold]{len(threads)} discussion thread(s)[/]")
    for i, thread in enumerate(threads, 1):
        state = " (resolved)" if thread["resolved"] else (" (unresolved)" if thread["resolvable"] else "")
        o.print(f"\n[bold]── Thread {i}{state}[/]")
        for note in thread["notes"]:
            where = ""
            if note.get("new_path") or note.get("old_path"):
                where = f" on {note.get('new_path') or note.get('old_path')}{_lines(note)}"
            flag = " [magenta](internal)[/]" if note["internal"] else ""
            who = queries.author_label(note["author"], note.get("author_name"))
            o.print(f"  {escape(who)} ({console.when(note['created_at'])}){escape(where)}{flag}:")
            body = _bounded(note["body"] or "", full, args)
            # One print for the whole body: rich costs ~0.5 ms a call, per line that was minutes.
            o.print("\n".join("    " + text_line for text_line in body.splitlines() or [""]),
                    markup=False, highlight=False)
    return 0


def _show_keyed(args: argparse.Namespace, config: Config, kind: kinds.KeyedKind) -> int:
    page = keyed_queries.show_keyed(Workspace(config), kind, str(args.iid), args.project)
    if args.json:
        console.print_json(page)
        return 0
    o = console.out
    o.print(f"[bold]{kind.display} {escape(page['reference'])}: {escape(page['title'] or '')}[/]")
    o.print(" · ".join(_release_facts(page) if kind is kinds.RELEASE else [page["project"], page.get("format") or ""]),
            markup=False)
    o.print(page["web_url"] or "", style="cyan", markup=False)
    o.print()
    o.print(_bounded(page[kind.text_column] or "(empty)", bool(getattr(args, "full", False)), args), markup=False)
    if page["links"]:
        o.print()
        o.print("links to: " + ", ".join(link["reference"] for link in page["links"]), markup=False)
    return 0


def _release_facts(release: dict[str, Any]) -> list[str]:
    """A release's line under its title: where, when it shipped (or is planned to), by whom, milestones."""
    shipped = ("upcoming, planned for " if release.get("upcoming_release") else "shipped ") + \
        console.when(release.get("released_at"))
    facts = [release["project"], shipped, queries.author_label(release.get("author_username"), release.get("author_name"))]
    if release.get("milestones"):
        facts.append("milestones " + ", ".join(release["milestones"]))
    return facts


def _bounded(text: str, full: bool, args: argparse.Namespace) -> str:
    """`text`, or its first SHOW_BODY_CHARS characters and a line saying what was left out and how to see it."""
    if full or len(text) <= SHOW_BODY_CHARS:
        return text
    command = f"show {args.what} {args.iid}" + (f" --project {args.project}" if args.project else "")
    return (text[:SHOW_BODY_CHARS] + f"\n[… {len(text) - SHOW_BODY_CHARS:,} more characters not shown: "
            f"`{command} --full` prints them all, `--json` too]")


def _lines(note: dict) -> str:
    """`, lines 10–11` for a multi-line DiffNote, `:42` for a one-line one, nothing without a line."""
    start = note.get("line_range_start_new_line") or note.get("line_range_start_old_line")
    end = note.get("line_range_end_new_line") or note.get("line_range_end_old_line")
    if start and end and start != end:
        return f", lines {start}–{end}"
    line = note.get("new_line") or note.get("old_line") or start
    return f":{line}" if line else ""


def sync_status_cmd(args: argparse.Namespace, config: Config) -> int:
    workspace = Workspace(config)
    status = queries.sync_status(workspace, args.project)
    status["backlog"] = _backlog(workspace, [p["configured"] for p in status["projects"]])
    if args.json:
        console.print_json(status)
        return 0
    o = console.out
    last = {r["project_path"]: r["last_success"] for r in status["last_success"]}
    running = [r for r in status["runs"] if r["status"] == "running"]
    table = Table(title="Projects", title_justify="left", box=None)
    for column in ("project", "last successful sync", *(f"{k.column} cursor" for k in kinds.ITEM_KINDS)):
        table.add_column(column)
    cursors = {(c["project"], c["resource_type"]): c for c in status["cursors"]}
    for entry in status["projects"]:
        project, canonical = entry["configured"], entry["project"] or entry["configured"]
        name = project if canonical == project else f"{project} (GitLab: {canonical})"
        table.add_row(escape(name), f"{console.when(last.get(project))} ({console.ago(last.get(project))})",
                      *(_cursor(cursors.get((canonical, k.name))) for k in kinds.ITEM_KINDS))
    o.print(table)
    o.print()
    _print_groups(status["groups"])
    runs = Table(title="Recent sync runs", title_justify="left", box=None)
    for column in ("run", "project", "mode", "status", "started", "took", "fetched", "API calls", "error"):
        runs.add_column(column, overflow="fold" if column == "error" else "ellipsis")
    for r in status["runs"][:10]:
        took = f"{r['duration_s']:.1f}s" if r.get("duration_s") is not None else "-"
        style = {"failed": "red", "running": "yellow", "abandoned": "magenta"}.get(r["status"], "")
        runs.add_row(str(r["id"]), r["project_path"], r["mode"], f"[{style}]{r['status']}[/]" if style else r["status"],
                     console.when(r["started_at"]), took, str(r["totals"].get("fetched", "-")),
                     str(r["api_calls"] if r["api_calls"] is not None else "-"), escape(r["error"] or ""))
    o.print(runs)
    if running:
        o.print(f"\n[yellow]{len(running)} sync(s) running[/] (PID " +
                ", ".join(str(r["pid"]) for r in running) + ")")
    o.print()
    _print_backlog(status["backlog"])
    return 0


def _backlog(workspace: Workspace, projects: list[str]) -> list[dict]:
    """What the change sensor would find left to do, per stored project (read from the stores
    alone: no Dagster to load)."""
    from gitlab_knowledge.backlog import backlog

    out = []
    for project, work in backlog(workspace, projects).items():
        out.append({"project": project, "pending_rechecks": work.pending, "pending_settles_at": work.pending_due,
                    "behind": list(work.behind), "failed_embeddings": work.failed_embeddings,
                    "embedding_provider_unavailable": work.provider_unavailable})
    return out


def _print_groups(groups: list[dict]) -> None:
    """Per configured group: how many projects it resolved to, and when it was last listed."""
    for g in groups:
        now = f" (GitLab: {g['full_path']})" if g["full_path"] and g["full_path"].casefold() != g["group"].casefold() else ""
        at = datetime.fromisoformat(g["listed_at"].removesuffix("Z")) if g["listed_at"] else None
        listed = (f"{g['projects']} project(s), listed {console.when(at)} ({console.ago(at)})"
                  + (f", {g['excluded']} excluded" if g["excluded"] else "")) if g["listed_at"] else "never listed"
        error = f" [red]last listing failed:[/] {escape(g['error'])}" if g["error"] else ""
        console.out.print(f"Group {escape(g['group'])}{escape(now)}: {listed}{error}")
    if groups:
        console.out.print()


def _print_backlog(backlog: list[dict]) -> None:
    o = console.out
    waiting = [b for b in backlog if b["pending_rechecks"] or b["behind"] or b["failed_embeddings"]]
    if not waiting:
        o.print("Backlog: none (no thread recheck pending, every layer and index caught up, no failed embedding)")
        return
    o.print("[bold]Backlog[/] (the change sensor's next run takes it up)")
    for b in waiting:
        parts = []
        if b["pending_rechecks"]:
            settles = f", settles after {console.when(b['pending_settles_at'])}" if b["pending_settles_at"] else ""
            parts.append(f"{b['pending_rechecks']} thread recheck(s) pending (GitLab's 60 s note throttle{settles})")
        parts += [f"behind: {line}" for line in b["behind"]]
        if b["failed_embeddings"]:
            cause = " (the embedding provider is unavailable)" if b["embedding_provider_unavailable"] else ""
            parts.append(f"{b['failed_embeddings']} document(s) failed to embed{cause}")
        o.print(f"  {escape(b['project'])}: " + "; ".join(escape(p) for p in parts))


def _cursor(cursor: dict | None) -> str:
    if not cursor:
        return "-"
    return f"{cursor['updated_at_cursor']} (id {cursor['tie_breaker_id']})"

