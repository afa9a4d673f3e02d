"""The search command's warm path: ask a running MCP server over a local socket.

A one-shot `python -m gitlab_knowledge.search` spends ~1 s importing LanceDB, loading the model and
opening the indexes. A running `python -m gitlab_knowledge.mcp` holds all of that, so it also
listens on a Unix socket whose path follows from the data directory alone (`socket_path`): the
search command finds it without any configuration, sends its parsed arguments, and prints what
the server rendered with the same function the in-process path uses. No server (no socket, a stale
one, a server for other settings, a timeout) means the command searches in-process, as before.

The socket is trusted only as far as nobody else can have put it there: it lives in a directory
only its user can write to (`private_problem`), the peer must run as the same user (SO_PEERCRED),
the whole exchange has one deadline, and a reply that is not exactly the protocol's shape counts
as no server at all.

This module is imported by every search command, so it imports nothing heavy.
"""

import argparse
import contextlib
import hashlib
import json
import logging
import os
import socket
import stat
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

from gitlab_knowledge.config import Config
from gitlab_knowledge.errors import KnowledgeError

log = logging.getLogger(__name__)

PROTOCOL = 1
SOCKET_NAME = "mcp-search.sock"
DISABLE_ENV = "GITLAB_KNOWLEDGE_RESIDENT"  # "off": never ask a running server
CONNECT_TIMEOUT = 0.5
# One deadline for connect, send and the whole answer: a server reloading 100K vectors after a sync
# needs ~2 s; past this the command searches in-process, so a stalled or trickling peer costs at most this.
EXCHANGE_DEADLINE = 15.0
MAX_MESSAGE = 32 * 1024 * 1024
_SUN_PATH_MAX = 100  # sockaddr_un holds 104-108 bytes depending on the OS
_MAX_EXIT_CODE = 125  # above: the shell's own meanings (126-127, 128+signal)


def socket_path(config: Config) -> Path:
    """Where the server for this data directory listens: in it, or (a path too long for a Unix
    socket) in a per-user directory (`runtime_dir`) under a name derived from it."""
    inside = config.data_dir / SOCKET_NAME
    if len(os.fsencode(str(inside))) < _SUN_PATH_MAX:
        return inside
    digest = hashlib.sha256(os.fsencode(str(config.data_dir.resolve()))).hexdigest()[:16]
    return runtime_dir() / f"{digest}.sock"


def runtime_dir() -> Path:
    """The user's own directory for sockets when the data directory's path is too long: never a
    file name in a shared directory, which another user could create first."""
    return Path(tempfile.gettempdir()) / f"gitlab_knowledge-{os.getuid()}"


def private_problem(directory: Path) -> str | None:
    """Why a socket in `directory` could be someone else's, or None when only this user can have
    put it there (the directory is ours and nobody else may write in it)."""
    try:
        # Through a symlink too: what matters is who may write where the socket is.
        info = directory.stat()
    except OSError as exc:
        return f"{directory}: {exc.strerror or exc}"
    if not stat.S_ISDIR(info.st_mode):
        return f"{directory} is not a directory"
    if info.st_uid != os.getuid():
        return f"{directory} belongs to uid {info.st_uid}, not to this user ({os.getuid()})"
    # The data directory may be readable by others (the socket is 0600); the one we make is 0700.
    if info.st_mode & (0o077 if directory == runtime_dir() else 0o022):
        return f"{directory} is open to other users (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def fingerprint(config: Config) -> dict[str, Any]:
    """The settings a search's output depends on: the server answers only when its own match."""
    e, s = config.embedding, config.search
    return {"data_dir": str(config.data_dir), "rrf_k": s.rrf_k, "candidates": s.candidates,
            "provider": e.provider, "model": e.model, "ollama_host": e.ollama_host}


class ResidentError(KnowledgeError):
    """The server's search failed: the same message and exit code the in-process search gives."""

    def __init__(self, message: str, exit_code: int, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.details = details or {}

    def fields(self) -> dict[str, Any]:
        return self.details


# The search command's arguments the server knows how to answer; `config` picked the settings,
# which `fingerprint` carries. A flag added to the command later is not among them, so a command
# using it searches in-process until it is added here and in resident.answer.
_ANSWERED = {"query", "mode", "limit", "model", "json", "explain", "config"}


def request_of(args: argparse.Namespace, color: bool) -> dict[str, Any] | None:
    """What the search command asks the server, or None when it uses a flag the server cannot honour."""
    from gitlab_knowledge.search.arguments import build_parser
    from gitlab_knowledge.search.filters import FILTERS

    filters = {spec.name: getattr(args, spec.dest) for spec in FILTERS}
    known = _ANSWERED | {spec.dest for spec in FILTERS}
    parser = build_parser()
    if any(value != parser.get_default(name) for name, value in vars(args).items() if name not in known):
        return None
    return {"query": " ".join(args.query), "filters": filters, "mode": args.mode, "limit": args.limit,
            "model": args.model, "json": args.json, "explain": args.explain, "color": bool(color)}


def ask_resident(config: Config, request: dict[str, Any] | None) -> tuple[str, str] | None:
    """(stdout, stderr) as the server rendered them, or None to search in-process. Raises
    ResidentError when the server searched and the search failed."""
    if request is None or not hasattr(socket, "AF_UNIX"):
        return None
    if os.environ.get(DISABLE_ENV, "").lower() in ("off", "0", "no", "false"):
        return None
    path = socket_path(config)
    if not path.exists():
        return None
    message = {"protocol": PROTOCOL, "settings": fingerprint(config), **request}
    try:
        answer = _exchange(path, message)
    except (OSError, ValueError) as exc:
        # Stale socket, a server that went away, stalled or is not ours: search here instead.
        log.debug("searching in-process: the server at %s did not answer (%s)", path, exc)
        return None
    problem = _reply_problem(answer)
    if problem is not None:
        log.debug("searching in-process: the server at %s answered %s", path, problem)
        return None
    if answer.get("decline"):
        return None
    if "error" in answer:
        raise ResidentError(answer["error"], answer["exit_code"], answer.get("details"))
    return answer["stdout"], answer["stderr"]


def _reply_problem(answer: Any) -> str | None:
    """What is wrong with a reply, or None when it has the protocol's shape: a decline, an error
    with a message and an exit code the command can exit with, or the output as two strings."""
    if not isinstance(answer, dict):
        return "something other than an object"
    if answer.get("protocol") != PROTOCOL:
        return "another protocol version"
    if "decline" in answer:
        return None if isinstance(answer["decline"], str) and answer["decline"] else "a malformed decline"
    if "error" in answer:
        code, details = answer.get("exit_code"), answer.get("details")
        if not isinstance(answer["error"], str):
            return "an error that is not a string"
        if type(code) is not int or not 1 <= code <= _MAX_EXIT_CODE:
            return f"an exit code that is not an integer from 1 to {_MAX_EXIT_CODE}"
        if details is not None and not isinstance(details, dict):
            return "error details that are not an object"
        return None
    if not isinstance(answer.get("stdout"), str) or not isinstance(answer.get("stderr"), str):
        return "no output strings"
    return None


def server_status(config: Config) -> dict[str, Any] | None:
    """What the server for this data directory says of itself, or None when none answers."""
    try:
        status = _exchange(socket_path(config), {"protocol": PROTOCOL, "status": True})
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) else None


def _exchange(path: Path, message: dict[str, Any]) -> Any:
    deadline = time.monotonic() + EXCHANGE_DEADLINE
    problem = private_problem(path.parent)
    if problem is not None:
        raise ValueError(f"the socket's directory is not private: {problem}")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(min(CONNECT_TIMEOUT, EXCHANGE_DEADLINE))
        sock.connect(str(path))
        check_peer(sock)
        _send_all(sock, json.dumps(message).encode() + b"\n", deadline)
        return json.loads(read_line(sock, deadline))


def check_peer(sock: socket.socket) -> None:
    """Refuse a peer that runs as another user: it would read the queries and answer for the server."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        # Not Linux: no SO_PEERCRED to ask; the private directory is then the only guard.
        log.debug("SO_PEERCRED is not available here: the server's user is not checked")
        return
    _pid, uid, _gid = struct.unpack("iII", sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("iII")))
    if uid != os.getuid():
        raise ValueError(f"the server runs as uid {uid}, not as this user ({os.getuid()})")


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("no whole answer before the deadline")
    return left


def _send_all(sock: socket.socket, data: bytes, deadline: float) -> None:
    view = memoryview(data)
    while view:
        sock.settimeout(_remaining(deadline))
        view = view[sock.send(view):]


def read_line(sock: socket.socket, deadline: float | None = None) -> bytes:
    """One newline-terminated message (the protocol is one JSON object per line each way), whole
    before `deadline` (time.monotonic()) when one is given."""
    chunks, size = [], 0
    while True:
        if deadline is not None:
            sock.settimeout(_remaining(deadline))
        chunk = sock.recv(65536)
        if not chunk:
            raise ValueError("connection closed before a whole message")
        chunks.append(chunk)
        size += len(chunk)
        if chunk.endswith(b"\n"):
            return b"".join(chunks)
        if size > MAX_MESSAGE:
            raise ValueError("message too long")


def remove_stale(path: Path) -> bool:
    """Remove a socket file nobody listens on; False when a live server holds it. Only for a
    socket of this user's in its private directory (the server checks both first)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(CONNECT_TIMEOUT)
        try:
            probe.connect(str(path))
        except FileNotFoundError:
            return True
        except OSError:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return True
    return False
