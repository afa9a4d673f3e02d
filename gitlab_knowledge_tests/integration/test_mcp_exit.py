"""The stdio MCP server ends at once and cleanly whenever its client goes: stdin closed or a
SIGTERM/SIGINT while the model and indexes load, while it idles after a search, and while a call
waits on GitLab. Exit 0 for the end of input, 130 for a signal; no traceback, no abort (exit 134,
"terminate called without an active exception"), at most one line on stderr.

"At once" without a clock: mid-call, the "GitLab" the call waits on is a socket this test holds
without ever answering (and the config gives GitLab 600 s), so a server that finished the call
before exiting would still be running when this test's own wait gives up; it sees the server's
connection close while it still holds it."""

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
import tomli_w

from gitlab_knowledge.config import load_config
from gitlab_knowledge.search.resident_client import server_status, socket_path
from gitlab_knowledge_tests.conftest import REPO, subprocess_env

HOLD_S = 600  # GitLab's timeout in the config: a call waits this long on the held socket
WAIT_S = 120  # far below the hold, far above a prompt exit on a loaded machine


@pytest.fixture(scope="module")
def hold() -> Iterator[socket.socket]:
    """A "GitLab" that accepts connections and never answers."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(WAIT_S)
        yield listener


@pytest.fixture(scope="module")
def config_path(sample: Any, hold: socket.socket, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("mcp-exit")
    shutil.copytree(sample.config.data_dir, base / "data", ignore=shutil.ignore_patterns("*.sock"))
    path = base / "gitlab_knowledge.toml"
    path.write_text(tomli_w.dumps({
        "projects": ["acme/platform", "acme/web-app"],
        "gitlab": {"url": f"http://127.0.0.1:{hold.getsockname()[1]}", "rate_limit": 0, "max_retries": 0,
                   "timeout": HOLD_S},
        "storage": {"data_dir": str(base / "data")}}))
    return path


def start(config_path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "gitlab_knowledge.mcp", "--config", str(config_path)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
                            env=subprocess_env())


def send(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()


def answer(stdout: IO[bytes], ident: int) -> dict[str, Any]:
    while line := stdout.readline():
        message = json.loads(line)
        if message.get("id") == ident:
            return message
    pytest.fail(f"the server closed stdout before answering request {ident}")


def handshake(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdout is not None
    send(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "test", "version": "1"}}})
    assert "result" in answer(proc.stdout, 1)
    send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})


def call(proc: subprocess.Popen[bytes], ident: int, name: str, arguments: dict[str, Any]) -> None:
    send(proc, {"jsonrpc": "2.0", "id": ident, "method": "tools/call",
                "params": {"name": name, "arguments": arguments}})


def loading(proc: subprocess.Popen[bytes], config_path: Path) -> None:
    """Return once the server listens on its search socket and says it is still loading the
    model and the vectors (they take seconds; the socket opens before they start)."""
    config = load_config(config_path)
    while not socket_path(config).exists():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.02)  # the socket appears within the server's first second or two
    status = server_status(config)
    assert status is not None and not status["warm"], status


def ended(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    code = proc.wait(timeout=WAIT_S)
    assert proc.stderr is not None
    return code, proc.stderr.read().decode()


def clean(stderr: str) -> None:
    assert "Traceback" not in stderr and "terminate called" not in stderr, stderr
    assert len(stderr.splitlines()) <= 1, stderr


# The signals take one path: each while loading, SIGTERM mid-call too; the end of input everywhere.
MOMENTS = [("loading", "eof"), ("loading", signal.SIGTERM), ("loading", signal.SIGINT), ("idle", "eof"),
           ("mid-call", "eof"), ("mid-call", signal.SIGTERM)]


@pytest.mark.parametrize("moment,how", MOMENTS, ids=[f"{m}-{h if h == 'eof' else signal.Signals(h).name}"
                                                     for m, h in MOMENTS])
def test_the_server_ends_at_once_when_its_client_goes(config_path: Path, hold: socket.socket, moment: str,
                                                      how: str | int) -> None:
    proc = start(config_path)
    held: socket.socket | None = None
    try:
        if moment == "loading":
            loading(proc, config_path)  # not a byte of the handshake sent
        elif moment == "idle":
            handshake(proc)
            call(proc, 2, "search", {"query": "redis session store", "limit": 3})
            assert proc.stdout is not None and "result" in answer(proc.stdout, 2)
        else:
            handshake(proc)
            call(proc, 2, "gitlab_get_mr_comments", {"project": "acme/platform", "mr": 847, "live": True})
            held, _ = hold.accept()  # the call now waits on GitLab, which never answers
        if how == "eof":
            assert proc.stdin is not None
            proc.stdin.close()
        else:
            proc.send_signal(int(how))
        code, stderr = ended(proc)
        assert code == (0 if how == "eof" else 130), stderr
        clean(stderr)
        if held is not None:
            held.settimeout(WAIT_S)
            while held.recv(1 << 16):  # the request's bytes, then the end: the server left mid-call
                pass
        assert not socket_path(load_config(config_path)).exists()
    finally:
        if held is not None:
            held.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_stdin_closed_before_the_server_starts(config_path: Path) -> None:
    proc = start(config_path)
    assert proc.stdin is not None
    proc.stdin.close()
    code, stderr = ended(proc)
    assert code == 0, stderr
    clean(stderr)


def test_a_client_that_writes_then_closes_gets_the_sdks_answer(config_path: Path) -> None:
    """`echo REQUEST | server`: what the client wrote before closing stdin is read (the SDK then
    answers a call still running with its "Connection closed" error) and the server exits 0."""
    proc = start(config_path)
    assert proc.stdin is not None and proc.stdout is not None
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "test", "version": "1"}}},
             {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "index_status", "arguments": {}}}]
    proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in lines))
    proc.stdin.close()
    assert "result" in answer(proc.stdout, 1)
    answer(proc.stdout, 2)
    code, stderr = ended(proc)
    assert code == 0, stderr
    clean(stderr)


def test_a_sigterm_at_once_ends_it_quietly(config_path: Path) -> None:
    """Before the interpreter has run the server's first line the signal's default action ends
    it (-15); from then on the handler does (130). Neither prints, neither keeps serving."""
    proc = start(config_path)
    proc.send_signal(signal.SIGTERM)
    code, stderr = ended(proc)
    assert code in (130, -signal.SIGTERM), stderr
    assert stderr == ""
