"""`[mcp] auth = "gitlab"` over real sockets: each client of the HTTP server is the GitLab user
whose token it sends, as the sandbox GitLab answers that token.

The server runs in this process (uvicorn on a 127.0.0.1 socket, the SDK's Streamable HTTP app
behind the GitLab auth guard, exactly as serve_http stacks them) so a test can hand it a clock;
the official SDK client talks to it. A probe tool reports `current_viewer()` from inside the tool
handler; the last test runs `python -m gitlab_knowledge.mcp --http` itself with a real tool."""

import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import tomli_w
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gitlab_knowledge.config import Config, parse_config
from gitlab_knowledge.mcp import server as server_module
from gitlab_knowledge.mcp.asking import current_token, current_viewer
from gitlab_knowledge.mcp.context import Context
from gitlab_knowledge.mcp.gitlab_auth import gitlab_auth_app
from gitlab_knowledge.mcp.http import listen, transport_security, whole_body
from gitlab_knowledge.mcp.tools import Tool, all_tools
from gitlab_knowledge.store.reader import StoreReader
from gitlab_knowledge.viewer import MAINTAINER, NO_ACCESS, PLANNER, REPORTER
from gitlab_knowledge_sandbox import DEFAULT_TOKEN, SAMPLE_DATASET, SandboxGitLab
from gitlab_knowledge_sandbox.users import GUEST, set_visibility
from gitlab_knowledge_tests.conftest import REPO, subprocess_env
from gitlab_knowledge_tests.helpers import Clock

PLATFORM, WEB = 101, 102
TOKENS = {"rita": "glpat-rita-0123456789", "paula": "glpat-paula-0123456789", "xena": "glpat-xena-0123456789",
          "ada": "glpat-ada-0123456789"}


@pytest.fixture(scope="module")
def gitlab() -> Iterator[SandboxGitLab]:
    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        users = sb.state.users
        users.add_user("rita", TOKENS["rita"], user_id=901)
        users.set_member(PLATFORM, 901, REPORTER)
        users.add_user("paula", TOKENS["paula"], user_id=902)
        users.set_member(PLATFORM, 902, PLANNER)
        users.set_member(WEB, 902, MAINTAINER)
        users.add_user("xena", TOKENS["xena"], user_id=904, external=True)
        users.add_user("ada", TOKENS["ada"], user_id=905, admin=True)
        set_visibility(sb.state, WEB, "internal")
        yield sb


def make_config(tmp_path: Path, url: str, **gitlab: Any) -> Config:
    doc = {"gitlab": {"url": url, "rate_limit": 0, "timeout": 10, **gitlab}, "projects": ["acme/platform", "acme/web-app"],
           "storage": {"data_dir": str(tmp_path / "data")}, "mcp": {"auth": "gitlab"}}
    return parse_config(doc, tmp_path, {}, "test")


class Probe:
    """A tool that answers who the handler is asking for. With `meet`, the first two calls meet
    inside the handler before either answers: both are in flight at once in the server's one event
    loop."""

    def __init__(self) -> None:
        self.meet = False
        self.inside = 0
        self.met: asyncio.Event | None = None

    async def __call__(self, _ctx: Any, _args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if self.meet:
            self.met = self.met or asyncio.Event()
            self.inside += 1
            if self.inside == 2:
                self.met.set()
            await asyncio.wait_for(self.met.wait(), 120)  # a deadline for a broken test, not a bound
        viewer = current_viewer()
        assert viewer is not None
        answer = {"username": viewer.username, "admin": viewer.is_admin, "external": viewer.external,
                  "access": {str(k): v for k, v in sorted(viewer.access.items())},
                  "has_token": current_token() is not None}
        return json.dumps(answer), answer

    def tool(self) -> Tool:
        return Tool("whoami", "Who", "Who the call is asking for.", {"type": "object"}, {"type": "object"}, self)


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Start the HTTP app in this process on a real socket; yields a starter taking (config, clock)."""
    import uvicorn

    probe = Probe()
    monkeypatch.setattr(server_module, "all_tools", lambda: [*all_tools(), probe.tool()])
    servers: list[tuple[Any, threading.Thread]] = []

    def start(config: Config, clock: Clock, meet: bool = False, guard: bool = True) -> str:
        probe.meet = meet
        context = Context(config=config, resident=None, include_confidential=False,  # type: ignore[arg-type]
                          include_internal=False, reader=StoreReader(config.duckdb_path))
        app = whole_body(server_module.build_server(context, http=True).streamable_http_app(
            host="127.0.0.1", transport_security=transport_security("127.0.0.1")))
        if guard:
            app = gitlab_auth_app(app, config, clock=clock)
        sock = listen("127.0.0.1", 0)  # listening already: a client connecting now waits in the backlog
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
        thread.start()
        servers.append((server, thread))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=30)


async def whoami(url: str, token: str, calls: int = 1) -> list[dict[str, Any]]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(60))
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        answers = []
        for _ in range(calls):
            result = await client.call_tool("whoami", {})
            assert not result.is_error, result.content[0].text
            answers.append(result.structured_content)
        return answers


def post(url: str, token: str | None) -> httpx2.Response:
    headers = {"Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx2.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers, timeout=30)


def test_two_users_at_once_each_call_sees_its_own_viewer(gitlab: SandboxGitLab, serve: Any, tmp_path: Path) -> None:
    url = serve(make_config(tmp_path, gitlab.url), Clock(), meet=True)

    async def both() -> list[list[dict[str, Any]]]:
        return list(await asyncio.gather(whoami(url, TOKENS["rita"], 3), whoami(url, TOKENS["paula"], 3)))

    rita, paula = asyncio.run(both())
    # web-app is internal: rita reads it without a membership; paula is a maintainer there.
    assert rita == [{"username": "rita", "admin": False, "external": False,
                     "access": {str(PLATFORM): REPORTER, str(WEB): NO_ACCESS}, "has_token": True}] * 3
    assert paula == [{"username": "paula", "admin": False, "external": False,
                      "access": {str(PLATFORM): PLANNER, str(WEB): MAINTAINER}, "has_token": True}] * 3
    xena, ada = asyncio.run(whoami(url, TOKENS["xena"])), asyncio.run(whoami(url, TOKENS["ada"]))
    assert xena[0]["access"] == {} and xena[0]["external"]  # internal projects are not for external users
    assert ada[0]["admin"]


def test_each_request_is_its_own_token_not_the_session_s(gitlab: SandboxGitLab, serve: Any, tmp_path: Path) -> None:
    """A session opened with one token and continued with another (a refreshed OAuth token, or a
    session id taken over by someone else) is answered as the token each request carries."""
    url = serve(make_config(tmp_path, gitlab.url), Clock())

    async def switching() -> list[str]:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKENS['rita']}"}, timeout=httpx2.Timeout(60))
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            first = (await client.call_tool("whoami", {})).structured_content
            http.headers["Authorization"] = f"Bearer {TOKENS['paula']}"
            second = (await client.call_tool("whoami", {})).structured_content
            return [first["username"], second["username"]]

    assert asyncio.run(switching()) == ["rita", "paula"]


def test_a_token_gitlab_refuses_is_one_line_401_naming_the_metadata(gitlab: SandboxGitLab, serve: Any,
                                                                    tmp_path: Path) -> None:
    url = serve(make_config(tmp_path, gitlab.url), Clock())
    origin = url.removesuffix("/mcp")
    for token in ("glpat-not-a-real-token-42", None, "two words"):
        refused = post(url, token)
        assert refused.status_code == 401
        assert len(refused.text.strip().splitlines()) == 1 and "error" in refused.json()
        assert refused.headers["www-authenticate"].startswith(
            f'Bearer resource_metadata="{origin}/.well-known/oauth-protected-resource"')
        if token:
            assert token not in refused.text and token not in str(refused.headers)
    assert post(url, TOKENS["rita"]).status_code not in (401, 403, 503)  # through to the SDK


def test_protected_resource_metadata_names_the_gitlab(gitlab: SandboxGitLab, serve: Any, tmp_path: Path) -> None:
    url = serve(make_config(tmp_path, gitlab.url), Clock())
    for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"):
        answer = httpx2.get(url.removesuffix("/mcp") + path, timeout=30)
        assert answer.status_code == 200
        assert answer.json() == {"resource": url, "authorization_servers": [gitlab.url],
                                 "bearer_methods_supported": ["header"], "scopes_supported": ["read_api"],
                                 "resource_name": "gitlab_knowledge"}


def test_revocation_and_a_removed_membership_take_effect_when_the_cache_expires(serve: Any, tmp_path: Path) -> None:
    with SandboxGitLab(dataset=SAMPLE_DATASET) as gitlab:
        users = gitlab.state.users
        users.add_user("gus", "glpat-gus-0123456789", user_id=903)
        users.set_member(PLATFORM, 903, GUEST)
        users.set_member(WEB, 903, GUEST)
        clock = Clock()
        url = serve(make_config(tmp_path, gitlab.url), clock)
        assert asyncio.run(whoami(url, "glpat-gus-0123456789"))[0]["access"] == {str(PLATFORM): GUEST, str(WEB): GUEST}
        asked = gitlab.stats()["by_route"]["user"]

        users.set_member(WEB, 903, None)
        clock.now += 299  # within the 300 s bound: GitLab's answer stands, GitLab is not asked
        assert asyncio.run(whoami(url, "glpat-gus-0123456789"))[0]["access"] == {str(PLATFORM): GUEST, str(WEB): GUEST}
        assert gitlab.stats()["by_route"]["user"] == asked
        clock.now += 2
        assert asyncio.run(whoami(url, "glpat-gus-0123456789"))[0]["access"] == {str(PLATFORM): GUEST}

        users.revoke("glpat-gus-0123456789")
        assert post(url, "glpat-gus-0123456789").status_code not in (401, 503)  # cached
        clock.now += 301
        assert post(url, "glpat-gus-0123456789").status_code == 401


def test_without_a_viewer_a_gitlab_users_server_answers_no_tool(serve: Any, tmp_path: Path) -> None:
    """Fail closed: were the guard ever bypassed, a call would read as the sync's token; the server
    refuses it instead."""
    url = serve(make_config(tmp_path, "http://127.0.0.1:9"), Clock(), guard=False)

    async def call() -> Any:
        http = httpx2.AsyncClient(timeout=httpx2.Timeout(60))
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            return await client.call_tool("whoami", {})

    result = asyncio.run(call())
    assert result.is_error and "GitLab users only" in result.content[0].text


def test_gitlab_unreachable_is_one_line_503(serve: Any, tmp_path: Path) -> None:
    with SandboxGitLab(dataset=SAMPLE_DATASET) as gone:
        dead = gone.url
    url = serve(make_config(tmp_path, dead, max_retries=0), Clock())
    answer = post(url, "glpat-anyone-0123456789")
    assert answer.status_code == 503
    assert len(answer.text.strip().splitlines()) == 1 and "glpat-anyone" not in answer.text


def test_the_server_process_serves_gitlab_users(sample: Any, gitlab: SandboxGitLab, tmp_path: Path) -> None:
    """`python -m gitlab_knowledge.mcp --http` with auth = "gitlab": the guard is in front, a
    user's session runs a real tool, no bearer token is asked for, the token is never logged."""
    shutil.copytree(sample.config.data_dir, tmp_path / "data", ignore=shutil.ignore_patterns("*.sock"))
    config = tmp_path / "gitlab_knowledge.toml"
    config.write_text(tomli_w.dumps({
        "projects": ["acme/platform", "acme/web-app"], "storage": {"data_dir": str(tmp_path / "data")},
        "gitlab": {"url": gitlab.url, "rate_limit": 0, "max_retries": 1, "timeout": 10}, "mcp": {"auth": "gitlab"}}))
    proc = subprocess.Popen([sys.executable, "-m", "gitlab_knowledge.mcp", "--config", str(config), "--http",
                             "--port", "0"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=REPO,
                            env=subprocess_env())
    try:
        line = proc.stderr.readline()
        match = re.search(r"(http://\S+/mcp)", line)
        assert match, line
        url = match.group(1)
        assert post(url, "glpat-wrong-0123456789").status_code == 401
        assert post(url, DEFAULT_TOKEN + "x").status_code == 401

        async def session() -> Any:
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKENS['rita']}"}, timeout=httpx2.Timeout(60))
            async with http, Client(streamable_http_client(url, http_client=http)) as client:
                return await client.call_tool("index_status", {})

        result = asyncio.run(session())
        assert not result.is_error, result.content[0].text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        logged = proc.stderr.read()
        proc.stderr.close()
    assert TOKENS["rita"] not in logged and "glpat-wrong" not in logged
