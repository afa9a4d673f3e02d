"""gitlab_get_mr_comments and the item tools through the SDK's own client (connected in-process):
the contract's acceptance criteria (docs/mr-comments.md) from the store and live from the sandbox
GitLab, which serves MR !847 with more than 100 notes, an internal note and injected faults."""

import asyncio
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from mcp import Client

from gitlab_knowledge.config import Config, parse_config
from gitlab_knowledge.mcp.resident import Resident
from gitlab_knowledge.mcp.server import build_server
from gitlab_knowledge.mcp.tools import schema
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_sandbox import DEFAULT_TOKEN, SAMPLE_DATASET, SandboxGitLab

MR = {"project": "acme/platform", "mr": 847}
EXTRA_THREADS = 110  # with the sample's 22 notes: 132 notes, 122 threads (3 pages of 50)
SAMPLE_NOTES, SYSTEM_NOTES = 22, 6  # the sample's !847 as synced into the store
COMMENTS_SCHEMA = schema("mr_comments.schema.json")


@pytest.fixture(scope="module")
def gitlab() -> Iterator[SandboxGitLab]:
    """The sample, plus review threads on !847: DiffNotes on two files, overview notes, one internal."""
    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        for i in range(EXTRA_THREADS):
            position = {"new_path": f"services/auth/file_{i % 2}.py", "new_line": 10 + i} if i % 3 else None
            thread = sb.state.create_discussion("acme/platform", "merge_requests", 847, f"review remark {i}",
                                                position=position)
            if i % 10 == 0:
                sb.state.reply("acme/platform", "merge_requests", 847, thread["id"], f"reply to remark {i}")
        sb.state.create_discussion("acme/platform", "merge_requests", 847, "Internal: do not ship before audit",
                                   internal=True)
        yield sb


@pytest.fixture(scope="module")
def store(sample: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the synced sample (the MCP server may put its socket there)."""
    data = tmp_path_factory.mktemp("mcp-comments") / "data"
    shutil.copytree(sample.config.data_dir, data, ignore=shutil.ignore_patterns("*.sock"))
    return data


def make_config(store: Path, url: str, **mcp: Any) -> Config:
    doc = {"gitlab": {"url": url, "rate_limit": 0, "max_retries": 3, "timeout": 5},
           "projects": ["acme/platform", "acme/web-app"], "storage": {"data_dir": str(store)}, "mcp": mcp}
    return parse_config(doc, store, {}, "test")


def call(config: Config, name: str, arguments: dict[str, Any]) -> Any:
    """One tool call through the SDK's client, which checks the result against the output schema."""
    server = build_server(Resident(config, local_socket=False).context)

    async def go() -> Any:
        async with Client(server) as client:
            return await client.call_tool(name, arguments)

    return asyncio.run(go())


def comments(config: Config, **arguments: Any) -> dict[str, Any]:
    result = call(config, "gitlab_get_mr_comments", {**MR, **arguments})
    assert not result.is_error, result.content[0].text
    jsonschema.validate(result.structured_content, COMMENTS_SCHEMA, format_checker=jsonschema.FormatChecker())
    return result.structured_content


def error(config: Config, name: str, arguments: dict[str, Any]) -> str:
    result = call(config, name, arguments)
    assert result.is_error
    text = result.content[0].text
    assert "\n" not in text and DEFAULT_TOKEN not in text
    return text


@pytest.fixture(scope="module")
def config(store: Path, gitlab: SandboxGitLab) -> Config:
    return make_config(store, gitlab.url)


# -- from the store ------------------------------------------------------------------------------


def test_store_comments_combine_diff_and_overview_notes_with_counts(config: Config) -> None:
    out = comments(config)
    notes = out["comments"]
    # The sample's !847: 22 notes, 6 of them system notes, which includeSystem (false) leaves out.
    assert out["counts"] == {"comments": 16, "discussions": len({c["thread_id"] for c in notes}), "notes": 22}
    assert not any(c["system"] for c in notes)
    assert {c["source"] for c in notes} == {"discussion"}
    diff = [c for c in notes if c["position"]]
    assert diff and all(c["file_path"] == (c["position"]["new_path"] or c["position"]["old_path"]) for c in diff)
    assert any(c["position"] is None and c["file_path"] is None for c in notes)
    assert all(c["author"]["username"] and isinstance(c["author"]["id"], int) for c in notes)
    without_overview = comments(config, includeOverviewNotes=False)
    assert without_overview["counts"]["comments"] == len(diff)
    # The project by its numeric id, or by its path in another case (as GitLab resolves it).
    for project in ("101", "ACME/Platform"):
        assert comments(config, project=project)["comments"] == notes


def test_only_unresolved_and_only_resolved_split_the_resolvable_notes(config: Config) -> None:
    everything = comments(config)["comments"]
    unresolved = comments(config, onlyUnresolved=True)["comments"]
    resolved = comments(config, onlyResolved=True)["comments"]
    assert unresolved and all(c["resolvable"] and c["resolved"] is False for c in unresolved)
    assert resolved and all(c["resolvable"] and c["resolved"] is True for c in resolved)
    assert len(unresolved) + len(resolved) == sum(1 for c in everything if c["resolvable"])
    assert "exclude each other" in error(config, "gitlab_get_mr_comments", {**MR, "onlyResolved": True,
                                                                             "onlyUnresolved": True})


def test_markdown_digest_carries_author_time_file_and_link(config: Config) -> None:
    out = comments(config, format="markdown", onlyUnresolved=True)
    digest = out["markdown"]
    assert digest.startswith("# Review comments on acme/platform!847")
    assert digest.index("## Unresolved") >= 0 and "## Resolved" not in digest
    for c in out["comments"]:
        line = next(li for li in digest.splitlines() if f"#note_{c['note_id']})" in li)
        assert f"@{c['author']['username']}" in line and c["created_at"][:10] in line
        if c["file_path"]:
            assert c["file_path"] in line
    assert "markdown" not in comments(config)  # json format: the digest is the text content only


def test_include_system_adds_exactly_the_system_notes_from_the_store_and_live(config: Config) -> None:
    system_ids = {}
    for live, notes in ((False, SAMPLE_NOTES), (True, SAMPLE_NOTES + EXTRA_THREADS + EXTRA_THREADS // 10)):
        with_system = comments(config, live=live, includeSystem=True)
        without = comments(config, live=live, includeSystem=False)
        system = [c for c in with_system["comments"] if c["system"]]
        assert len(system) == SYSTEM_NOTES, live
        assert with_system["counts"]["notes"] == without["counts"]["notes"] == notes
        assert with_system["counts"]["comments"] == notes
        assert without["counts"]["comments"] == notes - SYSTEM_NOTES
        assert not any(c["system"] for c in without["comments"])
        # The system-only threads are threads of their own: they add to the thread count.
        assert with_system["counts"]["discussions"] > without["counts"]["discussions"]
        assert [c for c in with_system["comments"] if not c["system"]] == without["comments"]
        system_ids[live] = {c["note_id"] for c in system}
        digest = comments(config, live=live, includeSystem=True, format="markdown")["markdown"]
        assert digest.count("system note") == SYSTEM_NOTES
    # The store holds the very notes GitLab serves.
    assert system_ids[False] == system_ids[True]


def test_include_system_agrees_for_an_mr_nobody_commented_on(config: Config) -> None:
    """!818 has no user notes, only GitLab's ("approved this merge request", "mentioned in ..."):
    the store holds them as GitLab serves them, as it does for a commented MR."""
    uncommented = {"project": "acme/platform", "mr": 818, "includeSystem": True}
    store = call(config, "gitlab_get_mr_comments", uncommented).structured_content
    live = call(config, "gitlab_get_mr_comments", {**uncommented, "live": True}).structured_content
    bodies = [c["body"] for c in store["comments"]]
    assert "approved this merge request" in bodies
    assert [(c["note_id"], c["body"]) for c in store["comments"]] == [(c["note_id"], c["body"]) for c in live["comments"]]
    assert store["counts"] == live["counts"]


def test_include_system_says_when_the_threads_predate_system_notes(config: Config) -> None:
    """A store upgraded to schema 5 keeps an MR's old threads until the next sync fetches them again."""
    mr_row = "SELECT raw_payload_id FROM merge_requests WHERE iid = 847 AND project_id = 101"
    with Workspace(config).write() as con:
        fetched = con.execute(f"SELECT discussions_fetched_at FROM raw_payloads WHERE id = ({mr_row})").fetchone()[0]
        con.execute(f"UPDATE raw_payloads SET discussions_fetched_at = NULL WHERE id = ({mr_row})")
    try:
        assert "may be missing" in call(config, "gitlab_get_mr_comments", {**MR, "includeSystem": True}).content[0].text
        assert "may be missing" not in call(config, "gitlab_get_mr_comments", MR).content[0].text
    finally:
        with Workspace(config).write() as con:
            con.execute(f"UPDATE raw_payloads SET discussions_fetched_at = ? WHERE id = ({mr_row})", [fetched])
    assert fetched is not None
    assert "may be missing" not in call(config, "gitlab_get_mr_comments", {**MR, "includeSystem": True}).content[0].text


def test_unknown_projects_and_bad_arguments_are_tool_errors(config: Config) -> None:
    message = error(config, "gitlab_get_mr_comments", {"project": "acme/nope", "mr": 1})
    assert "unknown project" in message and "acme/platform" in message
    assert "perPage" in error(config, "gitlab_get_mr_comments", {**MR, "perPage": 101})


# -- live from GitLab ----------------------------------------------------------------------------


def test_live_follows_every_page_and_keeps_thread_order(config: Config, gitlab: SandboxGitLab) -> None:
    gitlab.reset_stats()
    out = comments(config, live=True, perPage=50, includeSystem=True)
    pages = gitlab.stats()["by_route"].get("merge_request_discussions")
    assert pages == 3
    notes = out["comments"]
    assert out["counts"]["notes"] == SAMPLE_NOTES + EXTRA_THREADS + EXTRA_THREADS // 10  # not the internal note
    assert out["counts"]["comments"] == len(notes) > 100
    system = [c for c in notes if c["system"]]
    assert len(system) == SYSTEM_NOTES
    remarks = [int(c["body"].split()[-1]) for c in notes if c["body"].startswith("review remark")]
    assert remarks == list(range(EXTRA_THREADS))
    replies = [i for i, c in enumerate(notes) if c["body"] == "reply to remark 0"]
    assert replies and notes[replies[0] - 1]["body"] == "review remark 0"
    assert not any("do not ship" in c["body"] for c in notes)
    without_system = comments(config, live=True)
    assert without_system["counts"]["comments"] == len(notes) - SYSTEM_NOTES
    assert not any(c["system"] for c in without_system["comments"])


def test_internal_notes_need_the_opt_in(store: Path, gitlab: SandboxGitLab) -> None:
    opted_in = make_config(store, gitlab.url, include_internal=True)
    notes = comments(opted_in, live=True)["comments"]
    assert any(c["body"].startswith("Internal: do not ship") for c in notes)


def test_rate_limits_and_server_errors_are_retried(config: Config, gitlab: SandboxGitLab) -> None:
    gitlab.set_faults("429:count=2,retry_after=0,path=/discussions;503:count=2,path=/merge_requests/847$")
    try:
        out = comments(config, live=True)
        assert out["counts"]["comments"] > 100
        assert gitlab.stats()["faults"] == {"429": 2, "503": 2}
    finally:
        gitlab.set_faults(None)


def test_gitlab_errors_are_one_line_saying_what_to_do(config: Config, gitlab: SandboxGitLab, store: Path) -> None:
    message = error(config, "gitlab_get_mr_comments", {"project": "acme/platform", "mr": 9999, "live": True})
    assert "no MR !9999" in message and "IID" in message
    message = error(config, "gitlab_get_mr_comments", {"project": "acme/nope", "mr": 1, "live": True})
    assert "acme/nope" in message and "not found" in message
    tokens = gitlab.tokens
    gitlab.tokens = frozenset({"glpat-someone-else"})
    try:
        message = error(config, "gitlab_get_mr_comments", {**MR, "live": True})
        assert "401" in message and "read_api" in message
    finally:
        gitlab.tokens = tokens
    unreachable = parse_config({"gitlab": {"url": "http://127.0.0.1:9", "rate_limit": 0, "max_retries": 1},
                                "projects": ["acme/platform"], "storage": {"data_dir": str(store)}}, store, {}, "t")
    assert "unreachable" in error(unreachable, "gitlab_get_mr_comments", {**MR, "live": True})


class _Forbidden(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = b'{"message":"403 Forbidden"}'
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_forbidden_says_the_token_lacks_access(store: Path) -> None:
    # The sandbox has no 403 fault: a GitLab that forbids everything, on a real socket.
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Forbidden)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        message = error(make_config(store, f"http://127.0.0.1:{httpd.server_address[1]}"),
                        "gitlab_get_mr_comments", {**MR, "live": True})
        assert "403" in message and "read_api" in message
    finally:
        httpd.shutdown()
        httpd.server_close()


# -- items and the store's lock ------------------------------------------------------------------


def test_items_leave_out_confidential_issues_and_internal_notes(config: Config, store: Path) -> None:
    result = call(config, "get_issue", {"iid": 234, "project": "acme/platform"})
    item = result.structured_content
    jsonschema.validate(item, schema("item.schema.json"))
    assert item["omitted"]["internal_notes"] == 1
    assert not any(n["internal"] for t in item["threads"] for n in t["notes"])
    assert "include_confidential" in error(config, "get_issue", {"iid": 215, "project": "acme/platform"})
    opted_in = make_config(store, "http://127.0.0.1:9", include_confidential=True, include_internal=True)
    secret = call(opted_in, "get_issue", {"iid": 215, "project": "acme/platform"}).structured_content
    assert secret["confidential"] and any(n["internal"] for t in secret["threads"] for n in t["notes"])
    mr = call(config, "get_merge_request", {"iid": 812}).structured_content
    assert mr["type"] == "merge_request" and mr["source_branch"] and mr["reference"] == "acme/platform!812"


def test_a_writing_sync_makes_store_tools_answer_busy_and_the_server_holds_no_lock(config: Config) -> None:
    path = str(config.duckdb_path)
    comments(config)  # read before the sync starts: the answer below comes from it
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from gitlab_knowledge.store.db import write_connection\n"
        f"with write_connection(Path({path!r}), wait=10):\n"
        "    print('holding', flush=True); sys.stdin.readline()")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        message = error(config, "gitlab_get_mr_comments", {"project": "acme/platform", "mr": 812})
        assert "busy" in message and "try again" in message
        assert "busy" in error(config, "get_merge_request", {"iid": 847})
        # An MR read before, from an unchanged store, is answered without opening DuckDB.
        assert comments(config)["counts"]["comments"] == 16
    finally:
        holder.communicate("done\n", timeout=30)
    assert comments(config, mr=812)["counts"]["comments"] > 0
    # Nothing stays open after the calls: the server lets the file go 0.1 s after its last read
    # (store/reader.py LINGER_S), within a writer's first retries.
    writer = subprocess.run([sys.executable, "-c", (
        "from pathlib import Path; from gitlab_knowledge.store.db import write_connection\n"
        f"with write_connection(Path({path!r}), wait=5): print('wrote')")], capture_output=True, text=True)
    assert writer.stdout.strip() == "wrote", writer.stderr


def test_schemas_are_valid_json_schema() -> None:
    for name in ("mr_comments.schema.json", "item.schema.json"):
        jsonschema.Draft202012Validator.check_schema(schema(name))
    assert json.loads(json.dumps(COMMENTS_SCHEMA))["required"] == ["project", "mr", "fetchedAt", "counts", "comments"]


def test_a_write_to_the_store_is_seen_by_the_next_call(config: Config) -> None:
    before = comments(config)["counts"]
    thread = comments(config)["comments"][0]["thread_id"]
    with Workspace(config).write() as con:
        con.execute("UPDATE raw_payloads SET deleted_at = now() WHERE resource_type = 'discussion' AND gitlab_key = ?",
                    [thread])
    try:
        after = comments(config)["counts"]
        assert after["discussions"] == before["discussions"] - 1 and after["notes"] < before["notes"]
    finally:
        with Workspace(config).write() as con:
            con.execute("UPDATE raw_payloads SET deleted_at = NULL WHERE gitlab_key = ?", [thread])


def test_overlapping_calls_read_the_store_together_and_leave_it_unlocked(config: Config) -> None:
    """Tool calls run on worker threads at once: one attachment of the store serves them all, and
    none is held once they are answered (and the reader's 0.1 s after them is over)."""
    server = build_server(Resident(config, local_socket=False).context)
    calls = [("gitlab_get_mr_comments", {"project": "acme/platform", "mr": 812, "includeSystem": True}),
             ("get_issue", {"iid": 234, "project": "acme/platform"}),
             ("related", {"ref": "acme/platform!847"}),
             ("explain", {"ref": "acme/platform#234"})] * 4

    async def go() -> list[Any]:
        async with Client(server) as client:
            return list(await asyncio.gather(*(client.call_tool(name, arguments) for name, arguments in calls)))

    results = asyncio.run(go())
    assert not [r.content[0].text for r in results if r.is_error]
    for i, result in enumerate(results[4:], 4):
        same = results[i % 4].structured_content
        if calls[i][0] == "explain":  # its chain carries the time of the check
            assert result.structured_content["verdict"] == same["verdict"]
        else:
            assert result.structured_content == same
    writer = subprocess.run([sys.executable, "-c", (
        "from pathlib import Path; from gitlab_knowledge.store.db import write_connection\n"
        f"with write_connection(Path({str(config.duckdb_path)!r}), wait=5): print('wrote')")],
        capture_output=True, text=True)
    assert writer.stdout.strip() == "wrote", writer.stderr


def test_what_a_sync_makes_confidential_leaves_the_next_answer_of_a_running_server(config: Config) -> None:
    """The lists of what agents may not see are rebuilt when the store changes, not per process."""
    server = build_server(Resident(config, local_socket=False).context)
    ref = {"ref": "acme/platform#234"}

    def linked_issues(result: Any) -> set[str]:
        assert not result.is_error, result.content[0].text
        return {link["reference"] for links in result.structured_content["links"].values() for link in links
                if link["type"] == "issue"}

    def set_confidential(reference: str, value: bool) -> None:
        path, _, iid = reference.partition("#")
        with Workspace(config).write() as con:
            con.execute("UPDATE issues SET confidential = ? WHERE iid = ? AND project_id = "
                        "(SELECT id FROM projects WHERE path_with_namespace = ?)", [value, int(iid), path])

    async def go() -> tuple[set[str], set[str], set[str]]:
        async with Client(server) as client:
            before = linked_issues(await client.call_tool("related", ref))
            hidden = sorted(before)[0]
            await asyncio.to_thread(set_confidential, hidden, True)
            try:
                during = linked_issues(await client.call_tool("related", ref))
            finally:
                await asyncio.to_thread(set_confidential, hidden, False)
            return before, during, linked_issues(await client.call_tool("related", ref))

    before, during, after = asyncio.run(go())
    assert len(during) == len(before) - 1 and during < before
    assert after == before
