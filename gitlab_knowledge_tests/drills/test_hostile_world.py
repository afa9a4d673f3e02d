"""A hostile world around one small synced store (issue 28): GitLab text written to drive the
reader's terminal, a confidential issue an MR closes, a `--full` listing with a row GitLab never
sends, a note of 50 MB, an MR of 100,000 files, an embedding server answering NaN, and a web page
of another site talking to the MCP server on every bind. Each drill runs the real parts
(the sandbox GitLab behind the hostile proxy, CLI and MCP server subprocesses, the store's own
files) and checks what the user sees: the exit code of the README's table, one line on stderr,
no escape byte on stdout, nothing stored removed, bounded answers that say what they left out.

One store for the module (CLI sync, embedded model): the drills read it, and the few that change
it put it back or change only what no other drill reads."""

import asyncio
import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from gitlab_knowledge.config import Config, load_config
from gitlab_knowledge_sandbox import SandboxGitLab, generate_dataset
from gitlab_knowledge_tests.conftest import REPO, forked, subprocess_env, write_config_file
from gitlab_knowledge_tests.helpers import scalar
from gitlab_knowledge_tests.support.hostile_proxy import HostileProxy, Rule

# An issue written to drive the reader's terminal: clear the screen, retitle the window, colour,
# reorder with bidi overrides, a C1 CSI, a bell.
HOSTILE_TITLE = "Zanzibar \x1b[2Jquartz\x1b]0;pwned\x07 ledger \u202eevil\u202c \x9b31mcobalt\x07"
HOSTILE_BODY = "Body of zanzibar\x1b[8m hidden \x1b[0m\nsecond \u2066line\u2069 \x1bPdcs\x1b\\ end"
UNSAFE = set(chr(c) for c in [*range(0x00, 0x09), *range(0x0b, 0x20), *range(0x7f, 0xa0)]) | set(
    "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# A confidential issue's title, and words of it an attacker guesses (none is in the MR that closes it).
SECRET_TITLE = "Marmoset payroll export leaks salaries through the quarterly webhook"
SECRET_WORDS = "marmoset payroll salaries webhook"


@dataclass
class World:
    sb: SandboxGitLab
    proxy: HostileProxy
    home: Path  # gitlab_knowledge.toml + data/
    project: str
    hostile: int  # the issue with the hostile title
    fix: int  # the MR closing it
    secret: int  # the confidential issue
    closer: int  # the MR closing it
    spare: int  # an issue GitLab may delete

    @property
    def config_path(self) -> Path:
        return self.home / "gitlab_knowledge.toml"

    @property
    def config(self) -> Config:
        return load_config(self.config_path)


def cli(world: World, *args: str, module: str = "gitlab_knowledge", **env: str) -> subprocess.CompletedProcess[str]:
    return forked([module, *args, "--config", str(world.config_path)], cwd=world.home, env=subprocess_env(**env),
                  timeout=300)


def search(world: World, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return cli(world, *args, module="gitlab_knowledge.search", **env)


def said_once(done: subprocess.CompletedProcess[str], words: str) -> None:
    """A failure the user reads: one line on stderr with `words`, no traceback."""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    base = tmp_path_factory.mktemp("hostile-world")
    generate_dataset(base / "dataset", projects=1, issues=6, mrs=3, seed=28, threads_per_parent_mean=1.0)
    with SandboxGitLab(dataset=base / "dataset") as sb, HostileProxy(sb.url) as proxy:
        project = sb.state.list_projects()[0]["path_with_namespace"]
        state = sb.state
        hostile = state.create_issue(project, HOSTILE_TITLE, description=HOSTILE_BODY, labels="esc\x1b[5mlabel")
        fix = state.create_merge_request(project, "Fix \x1b[31mzanzibar\x1b[0m", "fix-z", "main",
                                         description=f"Closes #{hostile['iid']}")
        secret = state.create_issue(project, SECRET_TITLE, confidential=True,
                                    description="Only the payroll team may read this.")
        closer = state.create_merge_request(project, "Tidy the request validator", "tidy", "main",
                                            description=f"Closes #{secret['iid']}")
        spare = state.create_issue(project, "A throwaway issue GitLab deletes later")
        home = base / "home"
        home.mkdir()
        write_config_file(home / "gitlab_knowledge.toml", sb, home / "data", url=proxy.url)
        world = World(sb, proxy, home, project, hostile["iid"], fix["iid"], secret["iid"], closer["iid"],
                      spare["iid"])
        first = cli(world, "sync")
        assert first.returncode == 0, first.stderr
        yield world


def tools() -> dict[str, Any]:
    """The MCP server's tools by name: the functions each call runs, in-process."""
    from gitlab_knowledge.mcp.tools import all_tools

    return {t.name: t for t in all_tools()}


def stored(config: Config) -> tuple[int, int]:
    """(issues and MRs stored, raw payloads marked removed)."""
    items = scalar(config, "SELECT (SELECT count(*) FROM issues) + (SELECT count(*) FROM merge_requests)")
    return items, scalar(config, "SELECT count(*) FROM raw_payloads WHERE deleted_at IS NOT NULL")


# -- GitLab's side ------------------------------------------------------------------------------

def test_a_bad_row_in_a_full_listing_removes_nothing(world: World, token_env: str) -> None:
    """Issue 28 point 1: the `--full` listing's row of a stored issue comes without a usable id.
    That row may be the item, so the listing is incomplete for removal: the item stays, the run
    names the row and the held-back removal once each and succeeds (exit 0: the rest synced).
    Then the control: a complete listing without the item removes it."""
    from gitlab_knowledge.sync import engine
    from gitlab_knowledge.workspace import Workspace

    before = stored(world.config)
    rule = Rule(r"/projects/\d+/issues$", "bad_row", iid=world.spare, bad_id=None)
    world.proxy.add(rule)
    try:
        full = cli(world, "sync", "--full", "--json")
    finally:
        world.proxy.clear()
    assert rule.spoilt == 1
    assert full.returncode == 0, full.stderr
    [outcome] = json.loads(full.stdout)["projects"]
    assert (outcome["rejected"], outcome["deleted"]) == (1, 0), outcome
    said = [line for line in full.stderr.splitlines() if "rejected" in line or "incomplete" in line]
    assert said == [f"{world.project}: issue iid {world.spare} rejected: id is missing",
                    f"{world.project}: issues listing incomplete (1 rejected row): nothing removed as no "
                    "longer in GitLab on this run"], full.stderr
    assert "Traceback" not in full.stderr and "\x1b" not in full.stdout
    assert stored(world.config) == before

    # A non-integer id, through the raw layer alone (where removals happen; the job around it
    # costs a process): the same.
    config = world.config
    world.proxy.add(rule := Rule(r"/projects/\d+/issues$", "bad_row", iid=world.spare, bad_id="12x"))
    try:
        totals = engine.refresh(Workspace(config), world.project, full=True).totals()
    finally:
        world.proxy.clear()
    assert rule.spoilt == 1 and (totals["rejected"], totals["deleted"]) == (1, 0), totals
    assert stored(config) == before

    # The control: GitLab deleted it, and a listing with every row readable leaves it out.
    world.sb.state.delete(world.project, "issues", world.spare)
    assert engine.refresh(Workspace(config), world.project, full=True).totals()["deleted"] == 1
    assert stored(config)[1] == 1


def test_escape_codes_in_gitlab_text_never_reach_the_terminal(world: World) -> None:
    """Issue 28 point 5: search, show, list and related print GitLab's text without what a
    terminal would obey; --json keeps it exact."""
    project, issue, mr = world.project, world.hostile, world.fix
    outputs = {
        "search": search(world, "zanzibar quartz ledger", "--mode", "lexical"),
        "show": cli(world, "show", "issue", str(issue), "--project", project),
        "list": cli(world, "list", "issues", "--project", project, "--limit", "200"),
        "related": cli(world, "related", f"{project}!{mr}"),
        "related issue": cli(world, "related", f"{project}#{issue}"),
    }
    for name, done in outputs.items():
        assert done.returncode == 0, (name, done.stderr)
        unsafe = sorted(UNSAFE & set(done.stdout + done.stderr))
        assert not unsafe, (name, unsafe, done.stdout)
        assert "Zanzibar" in done.stdout and "quartz" in done.stdout, (name, done.stdout)
    assert "ledger evil" in outputs["search"].stdout and "cobalt" in outputs["list"].stdout
    assert "Body of zanzibar hidden" in outputs["show"].stdout and "second line" in outputs["show"].stdout
    assert "esclabel" in outputs["show"].stdout and "Fix zanzibar" in outputs["related issue"].stdout
    shown = json.loads(cli(world, "show", "issue", str(issue), "--project", project, "--json").stdout)
    assert shown["title"] == HOSTILE_TITLE


def test_a_confidential_title_behind_closes_is_not_searchable_through_the_mr(world: World) -> None:
    """Issue 28 point 3: the MR that closes a confidential issue was an oracle for its title (a
    search with confidential items left out found the MR by the title's words, score 1.0). Its
    document keeps the reference, not the title."""
    from gitlab_knowledge.search.filters import Filters
    from gitlab_knowledge.workspace import Workspace

    config = world.config
    closes = [line for line in scalar(config, "SELECT content_text FROM documents WHERE source_type = "
                                              "'merge_request' AND parent_iid = ?", [world.closer]).splitlines()
              if line.startswith("Closes:")]
    assert closes == [f"Closes: #{world.secret}"], closes
    # The attacker's guess, as a person searches without confidential items (what MCP does by default).
    for mode in ("hybrid", "lexical"):
        done = search(world, SECRET_WORDS, "--no-confidential", "--mode", mode, "--json")
        assert done.returncode == 0, done.stderr
        results = json.loads(done.stdout)["results"]
        assert not any(r["confidential"] for r in results), mode
        assert world.closer not in [r["iid"] for r in results if r["type"] == "merge_request"], (mode, results)
    searcher = Workspace(config).searcher()
    hidden = Filters(exclude_confidential=True)
    # The control: with confidential items allowed, the issue itself is what the words find.
    found = searcher.search(SECRET_WORDS, mode="lexical", limit=5).results
    assert found[0].fields["confidential"] and found[0].fields["iid"] == world.secret
    # The pinned path: the issue's reference shows nothing confidential (the MR may come: its text names it).
    pinned = searcher.search(f"#{world.secret}", hidden, mode="lexical", limit=10).results
    assert pinned and not any(r.fields["confidential"] for r in pinned)


# -- bounded answers ----------------------------------------------------------------------------

def test_show_bounds_a_50_mb_note_and_says_what_it_left_out(world: World) -> None:
    """Issue 28 point 6: `show` of an item with a 50 MB note had written 5 KB after 11 minutes (MCP
    cut the same note at 8,000 characters). Each body shown is cut at SHOW_BODY_CHARS with a line
    saying how much more there is; --json keeps it whole; MCP's get_issue cuts it at BODY_CHARS."""
    import duckdb

    from gitlab_knowledge.cli.inspect_cmd import SHOW_BODY_CHARS
    from gitlab_knowledge.mcp.bounds import BODY_CHARS
    from gitlab_knowledge.mcp.context import Context

    project = world.project
    issue = next(i["iid"] for i in world.sb.state.list_items(project, "issues") if i["user_notes_count"] > 0
                 and i["iid"] not in (world.hostile, world.secret))
    ref = ("show", "issue", str(issue), "--project", project)
    note_id = json.loads(cli(world, *ref, "--json").stdout)["threads"][0]["notes"][0]["id"]
    db = str(world.config.duckdb_path)
    with duckdb.connect(db) as con:
        [(before,)] = con.execute("SELECT body FROM notes WHERE id = ?", [note_id]).fetchall()
        con.execute("UPDATE notes SET body = repeat('a line of a very long note, fifty characters long.' "
                    "|| chr(10), 1000000) WHERE id = ?", [note_id])
    try:
        shown = cli(world, *ref)
        assert shown.returncode == 0, shown.stderr
        left_out = 51 * 1_000_000 - SHOW_BODY_CHARS
        assert f"[… {left_out:,} more characters not shown: `show issue {issue} --project {project} --full`" \
            in shown.stdout
        assert len(shown.stdout) < SHOW_BODY_CHARS * 3
        whole = json.loads(cli(world, *ref, "--json").stdout)
        assert len(whole["threads"][0]["notes"][0]["body"]) == 51 * 1_000_000
        # What an agent gets: the note cut at BODY_CHARS with a marker saying how much more.
        ctx = Context.create(world.config, resident=None)  # type: ignore[arg-type]  # get_issue searches nothing
        text, item = asyncio.run(tools()["get_issue"].handler(ctx, {"iid": issue, "project": project}))
        note = item["threads"][0]["notes"][0]["body"]
        assert note.startswith("a line of") and len(note) < BODY_CHARS + 200
        assert f"[… cut by gitlab_knowledge: {51 * 1_000_000 - BODY_CHARS:,} more characters" in note
        assert len(text) < BODY_CHARS * 3
    finally:
        # Through the store's own open: get_issue above leaves the file attached for a moment (the
        # server's reader lingers, store/reader.py), and the store's opens make it let go first.
        from gitlab_knowledge.store.db import write_connection
        with write_connection(world.config.duckdb_path) as con:
            con.execute("UPDATE notes SET body = ? WHERE id = ?", [before, note_id])
    assert "more characters not shown" not in cli(world, *ref).stdout


def test_an_mr_of_100000_files_is_bounded_in_every_mcp_answer(world: World, tmp_path: Path) -> None:
    """Issue 28 point 6: file_history returned 12 MB for an MR of 100,000 files. get_merge_request
    and file_history list ITEM_FILES of them and say how many they left out."""
    import shutil

    import duckdb
    import jsonschema

    from gitlab_knowledge.config import parse_config
    from gitlab_knowledge.graph import path_rows
    from gitlab_knowledge.mcp.bounds import ITEM_FILES
    from gitlab_knowledge.mcp.context import Context

    shutil.copytree(world.config.data_dir, tmp_path / "data", ignore=shutil.ignore_patterns("*.sock"))
    config = parse_config({"gitlab": {"url": "http://127.0.0.1:9"}, "projects": [world.project],
                           "storage": {"data_dir": str(tmp_path / "data")}}, tmp_path, {}, "t")
    with duckdb.connect(str(config.duckdb_path)) as con:
        mr_id, project_id = con.execute("SELECT id, project_id FROM merge_requests WHERE iid = ?",
                                        [world.fix]).fetchone()
        con.execute("INSERT INTO mr_files (merge_request_id, project_id, position, new_path, old_path, new_file) "
                    "SELECT ?, ?, 1000000 + i, 'generated/many/f' || i || '.py', "
                    "'generated/many/f' || i || '.py', true FROM range(100000) t(i)", [mr_id, project_id])
        path_rows.rebuild(con, [mr_id])  # and the paths it touched, as the graph layer keeps them
    tool = tools()
    ctx = Context.create(config, resident=None)  # type: ignore[arg-type]  # neither tool searches
    omitted = 100_000 - ITEM_FILES

    async def ask(name: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        text, out = await tool[name].handler(ctx, args)
        jsonschema.validate(out, tool[name].output_schema, format_checker=jsonschema.FormatChecker())
        assert len(text) < 100_000 and len(json.dumps(out)) < 200_000, (name, len(text), len(json.dumps(out)))
        return text, out

    text, out = asyncio.run(ask("file_history", {"path": "generated/many", "project": world.project}))
    [mr] = out["merge_requests"]
    assert len(mr["files"]) == ITEM_FILES and mr["files_omitted"] == omitted
    assert f"{omitted:,} more file(s) not shown" in text
    text, out = asyncio.run(ask("get_merge_request", {"iid": world.fix, "project": world.project}))
    assert len(out["files"]) == ITEM_FILES and out["omitted"]["files_over_limit"] == omitted
    assert out["counts"]["files"] >= 100_000 and f"[{omitted:,} more file(s) not shown" in text


# -- the embedding server -----------------------------------------------------------------------

def test_an_embedding_server_answering_nan(world: World, token_env: str) -> None:
    """Issue 28 point 7: a NaN query vector gave an empty answer and no warning. The search answers
    by keyword and says why; `embed` exits 6 with one line and keeps every stored vector."""
    from gitlab_knowledge.embeddings import refresh as embeddings
    from gitlab_knowledge.embeddings.ollama_provider import OllamaProvider
    from gitlab_knowledge.embeddings.vectors import VectorStore
    from gitlab_knowledge.workspace import Workspace
    from gitlab_knowledge_tests.support.fake_ollama import FakeOllama

    with FakeOllama() as fake:
        # An honest table of the Ollama model first, then the server goes bad.
        embeddings.refresh(Workspace(world.config), world.project, provider=OllamaProvider(host=fake.url))
        table = VectorStore(world.config.lancedb_dir, "ollama", "nomic-embed-text")
        before = table.count()
        assert before[0] > 0
        fake.poison(float("nan"))
        env = {"GITLAB_KNOWLEDGE_EMBEDDING": "ollama", "OLLAMA_HOST": fake.url}
        found = search(world, "zanzibar ledger", "--json", **env)
        assert found.returncode == 0, found.stderr
        answer = json.loads(found.stdout)
        assert answer["effective_mode"] == "lexical" and answer["results"], answer
        assert any("NaN" in w for w in answer["warnings"]), answer["warnings"]
        human = search(world, "zanzibar ledger", **env)
        assert human.returncode == 0 and "Zanzibar" in human.stdout and "\x1b" not in human.stdout
        assert human.stderr.splitlines() == ["warning: Embedding service unavailable, using lexical search only",
                                             "warning: the embedding model returned a query vector with NaN or "
                                             "infinite values"], human.stderr
        embed = cli(world, "embed", "--all", "--model", "ollama:nomic-embed-text", **env)
        assert embed.returncode == 6, embed.stdout + embed.stderr
        # One error line; beside it the project's warning (which project, retried next run) and
        # the progress line, no log record per batch.
        errors = [line for line in embed.stderr.splitlines() if not line.endswith("to examine")]
        assert errors == [f"warning: {world.project}: {before[0]} document(s) failed to embed (ollama/nomic-embed-text "
                          "returned a vector with NaN or infinite values); they are retried on the next run",
                          f"error: {before[0]} document(s) could not be embedded: ollama/nomic-embed-text "
                          "returned a vector with NaN or infinite values"], embed.stderr
        assert table.count() == before  # every stored vector is still there


# -- a web page of another site -----------------------------------------------------------------

BEARER_ENV = "GK_DRILL_MCP_BEARER"
BEARER = "drill-bearer-0123456789"


def start_http(config_path: Path, host: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "gitlab_knowledge.mcp", "--config", str(config_path), "--http",
                             "--host", host, "--port", "0"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True, cwd=REPO, env=subprocess_env(**{BEARER_ENV: BEARER}))
    assert proc.stderr is not None
    line = proc.stderr.readline()
    match = re.search(r"(http://\S+/mcp)", line)
    assert match, line + (proc.stderr.read() if proc.poll() is not None else "")
    return proc, match.group(1)


def post(url: str, **headers: str) -> int:
    import httpx2

    return httpx2.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                       headers={"Accept": "application/json, text/event-stream", **headers}, timeout=10).status_code


def raw_post(url: str, origin: bytes, headers: dict[str, str]) -> int:
    """A POST with header bytes no HTTP client library would send; its status."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'
    head = {"Host": parts.netloc, "Content-Type": "application/json", "Content-Length": str(len(body)),
            "Accept": "application/json, text/event-stream", "Connection": "close", **headers}
    request = (f"POST {parts.path} HTTP/1.1\r\n".encode() + b"".join(f"{k}: {v}\r\n".encode() for k, v in head.items())
               + b"Origin: " + origin + b"\r\n\r\n" + body)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as conn:
        conn.sendall(request)
        return int(conn.recv(64).split(b" ")[1])


@pytest.mark.parametrize("token", [False, True], ids=["no token", "bearer token"])
@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "0:0:0:0:0:0:0:1", "0.0.0.0"])
def test_every_bind_refuses_a_foreign_origin_or_host(tmp_path: Path, host: str, token: bool) -> None:
    """Issue 28 point 4: DNS-rebinding protection held only for the literal loopback names, and a
    token-protected bind never checked Origin. A page of another site (its Origin) or a rebound
    name (its Host) is refused on every bind, with the token and without; the bind's own names
    pass. An empty store: the checks come before any tool."""
    path = tmp_path / "gitlab_knowledge.toml"
    path.write_text(tomli_w.dumps({"projects": ["drill/origin"], "gitlab": {"url": "http://127.0.0.1:9"},
                                   "storage": {"data_dir": str(tmp_path / "data")},
                                   "mcp": {"bearer_token_env": BEARER_ENV} if token else {}}))
    if host == "0.0.0.0" and not token:  # beyond loopback a token is required: exit 2, one line
        done = subprocess.run([sys.executable, "-m", "gitlab_knowledge.mcp", "--config", str(path), "--http",
                               "--host", host, "--port", "0"], capture_output=True, text=True, cwd=REPO,
                              env=subprocess_env(), timeout=60)
        assert done.returncode == 2
        said_once(done, "bearer_token_env")
        return
    proc, url = start_http(path, host)
    auth = {"Authorization": f"Bearer {BEARER}"} if token else {}
    try:
        if host == "0.0.0.0":
            url = url.replace("0.0.0.0", "127.0.0.1")
        own = url.split("/mcp")[0]
        if token:
            assert post(url, Origin="http://evil.example") == 401  # the token first
        assert post(url, Origin="http://evil.example", **auth) == 403
        if host != "0.0.0.0":  # a wildcard bind answers to names it cannot know: Origin guards it
            assert post(url, Host="evil.example", **auth) == 421
            assert post(url, Origin="http://evil.example", Host="evil.example", **auth) == 421
        assert post(url, **auth) not in (401, 403, 421)
        assert post(url, Origin=own, **auth) not in (401, 403, 421)
        # An Origin carrying a C1 CSI (HTTP lets bytes over 0x7f through, read as C1 characters):
        # refused, and the server's log line quoting it obeys no terminal.
        assert raw_post(url, b"http://evil\x9b2J\x9d0;pwned\x9c.example", auth) == 403
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert proc.stderr is not None
        log = proc.stderr.read()
        proc.stderr.close()
    assert "Traceback" not in log and BEARER not in log
    assert not UNSAFE & set(log), log
