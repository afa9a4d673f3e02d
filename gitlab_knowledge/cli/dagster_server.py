"""`dagster dev` (webserver + daemon) as a process group that starts the way it must and stops
completely: the `ui` command, the end-to-end tests and the screenshot script all use this.

`dagster dev` started from a script ignores SIGINT/SIGTERM unless both are reset to their defaults
before exec, and killing only its parent orphans the webserver and the daemon (both measured with
Dagster 1.13). So it runs in its own session with default handlers, and stopping ends the whole
group, including code servers it respawns while shutting down.
"""

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import httpx

WORKSPACE = """load_from:
  - python_module:
      module_name: gitlab_knowledge.defs
      attribute: defs
      location_name: gitlab_knowledge
"""


# Dagster's "colored" log format colours every line whatever it writes to; its other formats colour
# too or are JSON. Its output is relayed through this filter when colour is not wanted.
_ESCAPES = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")


def wants_colour(*streams: IO[str]) -> bool:
    """Colour only for a terminal, and never with NO_COLOR set (the convention colour tools share)."""
    if os.environ.get("NO_COLOR"):
        return False
    return all(stream.isatty() for stream in streams)


def _relay_plain(source: IO[bytes], sink: IO[bytes]) -> None:
    for line in iter(source.readline, b""):
        with contextlib.suppress(OSError, ValueError):  # the reader went away: keep draining the pipe
            sink.write(_ESCAPES.sub(b"", line))
            sink.flush()
    source.close()


def _reset_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class DagsterServer:
    def __init__(self, home: Path, workspace: Path, *, host: str = "127.0.0.1", port: int = 3000,
                 env: dict[str, str] | None = None, log: Path | None = None, cwd: Path | None = None) -> None:
        self.home, self.workspace, self.host, self.port = home, workspace, host, port
        self.cwd = cwd or home  # relative storage paths in home's dagster.yaml resolve against it
        self.url = f"http://{host}:{port}"
        self.env = {**(env if env is not None else os.environ), "DAGSTER_HOME": str(home)}
        self.log = log
        self.process: subprocess.Popen | None = None
        self._relay: threading.Thread | None = None

    def command(self) -> list[str]:
        return [sys.executable, "-m", "dagster", "dev", "-w", str(self.workspace), "-h", self.host,
                "-p", str(self.port)]

    def start(self) -> "DagsterServer":
        out = self.log.open("wb") if self.log else None
        # A log file, a pipe or NO_COLOR gets Dagster's lines without their escape codes.
        plain = out is not None or not wants_colour(sys.stdout, sys.stderr)
        try:
            self.process = subprocess.Popen(self.command(), cwd=self.cwd, env=self.env,
                                            stdout=subprocess.PIPE if plain else None,
                                            stderr=subprocess.STDOUT if plain else None, start_new_session=True,
                                            preexec_fn=_reset_signals)
        except BaseException:
            if out:
                out.close()
            raise
        if plain:
            assert self.process.stdout is not None
            sink = out or sys.stdout.buffer
            self._relay = threading.Thread(target=self._relay_then_close, args=(self.process.stdout, sink, out),
                                           name="dagster-output", daemon=True)
            self._relay.start()
        return self

    @staticmethod
    def _relay_then_close(source: IO[bytes], sink: IO[bytes], owned: IO[bytes] | None) -> None:
        try:
            _relay_plain(source, sink)
        finally:
            if owned:
                owned.close()

    def ready(self) -> bool:
        """The webserver answers and the code location has loaded."""
        try:
            if httpx.get(f"{self.url}/server_info", timeout=2).status_code != 200:
                return False
            body = httpx.post(f"{self.url}/graphql", timeout=10, json={"query": (
                "{ workspaceOrError { ... on Workspace { locationEntries { loadStatus "
                "locationOrLoadError { __typename } } } } }")}).json()
        except (httpx.HTTPError, ValueError):
            return False
        entries = body.get("data", {}).get("workspaceOrError", {}).get("locationEntries") or []
        return bool(entries) and all(e["loadStatus"] == "LOADED" and
                                     e["locationOrLoadError"]["__typename"] == "RepositoryLocation" for e in entries)

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"dagster dev exited with code {self.process.returncode}")
            if self.ready():
                return
            time.sleep(0.5)
        raise TimeoutError(f"dagster dev was not ready within {timeout:.0f}s")

    def wait(self) -> int:
        assert self.process is not None
        return self.process.wait()

    def stop(self) -> None:
        if self.process is None:
            return
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            if self.process.poll() is not None:
                break
            try:
                os.killpg(self.process.pid, sig)
                self.process.wait(wait)
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        if self._relay is not None:
            self._relay.join(10)

    def __enter__(self) -> "DagsterServer":
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
