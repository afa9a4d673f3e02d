"""The MCP server on the official SDK's low-level `Server`: tools, tool errors, transports.

Every tool declares its input and output JSON Schema (tools.py); arguments are validated against
the input schema here, and every failure becomes a tool error (`is_error`) whose text is one line
saying what to do, with the token masked. Two transports: stdio (what desktop clients launch) and
Streamable HTTP (http.py).
"""

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
from jsonschema import Draft202012Validator
from mcp.server.lowlevel import Server

from gitlab_knowledge import __version__
from gitlab_knowledge.errors import AGENT, GitLabError, KnowledgeError
from gitlab_knowledge.mcp.asking import asking_as, viewer_of_request
from gitlab_knowledge.mcp.context import Context
from gitlab_knowledge.mcp.inline_schema import inlined
from gitlab_knowledge.mcp.resident import Resident
from gitlab_knowledge.mcp.tools import Tool, all_tools
from gitlab_knowledge.redact import redact

log = logging.getLogger(__name__)
DEBUG_ENV = "GITLAB_KNOWLEDGE_DEBUG"
INSTRUCTIONS = (
    "gitlab_knowledge: a local, synced copy of GitLab issues, merge requests and their discussion threads. "
    "Use `search` to find what was decided and where (exact references like !847 come first), "
    "`get_issue` / `get_merge_request` to read one item with its threads, and `gitlab_get_mr_comments` "
    "(onlyUnresolved: true, format: markdown) to address the review feedback on an MR; live: true reads "
    "GitLab now instead of the last sync. `related` lists what an issue or MR closes, mentions or is "
    "linked from; `file_history` the merge requests that touched a file; `me` what needs a user's attention; "
    "`person` what someone works on; `similar` the items most like one; `list_items` issues or MRs by state, "
    "labels, people, milestone, dates or path, without a query. "
    "`explain` says whether an item's index entry is fresh."
)


def one_line(text: str) -> str:
    return redact(" ".join(str(text).split()))


def tool_error(exc: BaseException) -> str:
    """The one line an agent reads when a tool fails: what went wrong and what to do, worded for an
    agent (`pass project`, where the command line says `add --project`)."""
    if isinstance(exc, GitLabError) and exc.status is None and "failed after" in exc.message:
        return one_line(f"{exc} — GitLab is unreachable or failing: check gitlab.url in the config and the "
                        "network, or try again later")
    if isinstance(exc, KnowledgeError):
        return one_line(exc.worded(AGENT))
    if os.environ.get(DEBUG_ENV):
        log.exception("tool failed")
    return one_line(f"internal error: {type(exc).__name__}: {exc} (the server's log has more with "
                    f"{DEBUG_ENV}=1)")


def _failure(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def build_server(context: Context, *, http: bool = False) -> Server[Context]:
    """The SDK server with the tools bound to `context` (one per process); `http`: served over
    HTTP, where `[mcp] auth = "gitlab"` makes every call that of a GitLab user (gitlab_auth.py)."""
    tools: dict[str, Tool] = {t.name: t for t in all_tools()}
    gitlab_users = context.config.mcp.auth == "gitlab" and http
    validators = {name: Draft202012Validator(t.input_schema) for name, t in tools.items()}
    listing = types.ListToolsResult(tools=[
        types.Tool(name=t.name, title=t.title, description=t.description, input_schema=t.input_schema,
                   output_schema=inlined(t.output_schema),  # cheaper for a client to validate against
                   annotations=types.ToolAnnotations(title=t.title, read_only_hint=True, destructive_hint=False,
                                                     idempotent_hint=True,
                                                     open_world_hint=t.name in ("gitlab_get_mr_comments", "explain")))
        for t in tools.values()])

    @contextlib.asynccontextmanager
    async def lifespan(_server: Server[Context]) -> AsyncIterator[Context]:
        yield context

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return listing

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = tools.get(params.name)
        if tool is None:
            return _failure(f"unknown tool {params.name!r}: the tools are {', '.join(tools)}")
        arguments = dict(params.arguments or {})
        problem = next(iter(sorted(validators[tool.name].iter_errors(arguments), key=lambda e: list(e.path))), None)
        if problem is not None:
            where = ".".join(str(p) for p in problem.absolute_path) or "arguments"
            return _failure(one_line(f"{tool.name}: {where}: {problem.message} (see the tool's input schema)"))
        viewer, token = viewer_of_request(getattr(ctx, "request", None))
        if viewer is None and gitlab_users:
            # Fail closed: without a viewer a call would read as the sync's token.
            return _failure("this server answers GitLab users only: send your GitLab token as Authorization: Bearer")
        try:
            with asking_as(viewer, token):
                text, structured = await tool.handler(ctx.lifespan_context, arguments)
        except Exception as exc:  # noqa: BLE001 - every failure is a tool error, never a dropped session
            return _failure(tool_error(exc))
        return types.CallToolResult(content=[types.TextContent(text=redact(text))], structured_content=structured)

    return Server("gitlab_knowledge", version=__version__, title="GitLab knowledge", instructions=INSTRUCTIONS,
                  lifespan=lifespan, on_list_tools=list_tools, on_call_tool=call_tool)


# -- running it ---------------------------------------------------------------------------------


async def serve_stdio(resident: Resident) -> None:
    from mcp.server.stdio import stdio_server

    server = build_server(resident.context)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
