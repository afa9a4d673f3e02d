"""The embedding ahead's worker process: the embedded model in a process of its own.

A batch's fetch phase is GIL-bound on one core; the work ahead (embeddings/ahead.py) is to use the
other. On a thread of the batch's process its Python (tokenizing, pooling, batching) took turns
with the fetch phase's for the one GIL, and it got ~0.7 of a core. Here the model runs in a child
(`python -m gitlab_knowledge.embeddings.ahead_worker THREADS NICE`), and the thread ahead only
hands it texts and waits on a pipe (the wait releases the GIL).

The protocol, over the child's stdin/stdout: frames of an 8-byte big-endian length and a pickle.
- child → parent, first: ("ready", pid, cpu_s) once the model is loaded (its imports and ONNX
  session overlap the batch's startup), or ("error", message).
- parent → child: a list of texts; child → parent: ("ok", [(vectors float32 [windows, dims],
  [covered text a window]) a text], cpu_s), or ("error", message) after which the child exits.
- End of the child's stdin (the parent closed it, or died) ends the child after the call in
  progress: it never outlives its batch by more than one call. Its stderr is discarded (the
  parent reports what ended it in one line; a traceback would reach the sync's output).

Nothing of the config reaches the child: it gets an environment of its own (`child_env`: no
token, only what Python needs to find its packages) and the two numbers on its command line.
"""

import contextlib
import os
import pickle
import struct
import subprocess
import sys
import time
from typing import IO, Any

import numpy as np

from gitlab_knowledge.embeddings.embedded import EmbeddedProvider
from gitlab_knowledge.embeddings.provider import Chunk

_LENGTH = struct.Struct(">Q")
# What the child's environment keeps of the parent's: where Python and its packages are, the
# locale and the temp dir. Nothing else: a GitLab token lives in the environment.
_KEPT_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "VIRTUAL_ENV")


class WorkerGone(Exception):
    """The worker process ended, failed or answered nonsense: the work ahead ends."""


def write_frame(out: IO[bytes], value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_LENGTH.pack(len(data)) + data)
    out.flush()


def read_frame(source: IO[bytes]) -> Any:
    """The next frame's value; EOFError at the end of the stream (a partial frame included)."""
    head = source.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        raise EOFError
    size = _LENGTH.unpack(head)[0]
    data = source.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)  # noqa: S301 - frames come from our own child (or parent) over a private pipe


def child_env() -> dict[str, str]:
    """The child's environment: the paths this process imports from (so it runs the same code,
    from a checkout or a Dagster code location as well as an install), and no secrets."""
    env = {k: v for k, v in os.environ.items() if k in _KEPT_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


class WorkerProvider:
    """The embedded model in a child process, as an EmbeddingProvider for the thread ahead: started
    at once (the model loads while the batch starts), `embed_documents` waits for its answer.
    Used by one thread; `close` from any thread. `pid` is the child's; `cpu_s` its CPU so far."""

    provider = EmbeddedProvider.provider
    model = EmbeddedProvider.MODEL
    dims = EmbeddedProvider.DIMS

    def __init__(self, threads: int, nice: int) -> None:
        self._proc = subprocess.Popen(  # noqa: S603 - our own module, run by this interpreter
            [sys.executable, "-m", __name__, str(threads), str(nice)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=child_env(),
            close_fds=True)
        self.pid = self._proc.pid
        self.cpu_s = 0.0
        self._ready = False

    def _answer(self) -> Any:
        assert self._proc.stdout is not None
        try:
            kind, *rest = read_frame(self._proc.stdout)
        except (EOFError, OSError, ValueError, pickle.UnpicklingError) as exc:
            raise WorkerGone(f"the embedding worker {self.pid} ended (exit {self._proc.poll()})") from exc
        if kind == "error":
            raise WorkerGone(f"the embedding worker failed: {rest[0]}")
        return kind, rest

    def embed_documents(self, texts: list[str]) -> list[list[Chunk]]:
        assert self._proc.stdin is not None
        if not self._ready:
            kind, rest = self._answer()
            if kind != "ready":
                raise WorkerGone(f"the embedding worker answered {kind!r} before it was ready")
            self._ready, self.cpu_s = True, rest[1]
        try:
            write_frame(self._proc.stdin, texts)
        except (OSError, ValueError) as exc:  # a broken pipe: it died
            raise WorkerGone(f"the embedding worker {self.pid} ended (exit {self._proc.poll()})") from exc
        kind, rest = self._answer()
        if kind != "ok" or not isinstance(rest[0], list) or len(rest[0]) != len(texts):
            raise WorkerGone("the embedding worker answered something else than the texts' vectors")
        self.cpu_s = rest[1]
        return [[Chunk(np.asarray(v, dtype=np.float32), c) for v, c in zip(vectors, covered, strict=True)]
                for vectors, covered in rest[0]]

    def embed_query(self, text: str) -> np.ndarray:
        """A query is its first window, as the model in-process embeds it (not used ahead)."""
        vector: np.ndarray = self.embed_documents([text])[0][0].vector
        return vector

    def check(self) -> str:
        return f"embedded {self.model} in worker process {self.pid}"

    def close(self, grace_s: float = 1.0) -> int:
        """End the child and reap it: SIGTERM (it holds nothing to save, and a normal exit would
        spend ~1 s tearing its session down), SIGKILL after `grace_s`. Its exit code (negative:
        the signal). Not while another thread waits on its pipes (kill, join that thread, close)."""
        proc = self._proc
        for stop in (proc.terminate, proc.kill):
            with contextlib.suppress(OSError):  # already gone
                stop()
            try:
                code = proc.wait(timeout=grace_s)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            code = proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:  # a broken pipe's buffered write
                pass
        return code

    def kill(self) -> None:
        """End the child now (a call in progress is lost): what stopping waits for at most."""
        with contextlib.suppress(OSError):
            self._proc.kill()


def _serve(threads: int, nice: int) -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but frames on the pipe, whatever a library prints
    try:
        model = EmbeddedProvider(threads=threads)
        model.embed_documents(["ready"])  # the tokenizer and the documents' session, loaded now
    except Exception as exc:  # noqa: BLE001 - told to the parent, which ends the work ahead
        write_frame(stdout, ("error", f"{type(exc).__name__}: {exc}"))
        return
    _lower_priority(nice)
    write_frame(stdout, ("ready", os.getpid(), time.process_time()))
    while True:
        try:
            texts = read_frame(stdin)
        except EOFError:
            return
        try:
            chunks = model.embed_documents(texts)
            answer = [(np.stack([c.vector for c in doc]), [c.text for c in doc]) for doc in chunks]
        except Exception as exc:  # noqa: BLE001 - told to the parent, which ends the work ahead
            write_frame(stdout, ("error", f"{type(exc).__name__}: {exc}"))
            return
        write_frame(stdout, ("ok", answer, time.process_time()))


def _lower_priority(nice: int) -> None:
    """Every thread of this process (the ONNX session's too, made by now) at `nice` more, and in
    Linux's idle scheduling class (`SCHED_IDLE`): a thread of the batch that wakes takes its core
    from this process at once, where at nice +19 it still had a small share to wait out (the batch's
    threads wake thousands of times a second: the GIL passing, DuckDB, the sockets). Six
    alternating pairs of the 300-project groups side: the fetch phase shorter in five, the sync
    33.7 against 34.1 s (medians), with as many documents embedded ahead. Only after the load:
    its ~2 s of CPU (imports, the model's hash, the session) at nice +10 took 11 s of a loaded
    machine (~0.1 of a core), and it overlaps the batch's startup anyway. This process shares no
    lock with the batch (its own GIL), so its threads' low priority cannot hold the batch up."""
    for task in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else [str(os.getpid())]:
        with contextlib.suppress(OSError, ValueError):  # a thread that ended; not Linux: this one only
            lower_priority(int(task), nice)
        with contextlib.suppress(OSError, ValueError, AttributeError):  # not Linux: nice alone
            os.sched_setscheduler(int(task), os.SCHED_IDLE, os.sched_param(0))


def lower_priority(tid: int, nice: int) -> None:
    """Thread `tid` (Linux nice is per thread) at `nice` more, at most 19."""
    os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError, KeyboardInterrupt):  # the parent went away: nothing to tell
        _serve(int(sys.argv[1]), int(sys.argv[2]))
