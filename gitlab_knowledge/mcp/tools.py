"""The tools: input schema, output schema, and a handler calling what the CLI calls.

search → `Searcher.search` (the resident one) and the search JSON contract; get_issue /
get_merge_request → `store.queries.show_item` and the graph's links; gitlab_get_mr_comments →
comments.py; explain → `explain.explain`; index_status → `index_status.index_status`; related,
file_history, me → graph/queries.py, graph/history.py, graph/people.py (graph_tools.py). Handlers return
(short text, structured output); a failure raises `KnowledgeError`, which the server turns into a
one-line tool error.
"""

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import date, datetime
from functools import cache
from importlib import resources
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.mcp.bounds import SEARCH_LIMIT
from gitlab_knowledge.mcp.context import Context
from gitlab_knowledge.search import filter_schemas

Result = tuple[str, dict[str, Any]]
Handler = Callable[[Context, dict[str, Any]], Awaitable[Result]]


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    handler: Handler


@cache
def schema(name: str) -> dict[str, Any]:
    """A JSON Schema shipped in the package (`mcp/<name>`, `search/schema.json`, `cli/schemas/<name>`)."""
    package, _, file = name.rpartition("/")
    package = package.replace("/", ".") or "mcp"
    return json.loads(resources.files(f"gitlab_knowledge.{package}").joinpath(file).read_text("utf-8"))


def plain(value: Any) -> Any:
    """JSON-ready: datetimes as ISO 8601 (UTC `Z` when naive, as the store keeps them)."""
    if isinstance(value, datetime):
        return value.isoformat() + ("Z" if value.tzinfo is None else "")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def _optional_string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


# -- search -------------------------------------------------------------------------------------

def search_input() -> dict[str, Any]:
    """The search tool's input schema: the query, the filters (one per described FilterSpec,
    search/filter_schemas.py), the mode and the limit."""
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["query"],
        "properties": {
            "query": {"type": "string", "minLength": 1, "description": "What to look for: words, a question, an "
                      "identifier, a path, or a reference such as #234, !847 or group/project#12."},
            **filter_schemas.arguments(),
            "mode": {"enum": ["hybrid", "lexical", "semantic"], "default": "hybrid",
                     "description": "hybrid (default) fuses keywords and meaning; lexical is keywords only."},
            "limit": {"type": "integer", "minimum": 1, "maximum": SEARCH_LIMIT, "default": 10},
        },
    }


SEARCH_INPUT = search_input()


async def search(ctx: Context, args: dict[str, Any]) -> Result:
    from gitlab_knowledge.search.output import render_human, response_json

    limit = args.get("limit", 10)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= SEARCH_LIMIT:
        raise UsageError(f"limit must be a whole number from 1 to {SEARCH_LIMIT}, got {limit!r}")
    filters = await asyncio.to_thread(ctx.filters, **filter_schemas.keywords(args))
    response = await asyncio.to_thread(ctx.resident.search, str(args.get("query") or ""), filters,
                                       args.get("mode", "hybrid"), limit, ctx.search_reads())
    warnings = "".join(f"warning: {w}\n" for w in response.warnings)
    return warnings + render_human(response, color=False), response_json(response)


# -- items --------------------------------------------------------------------------------------


def _item_input(kind: kinds.Kind) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["iid"],
        "properties": {
            "iid": {"type": "integer", "minimum": 1,
                    "description": f"The {kind.display}'s IID, the number in {kind.sigil}123."},
            "project": _optional_string("group/project; needed when the IID exists in several synced projects."),
        },
    }


def _a(noun: str) -> str:
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


# A kind whose item carries more than threads and links says so in its tool's description.
_ITEM_DESCRIPTIONS = {
    kinds.MERGE_REQUEST.name:
        "A merge request from the local store with its discussion threads, notes and DiffNote file/line "
        "(long bodies are cut with a marker), its links to other issues and MRs and the files it changed.",
}


def _item_tool(kind: kinds.Kind) -> Tool:
    """`get_<kind>`: one item of that kind, as `item.schema.json` describes it."""
    article = _a(kind.noun)
    description = _ITEM_DESCRIPTIONS.get(
        kind.name, f"{article[:1].upper()}{article[1:]} from the local store with its discussion threads and "
        "notes (long bodies are cut with a marker) and its links to other issues and MRs (`related` has them in "
        "full).")
    return Tool(f"get_{kind.name}", f"Get {article}", description, _item_input(kind),
                schema("item.schema.json"), _item_handler(kind))


def _item_handler(kind: kinds.Kind) -> Handler:
    async def handler(ctx: Context, args: dict[str, Any]) -> Result:
        from gitlab_knowledge.mcp.items import get_item, render

        iid = args.get("iid")
        if isinstance(iid, bool) or not isinstance(iid, int) or iid < 1:
            raise UsageError(f"iid must be a whole number >= 1, got {iid!r}")
        item = await asyncio.to_thread(get_item, ctx.workspace(visible_only=True), kind, iid,
                                       args.get("project") or None)
        return render(item), item

    return handler


# -- MR comments --------------------------------------------------------------------------------

COMMENTS_INPUT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["project", "mr"],
    "properties": {
        "project": {"type": ["string", "integer"], "description": "The project: numeric id or group/project path."},
        "mr": {"type": "integer", "minimum": 1, "description": "The merge request's IID (the number in !847)."},
        "includeSystem": {"type": "boolean", "default": False,
                          "description": "Include GitLab's system notes (\"added 1 commit\", \"approved this merge "
                                         "request\"), from the store or live."},
        "includeOverviewNotes": {"type": "boolean", "default": True,
                                 "description": "Include notes on the MR itself, not on a diff line."},
        "onlyResolved": {"type": "boolean", "default": False},
        "onlyUnresolved": {"type": "boolean", "default": False,
                           "description": "Only unresolved resolvable notes: what is left to address."},
        "perPage": {"type": "integer", "minimum": 1, "maximum": 100, "default": 100},
        "format": {"enum": ["json", "markdown"], "default": "json",
                   "description": "markdown adds a digest grouped by file and line, unresolved first."},
        "live": {"type": "boolean", "default": False,
                 "description": "false: the local store as last synced; true: GitLab now (read-only)."},
    },
}


async def mr_comments(ctx: Context, args: dict[str, Any]) -> Result:
    from gitlab_knowledge.mcp import comments, digest

    if isinstance(args.get("project"), int) and not isinstance(args.get("project"), bool):
        args = {**args, "project": str(args["project"])}
    request = comments.CommentsRequest.from_arguments(args)
    workspace = ctx.workspace(visible_only=True)
    if request.live:
        source = await comments.from_gitlab(workspace, request)
    else:
        source = await asyncio.to_thread(comments.from_store, workspace, request)
    out, hidden = comments.envelope(request, source, ctx.include_internal)
    text = digest.render(out, title=source.title, reference=source.reference, web_url=source.web_url,
                         live=request.live, hidden_internal=hidden,
                         system_notes_missing=request.include_system and source.before_system_notes)
    if request.markdown:
        out["markdown"] = text
    return text, out


# -- explain, index status ----------------------------------------------------------------------

EXPLAIN_INPUT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["ref"],
    "properties": {
        "ref": {"type": "string", "minLength": 1,
                "description": "#IID, !IID, group/project#IID, a GitLab URL (a note's too) or a document id."},
        "project": _optional_string("group/project, when a short reference is ambiguous."),
        "live": {"type": "boolean", "default": False, "description": "Also compare with GitLab now."},
    },
}
EXPLAIN_OUTPUT = {
    "type": "object",
    "required": ["document_id", "verdict", "reasons", "chain", "related_documents"],
    "properties": {
        "document_id": {"type": "string"},
        "verdict": {"enum": ["fresh", "stale"]},
        "reasons": {"type": "array", "items": {"type": "string"}},
        "chain": {"type": "object", "description": "Per layer: gitlab (live), raw_payloads, normalized, document, "
                                                   "vector, lexical, watermarks."},
        "related_documents": {"type": "array", "items": {"type": "string"}},
    },
}


async def explain(ctx: Context, args: dict[str, Any]) -> Result:
    from gitlab_knowledge.explain import explain as explain_ref

    ref = str(args.get("ref") or "").strip()
    if not ref:
        raise UsageError("ref is required: #IID, !IID, group/project#IID, a GitLab URL or a document id")
    result = await asyncio.to_thread(explain_ref, ctx.workspace(visible_only=True), ref, args.get("project") or None,
                                     bool(args.get("live", False)))
    out = plain(result.as_dict())
    lines = [f"{out['document_id']}: {out['verdict']}"]
    lines += [f"- {reason}" for reason in out["reasons"]]
    if out["verdict"] == "fresh":
        lines.append("every layer holds the version GitLab gave the last sync")
    return "\n".join(lines) + "\n", out


INDEX_STATUS_OUTPUT = {
    "type": "object",
    "required": ["model", "projects"],
    "properties": {
        "model": {"type": "string"},
        "projects": {"type": "array", "items": {
            "type": "object",
            "required": ["project", "documents", "vectors", "lexical"],
            "properties": {
                "project": {"type": "string"},
                "documents": {"type": "integer", "minimum": 0},
                "vectors": {"$ref": "#/$defs/counts"},
                "lexical": {"$ref": "#/$defs/counts"},
            },
        }},
    },
    "$defs": {"counts": {"type": "object", "required": ["indexed", "stale", "unindexed", "failed", "orphaned"],
                         "additionalProperties": {"type": "integer", "minimum": 0}}},
}


async def index_status(ctx: Context, args: dict[str, Any]) -> Result:
    from gitlab_knowledge.index_status import index_status as status_of

    out = plain(await asyncio.to_thread(status_of, ctx.workspace(visible_only=True)))
    lines = [f"model {out['model']}"]
    for p in out["projects"]:
        v, lx = p["vectors"], p["lexical"]
        lines.append(f"{p['project']}: {p['documents']} documents; vectors {v['indexed']} indexed, {v['stale']} stale, "
                     f"{v['unindexed']} unindexed, {v['failed']} failed, {v['orphaned']} orphaned; lexical "
                     f"{lx['indexed']} indexed, {lx['stale']} stale, {lx['unindexed']} unindexed, "
                     f"{lx['orphaned']} orphaned")
    return "\n".join(lines) + "\n", out


# -- the list -----------------------------------------------------------------------------------


def all_tools() -> list[Tool]:
    from gitlab_knowledge.mcp import graph_tools as graph
    from gitlab_knowledge.mcp import query_tools, release, wiki

    return [
        Tool("search", "Search GitLab knowledge",
             "Hybrid keyword + meaning search over the synced issues, merge requests, discussion threads, wiki "
             "pages (a long page by heading section) and releases (their notes, tag and date: `type: [release]` "
             "answers \"when did X ship\"). "
             "Exact references (#234, !847) and code identifiers come first. Returns the search JSON contract.",
             SEARCH_INPUT, schema("search/schema.json"), search),
        *(_item_tool(kind) for kind in kinds.ITEM_KINDS),
        Tool("get_wiki_page", "Get a wiki page",
             "A project wiki page from the local store by its slug (search results name wiki pages `wiki:<slug>`): "
             "its text (long pages are cut with a marker) and the issues and MRs it links to.",
             wiki.WIKI_INPUT, schema("wiki_page.schema.json"), wiki.handler),
        Tool("get_release", "Get a release",
             "A project release from the local store by its tag (search results name releases `release:<tag>`): "
             "when it shipped (or is planned to), its milestones, its notes and the issues and MRs they name.",
             release.RELEASE_INPUT, schema("release.schema.json"), release.handler),
        Tool("gitlab_get_mr_comments", "Get an MR's review comments",
             "The review feedback on one merge request as one list of comments (diff and overview notes, with "
             "author, file, line, resolution), from the local store or live from GitLab (live: true). "
             "onlyUnresolved: what is left to address; format markdown: a digest grouped by file and line.",
             COMMENTS_INPUT, schema("mr_comments.schema.json"), mr_comments),
        Tool("explain", "Explain a document's freshness",
             "The provenance chain of an issue, MR or thread (GitLab, raw payload, normalized row, document, "
             "vector, lexical entry) and whether the index is fresh or stale, naming the layer behind.",
             EXPLAIN_INPUT, EXPLAIN_OUTPUT, explain),
        Tool("index_status", "Index status",
             "Per project: documents, and for the vectors and the lexical index how many are indexed, stale, "
             "unindexed, failed or orphaned.", {"type": "object", "additionalProperties": False, "properties": {}},
             INDEX_STATUS_OUTPUT, index_status),
        Tool("related", "Related issues and MRs",
             "An issue or MR and every item it closes, is closed by, mentions, is mentioned in, is related to, "
             "duplicates or is duplicated by, blocks or is blocked by, was moved to or from, "
             "from its descriptions, notes and GitLab's system notes, and the wiki pages and releases naming it "
             "(mentioned_in), "
             "each with where the link was written. "
             f"At most {graph.GRAPH_LIST} links per group. The `related --json` document.",
             graph.RELATED_INPUT, schema("cli/schemas/related.json"), graph.related),
        Tool("file_history", "A file's merge requests",
             "The merge requests that touched a file (or every file under a directory), newest first, following "
             "renames back, each with the matching files, what it closes and its other links (grouped as `related` "
             "groups them) and its review threads on them. "
             f"At most {graph.GRAPH_LIST} links per group (`links_omitted` says how many more). "
             "The `history --json` document.", graph.HISTORY_INPUT, schema("cli/schemas/history.json"),
             graph.file_history),
        Tool("me", "What needs a user's attention",
             "For a user (default: the token's): open issues and MRs assigned, open MRs to review, their open MRs "
             "with unresolved threads, where others mentioned them (notes in any thread, descriptions), each with "
             "its reason, and new comments and closes or merges on "
             f"their items since a day (default 7 days ago). The newest {graph.ME_LIMIT} entries per list (`limit`: up "
             f"to {graph.GRAPH_LIST}), `counts` says how many each has. "
             "The `me --json` document.", graph.ME_INPUT, schema("cli/schemas/me.json"), graph.me),
        *query_tools.tools(),
    ]
