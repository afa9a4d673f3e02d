"""The MCP server as clients run it: `python -m gitlab_knowledge.mcp` in a subprocess, driven by
the SDK's own client over stdio and over Streamable HTTP; every tool listed, called and its output
checked against its schema; a sync committing while it serves; the search command asking it."""

import asyncio
import json
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import jsonschema
import pytest
import tomli_w
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from gitlab_knowledge.config import load_config
from gitlab_knowledge.search.resident_client import server_status, socket_path
from gitlab_knowledge_sandbox import DEFAULT_TOKEN, SAMPLE_DATASET, SandboxGitLab
from gitlab_knowledge_tests.conftest import REPO, subprocess_env

TOOLS = {"search", "get_issue", "get_merge_request", "gitlab_get_mr_comments", "explain", "index_status", "related",
         "file_history", "me", "person", "similar", "list_items", "get_wiki_page", "get_release"}
CALLS = [
    ("search", {"query": "why did we choose redis", "limit": 5}),
    ("search", {"query": "session", "mode": "lexical", "type": ["merge_request"], "label": ["auth"], "limit": 3}),
    ("get_issue", {"iid": 196, "project": "acme/platform"}),
    ("get_merge_request", {"iid": 812, "project": "acme/platform"}),
    ("gitlab_get_mr_comments", {"project": "acme/platform", "mr": 847, "format": "markdown"}),
    ("gitlab_get_mr_comments", {"project": "101", "mr": 847, "live": True, "includeSystem": True, "perPage": 5}),
    ("explain", {"ref": "acme/platform!812"}),
    ("index_status", {}),
    ("related", {"ref": "acme/platform!847"}),
    ("get_wiki_page", {"slug": "adr/ADR-012-jwt-access-tokens"}),
    ("search", {"query": "promote the postgres replica", "type": ["wiki"], "limit": 3}),
    ("get_release", {"tag": "release:v3.2.0"}),
    ("search", {"query": "when did dark mode ship", "type": ["release"], "limit": 3}),
    ("file_history", {"path": "services/auth", "project": "acme/platform", "limit": 5}),
    ("me", {"user": "johndoe", "since": "2024-01-01"}),
]
NEW_TITLE = "Quokka migration checklist for the zebrafish cluster"
BEARER_ENV = "GK_TEST_MCP_BEARER"


@pytest.fixture(scope="module")
def gitlab() -> Iterator[SandboxGitLab]:
    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        yield sb


@pytest.fixture(scope="module")
def config_path(sample: Any, gitlab: SandboxGitLab, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("mcp-server")
    shutil.copytree(sample.config.data_dir, base / "data", ignore=shutil.ignore_patterns("*.sock"))
    path = base / "gitlab_knowledge.toml"
    path.write_text(tomli_w.dumps({
        "projects": ["acme/platform", "acme/web-app"],
        "gitlab": {"url": gitlab.url, "rate_limit": 0, "max_retries": 3, "timeout": 5},
        "storage": {"data_dir": str(base / "data")}, "mcp": {"bearer_token_env": BEARER_ENV}}))
    return path


def env(**extra: str) -> dict[str, str]:
    return subprocess_env(**{BEARER_ENV: "test-bearer-0123456789", **extra})


async def check_every_tool(client: Client) -> dict[str, Any]:
    listed = (await client.list_tools()).tools
    assert {t.name for t in listed} == TOOLS
    schemas = {t.name: t.output_schema for t in listed}
    for tool in listed:
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)
        jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        assert tool.annotations.read_only_hint
    answers = {}
    for name, arguments in CALLS:
        result = await client.call_tool(name, arguments)
        assert not result.is_error, (name, result.content[0].text)
        assert result.content[0].text.strip()
        jsonschema.validate(result.structured_content, schemas[name], format_checker=jsonschema.FormatChecker())
        answers[name] = result.structured_content
    # The ADR on the sample's wiki names the MR that implemented it.
    assert "acme/platform!847" in {link["reference"] for link in answers["get_wiki_page"]["links"]}
    # The release notes of web-app v3.2.0 name the MR that shipped dark mode, and its date.
    assert "acme/web-app!119" in {link["reference"] for link in answers["get_release"]["links"]}
    assert answers["get_release"]["released_at"].startswith("2024-04-05") and not answers["get_release"]["upcoming"]
    failed = await client.call_tool("get_issue", {"iid": 0})
    assert failed.is_error and "\n" not in failed.content[0].text
    return answers


def run_search(config_path: Path, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitlab_knowledge.search", *args, "--config", str(config_path)],
                          capture_output=True, text=True, cwd=REPO, env=env(**extra_env), timeout=120)


def same_search(resident: dict[str, Any], local: dict[str, Any]) -> None:
    """Equal but for timings; warm scores are a dot product in memory, LanceDB's its own
    float32 arithmetic, so a score may differ in the last of its six decimals."""
    for key in ("took_ms", "embed_ms"):
        resident.pop(key), local.pop(key)
    assert [r["document_id"] for r in resident["results"]] == [r["document_id"] for r in local["results"]]
    for a, b in zip(resident["results"], local["results"], strict=True):
        for field in ("score", "rrf_score"):
            assert a.pop(field) == pytest.approx(b.pop(field), abs=1e-4)
        for name in ("lexical", "semantic"):
            x, y = a["retriever_scores"].pop(name), b["retriever_scores"].pop(name)
            assert (x is None) == (y is None) and (x is None or x == pytest.approx(y, abs=1e-4))
    assert resident == local


def sync_project(config_path: Path) -> None:
    from gitlab_knowledge_tests.helpers import run_layers

    run_layers(load_config(config_path), ["acme/platform"], None)


def test_stdio_every_tool_a_sync_while_serving_and_the_search_command(config_path: Path,
                                                                      gitlab: SandboxGitLab) -> None:
    config = load_config(config_path)
    params = StdioServerParameters(command=sys.executable, args=["-m", "gitlab_knowledge.mcp", "--config",
                                                                 str(config_path)], env=env(), cwd=str(REPO))

    async def session() -> None:
        async with Client(params) as client:
            answers = await check_every_tool(client)
            assert answers["search"]["results"] and answers["search"]["limit"] == 3
            secret = await client.call_tool("search", {"query": "SSRF webhook URL validation bypass internal",
                                                       "limit": 20})
            assert not any(r["confidential"] or r["internal"] for r in secret.structured_content["results"])
            # The graph filters reach the resident searcher as the CLI's do.
            scoped = await client.call_tool("search", {"query": "token", "path": "services/auth", "limit": 10})
            assert not scoped.is_error, scoped.content[0].text
            assert scoped.structured_content["filters"]["path"] == "services/auth"
            assert scoped.structured_content["results"]
            assert {r["type"] for r in scoped.structured_content["results"]} <= {"merge_request", "discussion"}

            # The search command finds this server by its data directory and prints what it would have.
            before = server_status(config)["answered"]
            resident = await asyncio.to_thread(run_search, config_path, "why did we choose redis", "--json")
            local = await asyncio.to_thread(run_search, config_path, "why did we choose redis", "--json",
                                            GITLAB_KNOWLEDGE_RESIDENT="off")
            assert resident.returncode == local.returncode == 0, resident.stderr + local.stderr
            same_search(json.loads(resident.stdout), json.loads(local.stdout))
            human = await asyncio.to_thread(run_search, config_path, "redis", "--mode", "lexical", "--limit", "3")
            human_local = await asyncio.to_thread(run_search, config_path, "redis", "--mode", "lexical",
                                                  "--limit", "3", GITLAB_KNOWLEDGE_RESIDENT="off")
            timing = re.compile(r"search, \d+\.\d\ds\)")
            assert timing.sub("", human.stdout) == timing.sub("", human_local.stdout) and human.stdout
            bad = await asyncio.to_thread(run_search, config_path, "x", "--after", "2024-13-01", "--json")
            assert bad.returncode == 2 and "calendar date" in json.loads(bad.stdout)["error"]
            # A project the store does not hold: the server refuses it as the command would.
            unknown = await asyncio.to_thread(run_search, config_path, "x", "--project", "nope/nope", "--json")
            assert unknown.returncode == 2 and "synced projects: acme/platform" in json.loads(unknown.stdout)["error"]
            assert server_status(config)["answered"] == before + 2

            # A sync commits new index versions while the server answers; it picks them up unrestarted.
            missing = await client.call_tool("search", {"query": "quokka zebrafish", "mode": "lexical"})
            assert missing.structured_content["total"] == 0
            gitlab.state.create_issue("acme/platform", NEW_TITLE, description="Zebrafish quokka runbook.")
            syncing = asyncio.ensure_future(asyncio.to_thread(sync_project, config_path))
            while not syncing.done():
                during = await client.call_tool("search", {"query": "redis session store", "limit": 3})
                assert not during.is_error, during.content[0].text
                await asyncio.sleep(0.2)
            await syncing
            # Each index is followed on its own (Tantivy's reader reloads after the commit, the warm
            # vectors on the new table version): until both have, the new issue may be found by one
            # retriever only, and ranked below a document both find. Waited for, not assumed.
            deadline = time.monotonic() + 90
            while True:
                found = await client.call_tool("search", {"query": "quokka zebrafish checklist", "limit": 3})
                titles = [r["title"] for r in found.structured_content["results"]]
                if titles[:1] == [NEW_TITLE] or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.3)
            assert titles[0] == NEW_TITLE
            issue = await client.call_tool("get_issue", {"iid": found.structured_content["results"][0]["iid"],
                                                         "project": "acme/platform"})
            assert issue.structured_content["title"] == NEW_TITLE

    asyncio.run(session())
    deadline = time.monotonic() + 10
    while socket_path(config).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not socket_path(config).exists()  # the server removed its socket on the way out


def start_http(config_path: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "gitlab_knowledge.mcp", "--config", str(config_path), "--http",
                             "--port", "0", *args], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            cwd=REPO, env=env())
    line = proc.stderr.readline()
    match = re.search(r"(http://\S+/mcp)", line)
    assert match, line + (proc.stderr.read() if proc.poll() is not None else "")
    return proc, match.group(1)


def test_http_answers_with_the_bearer_token_only(config_path: Path) -> None:
    proc, url = start_http(config_path)
    try:
        refused = httpx2.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=10)
        assert refused.status_code == 401

        async def session() -> dict[str, Any]:
            http = httpx2.AsyncClient(headers={"Authorization": "Bearer test-bearer-0123456789"},
                                      timeout=httpx2.Timeout(60))
            async with http, Client(streamable_http_client(url, http_client=http)) as client:
                return await check_every_tool(client)

        answers = asyncio.run(session())
        assert answers["gitlab_get_mr_comments"]["counts"]["comments"] > 0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        proc.stderr.close()
    assert not socket_path(load_config(config_path)).exists()


def test_http_refuses_a_network_bind_without_a_token(config_path: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare.toml"
    doc = load_config(config_path)
    bare.write_text(tomli_w.dumps({"projects": list(doc.projects), "gitlab": {"url": doc.gitlab.url},
                                   "storage": {"data_dir": str(tmp_path / "data")}}))
    done = subprocess.run([sys.executable, "-m", "gitlab_knowledge.mcp", "--config", str(bare), "--http", "--host",
                           "0.0.0.0", "--port", "0"], capture_output=True, text=True, cwd=REPO, env=env(), timeout=60)
    assert done.returncode == 2
    assert "bearer_token_env" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert DEFAULT_TOKEN not in done.stderr


def _no_token_config(config_path: Path, tmp_path: Path) -> Path:
    bare = tmp_path / "no-token.toml"
    doc = load_config(config_path)
    bare.write_text(tomli_w.dumps({"projects": list(doc.projects), "gitlab": {"url": doc.gitlab.url},
                                   "storage": {"data_dir": str(doc.data_dir)}}))
    return bare


def _post(url: str, **headers: str) -> int:
    return httpx2.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                       headers={"Accept": "application/json, text/event-stream", **headers}, timeout=10).status_code


def test_a_client_leaving_mid_body_is_one_log_line(config_path: Path, tmp_path: Path) -> None:
    """A raw socket on 127.0.0.1 promises 4,000 bytes of body, sends 11 and closes: the server
    logs one line (no traceback) and goes on answering."""
    proc, url = start_http(_no_token_config(config_path, tmp_path))
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True)
    reader.start()
    try:
        host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as raw:
            raw.sendall(f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                        "Accept: application/json, text/event-stream\r\nContent-Length: 4000\r\n\r\n"
                        '{"jsonrpc":'.encode())
        first = lines.get(timeout=120)  # what the server said about it (a deadline, not a bound)
        assert "disconnected before sending its whole request" in first, first
        assert _post(url) not in (401, 403, 421, 500)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        reader.join(timeout=20)
    said = [first, *iter_lines(lines)]
    # (What the process says as SIGTERM stops it is another test's business.)
    assert "Traceback" not in "".join(said) and not [line for line in said if "Disconnect" in line], said
    assert len([line for line in said if "disconnect" in line]) == 1, said


def iter_lines(lines: "queue.Queue[str]") -> list[str]:
    """What the reader thread has collected so far (the process has ended: nothing more comes)."""
    out = []
    while not lines.empty():
        out.append(lines.get())
    return out
