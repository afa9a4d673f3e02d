"""A parent that imports the product once and forks the processes a kill test kills.

A fresh `python -m gitlab_knowledge sync` spends ~2 s of CPU importing Dagster, LanceDB, PyArrow
and ONNX Runtime before it does anything a kill could interrupt; the kill drills start ~30 of
them. Here one process (the zygote) imports them once and forks each child, which then runs the
module as `python -m MODULE ARGS...` would (runpy, argv, cwd, exit code, stdout and stderr to
files): a real process of its own, with its own pid, that a test SIGKILLs like any other. What a
child is spared is only the import, which no store state depends on.

Forking after those imports is safe because nothing has run yet: the threads the libraries start
on import (LanceDB's event loop, jemalloc's) are idle, LanceDB resets its runtime in a forked
child, and no file, connection or model session is open in the zygote.

    python -m gitlab_knowledge_tests.support.zygote MODULE...   (the modules to import first)

Protocol (one JSON object a line): in, {"module", "argv", "cwd", "out", "err", "env"}; out, {"ready"},
{"pid"} after each fork, and {"exit": pid, "code": n, "cpu": seconds} when a child ends (-n: killed by signal n).
"""

import contextlib
import json
import os
import select
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

# What a sync imports (measured: the modules new in a forked child's sys.modules after a sync).
# A module missing here is only imported by the child itself, at the old cost.
PRELOAD = (
    "gitlab_knowledge.cli", "gitlab_knowledge.cli.sync_cmd", "gitlab_knowledge.cli.ui", "gitlab_knowledge.cli.demo",
    "gitlab_knowledge.cli.doctor", "gitlab_knowledge.cli.eval_cmd", "gitlab_knowledge.cli.explain_cmd",
    "gitlab_knowledge.cli.graph_cmd", "gitlab_knowledge.cli.index_cmd", "gitlab_knowledge.cli.inspect_cmd",
    "gitlab_knowledge.cli.models_cmd", "gitlab_knowledge.cli.similar_cmd",
    "gitlab_knowledge.defs", "gitlab_knowledge.defs.runner", "gitlab_knowledge.workspace",
    "gitlab_knowledge.sync.engine", "gitlab_knowledge.sync.pipeline", "gitlab_knowledge.normalized.refresh",
    "gitlab_knowledge.documents.refresh", "gitlab_knowledge.lexical.refresh", "gitlab_knowledge.graph.refresh",
    "gitlab_knowledge.embeddings.embedded", "gitlab_knowledge.embeddings.providers", "gitlab_knowledge.index_status",
    "gitlab_knowledge.purge", "gitlab_knowledge.search",
    # Dagster's instance on SQLite, in-process execution, and what they load lazily.
    "dagster._core.instance.factory", "dagster._core.storage.runs.sqlite", "dagster._core.storage.event_log.sqlite",
    "dagster._core.storage.schedules.sqlite", "dagster._core.storage.noop_compute_log_manager",
    "dagster._core.storage.root", "dagster._core.storage.migration.utils", "dagster._core.storage.sqlite",
    "dagster._core.execution.execute_in_process", "dagster._core.executor.in_process",
    "dagster._core.execution.backfill", "dagster._core.execution.asset_backfill", "dagster._core.execution.stats",
    "dagster._core.remote_representation.external", "dagster._core.workspace.context", "dagster._core.scheduler",
    "dagster._core.secrets.env_file", "dagster._core.snap", "dagster._daemon.controller", "dagster._daemon.sensor",
    "dagster._daemon.monitoring", "dagster._daemon.auto_run_reexecution.auto_run_reexecution",
    "dagster._scheduler.scheduler", "dagster._scheduler.stale",
    "sqlite3", "alembic.command", "mako.template", "pygments.lexers.python", "pygments.formatters.html",
    "rich.progress", "rich.table", "rich.syntax", "rich.traceback", "rich.panel", "rich.columns", "structlog",
    "tenacity", "httpx", "watchdog.observers", "upath", "fsspec.implementations.local", "tantivy", "tomli_w", "dotenv",
)


def _child(request: dict[str, Any], own_fds: list[int], replies: Any) -> NoReturn:
    """In the forked child: become `python -m MODULE ARGV` with stdout/stderr to files. It ends as
    that command would, never returning into the zygote's loop: what the interpreter's exit does
    that a command can observe (threads joined, atexit handlers run, streams flushed), then
    os._exit. Not the teardown of the ~2,000 modules inherited from the zygote: freeing them
    writes to every page they share with it, and copying those pages cost a light command
    (`list`, `related`) twice its CPU as a fresh interpreter."""
    import runpy
    import signal

    code = 1
    try:
        replies.close()
        for fd in own_fds:
            os.close(fd)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        for fd, path in ((1, request["out"]), (2, request["err"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, fd)
            os.close(target)
        os.chdir(request["cwd"])
        if request.get("env") is not None:  # the command's own environment, as Popen(env=...) gives it
            os.environ.clear()
            os.environ.update(request["env"])
        sys.argv = [request["module"], *request["argv"]]
        try:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
    _leave(code)


def _leave(code: int) -> NoReturn:
    """What Py_FinalizeEx does before tearing the interpreter down, in its order; then exit."""
    import atexit

    try:
        threading._shutdown()  # type: ignore[attr-defined]  # joins the non-daemon threads, as at exit
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def serve(preload: list[str]) -> NoReturn:
    # LanceDB warns that fork support is experimental; nothing of LanceDB has run in this process.
    warnings.filterwarnings("ignore", message="lancedb fork support")
    from gitlab_knowledge.embeddings.lance_import import import_lancedb

    import_lancedb()  # the product's own way in (its REST client deferred), before the modules that use it
    for name in preload:
        __import__(name)
    requests, replies = 0, os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints of the zygote itself must not corrupt the protocol
    pidfds: dict[int, int] = {}  # pidfd -> pid
    pending = b""

    def say(message: dict[str, Any]) -> None:
        replies.write(json.dumps(message) + "\n")

    # Everything imported so far moves to the collector's permanent generation: a child's garbage
    # collections then never walk (and so never copy) the pages it shares with the zygote.
    import gc

    gc.freeze()
    say({"ready": os.getpid()})
    while True:
        readable, _, _ = select.select([requests, *pidfds], [], [])
        for fd in readable:
            if fd in pidfds:
                pid = pidfds.pop(fd)
                os.close(fd)
                _, status, usage = os.wait4(pid, 0)
                say({"exit": pid, "code": os.waitstatus_to_exitcode(status), "cpu": usage.ru_utime + usage.ru_stime})
                continue
            chunk = os.read(requests, 65536)
            if not chunk:  # the test closed the pipe: the zygote ends, without tearing down
                replies.flush()  # the ~2,000 modules it imported (seconds of a loaded machine)
                os._exit(0)
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _child(request, [requests, *pidfds], replies)
                pidfds[os.pidfd_open(pid)] = pid
                say({"pid": pid})


class Child:
    """A forked child, with the parts of subprocess.Popen the kill tests use."""

    def __init__(self, zygote: "Zygote", pid: int, out: Path, err: Path) -> None:
        self._zygote, self.pid, self._out, self._err = zygote, pid, out, err
        self.returncode: int | None = None

    def poll(self) -> int | None:
        self.returncode = self._zygote._exits.get(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        with self._zygote._changed:
            if not self._zygote._changed.wait_for(lambda: self.pid in self._zygote._exits or self._zygote._gone,
                                                  timeout):
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
        code = self.poll()
        if code is None:
            raise RuntimeError(f"the zygote ended before child {self.pid}: {self._zygote.stderr()}")
        return code

    def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        self.wait(timeout)
        return self._out.read_bytes(), self._err.read_bytes()

    def kill(self) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, 9)


class Zygote:
    """`with Zygote(env, workdir) as z: child = z.spawn("gitlab_knowledge", [...], cwd)`."""

    def __init__(self, env: dict[str, str], workdir: Path, preload: tuple[str, ...] = PRELOAD) -> None:
        self.workdir = self._workdir = workdir
        self._log = workdir / "zygote.err"
        self._process = subprocess.Popen([sys.executable, "-m", __name__, *preload], env=env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self._log.open("wb"))
        self._exits: dict[int, int] = {}
        self.cpu: dict[int, float] = {}  # pid -> CPU seconds (user + system) of each ended child
        self._pids: list[int] = []
        self._gone = False
        self._changed = threading.Condition()
        self._spawned = 0
        ready = self._read()
        if ready is None or "ready" not in ready:
            raise RuntimeError(f"the zygote did not start: {self.stderr()}")
        self._reader = threading.Thread(target=self._listen, name="zygote-reader", daemon=True)
        self._reader.start()

    def _read(self) -> dict[str, Any] | None:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        return json.loads(line) if line else None

    def _listen(self) -> None:
        while (message := self._read()) is not None:
            with self._changed:
                if "exit" in message:
                    self._exits[message["exit"]] = message["code"]
                    self.cpu[message["exit"]] = message["cpu"]
                else:
                    # A new child may have the pid of one that ended earlier (the kernel reuses pids
                    # once they wrap around, which a long suite on a busy machine reaches): that
                    # child's exit must not read as this one's, before it has even begun.
                    self._exits.pop(message["pid"], None)
                    self.cpu.pop(message["pid"], None)
                    self._pids.append(message["pid"])
                self._changed.notify_all()
        with self._changed:
            self._gone = True
            self._changed.notify_all()

    def stderr(self) -> str:
        return self._log.read_text(errors="replace")[-3000:]

    def spawn(self, module: str, argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> Child:
        """Fork a child running `python -m module *argv` in `cwd` (with `env` as its whole
        environment, else the zygote's); returns once it exists."""
        assert self._process.stdin is not None
        with self._changed:  # threads of one test may spawn at once: the pids come back in request order
            index = self._spawned
            self._spawned += 1
            out, err = self._workdir / f"child-{index + 1}.out", self._workdir / f"child-{index + 1}.err"
            request = {"module": module, "argv": argv, "cwd": str(cwd or self._workdir), "out": str(out),
                       "err": str(err), "env": env}
            self._process.stdin.write((json.dumps(request) + "\n").encode())
            self._process.stdin.flush()
            if not self._changed.wait_for(lambda: len(self._pids) > index or self._gone, 60):
                raise RuntimeError(f"the zygote did not fork: {self.stderr()}")
            if self._gone:
                raise RuntimeError(f"the zygote ended: {self.stderr()}")
            return Child(self, self._pids[index], out, err)

    def run(self, module: str, argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float | None = None) -> "subprocess.CompletedProcess[str]":
        """`subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True,
        ...)` with the child forked from here: the same exit code, stdout and stderr, without
        the ~2 s of CPU each fresh interpreter spends importing Dagster and the index libraries."""
        child = self.spawn(module, argv, cwd, env)
        try:
            out, err = child.communicate(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(30)
            raise subprocess.TimeoutExpired([module, *argv], timeout or 0) from None
        assert child.returncode is not None
        return subprocess.CompletedProcess([module, *argv], child.returncode, out.decode(errors="replace"),
                                           err.decode(errors="replace"))

    def __enter__(self) -> "Zygote":
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """End the zygote and SIGKILL any child still running."""
        for pid in self._pids:
            if pid not in self._exits:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
        assert self._process.stdin is not None
        self._process.stdin.close()
        try:
            self._process.wait(30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(30)
        self._reader.join(30)


if __name__ == "__main__":
    serve(sys.argv[1:])
