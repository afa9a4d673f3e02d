"""The questions a person asks at the CLI, as tools: `person`, `similar`, `list_items`.

Each calls the function its CLI command calls (`person` graph/people.py, `similar`
search/similar.py, `list` store/queries.py's `list_items`) and reads through a workspace that
sees only what agents may see (store/visibility.py), as the other graph tools do: a confidential
issue or an internal note never reaches an answer without the config's opt-in. `similar` runs on
the resident searcher with the no-confidential and no-internal filters forced on, like `search`,
and refuses to start from an item the lens hides (its text would be the query).
"""

import asyncio
from datetime import datetime
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.mcp.bounds import GRAPH_LIST, SEARCH_LIMIT
from gitlab_knowledge.mcp.context import Context
from gitlab_knowledge.mcp.digest import when
from gitlab_knowledge.search import filter_schemas

PERSON_LIMIT = 50  # entries per list of `person`
LIST_LIMIT = GRAPH_LIST  # items per `list_items` call
_DATE = r"^\d{4}-\d{2}-\d{2}$"
# GitLab's item states as `list --state` takes them (`all`: any).
STATES = ("opened", "closed", "merged", "locked", "reopened", "all")
_KINDS = {**{k.name: k for k in kinds.ITEM_KINDS}, **{w: k for k in kinds.ITEM_KINDS for w in k.cli_names}}
# The kinds keyed by a string (wiki pages, releases), listed by project alone.
_KEYED = {**{k.name: k for k in kinds.KEYED_KINDS}, **{w: k for k in kinds.KEYED_KINDS for w in k.cli_names}}


def _text(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "description": description, **extra}


def _day(value: Any, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        raise UsageError(f"{name} must be a day like 2024-03-15, got {value!r}") from None


def _limit(args: dict[str, Any], default: int, most: int) -> int:
    limit = args.get("limit", default)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= most:
        raise UsageError(f"limit must be a whole number from 1 to {most}, got {limit!r}")
    return limit


def _item(entry: dict[str, Any]) -> str:
    title = entry["title"] if entry.get("title") is not None else "(not in the store)"
    state = f" ({entry['state']})" if entry.get("state") else ""
    return f"{entry['reference']} {title}{state}"


# -- person -------------------------------------------------------------------------------------

PERSON_INPUT = {
    "type": "object", "additionalProperties": False, "required": ["user"],
    "properties": {
        "user": _text("A GitLab username (with or without @)."),
        "project": _text("Only this project (group/project)."),
        "since": _text("Only activity since this day (YYYY-MM-DD, UTC).", pattern=_DATE),
        "limit": {"type": "integer", "minimum": 1, "maximum": PERSON_LIMIT, "default": 20,
                  "description": "Entries per list (the counts cover them all)."},
    },
}


async def person(ctx: Context, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    from gitlab_knowledge.graph import people

    limit = _limit(args, 20, PERSON_LIMIT)
    out = (await asyncio.to_thread(people.person, ctx.workspace(visible_only=True), str(args["user"]),
                                   args.get("project") or None, _day(args.get("since"), "since"), limit)).as_dict()
    name = f" ({out['name']})" if out["name"] else ""
    lines = [f"# @{out['user']}{name}" + (f" since {when(out['since'])}" if out["since"] else ""),
             ", ".join(f"{n} {key.replace('_', ' ')}" for key, n in out["counts"].items())]
    for key in ("authored_issues", "authored_mrs", "reviewed_mrs", "commented_on", "assigned"):
        if out[key]:
            lines += ["", f"## {key.replace('_', ' ').capitalize()} ({out['counts'][key]})"]
            lines += [f"- {_item(e)}" for e in out[key]]
    if out["mentioned_in"]:
        lines += ["", f"## Mentioned in ({out['counts']['mentioned_in']})"]
        lines += [f"- {m['item']['reference']} @{m['author'] or '?'}: {m['excerpt']}" for m in out["mentioned_in"]]
    if out["top_labels"]:
        lines += ["", "Labels: " + ", ".join(f"{x['label']} ({x['count']})" for x in out["top_labels"])]
    if out["top_paths"]:
        lines += ["Files: " + ", ".join(f"`{x['path']}` ({x['count']})" for x in out["top_paths"])]
    return "\n".join(lines) + "\n", out


# -- similar ------------------------------------------------------------------------------------

SIMILAR_INPUT = {
    "type": "object", "additionalProperties": False, "required": ["ref"],
    "properties": {
        "ref": _text("The issue or MR to start from: #IID, !IID, group/project#IID, an issue/MR URL or a document id."),
        "project": _text("group/project, when a short reference is ambiguous."),
        **filter_schemas.arguments(),
        "mode": {"enum": ["hybrid", "lexical", "semantic"], "default": "hybrid"},
        "limit": {"type": "integer", "minimum": 1, "maximum": SEARCH_LIMIT, "default": 10},
    },
}


async def similar(ctx: Context, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    from gitlab_knowledge.search.output import render_human, response_json

    ref, project = str(args["ref"]).strip(), args.get("project") or None
    limit = _limit(args, 10, SEARCH_LIMIT)
    filters = await asyncio.to_thread(ctx.filters, **filter_schemas.keywords(args))
    await asyncio.to_thread(_visible, ctx, ref, project)
    response = await asyncio.to_thread(ctx.resident.similar, ref, filters, args.get("mode", "hybrid"), limit, project,
                                       ctx.search_reads())
    warnings = "".join(f"warning: {w}\n" for w in response.warnings)
    return warnings + render_human(response, color=False), response_json(response)


def _visible(ctx: Context, ref: str, project: str | None) -> None:
    """The item `ref` names is one agents may see: its own text becomes the query."""
    from gitlab_knowledge.graph.queries import resolve_item
    from gitlab_knowledge.mcp.graph_tools import refuse_confidential

    try:
        with ctx.workspace(visible_only=True).read() as con:
            resolve_item(con, ref, project, "similar")
    except UsageError:
        refuse_confidential(ctx, ref, project)
        raise


# -- list_items ---------------------------------------------------------------------------------

LIST_INPUT = {
    "type": "object", "additionalProperties": False, "required": ["kind"],
    "properties": {
        "kind": {"enum": sorted({**_KINDS, **_KEYED}), "description": "issue or merge_request (mr), or wiki_page "
                 "(wiki: the synced wiki pages) or release (the synced releases), narrowed by project alone."},
        "project": _text("Only this project (group/project)."),
        "state": {"enum": list(STATES), "default": "all", "description": "GitLab's state; all (default) is any."},
        "labels": {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 20,
                   "description": "Carries every one of these labels."},
        "author": _text("The author's username."),
        "assignee": _text("Among the assignees."),
        "reviewer": _text("Among the reviewers (merge requests only)."),
        "milestone": _text("The milestone's title."),
        "updated_since": _text("Updated on or after this day (YYYY-MM-DD, UTC).", pattern=_DATE),
        "created_since": _text("Created on or after this day (YYYY-MM-DD, UTC).", pattern=_DATE),
        "path": _text("Merge requests that changed this file (or a file under this directory) or have a review "
                      "thread on it."),
        "participant": _text("Authored, assigned, reviewing or commented on it."),
        "sort": {"enum": ["updated_desc", "updated_asc", "created_desc", "created_asc"], "default": "updated_desc"},
        "limit": {"type": "integer", "minimum": 1, "maximum": LIST_LIMIT, "default": 20},
    },
}


def list_output() -> dict[str, Any]:
    """`list --json`'s items (cli/schemas/list.json) in an object, as MCP wants structured output."""
    from gitlab_knowledge.mcp.tools import schema

    rows = schema("cli/schemas/list.json")
    return {"type": "object", "additionalProperties": False, "required": ["kind", "filters", "count", "items"],
            "properties": {"kind": {"enum": [*(k.name for k in kinds.ITEM_KINDS), *(k.name for k in kinds.KEYED_KINDS)]},
                           "filters": {"type": "object", "description": "The arguments the call narrowed by."},
                           "count": {"type": "integer", "minimum": 0, "description": "Items returned (≤ limit)."},
                           "items": {"type": "array", "items": rows["items"],
                                     "description": "`list --json`'s items, in the asked order."}},
            "$defs": rows["$defs"]}


async def list_items(ctx: Context, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    from gitlab_knowledge.mcp.tools import plain
    from gitlab_knowledge.store.queries import ListFilters
    from gitlab_knowledge.store.queries import list_items as listing

    if str(args["kind"]) in _KEYED:
        return await _list_keyed(ctx, _KEYED[str(args["kind"])], args)
    kind = _KINDS[str(args["kind"])]
    limit = _limit(args, 20, LIST_LIMIT)
    filters = ListFilters(
        state=args.get("state"), labels=tuple(args.get("labels") or ()), author=args.get("author"),
        assignee=args.get("assignee"), reviewer=args.get("reviewer"), milestone=args.get("milestone"),
        updated_since=_day(args.get("updated_since"), "updated_since"),
        created_since=_day(args.get("created_since"), "created_since"), path=args.get("path"),
        participant=args.get("participant"), sort=args.get("sort", "updated_desc"))
    rows = plain(await asyncio.to_thread(listing, ctx.workspace(visible_only=True), kind,
                                         args.get("project") or None, limit, None, filters))
    asked = {k: v for k, v in args.items() if k not in ("kind", "limit")}
    lines = [f"# {len(rows)} {kind.plural_display.lower()}" + (f" ({', '.join(f'{k}: {v}' for k, v in asked.items())})"
                                                               if asked else "")]
    for r in rows:
        labels = f" · {', '.join(r['labels'])}" if r.get("labels") else ""
        lines.append(f"- {kind.ref(r['iid'], r['project'])} {r['title']} ({r['state']}) · @{r['author'] or '?'} · "
                     f"updated {when(r['updated_at'])}{labels}")
    if not rows:
        lines.append("Nothing in the store matches every filter given.")
    return "\n".join(lines) + "\n", {"kind": kind.name, "filters": asked, "count": len(rows), "items": rows}


async def _list_keyed(ctx: Context, kind: kinds.KeyedKind, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """`list wiki`: the function the CLI calls, through the same lensed workspace."""
    from gitlab_knowledge.errors import UsageError
    from gitlab_knowledge.store.keyed_queries import list_keyed

    other = sorted(k for k in args if k not in ("kind", "project", "limit", "sort", "state") or
                   (k == "state" and args[k] != "all"))
    if other:
        raise UsageError(f"{other[0]} narrows issues and merge requests; {kind.plural_display.lower()} are listed "
                         "by project alone")
    rows = await asyncio.to_thread(list_keyed, ctx.workspace(visible_only=True), kind, args.get("project") or None,
                                   _limit(args, 20, LIST_LIMIT))
    lines = [f"# {len(rows)} {kind.plural_display.lower()}"] + [
        f"- {kind.ref(r['key'], r['project'])} {r['title']} ({r['format']})" for r in rows]
    asked = {k: v for k, v in args.items() if k == "project"}
    return "\n".join(lines) + "\n", {"kind": kind.name, "filters": asked, "count": len(rows), "items": rows}


def tools() -> list[Any]:
    from gitlab_knowledge.mcp.tools import Tool, schema

    return [
        Tool("person", "What someone works on",
             "What a user authored, reviewed, commented on, was assigned and was mentioned in (counts, and the "
             "newest `limit` of each), the labels and files they work on most, and their recent activity. "
             "The `person --json` document.", PERSON_INPUT, schema("cli/schemas/person.json"), person),
        Tool("similar", "Issues and MRs like this one",
             "The issues and merge requests most like a given one (duplicates, prior art), by its title and "
             "description, with search's filters. Returns the search JSON contract.",
             SIMILAR_INPUT, schema("search/schema.json"), similar),
        Tool("list_items", "List issues, MRs, wiki pages or releases",
             "Issues or merge requests narrowed by structured filters, no query needed (\"open MRs labelled "
             "security updated since 2024-11-18\"): state, labels, author, assignee, reviewer, milestone, "
             "updated/created since, path, participant; sorted, at most `limit`. kind wiki_page lists the synced "
             "wiki pages, kind release the releases (by project). The `list --json` items.",
             LIST_INPUT, list_output(), list_items),
    ]
