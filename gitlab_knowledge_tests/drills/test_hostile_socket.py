"""Drill (issue 28 point 2): the search command's socket in a hostile world. A socket another user
put first (at the shared temp-dir name the old layout used, in a directory others may write, from
a process of another user) is never asked, and the command prints the real answer (exit 0, no
escape byte of the squatter's); a stalled or trickling server costs at most the one deadline; a
malformed reply means the in-process search; the real server binds past a stale or squatted
socket."""

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from gitlab_knowledge.config import load_config
from gitlab_knowledge.search import resident_client
from gitlab_knowledge.search.resident_client import ask_resident, server_status, socket_path
from gitlab_knowledge_tests.conftest import REPO, subprocess_env

BEARER_ENV = "GK_TEST_SOCKET_BEARER"
SQUATTED = {"protocol": 1, "stdout": "SQUATTED \x1b[2J\x1b]0;pwned\x07\n", "stderr": "",
            "answered": 0, "warm": True, "pid": 1}


class FakeServer:
    """A listener at `path` that answers each request its own way and counts who asked."""

    def __init__(self, path: Path, behaviour: str = "reply", reply: Any = None, hold: float = 8.0) -> None:
        self.path, self.behaviour, self.reply, self.hold = path, behaviour, reply, hold
        self.asked: list[bytes] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self.held_out = threading.Event()  # an answer ran its whole hold: nobody cut it short
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                self.asked.append(conn.recv(65536))
                end = time.monotonic() + self.hold
                if self.behaviour == "reply":
                    conn.sendall(json.dumps(self.reply).encode() + b"\n")
                elif self.behaviour == "stall":
                    while time.monotonic() < end and not self._stop.is_set():
                        time.sleep(0.05)
                elif self.behaviour == "trickle":
                    while time.monotonic() < end and not self._stop.is_set():
                        conn.sendall(b" ")
                        time.sleep(0.1)
                if self.behaviour != "reply" and not self._stop.is_set():
                    self.held_out.set()
            except OSError:
                pass

    def close(self) -> None:
        self._stop.set()
        self.sock.close()
        self.path.unlink(missing_ok=True)


@pytest.fixture
def private_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temp directory of this test's own, so nothing here meets another process's sockets. A short
    one under /tmp: a socket's path must fit in 108 bytes, and pytest's own directories under xdist
    (…/popen-gw1/<test name>/) leave too little room for the sockets the tests make there."""
    tmp = Path(tempfile.mkdtemp(prefix="gk-sock-", dir="/tmp"))
    tmp.chmod(0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def stores(sample: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sample's data twice: at a short path, and at one too long for a socket inside it (the
    old code's temp-dir case; a symlink would not do, the configuration resolves it)."""
    base = tmp_path_factory.mktemp("socket-store")
    short, long = base / "data", base / ("long-data-directory-" * 5)
    for where in (short, long):
        shutil.copytree(sample.config.data_dir, where, ignore=shutil.ignore_patterns("*.sock"))
    assert len(os.fsencode(str(long / "mcp-search.sock"))) >= 100
    return short, long


@pytest.fixture
def store(stores: tuple[Path, Path]) -> Path:
    return stores[0]


def write_config(where: Path, data_dir: Path) -> Path:
    path = where / "gitlab_knowledge.toml"
    path.write_text(tomli_w.dumps({"projects": ["acme/platform", "acme/web-app"],
                                   "gitlab": {"url": "http://127.0.0.1:9", "rate_limit": 0},
                                   "storage": {"data_dir": str(data_dir)},
                                   "mcp": {"bearer_token_env": BEARER_ENV}}))
    return path


@pytest.fixture
def short_config(store: Path, tmp_path: Path) -> Path:
    return write_config(tmp_path, store)


@pytest.fixture
def long_config(stores: tuple[Path, Path], tmp_path: Path) -> Path:
    (tmp_path / "long").mkdir()
    return write_config(tmp_path / "long", stores[1])


def old_shared_path(config_path: Path) -> Path:
    """Where the search command used to look for a long data directory's server: a name anyone can
    compute, in the directory everyone may write."""
    data_dir = load_config(config_path).data_dir
    digest = hashlib.sha256(os.fsencode(str(data_dir.resolve()))).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"gitlab_knowledge-{digest}.sock"


def run_search(config_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitlab_knowledge.search", *args, "--config", str(config_path)],
                          capture_output=True, text=True, cwd=REPO, timeout=300,
                          env=subprocess_env(TMPDIR=tempfile.gettempdir(), **{BEARER_ENV: "t" * 24}))


def real_results(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SQUATTED" not in done.stdout and "\x1b" not in done.stdout
    assert json.loads(done.stdout)["results"]


def test_a_squatted_socket_at_the_old_shared_name_is_never_asked(long_config: Path, private_tmp: Path) -> None:
    squatter = FakeServer(old_shared_path(long_config), reply=SQUATTED)
    try:
        real_results(run_search(long_config, "redis", "--json"))
        assert squatter.asked == []  # neither the query nor the data directory reached it
    finally:
        squatter.close()


@pytest.mark.parametrize("how", ["writable by all", "owned by another user"])
def test_a_socket_in_a_directory_that_is_not_private_is_never_asked(long_config: Path, short_config: Path,
                                                                    store: Path, private_tmp: Path,
                                                                    how: str) -> None:
    if how == "owned by another user" and os.getuid() != 0:
        pytest.skip("making a directory another user's needs root")
    mode = store.stat().st_mode & 0o777
    runtime = private_tmp / f"gitlab_knowledge-{os.getuid()}"
    runtime.mkdir(mode=0o700)
    squatters = []
    try:
        for directory in (store, runtime):  # the data directory, and the per-user one of a long path
            if how == "writable by all":
                directory.chmod(0o777)
            else:
                os.chown(directory, 65534, 65534)
        # Whatever the layout, the socket the command would look for is one somebody else could have made.
        for config_path in (short_config, long_config):
            squatters.append(FakeServer(socket_path(load_config(config_path)), reply=SQUATTED))
            real_results(run_search(config_path, "redis", "--json"))
        assert [s.asked for s in squatters] == [[], []]
    finally:
        for squatter in squatters:
            squatter.close()
        for directory in (store, runtime):
            os.chown(directory, os.getuid(), os.getgid())
        store.chmod(mode)


def test_a_server_of_another_user_is_never_asked(short_config: Path, private_tmp: Path) -> None:
    if os.getuid() != 0 or not hasattr(socket, "SO_PEERCRED"):
        pytest.skip("running a listener as another user needs root; SO_PEERCRED needs Linux")
    path = socket_path(load_config(short_config))
    # Bound by this user (the file is ours, in our directory), listening as nobody: only the peer's
    # credentials tell them apart.
    script = (f"import os, socket, json\ns = socket.socket(socket.AF_UNIX)\ns.bind({str(path)!r})\n"
              "os.setgid(65534); os.setuid(65534)\ns.listen(8)\nprint('ready', flush=True)\n"
              "while True:\n    c, _ = s.accept()\n    if c.recv(65536):\n        print('asked', flush=True)\n"
              f"        c.sendall(json.dumps({SQUATTED!r}).encode() + b'\\n')\n    c.close()\n")
    other = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "ready"
        real_results(run_search(short_config, "redis", "--json"))
    finally:
        other.kill()
        out, _ = other.communicate(timeout=10)
        path.unlink(missing_ok=True)
    assert "asked" not in out


@pytest.mark.parametrize("behaviour", ["stall", "trickle"])
def test_a_stalled_or_trickling_server_costs_at_most_the_deadline(short_config: Path, private_tmp: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  behaviour: str) -> None:
    deadline = 1.0
    monkeypatch.setattr(resident_client, "EXCHANGE_DEADLINE", deadline, raising=False)
    config = load_config(short_config)
    slow = FakeServer(socket_path(config), behaviour, hold=20.0)
    try:
        assert ask_resident(config, {"query": "redis", "filters": {}, "mode": "hybrid", "limit": 3}) is None
        # The command gave up while the server was still stalling or trickling: the deadline ended
        # the exchange, not the server (no clock compared here: the hold is 20 times the deadline, and shorter than the
        # 30 s per-read wait a client without one would sit out, so such a client fails this).
        waited_out = slow.held_out.is_set()
    finally:
        slow.close()
    assert slow.asked  # it was asked (it is the user's own, in a private directory) and waited on
    assert not waited_out, behaviour


@pytest.mark.parametrize("reply", [
    {"protocol": 1, "error": "boom", "exit_code": "nope"},
    {"protocol": 1, "error": "boom", "exit_code": 99999},
    {"protocol": 1, "error": "boom", "exit_code": True},
    {"protocol": 1, "error": ["boom"], "exit_code": 3},
    {"protocol": 1, "stderr": ""},
    {"protocol": 1, "stdout": 5, "stderr": ""},
    ["not", "an", "object"],
], ids=["exit-code-string", "exit-code-range", "exit-code-bool", "error-list", "no-stdout", "stdout-int", "list"])
def test_a_malformed_reply_means_the_in_process_search(short_config: Path, private_tmp: Path, reply: Any) -> None:
    odd = FakeServer(socket_path(load_config(short_config)), reply=reply)
    try:
        real_results(run_search(short_config, "redis", "--json"))
    finally:
        odd.close()
    assert odd.asked


@pytest.fixture
def server(long_config: Path, private_tmp: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """A real server for the long data directory, started after a squatter took the old shared name
    and a dead server left its socket in the new private directory."""
    squatter = FakeServer(old_shared_path(long_config), reply=SQUATTED)
    stale = socket_path(load_config(long_config))
    if stale.parent != squatter.path.parent:
        stale.parent.mkdir(mode=0o700)
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        dead.bind(str(stale))
        dead.close()  # the file stays; nobody listens
    proc = subprocess.Popen([sys.executable, "-m", "gitlab_knowledge.mcp", "--config", str(long_config), "--http",
                             "--port", "0"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            cwd=REPO, env=subprocess_env(TMPDIR=str(private_tmp), **{BEARER_ENV: "t" * 24}))
    try:
        yield proc, squatter.path
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()
        squatter.close()


def test_the_real_server_binds_past_a_stale_or_squatted_socket(server: tuple[subprocess.Popen[str], Path],
                                                               long_config: Path) -> None:
    proc, _ = server
    config = load_config(long_config)
    deadline = time.monotonic() + 120
    status = None
    while time.monotonic() < deadline and proc.poll() is None:
        status = server_status(config)
        if status and status.get("pid") == proc.pid:
            break
        time.sleep(0.3)
    assert status and status.get("pid") == proc.pid, status
    real_results(run_search(long_config, "redis", "--json"))
    assert server_status(config)["answered"] == 1  # the real server answered the command
