"""`ui` and `sync` use one Dagster instance, so the runs the CLI starts show up in the UI. The
choice is checked directly: the webserver is never started."""

import os
import pty
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import dagster as dg
import pytest

from gitlab_knowledge.cli import ui
from gitlab_knowledge.config import Config, parse_config
from gitlab_knowledge.defs.runner import dagster_instance

REPO = Path(__file__).resolve().parents[2]
PROBE = "gitlab_knowledge_test_probe"


@pytest.fixture
def config(tmp_path: Path) -> Config:
    doc = {"gitlab": {"url": "http://127.0.0.1:9"}, "projects": ["a/b"],
           "storage": {"data_dir": str(tmp_path / "data")}}
    return parse_config(doc, tmp_path, {}, "test")


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Path:
    """The directory the commands run from: the repository's root files, or none of them."""
    run_dir = tmp_path / "cwd"
    run_dir.mkdir()
    if request.param == "repository root":
        for name in ("dagster.yaml", "workspace.yaml"):
            shutil.copy(REPO / name, run_dir / name)
    monkeypatch.chdir(run_dir)
    return run_dir


def ui_and_sync(config: Config, monkeypatch: pytest.MonkeyPatch) -> tuple[ui.DagsterServer, list[str]]:
    """The `dagster dev` that `ui` would start, and what an instance opened the way it opens one
    (its DAGSTER_HOME, its working directory) finds of a partition `sync`'s instance just added."""
    marker = f"probe-{uuid.uuid4().hex}"
    with dagster_instance(config) as sync_instance:
        sync_instance.add_dynamic_partitions(PROBE, [marker])
    server = ui.server_for(config, host="127.0.0.1", port=3000, config_path=None)
    with monkeypatch.context() as m:
        m.setenv("DAGSTER_HOME", server.env["DAGSTER_HOME"])
        m.chdir(server.cwd)
        with dg.DagsterInstance.get() as ui_instance:
            seen = [key for key in ui_instance.get_dynamic_partitions(PROBE) if key == marker]
    return server, seen


@pytest.mark.parametrize("cwd", ["elsewhere", "repository root"], indirect=True)
def test_both_use_dagster_home_when_it_is_set(config, cwd, tmp_path, monkeypatch):
    home = tmp_path / "my-dagster-home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    server, seen = ui_and_sync(config, monkeypatch)
    assert server.home == Path(server.env["DAGSTER_HOME"]) == home.resolve()
    assert seen
    assert not (home / "workspace.yaml").exists()  # the user's directory gets no file of ours


@pytest.mark.parametrize("cwd", ["elsewhere", "repository root"], indirect=True)
def test_both_use_the_same_default_when_it_is_not_set(config, cwd, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    server, seen = ui_and_sync(config, monkeypatch)
    expected = cwd if (cwd / "dagster.yaml").exists() else config.dagster_home
    assert server.home == Path(server.env["DAGSTER_HOME"]) == expected.resolve()
    assert seen
    expected_workspace = cwd if (cwd / "workspace.yaml").exists() else config.dagster_home
    assert server.workspace == expected_workspace / "workspace.yaml"


# A stand-in for `dagster dev` that logs the way Dagster's "colored" format does, whatever its output is.
PAINTER = """
import sys
from pathlib import Path
from gitlab_knowledge.cli.dagster_server import DagsterServer

class Painter(DagsterServer):
    def command(self):
        return [sys.executable, "-c", "print('\\\\x1b[34mINFO\\\\x1b[0m - dagster - \\\\x1b[31mready\\\\x1b[0m', flush=True)"]

server = Painter(Path("."), Path("workspace.yaml")).start()
code = server.wait()
server.stop()
sys.exit(code)
"""


def run_painter(tmp_path: Path, *, terminal: bool, **env: str) -> bytes:
    child_env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    child_env.update(PYTHONPATH=os.pathsep.join(sys.path), **env)
    if not terminal:
        done = subprocess.run([sys.executable, "-c", PAINTER], cwd=tmp_path, env=child_env, capture_output=True,
                              timeout=120, check=True)
        return done.stdout + done.stderr
    leader, follower = pty.openpty()
    try:
        child = subprocess.Popen([sys.executable, "-c", PAINTER], cwd=tmp_path, env=child_env, stdin=follower,
                                 stdout=follower, stderr=follower)
        assert child.wait(120) == 0
        os.close(follower)
        follower = -1
        out = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: every end of the terminal is closed
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)


def test_ui_logs_have_no_colour_codes_off_a_terminal(tmp_path):
    out = run_painter(tmp_path, terminal=False)
    assert b"INFO - dagster - ready" in out and b"\x1b" not in out, out


def test_ui_logs_have_no_colour_codes_with_no_color_set(tmp_path):
    out = run_painter(tmp_path, terminal=True, NO_COLOR="1")
    assert b"INFO - dagster - ready" in out and b"\x1b" not in out, out


def test_ui_logs_keep_their_colour_on_a_terminal(tmp_path):
    out = run_painter(tmp_path, terminal=True)
    assert b"\x1b[34mINFO" in out, out


def test_a_log_file_gets_no_colour_codes(tmp_path):
    log = tmp_path / "ui.log"
    painter = ui.DagsterServer(tmp_path, tmp_path / "workspace.yaml", log=log)
    painter.command = lambda: [sys.executable, "-c", "print('\\x1b[34mINFO\\x1b[0m ready', flush=True)"]  # type: ignore[method-assign]
    painter.start()
    assert painter.wait() == 0
    painter.stop()
    assert log.read_bytes() == b"INFO ready\n"
