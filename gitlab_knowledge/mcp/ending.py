"""How the server process ends: at once, at any moment, with its exit code and nothing else.

The process only reads the store; what it leaves behind is the search command's socket file,
removed first. Then it leaves with `os._exit`, skipping the interpreter's teardown: the embedding
model, LanceDB and Tantivy run native threads that may be mid-work (the first seconds load all
three), and the C++ runtime's exit under a live thread aborts the process ("terminate called
without an active exception", exit 134), while a normal teardown after a search also waits ~2 s
on their pools. Nothing in the process needs a finaliser to run.

Two things end it besides a returning `main`:
- SIGTERM or SIGINT: the handler ends the process itself instead of raising, so no code that
  happens to be running (an import, the SDK's loop, a `finally` that catches too much) can
  swallow the signal or turn it into a traceback.
- stdio only: the client closing the server's stdin with nothing left unread. The SDK notices
  end of input only once it reads, and it does not read while the model loads; a thread waits
  for the hang-up on a duplicate of fd 0 (the SDK points fd 0 at /dev/null while it serves and
  reads a duplicate of its own; both name the same pipe).
"""

import contextlib
import os
import select
import signal
import stat
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

INTERRUPTED = 130  # the README's exit code for Ctrl-C, and SIGTERM, to any command


class Ending:
    """The one way out of the process once it may hold native threads."""

    def __init__(self) -> None:
        self._cleanups: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def on_exit(self, cleanup: Callable[[], None]) -> None:
        self._cleanups.append(cleanup)

    def now(self, code: int) -> NoReturn:
        # One thread ends the process; another arriving here (the hang-up during a signal) waits for it.
        self._lock.acquire()
        self._leave(code)

    def _leave(self, code: int) -> NoReturn:
        for cleanup in self._cleanups:
            with contextlib.suppress(Exception):
                cleanup()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)

    def on_signals(self) -> None:
        """SIGTERM and SIGINT end the process with INTERRUPTED (a signal the parent told us to
        ignore stays ignored)."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            if signal.getsignal(signum) is not signal.SIG_IGN:
                signal.signal(signum, self._signalled)

    def _signalled(self, _signum: int, _frame: object) -> None:
        # Not waiting: the handler may run in the very thread that is already ending the process.
        if self._lock.acquire(blocking=False):
            self._leave(INTERRUPTED)

    def on_stdin_hangup(self) -> bool:
        """End with 0 when the client closes stdin and every byte it sent has been read. False
        when stdin is not a pipe or socket (a terminal, a file: the SDK's end of input rules)."""
        if not hasattr(select, "poll"):  # not POSIX: the SDK's end of input rules
            return False
        try:
            kind = os.fstat(0).st_mode
        except OSError:
            return False
        if not (stat.S_ISFIFO(kind) or stat.S_ISSOCK(kind)):
            return False
        fd = os.dup(0)
        # Only the hang-up is asked for (POLLHUP is always reported; POLLRDHUP is a socket
        # peer's shutdown): readable data alone never wakes the thread, so it cannot spin.
        watch = getattr(select, "POLLRDHUP", 0) if stat.S_ISSOCK(kind) else 0
        threading.Thread(target=self._wait_for_hangup, args=(fd, watch), name="gk-stdin-hangup",
                         daemon=True).start()
        return True

    def _wait_for_hangup(self, fd: int, watch: int) -> None:
        poller = select.poll()
        poller.register(fd, watch)
        try:
            poller.poll()
        except OSError:
            return
        if _unread(fd) == 0:
            self.now(0)
        # The client wrote and then closed: the SDK reads the rest, answers, meets the end of
        # input and `main` returns. Polling again would return at once, forever, so stop here.


def _unread(fd: int) -> int:
    """Bytes waiting in the pipe or socket (FIONREAD); -1 when it cannot be told."""
    import fcntl
    import termios

    buf = bytearray(4)
    try:
        fcntl.ioctl(fd, termios.FIONREAD, buf)
    except OSError:
        return -1
    return int.from_bytes(buf, sys.byteorder, signed=True)
