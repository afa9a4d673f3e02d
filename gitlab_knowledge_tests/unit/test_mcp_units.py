"""The MCP server's pure parts: GitLab note → comment, filters, the digest, bounds, [mcp] config,
and how the search command finds a server."""

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gitlab_knowledge.config import parse_config
from gitlab_knowledge.errors import ConfigError, UsageError
from gitlab_knowledge.mcp import digest
from gitlab_knowledge.mcp.bounds import cut
from gitlab_knowledge.mcp.comments import CommentsRequest, Source, comment, envelope
from gitlab_knowledge.mcp.http import bearer_token
from gitlab_knowledge.mcp.tools import schema
from gitlab_knowledge.search.resident_client import request_of, socket_path
from gitlab_knowledge_tests.conftest import REPO

FIXTURES = REPO / "gitlab_knowledge_tests" / "fixtures" / "gitlab-api" / "discussions"
URL = "https://gitlab.example.com/g/p/-/merge_requests/3"


def note(note_id: int, **fields: Any) -> dict[str, Any]:
    return {"id": note_id, "body": f"note {note_id}", "author": {"id": 1, "username": "ann", "name": "Ann"},
            "created_at": f"2024-03-0{note_id % 9 + 1}T10:00:00.000Z", "updated_at": None, "system": False,
            "resolvable": False, **fields}


def diff(note_id: int, path: str, line: int, resolved: bool) -> dict[str, Any]:
    return note(note_id, type="DiffNote", resolvable=True, resolved=resolved,
                position={"new_path": path, "old_path": path, "new_line": line, "old_line": None})


def test_gitlabs_own_diffnote_payload_maps_to_one_contract_comment() -> None:
    thread = json.loads((FIXTURES / "merge_request_diffnote_discussion.json").read_text())[0]
    c = comment(thread["notes"][0], thread["id"], URL)
    jsonschema.validate(c, {**schema("mr_comments.schema.json")["$defs"]["comment"],
                            "$defs": schema("mr_comments.schema.json")["$defs"]})
    assert c["file_path"] == "package.json" and c["position"]["line_range"]["start"]["type"] == "new"
    assert c["author"] == {"id": 1, "username": "root", "name": "root"} and c["resolved"] is False
    assert comment(note(5), "t", None)["resolved"] is None  # not resolvable: no resolution at all
    removed_line = comment(note(6, position={"new_path": None, "old_path": "gone.py"}), "t", None)
    assert removed_line["file_path"] == "gone.py"


def source(*threads: list[dict[str, Any]]) -> Source:
    return Source(threads=[{"id": f"t{i}", "notes": notes} for i, notes in enumerate(threads)],
                  fetched_at=datetime(2024, 3, 9, tzinfo=UTC), web_url=URL, title="T", reference="g/p!3")


def test_filters_counts_and_internal_notes() -> None:
    src = source([diff(1, "a.py", 3, False), note(2)], [note(3, system=True)], [note(4, internal=True)],
                 [diff(5, "b.py", 9, True)], [note(6, confidential=True)])
    request = CommentsRequest(project="g/p", mr=3, include_system=True, live=True)
    out, hidden = envelope(request, src, include_internal=False)
    assert hidden == 2 and out["counts"] == {"comments": 4, "discussions": 3, "notes": 4}
    assert out["fetchedAt"] == "2024-03-09T00:00:00Z"
    unresolved, _ = envelope(CommentsRequest(project="g/p", mr=3, only_unresolved=True), src, False)
    assert [c["note_id"] for c in unresolved["comments"]] == [1]
    no_overview, _ = envelope(CommentsRequest(project="g/p", mr=3, include_overview=False), src, True)
    assert [c["note_id"] for c in no_overview["comments"]] == [1, 5]


def test_request_validation_is_one_clear_line() -> None:
    base = {"project": "g/p", "mr": 3}
    assert CommentsRequest.from_arguments(base) == CommentsRequest(project="g/p", mr=3)
    for bad, words in (({"mr": 0}, "IID"), ({"perPage": 0}, "perPage"), ({"format": "html"}, "format"),
                       ({"onlyResolved": True, "onlyUnresolved": True}, "exclude each other"),
                       ({"project": " / "}, "project")):
        with pytest.raises(UsageError, match=words):
            CommentsRequest.from_arguments({**base, **bad})
    # System notes come from the store as well as from GitLab: no `live` needed.
    assert CommentsRequest.from_arguments({**base, "includeSystem": True}).include_system


def test_digest_groups_unresolved_first_then_by_file_and_line() -> None:
    src = source([diff(1, "b.py", 9, True)], [note(2, resolvable=True, resolved=False)], [diff(3, "b.py", 20, False)],
                 [diff(4, "a.py", 50, False)], [note(5)])
    out, _ = envelope(CommentsRequest(project="g/p", mr=3), src, False)
    text = digest.render(out, title="T", reference="g/p!3", web_url=URL, live=False, hidden_internal=0)
    order = [text.index(s) for s in ("## Unresolved", "`a.py`", "`b.py`", "Overview", "## Resolved", "## Comments")]
    assert order == sorted(order)
    assert text.index("#note_4") < text.index("#note_3") < text.index("#note_2") < text.index("#note_1")
    line = next(li for li in text.splitlines() if "#note_3" in li)
    assert "@ann (Ann)" in line and "2024-03-04 10:00 UTC" in line and "`b.py:20`" in line and "unresolved" in line


def test_cut_keeps_the_start_and_says_how_much_is_gone() -> None:
    assert cut("short", 10) == "short"
    long = cut("x" * 25, 10, "https://g/n")
    assert long.startswith("x" * 10) and "15 more characters" in long and "https://g/n" in long


def test_mcp_config_section(tmp_path: Path) -> None:
    def parse(mcp: Any) -> Any:
        return parse_config({"gitlab": {"url": "https://g"}, "projects": ["g/p"], "mcp": mcp}, tmp_path, {}, "t")

    assert parse({}).mcp.include_confidential is False
    settings = parse({"include_internal": True, "bearer_token_env": "MCP_TOKEN"}).mcp
    assert settings.include_internal and settings.bearer_token_env == "MCP_TOKEN"
    for bad, field in (({"include_internal": "yes"}, "mcp.include_internal"), ({"nope": 1}, "mcp.nope"),
                       ({"bearer_token_env": "not a name"}, "mcp.bearer_token_env")):
        with pytest.raises(ConfigError, match=field):
            parse(bad)


def test_mcp_auth_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def parse(mcp: Any, env: dict[str, str] | None = None) -> Any:
        doc = {"gitlab": {"url": "https://g"}, "projects": ["g/p"], "mcp": mcp}
        return parse_config(doc, tmp_path, env or {}, "t").mcp

    assert (parse({}).auth, parse({}).auth_cache_seconds) == ("bearer", 300.0)
    assert (parse({"auth": "gitlab", "auth_cache_seconds": 60}).auth_cache_seconds) == 60
    assert parse({}, {"GITLAB_KNOWLEDGE_MCP_AUTH": "gitlab"}).auth == "gitlab"
    for bad, field in (({"auth": "ldap"}, "mcp.auth must be one of bearer, gitlab"),
                       ({"auth_cache_seconds": -1}, "mcp.auth_cache_seconds"),
                       ({"auth_cache_seconds": 10**9}, "mcp.auth_cache_seconds"),
                       ({"auth": "gitlab", "bearer_token_env": "T"}, "exclude each other")):
        with pytest.raises(ConfigError, match=field):
            parse(bad)
    # each client authenticates itself: a network bind needs no shared token
    config = parse_config({"gitlab": {"url": "https://g"}, "projects": ["g/p"], "mcp": {"auth": "gitlab"}}, tmp_path,
                          {}, "t")
    monkeypatch.setenv("GITLAB_TOKEN", "glpat-sync-0123456789")
    assert bearer_token(config, "0.0.0.0") is None
    # ... but the server checks confidential flips with the sync's token: one line before it listens
    monkeypatch.delenv("GITLAB_TOKEN")
    with pytest.raises(ConfigError, match="GITLAB_TOKEN is not set"):
        bearer_token(config, "0.0.0.0")
    with pytest.raises(UsageError, match="bearer_token_env"):
        bearer_token(parse_config({"gitlab": {"url": "https://g"}, "projects": ["g/p"]}, tmp_path, {}, "t"), "0.0.0.0")


def test_the_search_command_finds_the_server_by_its_data_directory(tmp_path: Path) -> None:
    def config(data: Path) -> Any:
        return parse_config({"gitlab": {"url": "https://g"}, "projects": ["g/p"],
                             "storage": {"data_dir": str(data)}}, tmp_path, {}, "t")

    assert socket_path(config(tmp_path / "data")) == tmp_path / "data" / "mcp-search.sock"
    deep = tmp_path / ("d" * 120)
    assert socket_path(config(deep)) == socket_path(config(deep)) != deep / "mcp-search.sock"
    args = argparse.Namespace(query=["a", "b"], mode="hybrid", limit=3, model=None, json=True, explain=False,
                              config=None, type=None, author=None, label=None, after=None, before=None, project=None,
                              state=None, path=None, participant=None, no_confidential=False, no_internal=False)
    assert request_of(args, False)["query"] == "a b"
    args.some_new_flag = "on"  # a flag the server does not know: the command searches in-process
    assert request_of(args, False) is None


def test_the_search_tool_takes_every_spelling_of_a_type() -> None:
    from gitlab_knowledge import kinds
    from gitlab_knowledge.mcp.tools import SEARCH_INPUT
    from gitlab_knowledge.search.filters import Filters

    words = ["mr", "merge_request", "merge-requests", "issues", "discussion"]
    jsonschema.validate({"query": "x", "type": words}, SEARCH_INPUT)
    assert Filters.build(types=words).types == ("merge_request", "issue", "discussion")
    # Every word the tool's schema lists is one the filter reads as a type (the JSON says its name).
    assert set(Filters.build(types=list(kinds.SOURCE_TYPE_WORDS)).types) == set(kinds.SOURCE_TYPES)


def test_errors_are_worded_for_each_face() -> None:
    from gitlab_knowledge.errors import (
        CLI,
        AmbiguousReference,
        BadValue,
        MissingUser,
        UnknownProject,
        error_document,
    )
    from gitlab_knowledge.mcp.server import tool_error

    ambiguous = AmbiguousReference("#5", ["b/q", "a/p"], qualified="group/project#5")
    assert str(ambiguous) == ambiguous.worded(CLI) == "#5 exists in several projects (a/p, b/q): add --project or write group/project#5"
    assert tool_error(ambiguous) == "#5 exists in several projects (a/p, b/q): pass project or write group/project#5"
    assert ambiguous.fields() == {"reference": "#5", "candidate_projects": ["a/p", "b/q"]}
    assert str(MissingUser()).endswith("or pass --user USERNAME")
    assert tool_error(MissingUser()).endswith("or pass user (a GitLab username)")
    bad = BadValue("mode", "fuzzy", ("hybrid", "lexical", "semantic"))
    assert str(bad) == "--mode expects one of hybrid, lexical, semantic, got 'fuzzy'"
    assert tool_error(bad) == "mode expects one of hybrid, lexical, semantic, got 'fuzzy'"
    unknown = UnknownProject("no/such", ["a/p"])
    assert tool_error(unknown) == str(unknown) == "project 'no/such' is not in the store (synced projects: a/p)"
    assert error_document(str(unknown), unknown.exit_code, unknown) == {
        "schema_version": 1, "error": str(unknown), "exit_code": 2,
        "details": {"project": "no/such", "known_projects": ["a/p"]}}
    assert error_document("interrupted", 130) == {"schema_version": 1, "error": "interrupted", "exit_code": 130}


def test_the_server_creates_a_missing_data_directory_private(tmp_path: Path) -> None:
    """Issue 28, point 7: the MCP server made a missing data directory 0755; it holds confidential
    titles and internal notes, so it is 0700 as the CLI's (workspace.private_dir)."""
    from gitlab_knowledge.mcp.resident import LocalEndpoint, ResidentSearch

    data = tmp_path / "data"
    config = parse_config({"gitlab": {"url": "https://g"}, "projects": ["g/p"],
                           "storage": {"data_dir": str(data)}}, tmp_path, {}, "t")
    endpoint = LocalEndpoint(ResidentSearch(config))
    assert endpoint.start()
    try:
        assert (data.stat().st_mode & 0o777) == 0o700
    finally:
        endpoint.stop()


def test_http_connections_are_accepted_with_tcp_nodelay() -> None:
    """uvicorn on the socket `listen` makes, as `serve_http` runs it: every accepted connection
    has TCP_NODELAY, so no answer waits for the client's delayed ACK (Nagle: ~40 ms a call)."""
    import asyncio
    import socket

    import uvicorn

    from gitlab_knowledge.mcp.http import listen

    async def not_found(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 404, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(not_found, log_level="warning", lifespan="off"))

    async def serve_one() -> list[int]:
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        writer.write(b"GET /nope HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 404")
        accepted = [c.transport.get_extra_info("socket") for c in server.server_state.connections]
        flags = [s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in accepted]
        writer.close()
        server.should_exit = True
        await serving
        return flags

    flags = asyncio.run(serve_one())
    assert len(flags) == 1 and flags[0] != 0
