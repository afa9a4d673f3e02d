"""The knowledge-graph tools: `related`, `file_history`, `me`.

Each calls the function its CLI command calls (graph/queries.py, graph/history.py, graph/people.py)
and returns that command's --json document, validated by the same schema (cli/schemas/<name>.json),
plus a short text rendering. The reads go through a workspace that sees only what agents may see
(store/visibility.py), so a confidential issue or an internal note never reaches an answer without
the config's opt-in.
Lists are cut at GRAPH_LIST entries (`me`'s at its `limit`, ME_LIMIT unless asked); the text says
when one was. A merge request in
`file_history` lists at most ITEM_FILES files, GRAPH_LIST threads and GRAPH_LIST links per group
(as `related` cuts its groups; `files_omitted` / `threads_omitted` / `links_omitted` say how many
more there were).
"""

import asyncio
from datetime import datetime
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import KnowledgeError, UsageError
from gitlab_knowledge.graph.answers import ME_LIMIT
from gitlab_knowledge.mcp.bounds import GRAPH_LIST, HISTORY_LIMIT, ITEM_FILES
from gitlab_knowledge.mcp.context import Context, confidential_refusal
from gitlab_knowledge.mcp.digest import when

GROUP_TITLES = {"closes": "Closes", "closed_by": "Closed by", "mentions": "Mentions",
                "mentioned_in": "Mentioned in", "related": "Related", "duplicate_of": "Duplicate of",
                "duplicated_by": "Duplicated by", "blocks": "Blocks", "blocked_by": "Blocked by",
                "moved_to": "Moved to", "moved_from": "Moved from"}
_DATE = r"^\d{4}-\d{2}-\d{2}$"


def _text(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "description": description, **extra}


RELATED_INPUT = {
    "type": "object", "additionalProperties": False, "required": ["ref"],
    "properties": {
        "ref": _text("#IID, !IID, group/project#IID, group/project!IID or an issue/MR URL."),
        "project": _text("group/project, when a short reference is ambiguous."),
    },
}
HISTORY_INPUT = {
    "type": "object", "additionalProperties": False, "required": ["path"],
    "properties": {
        "path": _text("A file or directory of the repository, e.g. services/auth/jwt.py or services/auth."),
        "project": _text("Only this project (group/project)."),
        "limit": {"type": "integer", "minimum": 1, "maximum": HISTORY_LIMIT, "default": HISTORY_LIMIT,
                  "description": "The newest N merge requests."},
    },
}
ME_INPUT = {
    "type": "object", "additionalProperties": False, "properties": {
        "user": _text("A GitLab username (default: the token's user, as the last sync recorded it)."),
        "since": _text("Changes since this day (YYYY-MM-DD, UTC; default: 7 days ago).", pattern=_DATE),
        "project": _text("Only this project (group/project)."),
        "limit": {"type": "integer", "minimum": 1, "maximum": GRAPH_LIST, "default": ME_LIMIT,
                  "description": "Entries per list, the newest (`counts` says how many each list has)."},
    },
}


def _cap(values: list[Any]) -> list[Any]:
    return values[:GRAPH_LIST]


def _item(entry: dict[str, Any]) -> str:
    title = entry["title"] if entry.get("title") is not None else "(not in the store)"
    state = f" ({entry['state']})" if entry.get("state") else ""
    return f"{entry['reference']} {title}{state}"


# -- related ------------------------------------------------------------------------------------


async def related(ctx: Context, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    from gitlab_knowledge.graph import queries

    ref, project = str(args["ref"]).strip(), args.get("project") or None
    try:
        out = (await asyncio.to_thread(queries.related, ctx.workspace(visible_only=True), ref, project)).as_dict()
    except UsageError:
        await asyncio.to_thread(refuse_confidential, ctx, ref, project)
        raise
    full = {g: len(v) for g, v in out["links"].items()}
    out["links"] = {g: _cap(v) for g, v in out["links"].items()}
    lines = [f"# {_item(out['item'])}", out["item"]["url"] or ""]
    for group, title in GROUP_TITLES.items():
        links = out["links"][group]
        if links:
            more = f" (first {GRAPH_LIST} of {full[group]})" if full[group] > len(links) else ""
            lines += ["", f"## {title} ({len(links)}){more}"]
            lines += [f"- {_item(link)}{' · external' if link['external'] else ''} · via {', '.join(link['via'])}"
                      for link in links]
    if not any(full.values()):
        lines += ["", "No links in the store: nothing it names and nothing naming it."]
    return "\n".join(lines) + "\n", out


def refuse_confidential(ctx: Context, ref: str, project: str | None) -> None:
    """The reference names a confidential issue the config's lens hid: say so, as get_issue does.
    It is resolved again through the lens that shows only those issues (store/visibility.py). A
    viewer is told nothing more than "not found", as GitLab answers them 404."""
    from gitlab_knowledge.graph.queries import resolve_item
    from gitlab_knowledge.mcp.asking import current_viewer
    from gitlab_knowledge.store.visibility import confidential_lens

    if ctx.include_confidential or current_viewer() is not None:
        return
    with ctx.workspace().with_(lens=confidential_lens()).read() as con:
        try:
            kind, item = resolve_item(con, ref, project)
        except KnowledgeError:
            return
    if kind is kinds.ISSUE:
        raise confidential_refusal(kind.ref(item["iid"], item["project"]))


# -- file history -------------------------------------------------------------------------------


def _limit(args: dict[str, Any], default: int, most: int) -> int:
    limit = args.get("limit", default)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= most:
        raise UsageError(f"limit must be a whole number from 1 to {most}, got {limit!r}")
    return limit


async def file_history(ctx: Context, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    from gitlab_knowledge.graph.history import history

    limit = _limit(args, HISTORY_LIMIT, HISTORY_LIMIT)
    out = (await asyncio.to_thread(history, ctx.workspace(visible_only=True), str(args["path"]),
                                   args.get("project") or None, limit)).as_dict()
    mrs = out["merge_requests"]
    for mr in mrs:  # a directory's history of an MR touching 100,000 files was 12 MB
        for key, bound in (("files", ITEM_FILES), ("threads", GRAPH_LIST)):
            if len(mr[key]) > bound:
                mr[f"{key}_omitted"] = len(mr[key]) - bound
                mr[key] = mr[key][:bound]
        # Each group of links as `related` cuts it (an MR mentioned in 1,000 items listed them all).
        over = {group: len(links) - GRAPH_LIST for group, links in mr["links"].items() if len(links) > GRAPH_LIST}
        if over:
            mr["links_omitted"] = over
            mr["links"] = {group: _cap(links) for group, links in mr["links"].items()}
            mr["closes"] = _cap(mr["closes"])
    more = f", the newest {len(mrs)} shown" if out["total"] > len(mrs) else ""
    lines = [f"# History of `{out['path']}`: {out['total']} merge request(s){more}"]
    lines += [f"followed a rename: `{r['from']}` → `{r['to']}` by {r['by']}" for r in out["renames"]]
    for mr in mrs:
        stamp = f"merged {when(mr['merged_at'])}" if mr["merged_at"] else f"updated {when(mr['updated_at'])}"
        lines += ["", f"## {_item(mr)} · @{mr['author'] or '?'} · {stamp}"]
        if mr["url"]:
            lines.append(mr["url"])
        for f in mr["files"]:
            change = f"renamed from `{f['old_path']}` to" if f["change"] == "renamed" else (f["change"] or "reviewed")
            lines.append(f"- {change} `{f['path']}`")
        if mr.get("files_omitted"):
            lines.append(f"- [{mr['files_omitted']:,} more file(s) not shown: the first {ITEM_FILES} are; "
                         "ask about a narrower path, or run `history PATH --json`, for the rest]")
        lines += [f"- {title.lower()} {_item(link)}" for group, title in GROUP_TITLES.items()
                  for link in mr["links"][group]]
        lines += [f"- [{n:,} more link(s) ({GROUP_TITLES[group].lower()}) not shown: the first {GRAPH_LIST} are]"
                  for group, n in mr.get("links_omitted", {}).items()]
        for t in mr["threads"]:
            state = "resolved" if t["resolved"] else ("unresolved" if t["resolvable"] else "comment")
            line = f":{t['line']}" if t["line"] else ""
            lines.append(f"- thread ({state}) @{t['author'] or '?'} on `{t['path'] or ''}{line}`: {t['excerpt']}")
        if mr.get("threads_omitted"):
            lines.append(f"- [{mr['threads_omitted']:,} more thread(s) not shown: the first {GRAPH_LIST} are]")
    if not mrs:
        lines += ["", "No merge request in the store touched it (file lists come with a sync; review comments "
                      "on the path count too)."]
    return "\n".join(lines) + "\n", out


# -- me -----------------------------------------------------------------------------------------


def _since(value: Any) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        raise UsageError(f"since must be a day like 2024-03-15, got {value!r}") from None


def _resolution(mention: dict[str, Any]) -> str:
    return {True: ", resolved", False: ", unresolved"}.get(mention["resolved"], "")


async def me(ctx: Context, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    from gitlab_knowledge.graph import people

    since, limit = _since(args.get("since")), _limit(args, ME_LIMIT, GRAPH_LIST)
    # The lists are cut to `limit` in the query (the newest), `counts` keeps how long they are.
    out = (await asyncio.to_thread(people.me, ctx.workspace(visible_only=True), args.get("user") or None,
                                   since, args.get("project") or None, False, limit)).as_dict()
    changes, counts = out["changes"], out["counts"]
    sections = [
        ("Issues assigned", "assigned_issues", out["assigned_issues"], _item),
        ("Merge requests assigned (authored by others)", "assigned_mrs", out["assigned_mrs"], _item),
        ("Review requested", "review_requested", out["review_requested"], _item),
        ("Open merge requests authored", "authored_open_mrs", out["authored_open_mrs"],
         lambda e: _item(e) + (f" · {e['unresolved_threads']} unresolved thread(s)" if e["unresolved_threads"] else "")),
        ("Mentions of them", "mentions", out["mentions"],
         lambda m: f"{m['item']['reference']} ({m['reason']}{_resolution(m)}) @{m['author'] or '?'}: {m['excerpt']}"),
        (f"New comments on their items since {when(out['since'])}", "notes", changes["notes"],
         lambda n: f"{when(n['created_at'])} {n['item']['reference']} @{n['author'] or '?'}: {n['excerpt']}"),
        ("Closed or merged since then", "state_changes", changes["state_changes"],
         lambda s: f"{when(s['at'])} {s['change']} {_item(s['item'])}"),
    ]
    who = " (the token's user)" if out["user_from"] == "token" else ""
    lines = [f"# @{out['user']}{who}" + (f" in {out['project']}" if out["project"] else "")]
    for title, key, entries, line in sections:
        total = counts[key] or 0
        more = f" (first {len(entries)} of {total})" if total > len(entries) else ""
        lines += ["", f"## {title} ({len(entries)}){more}"]
        lines += [f"- {line(e)}" for e in entries]
    return "\n".join(lines) + "\n", out
