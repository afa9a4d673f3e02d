"""The one warm searcher of a server process, and the local socket the search command asks.

Start-up is split so the first answer comes quickly: the model and the indexes open on the first
search, which scans LanceDB as a one-shot search does, while a background thread loads the
vectors into a second, warm `Searcher`; once loaded, the warm one answers (about ten times faster
per query at 100K documents). Both share the one embedding model. The warm searcher reloads the
vectors when a sync commits a new table version (`MemoryVectors`), and Tantivy's reader follows
the index's commits, so a sync's results appear without a restart. Nothing here opens DuckDB: a
search's own DuckDB reads (graph filters, linked references) go through the workspace it is
handed (`reads`: a viewer's lens, mcp/context.py), else through this process's plain one.
"""

import contextlib
import json
import logging
import os
import socket
import socketserver
import stat
import threading
import time
from pathlib import Path
from typing import Any

from gitlab_knowledge.config import Config
from gitlab_knowledge.errors import KnowledgeError, error_document
from gitlab_knowledge.search.engine import Response, Searcher
from gitlab_knowledge.search.filters import Filters
from gitlab_knowledge.search.resident_client import (
    PROTOCOL,
    fingerprint,
    private_problem,
    read_line,
    remove_stale,
    socket_path,
)
from gitlab_knowledge.workspace import Workspace, private_dir

log = logging.getLogger(__name__)
WARM_RETRY_SECONDS = 30.0


class ResidentSearch:
    """`search()` is safe to call from any thread: one search runs at a time per searcher."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._lock = threading.Lock()  # a Searcher runs one search at a time
        self._warm_lock = threading.Lock()
        # Both searchers take their embedder from one workspace: one model per process.
        self._workspace = Workspace(config)
        self._cold = self._workspace.searcher()
        self._warm: Searcher | None = None
        self._warming: threading.Thread | None = None
        self._warm_tried = 0.0
        self._warm_guard = threading.Lock()
        self.warm_seconds: float | None = None  # how long loading the vectors took, once done
        self.commands_answered = 0  # searches answered for the search command (its socket)

    @property
    def is_warm(self) -> bool:
        return self._warm is not None

    def provider(self) -> Any:
        """The embedding model, loaded once per process (explain and index status use it too)."""
        with self._lock:
            return self._cold.provider()

    def start_warming(self) -> None:
        with self._warm_guard:
            if self._warming is None or (not self._warming.is_alive() and self._warm is None
                                         and time.monotonic() - self._warm_tried > WARM_RETRY_SECONDS):
                # Again later when it failed: a server started before the first sync warms up after it.
                self._warm_tried = time.monotonic()
                self._warming = threading.Thread(target=self._warm_up, name="gk-warm-search", daemon=True)
                self._warming.start()

    def _warm_up(self) -> None:
        started = time.perf_counter()
        try:
            with self._lock:
                # Model, LanceDB and Tantivy open now, not in the first agent's search.
                self._cold.search("warm up", limit=1)
            warm = self._workspace.searcher(warm=True)
            warm.search("warm up", mode="semantic", limit=1)  # loads the vectors into memory
        except KnowledgeError as exc:
            # No vectors yet, or no provider: the cold searcher degrades the way a CLI search does.
            log.info("search stays on the one-shot path: %s", exc)
            return
        except Exception:  # noqa: BLE001 - a failed warm-up must not take the server down
            log.exception("loading the vectors into memory failed; search stays on the one-shot path")
            return
        self.warm_seconds = round(time.perf_counter() - started, 2)
        self._warm = warm

    def search(self, query: str, filters: Filters | None = None, mode: str = "hybrid", limit: int = 10,
               reads: Workspace | None = None) -> Response:
        warm = self._warm
        if warm is None and self._warming is not None:
            self.start_warming()
        searcher, lock = (warm, self._warm_lock) if warm is not None else (self._cold, self._lock)
        with lock:
            self._follow_new_index(searcher)
            return searcher.search(query, filters, mode, limit, reads=reads)

    def similar(self, ref: str, filters: Filters | None = None, mode: str = "hybrid", limit: int = 10,
                project: str | None = None, reads: Workspace | None = None) -> Response:
        """`similar` (search/similar.py) on the searcher `search` would use, under its lock."""
        from gitlab_knowledge.search.similar import similar

        warm = self._warm
        searcher, lock = (warm, self._warm_lock) if warm is not None else (self._cold, self._lock)
        with lock:
            self._follow_new_index(searcher)
            return similar(searcher, ref, filters, mode, limit, project, reads=reads)

    def _follow_new_index(self, searcher: Searcher) -> None:
        """A Searcher remembers a missing lexical index; the first sync creates it, so look again."""
        if searcher.lexical() is None and (self.config.tantivy_dir / "meta.json").exists():
            searcher._lexical_error = None


# -- the search command's socket ----------------------------------------------------------------


def answer(resident: ResidentSearch, message: Any) -> dict[str, Any]:
    """One request of the search command, answered with the output it would have printed."""
    from gitlab_knowledge.search.__main__ import render

    reply: dict[str, Any] = {"protocol": PROTOCOL}
    if not isinstance(message, dict) or message.get("protocol") != PROTOCOL:
        return {**reply, "decline": "another protocol version"}
    if message.get("status"):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        return {**reply, "answered": resident.commands_answered, "warm": resident.is_warm,
                "warm_seconds": resident.warm_seconds, "pid": os.getpid(), "peak_rss_mb": round(peak, 1)}
    if message.get("settings") != fingerprint(resident.config):
        return {**reply, "decline": "this server runs with other settings"}
    if message.get("model"):
        return {**reply, "decline": "this server searches the configured model only"}
    try:
        filters = Filters.build(**(message.get("filters") or {}))
        response = resident.search(str(message.get("query") or ""), filters, str(message.get("mode") or "hybrid"),
                                   int(message.get("limit") or 10))
        out, err = render(response, as_json=bool(message.get("json")), color=bool(message.get("color")),
                          explain=bool(message.get("explain")))
    except KnowledgeError as exc:
        return {**reply, **error_document(str(exc), exc.exit_code, exc)}
    except Exception:  # noqa: BLE001 - the command searches in-process and reports it its own way
        log.exception("a search for the search command failed")
        return {**reply, "decline": "internal error"}
    resident.commands_answered += 1
    return {**reply, "stdout": out, "stderr": err}


class _Handler(socketserver.StreamRequestHandler):
    server: "_SocketServer"

    def handle(self) -> None:
        try:
            message = json.loads(read_line(self.connection))
        except (OSError, ValueError):
            return
        reply = answer(self.server.resident, message)
        with contextlib.suppress(OSError):
            self.wfile.write(json.dumps(reply, ensure_ascii=False).encode() + b"\n")


class _SocketServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: Path, resident: ResidentSearch) -> None:
        self.resident = resident
        super().__init__(str(path), _Handler)


class LocalEndpoint:
    """The Unix socket the search command finds from its data directory (search/resident_client.py)."""

    def __init__(self, resident: ResidentSearch) -> None:
        self.resident = resident
        self.path = socket_path(resident.config)
        self._server: _SocketServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Listen, unless another live server already does for this data directory."""
        if not hasattr(socket, "AF_UNIX"):
            return False
        try:
            if self.path.parent == self.resident.config.data_dir:  # it will hold the store: the owner's only
                private_dir(self.path.parent)
            else:
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            problem = private_problem(self.path.parent) or _foreign(self.path)
            if problem is not None:
                # The search command would refuse this socket too; MCP is served all the same.
                log.warning("search commands will not use this server: %s, so a socket there could be "
                            "another user's", problem)
                return False
            if not remove_stale(self.path):
                log.info("another server already answers search commands at %s", self.path)
                return False
            old_umask = os.umask(0o177)  # the socket is the user's alone
            try:
                self._server = _SocketServer(self.path, self.resident)
            finally:
                os.umask(old_umask)
        except OSError as exc:
            log.warning("search commands will not use this server: cannot listen at %s (%s)", self.path, exc)
            return False
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="gk-search-socket", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


    def remove_file(self) -> None:
        """The socket file, if this endpoint listens on it: what a process ending at once removes."""
        if self._server is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()


def _foreign(path: Path) -> str | None:
    """Why the file at `path` is not ours to replace (None: no file, or our own socket). In a
    private directory another user's file can only mean the directory was not private once."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None
    if info.st_uid != os.getuid():
        return f"{path} belongs to uid {info.st_uid}"
    if not stat.S_ISSOCK(info.st_mode):
        return f"{path} is not a socket"
    return None


class Resident:
    """What lives for the process: the warm searcher, the tools' context and the search command's
    socket. Started before the SDK is imported, so the model loads while the process starts."""

    def __init__(self, config: Config, *, local_socket: bool = True) -> None:
        from gitlab_knowledge.mcp.context import Context  # tools imports this module

        self.search = ResidentSearch(config)
        self.context = Context.create(config, self.search)
        self.endpoint = LocalEndpoint(self.search) if local_socket else None

    def start(self) -> None:
        # The socket first: its umask change must not meet another thread creating files.
        if self.endpoint is not None:
            self.endpoint.start()
        self.search.start_warming()

    def stop(self) -> None:
        if self.endpoint is not None:
            self.endpoint.stop()
        self.context.reader.close()

    def remove_socket(self) -> None:
        """Undo what outlives the process (the socket file) without waiting on anything."""
        if self.endpoint is not None:
            self.endpoint.remove_file()
