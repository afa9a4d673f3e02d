"""The search command's warm path: ask a running MCP server over a local socket.

A one-shot `python -m gitlab_knowledge.search` spends ~1 s importing LanceDB, loading the model and
opening the indexes. A running `python -m gitlab_knowledge.mcp` holds all of that, so it also
listens on a Unix socket whose path follows from the data directory alone (`socket_path`): the
search command finds it without any configuration, sends its parsed arguments, and prints what
the server rendered with the same function the in-process path uses. No server (no socket, a stale
one, a server for other settings, a timeout) means the command searches in-process, as before.

This module is imported by every search command, so it imports nothing heavy.
"""

import argparse
import contextlib
import hashlib
import json
import os
import socket
import tempfile
from pathlib import Path
from typing import Any

from gitlab_knowledge.config import Config
from gitlab_knowledge.errors import KnowledgeError

PROTOCOL = 1
SOCKET_NAME = "mcp-search.sock"
DISABLE_ENV = "GITLAB_KNOWLEDGE_RESIDENT"  # "off": never ask a running server
CONNECT_TIMEOUT = 0.5
ANSWER_TIMEOUT = 30.0  # a server reloading 100K vectors after a sync needs ~2 s; a stuck one is skipped
MAX_MESSAGE = 32 * 1024 * 1024
_SUN_PATH_MAX = 100  # sockaddr_un holds 104-108 bytes depending on the OS


def socket_path(config: Config) -> Path:
    """Where the server for this data directory listens: in it, or (a path too long for a Unix
    socket) in the temp directory under a name derived from it."""
    inside = config.data_dir / SOCKET_NAME
    if len(os.fsencode(str(inside))) < _SUN_PATH_MAX:
        return inside
    digest = hashlib.sha256(os.fsencode(str(config.data_dir.resolve()))).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"gitlab_knowledge-{digest}.sock"


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
    except (OSError, ValueError):
        return None  # stale socket, a server that went away or stalled: search here instead
    if not isinstance(answer, dict) or answer.get("protocol") != PROTOCOL or answer.get("decline"):
        return None
    if "error" in answer:
        details = answer.get("details")
        raise ResidentError(str(answer["error"]), int(answer.get("exit_code") or 1),
                            details if isinstance(details, dict) else None)
    return str(answer.get("stdout") or ""), str(answer.get("stderr") or "")


def server_status(config: Config) -> dict[str, Any] | None:
    """What the server for this data directory says of itself, or None when none answers."""
    try:
        status: dict[str, Any] | None = _exchange(socket_path(config), {"protocol": PROTOCOL, "status": True})
        return status
    except (OSError, ValueError):
        return None


def _exchange(path: Path, message: dict[str, Any]) -> Any:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(CONNECT_TIMEOUT)
        sock.connect(str(path))
        sock.settimeout(ANSWER_TIMEOUT)
        sock.sendall(json.dumps(message).encode() + b"\n")
        return json.loads(read_line(sock))


def read_line(sock: socket.socket) -> bytes:
    """One newline-terminated message (the protocol is one JSON object per line each way)."""
    chunks, size = [], 0
    while True:
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
    """Remove a socket file nobody listens on; False when a live server holds it."""
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
