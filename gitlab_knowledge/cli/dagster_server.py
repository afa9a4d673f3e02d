"""`dagster dev` (webserver + daemon) as a process group that starts the way it must and stops
completely: the `ui` command, the end-to-end tests and the screenshot script all use this.

`dagster dev` started from a script ignores SIGINT/SIGTERM unless both are reset to their defaults
before exec, and killing only its parent orphans the webserver and the daemon (both measured with
Dagster 1.13). So it runs in its own session with default handlers, and stopping ends the whole
group, including code servers it respawns while shutting down.
"""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

WORKSPACE = """load_from:
  - python_module:
      module_name: gitlab_knowledge.defs
      attribute: defs
      location_name: gitlab_knowledge
"""


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

    def command(self) -> list[str]:
        return [sys.executable, "-m", "dagster", "dev", "-w", str(self.workspace), "-h", self.host,
                "-p", str(self.port)]

    def start(self) -> "DagsterServer":
        out = self.log.open("wb") if self.log else None
        try:
            self.process = subprocess.Popen(self.command(), cwd=self.cwd, env=self.env, stdout=out,
                                            stderr=subprocess.STDOUT if out else None, start_new_session=True,
                                            preexec_fn=_reset_signals)
        finally:
            if out:
                out.close()
        return self

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
