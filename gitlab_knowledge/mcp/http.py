"""Streamable HTTP: 127.0.0.1 unless told otherwise; beyond loopback only with a bearer token.

The SDK's app already refuses requests whose Host or Origin is not loopback when bound to
127.0.0.1 (DNS rebinding); the bearer check wraps it for everything else.
"""

import hmac
import ipaddress
import os
import socket
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from gitlab_knowledge.config import Config
from gitlab_knowledge.errors import ConfigError, UsageError
from gitlab_knowledge.mcp.resident import Resident
from gitlab_knowledge.redact import register_secret

ASGIApp = Callable[[MutableMapping[str, Any], Any, Any], Awaitable[None]]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bearer_token(config: Config, host: str) -> str | None:
    """The token HTTP clients must send; required when the server listens beyond this machine."""
    name = config.mcp.bearer_token_env
    value = os.environ.get(name, "").strip() if name else ""
    if name and not value:
        raise ConfigError(f"{name} (mcp.bearer_token_env) is not set: export the token HTTP clients must send")
    if not value and not is_loopback(host):
        raise UsageError(f"--host {host} would expose the store to the network without authentication: set "
                         "[mcp] bearer_token_env to a variable holding a token (clients then send "
                         "`Authorization: Bearer <token>`), or bind 127.0.0.1")
    if value:
        register_secret(value)
    return value or None


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        # Listening now, before the address is announced: a client that reads the line and
        # connects before uvicorn has started waits in the backlog instead of being refused.
        sock.listen(socket.SOMAXCONN)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port} ({exc.strerror}): pick another --port") from None
    return sock


def require_bearer(app: ASGIApp, token: str) -> ASGIApp:
    """Answer 401 to an HTTP request without `Authorization: Bearer <token>`."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            sent = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(sent, expected):
                body = b'{"error": "missing or wrong bearer token: send Authorization: Bearer <token>"}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


async def serve_http(resident: Resident, sock: socket.socket, host: str, token: str | None) -> None:
    import uvicorn

    from gitlab_knowledge.mcp.server import build_server

    app: Any = build_server(resident.context).streamable_http_app(host=host)
    if token:
        app = require_bearer(app, token)
    shown = f"[{host}]" if ":" in host else host
    # Clients and tests read this line to find the port (--port 0 picks a free one).
    sys.stderr.write(f"gitlab_knowledge MCP server: http://{shown}:{sock.getsockname()[1]}/mcp\n")
    sys.stderr.flush()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    await server.serve(sockets=[sock])
