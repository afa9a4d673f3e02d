"""Streamable HTTP: 127.0.0.1 unless told otherwise; beyond loopback only with a bearer token.

Every bind checks Host and Origin (DNS rebinding, cross-site pages): the SDK's check gets the
names the bind answers to, loopback judged by address (127.0.0.2 and ::1 spelled long are
loopback too). A wildcard bind (0.0.0.0, ::) answers to names it cannot know, so there an Origin
must name the Host the request was sent to; its bearer token guards the rest.
"""

import hmac
import ipaddress
import logging
import os
import socket
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from gitlab_knowledge.config import Config
from gitlab_knowledge.errors import ConfigError, UsageError
from gitlab_knowledge.mcp.resident import Resident
from gitlab_knowledge.redact import register_secret

if TYPE_CHECKING:
    from mcp.server.transport_security import TransportSecuritySettings

ASGIApp = Callable[[MutableMapping[str, Any], Any, Any], Awaitable[None]]
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
log = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def is_wildcard(host: str) -> bool:
    address = _address(host)
    return address is not None and address.is_unspecified


def bind_names(host: str) -> list[str]:
    """The Host names (without port) a bind answers to: its spelling, its address's canonical
    form and, on loopback, the usual loopback names."""
    address = _address(host)
    names = [f"[{host.strip('[]')}]" if ":" in host else host]
    if address is not None:
        names.append(f"[{address.compressed}]" if address.version == 6 else address.compressed)
    if is_loopback(host) or (address is not None and address.is_unspecified):
        names += LOOPBACK_NAMES
    return list(dict.fromkeys(names))


def transport_security(host: str) -> "TransportSecuritySettings":
    """The SDK's Host/Origin check for a bind: on a wildcard bind it checks the loopback names'
    Origins only when the Host is one of them, so it is turned off there and same_origin() checks."""
    from mcp.server.transport_security import TransportSecuritySettings

    if is_wildcard(host):
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    names = bind_names(host)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[n for name in names for n in (name, f"{name}:*")],
        allowed_origins=[f"{scheme}://{n}" for name in names for scheme in ("http", "https")
                         for n in (name, f"{name}:*")])


def same_origin(app: ASGIApp) -> ASGIApp:
    """Answer 403 to an HTTP request whose Origin is not the Host it was sent to (a page of
    another site); a request without Origin (not a browser's cross-site one) passes."""

    async def checked(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            origin = headers.get(b"origin", b"").decode("latin-1").strip()
            host = headers.get(b"host", b"").decode("latin-1").strip().lower()
            if origin and (urlsplit(origin).netloc.lower() != host or not host):
                body = b"Invalid Origin header"
                await send({"type": "http.response.start", "status": 403,
                            "headers": [(b"content-type", b"text/plain"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return checked


def bearer_token(config: Config, host: str) -> str | None:
    """The token HTTP clients must send; required when the server listens beyond this machine,
    unless each client is a GitLab user (`[mcp] auth = "gitlab"`, where there is none)."""
    if config.mcp.auth == "gitlab":
        config.token()  # the sync's token, for the confidential flips' check (mcp/confidential_watch.py)
        return None
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
    # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY on an accepted connection only when the
    # socket says proto == IPPROTO_TCP (accepted sockets copy the listener's); with proto 0 Nagle
    # holds each answer's last segment for the client's delayed ACK, ~40 ms per call, even a 404.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
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


def whole_body(app: ASGIApp) -> ASGIApp:
    """Hand the app an HTTP request only once its whole body has arrived. A client that goes away
    halfway (fewer bytes than its Content-Length, then closed) is one line in the log, where the
    SDK, reading the body itself, would log starlette's ClientDisconnect with a traceback. The SDK
    reads each JSON-RPC body whole anyway, so nothing that streamed is held back."""

    async def buffered(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                client = scope.get("client")
                peer = f" {client[0]}:{client[1]}" if client else ""
                log.warning("a client%s disconnected before sending its whole request (%s %s): dropped",
                            peer, scope.get("method", ""), scope.get("path", ""))
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body, handed = b"".join(chunks), False

        async def replay() -> MutableMapping[str, Any]:
            nonlocal handed
            if handed:  # after the body: what the client does next (a disconnect)
                message: MutableMapping[str, Any] = await receive()
                return message
            handed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, replay, send)

    return buffered


async def serve_http(resident: Resident, sock: socket.socket, host: str, token: str | None) -> None:
    import uvicorn

    from gitlab_knowledge.mcp.server import build_server

    app: Any = whole_body(build_server(resident.context, http=True).streamable_http_app(
        host=host, transport_security=transport_security(host)))
    if is_wildcard(host):
        app = same_origin(app)
    if token:
        app = require_bearer(app, token)
    elif resident.context.config.mcp.auth == "gitlab":
        from gitlab_knowledge.mcp.gitlab_auth import gitlab_auth_app

        # The reader's overlay: confidential flips, checked with the sync's token (its absence is
        # a ConfigError here, before the server listens).
        app = gitlab_auth_app(app, resident.context.config, reader=resident.context.reader)
    shown = f"[{host}]" if ":" in host else host
    # Clients and tests read this line to find the port (--port 0 picks a free one).
    sys.stderr.write(f"gitlab_knowledge MCP server: http://{shown}:{sock.getsockname()[1]}/mcp\n")
    sys.stderr.flush()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    await server.serve(sockets=[sock])
