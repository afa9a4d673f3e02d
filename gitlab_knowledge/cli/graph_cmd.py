"""The knowledge-graph commands: `related`, `history`, `me`, `person` (read-only, the store only)."""

import argparse
from collections.abc import Callable
from datetime import datetime
from typing import Any

from rich.markup import escape

from gitlab_knowledge import kinds
from gitlab_knowledge.argparsing import OneLineParser, bounded_int
from gitlab_knowledge.cli import console
from gitlab_knowledge.config import Config
from gitlab_knowledge.graph.answers import ME_LIMIT

# The handlers import graph.queries (DuckDB, the explain parser) when they run: every command's
# start-up imports this module to build the parser.
GROUP_TITLES = {"closes": "Closes", "closed_by": "Closed by", "mentions": "Mentions",
                "mentioned_in": "Mentioned in", "related": "Related", "duplicate_of": "Duplicate of",
                "duplicated_by": "Duplicated by", "blocks": "Blocks", "blocked_by": "Blocked by",
                "moved_to": "Moved to", "moved_from": "Moved from"}
CHANGE_WORDS = {"new": "added", "deleted": "deleted", "modified": "modified", None: "reviewed"}


def since_date(text: str) -> datetime:
    """An argparse type: YYYY-MM-DD (midnight UTC) or an ISO 8601 time."""
    try:
        return datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a date like 2024-03-15, got {text!r}") from None


def add_parsers(add: Callable[[str, str], OneLineParser]) -> None:
    """The four commands, each through `add` (which gives it --json naming its schema)."""
    p = add("related", "the issues and MRs an issue or MR closes, mentions or is linked from")
    p.add_argument("ref", help="#IID, !IID, group/project#IID, group/project!IID or an issue/MR URL")
    p.add_argument("--project", metavar="PATH")
    p = add("history", "the merge requests that touched a file (or every file under a directory), following renames")
    p.add_argument("path", help="a path in the repository, e.g. services/auth/jwt.py or services/auth/")
    p.add_argument("--project", metavar="PATH")
    p.add_argument("--limit", type=bounded_int(1), default=50, metavar="N", help="newest N merge requests (default 50)")
    p = add("me", "what needs your attention: assigned issues and MRs, review requests, your MRs' open threads, "
                  "mentions, and what changed on your items")
    p.add_argument("--user", metavar="USERNAME", help="someone else (default: the token's user, as the last sync saw it)")
    p.add_argument("--since", type=since_date, metavar="YYYY-MM-DD",
                   help="changes and mentions since then (default: 7 days ago)")
    p.add_argument("--project", metavar="PATH")
    p.add_argument("--live", action="store_true", help="also your pending GitLab To-Dos, asked now (the token's user)")
    p.add_argument("--limit", type=bounded_int(1), default=ME_LIMIT, metavar="N",
                   help=f"the newest N entries per list (default {ME_LIMIT}; the totals are counted in full)")
    p = add("person", "what someone authored, reviewed, commented on and was assigned; their labels and files")
    p.add_argument("user", help="a GitLab username")
    p.add_argument("--project", metavar="PATH")
    p.add_argument("--since", type=since_date, metavar="YYYY-MM-DD", help="only activity since then")
    p.add_argument("--limit", type=bounded_int(1), default=20, metavar="N", help="items per list (default 20)")


def _item(entry: dict[str, Any]) -> str:
    title = escape(entry["title"]) if entry.get("title") is not None else "[dim](not in the store)[/]"
    state = f" [dim]({entry['state']})[/]" if entry.get("state") else ""
    return f"{escape(entry['reference'])}  {title}{state}"


def _when(value: str | None) -> str:
    return value[:16].replace("T", " ") if value else "-"


def related_cmd(args: argparse.Namespace, config: Config) -> int:
    from gitlab_knowledge.graph.queries import related
    from gitlab_knowledge.workspace import Workspace

    result = related(Workspace(config), args.ref, args.project)
    if args.json:
        console.print_json(result.as_dict())
        return 0
    o = console.out
    o.print(f"[bold]{_item(result.item)}[/]")
    o.print(result.item["url"] or "", style="cyan", markup=False)
    shown = 0
    for group, title in GROUP_TITLES.items():
        links = result.links[group]
        if not links:
            continue
        shown += len(links)
        o.print(f"\n[bold]{title}[/] ({len(links)})")
        for link in links:
            flag = " [magenta]external[/]" if link["external"] else ""
            o.print(f"  {_item(link)}{flag}  [dim]via {', '.join(link['via'])}[/]")
    if not shown:
        o.print("\nNo links in the store: nothing it names and nothing naming it.")
    return 0


def history_cmd(args: argparse.Namespace, config: Config) -> int:
    from gitlab_knowledge.graph.history import history
    from gitlab_knowledge.workspace import Workspace

    result = history(Workspace(config), args.path, args.project, args.limit)
    if args.json:
        console.print_json(result.as_dict())
        return 0
    o = console.out
    mrs = result.merge_requests
    more = f", newest {len(mrs)} shown" if result.total > len(mrs) else ""
    o.print(f"[bold]{escape(result.path)}[/]: {result.total} merge request(s){more}")
    for rename in result.renames:
        o.print(f"  followed: {escape(rename['from'])} → {escape(rename['to'])} (renamed by {escape(rename['by'])})")
    for mr in mrs:
        when = f"merged {_when(mr['merged_at'])}" if mr["merged_at"] else f"updated {_when(mr['updated_at'])}"
        o.print(f"\n[bold]{_item(mr)}[/]  @{escape(mr['author'] or '?')} · {when}")
        for f in mr["files"]:
            change = f"renamed from {escape(f['old_path'] or '?')} to" if f["change"] == "renamed" \
                else CHANGE_WORDS.get(f["change"], f["change"])
            o.print(f"  {change} {escape(f['path'])}")
        for group, title in GROUP_TITLES.items():  # closes, then the other typed links
            for link in mr["links"][group]:
                o.print(f"  {title.lower()} {_item(link)}")
        for t in mr["threads"]:
            state = "resolved" if t["resolved"] else ("unresolved" if t["resolvable"] else "comment")
            line = f":{t['line']}" if t["line"] else ""
            o.print(f"  thread ({state}) @{escape(t['author'] or '?')} on {escape(t['path'] or '')}{line}: "
                    f"{escape(t['excerpt'])}")
    return 0


def _section(title: str, entries: list[dict[str, Any]], line: Callable[[dict[str, Any]], str],
             total: int | None = None) -> None:
    more = f", the newest {len(entries)} shown (--limit for more)" if total is not None and total > len(entries) else ""
    console.out.print(f"\n[bold]{title}[/] ({len(entries) if total is None else total}{more})")
    for entry in entries:
        console.out.print("  " + line(entry))


def me_cmd(args: argparse.Namespace, config: Config) -> int:
    from gitlab_knowledge.graph.people import me
    from gitlab_knowledge.workspace import Workspace

    result = me(Workspace(config), args.user, args.since, args.project, args.live, args.limit)
    if args.json:
        console.print_json(result.as_dict())
        return 0
    console.out.print(f"[bold]@{escape(result.user)}[/]" + (" (the token's user)" if result.user_from == "token"
                                                               else ""))
    counts = result.counts
    _section("Issues assigned to you", result.assigned_issues, _item, counts["assigned_issues"])
    _section("Merge requests assigned to you", result.assigned_mrs, _item, counts["assigned_mrs"])
    _section("Review requested", result.review_requested, _item, counts["review_requested"])
    _section("Your open merge requests", result.authored_open_mrs,
             lambda e: _item(e) + (f"  [yellow]{e['unresolved_threads']} unresolved thread(s)[/]"
                                   if e["unresolved_threads"] else ""), counts["authored_open_mrs"])
    _section("Mentions of you", result.mentions,
             lambda m: f"{_item(m['item'])}  [dim]{m['reason']}{_thread_state(m)}[/]  @{escape(m['author'] or '?')}: "
                       f"{escape(m['excerpt'])}", counts["mentions"])
    if result.todos is not None:
        _section("Your GitLab To-Dos", result.todos,
                 lambda t: f"{escape(t['reference'] or t['url'] or t['target_type'])}  {escape(t['title'] or '')}  "
                           f"[dim]{escape(t['reason'])}[/]  @{escape(t['author'] or '?')}", counts["todos"])
    changes = result.changes
    _section(f"New comments on your items since {_when(result.since)}", changes.notes,
             lambda n: f"{_when(n['created_at'])}  {escape(n['item']['reference'])}  @{escape(n['author'] or '?')}: "
                       f"{escape(n['excerpt'])}", counts["notes"])
    _section("Closed or merged since then", changes.state_changes,
             lambda s: f"{_when(s['at'])}  {s['change']}  {_item(s['item'])}", counts["state_changes"])
    return 0


def _thread_state(mention: dict[str, Any]) -> str:
    return {True: ", resolved", False: ", unresolved"}.get(mention["resolved"], "")


def _person_list(key: str) -> str:
    """A list of `person` as people read it: `authored_mrs` is "authored merge requests" (the kind
    table's plural), `commented_on` "commented on"."""
    verb, _, what = key.partition("_")
    kind = kinds.from_cli(what) if what else None
    return f"{verb} {kind.plural_display.lower()}" if kind else key.replace("_", " ")


def person_cmd(args: argparse.Namespace, config: Config) -> int:
    from gitlab_knowledge.graph.people import person
    from gitlab_knowledge.workspace import Workspace

    result = person(Workspace(config), args.user, args.project, args.since, args.limit)
    if args.json:
        console.print_json(result.as_dict())
        return 0
    o = console.out
    name = f" ({escape(result.name)})" if result.name else ""
    o.print(f"[bold]@{escape(result.user)}[/]{name}" + (f" since {_when(result.since)}" if result.since else ""))
    counts = result.counts
    o.print(", ".join(f"{n} {_person_list(key)}" for key, n in counts.items()))
    for key in ("authored_issues", "authored_mrs", "reviewed_mrs", "commented_on", "assigned"):
        entries = getattr(result, key)
        if entries:
            shown = f", newest {len(entries)}" if counts[key] > len(entries) else ""
            o.print(f"\n[bold]{_person_list(key).capitalize()}[/] ({counts[key]}{shown})")
            for entry in entries:
                o.print("  " + _item(entry))
    if result.mentioned_in:
        shown = f", newest {len(result.mentioned_in)}" if counts["mentioned_in"] > len(result.mentioned_in) else ""
        o.print(f"\n[bold]Mentioned in[/] ({counts['mentioned_in']}{shown})")
        for m in result.mentioned_in:
            o.print(f"  {_item(m['item'])}  @{escape(m['author'] or '?')}: {escape(m['excerpt'])}")
    if result.top_labels:
        o.print("\n[bold]Labels[/]: " + ", ".join(f"{escape(x['label'])} ({x['count']})" for x in result.top_labels))
    if result.top_paths:
        o.print("[bold]Files[/]: " + ", ".join(f"{escape(x['path'])} ({x['count']})" for x in result.top_paths))
    if result.recent_activity:
        o.print("\n[bold]Recent activity[/]")
        for a in result.recent_activity:
            what = f": {escape(a['excerpt'])}" if a["excerpt"] else ""
            o.print(f"  {_when(a['at'])}  {a['action']} {escape(a['item']['reference'])}{what}")
    return 0
