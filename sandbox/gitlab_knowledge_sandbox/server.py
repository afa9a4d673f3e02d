"""The sandbox GitLab HTTP server: a real socket server on 127.0.0.1 speaking GitLab REST v4."""

import contextlib
import json
import socket
import ssl
import sys
import threading
import traceback
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlsplit

from .api import API_PREFIX, Api, ApiRequest, ApiResponse
from .clock import SandboxClock, http_date
from .control import CONTROL_PREFIX, Stats, handle_control
from .dataset import Dataset, load_dataset
from .faults import STATUS_TEXT, Fault, FaultInjector
from .inflight import InFlight
from .params import nest_form
from .ratelimit import RateLimiter, rate_headers, synthetic_state, throttled_headers
from .state import SandboxState

DEFAULT_TOKEN = "glpat-sandbox-token-000000"
SAMPLE_DATASET = Path(__file__).resolve().parent / "sample"
MAX_BODY = 16 * 1024 * 1024


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], sandbox: "SandboxGitLab") -> None:
        self.sandbox = sandbox
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away (killed mid-request, timed out) is routine for a test server;
        # anything else still gets the default traceback.
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionResetError, BrokenPipeError, TimeoutError)):
            return
        super().handle_error(request, client_address)

    def close_connections(self) -> None:
        # Idle keep-alive connections would otherwise keep being served after stop().
        with self.connections_lock:
            conns = list(self.connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _CloseConnection(Exception):
    """Stop handling this request and close the connection (drop/timeout faults, oversized bodies)."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "SandboxGitLab/1"
    sys_version = ""
    # Idle keep-alive sockets must not pin a thread forever.
    timeout = 120
    # Headers and body go out in separate writes; with Nagle on, delayed ACKs add ~40 ms each.
    disable_nagle_algorithm = True
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.connections_lock:
                self.server.connections.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature from the base class
        pass

    def date_time_string(self, timestamp: float | None = None) -> str:
        return http_date(self.server.sandbox.clock.now())

    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_GET

    # -- plumbing ----------------------------------------------------------------------------

    def _dispatch(self) -> None:
        sandbox = self.server.sandbox
        try:
            raw_body = self._read_body()
            path = urlsplit(self.path).path or "/"
            if path.startswith(CONTROL_PREFIX):
                self._send_json(*sandbox.control(self.command, path, raw_body), count=False)
                return
            with sandbox.in_flight.serving(path):
                self._api(path, raw_body)
        except _CloseConnection:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:  # a sandbox bug must not look like a hung server
            traceback.print_exc(file=sys.stderr)
            self._send_json(500, {"message": "500 Internal Server Error"})

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            # The body stays unread, so this connection cannot carry another request.
            self.close_connection = True
            self._send_json(413, {"message": "413 Request Entity Too Large"})
            raise _CloseConnection()
        return self.rfile.read(length) if length > 0 else b""

    def _api(self, path: str, raw_body: bytes) -> None:
        sandbox = self.server.sandbox
        method = "GET" if self.command == "HEAD" else self.command
        route = sandbox.api.resolve(path)
        sandbox.counters.request(route.stats_name(method) if route else "unknown")
        if sandbox.latency_ms > 0:
            sandbox.sleep(sandbox.latency_ms / 1000.0)

        fault = sandbox.injector.pick(method, path) if path.startswith(API_PREFIX + "/") else None
        truncate = False
        if fault is not None:
            sandbox.counters.count("faults", fault.kind)
            truncate = self._apply_fault(fault)
            if truncate is None:
                return

        if route is None:
            # GitLab's catch-all route answers 404 before any authentication.
            self._send_json(404, {"error": "404 Not Found"})
            return
        token = self._token()
        viewer = sandbox.state.users.principal(token)
        if token is None or viewer is None:
            self._send_json(401, {"message": "401 Unauthorized"}, sandbox.rate_headers_for(token))
            return
        rate_extra: dict[str, str] = {}
        if sandbox.limiter is not None:
            state = sandbox.limiter.check(token)
            now = sandbox.clock.now()
            if not state.allowed:
                self._send_throttled(throttled_headers(state, now, retry_after=state.retry_after))
                return
            rate_extra = rate_headers(state, now)

        try:
            request = self._api_request(method, path, raw_body)
            request.viewer = viewer
        except ValueError as exc:
            response = ApiResponse(400, {"error": str(exc)})
        else:
            response = sandbox.api.handle(route, request)
        self._send_json(response.status, response.body, {**response.headers, **rate_extra}, truncate=truncate)

    def _apply_fault(self, fault: Fault) -> bool | None:
        """Act on a fault. Returns True to truncate the real answer, False to answer normally,
        None when the fault already answered (or deliberately did not)."""
        sandbox = self.server.sandbox
        if fault.kind == "latency":
            sandbox.sleep(fault.ms / 1000.0)
            return False
        if fault.kind == "truncate":
            return True
        if fault.kind == "drop":
            raise _CloseConnection()
        if fault.kind == "timeout":
            sandbox.sleep(fault.delay)
            raise _CloseConnection()
        if fault.kind == "429":
            now = sandbox.clock.now()
            state = sandbox.limiter.peek(self._token() or "") if sandbox.limiter else None
            state = state or synthetic_state(fault.retry_after)
            self._send_throttled(throttled_headers(state, now, retry_after=fault.retry_after, reset=fault.reset))
            return None
        status = fault.status or 500
        self._send_json(status, {"message": STATUS_TEXT.get(status, f"{status} Error")},
                        sandbox.rate_headers_for(self._token()))
        return None

    def _token(self) -> str | None:
        token = self.headers.get("PRIVATE-TOKEN")
        if token:
            return token.strip()
        auth = self.headers.get("Authorization") or ""
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
        return None

    def _api_request(self, method: str, path: str, raw_body: bytes) -> ApiRequest:
        query_string = urlsplit(self.path).query
        pairs = parse_qsl(query_string, keep_blank_values=True)
        body: dict[str, Any] = {}
        if raw_body and method in ("POST", "PUT", "PATCH", "DELETE"):
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            text = raw_body.decode("utf-8", errors="replace")
            if ctype == "application/json" or (not ctype and text.lstrip().startswith("{")):
                try:
                    parsed = json.loads(text)
                except ValueError:
                    raise ValueError("400 Bad request - body is not valid JSON") from None
                if not isinstance(parsed, dict):
                    raise ValueError("400 Bad request - JSON body must be an object")
                body = parsed
            else:
                body = nest_form(parse_qsl(text, keep_blank_values=True))
        host = self.headers.get("Host") or "{}:{}".format(*self.server.server_address[:2])
        return ApiRequest(
            method=method,
            path=path,
            query=parse_qs(query_string, keep_blank_values=True),
            query_pairs=pairs,
            body=body,
            base_url=f"http://{host}",
        )

    def _send_throttled(self, headers: dict[str, str]) -> None:
        body = b"Retry later\n"
        self._send(429, body, "text/plain", headers)

    def _send_json(self, status: int, body: Any, headers: dict[str, str] | None = None,
                   *, truncate: bool = False, count: bool = True) -> None:
        payload = b"" if status == 204 else _encode_json(body)
        if truncate and payload:
            # Valid HTTP (Content-Length matches), broken JSON.
            payload = payload[: max(1, len(payload) // 2)]
        self._send(status, payload, "application/json", headers or {}, count=count)

    def _send(self, status: int, payload: bytes, content_type: str, headers: dict[str, str],
              *, count: bool = True) -> None:
        if count:
            self.server.sandbox.counters.count("status", str(status))
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        for key, value in headers.items():
            self.send_header(key, value)
        if status != 204:
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD" and status != 204:
            self.wfile.write(payload)


class SandboxGitLab:
    """A GitLab REST v4 look-alike over a dataset, served on a real local socket."""

    def __init__(
        self,
        dataset: Path | str | Dataset | None = None,
        token: str | Iterable[str] = DEFAULT_TOKEN,
        host: str = "127.0.0.1",
        port: int = 0,
        latency_ms: float = 0.0,
        rate_limit: float | None = None,
        faults: str | None = None,
        clock: SandboxClock | None = None,
        tls: tuple[Path | str, Path | str] | None = None,
        legacy_diffs: bool = False,
    ) -> None:
        """`tls=(certificate, key)` serves HTTPS, for testing a client's custom CA bundle;
        `legacy_diffs=True` answers like GitLab < 15.7 (no `.../merge_requests/:iid/diffs`)."""
        if dataset is None:
            dataset = SAMPLE_DATASET
        if not isinstance(dataset, Dataset):
            dataset = load_dataset(dataset)
        self.dataset_path = dataset.path
        self.clock = clock or SandboxClock()
        self.state = SandboxState(dataset, self.clock)
        self.state.legacy_diffs = legacy_diffs
        self.api = Api(self.state)
        self.tokens = frozenset([token] if isinstance(token, str) else token)
        self.token = token if isinstance(token, str) else next(iter(sorted(self.tokens)), DEFAULT_TOKEN)
        self.host = host
        self.port = port
        self.latency_ms = float(latency_ms)
        self.limiter = RateLimiter(rate_limit) if rate_limit else None
        self.injector = FaultInjector(faults)
        self.counters = Stats()
        self.in_flight = InFlight(lambda ref: self.state.project(ref))  # the projects being served at once (inflight.py)
        self.tls = tls
        self._stopping = threading.Event()
        self._server: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def tokens(self) -> frozenset[str]:
        """The sandbox's own tokens: the dataset's user, reading as an admin (users.py)."""
        return self._tokens

    @tokens.setter
    def tokens(self, value: Iterable[str]) -> None:
        self._tokens = frozenset(value)
        self.state.users.trust(self._tokens, self.state.user)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> "SandboxGitLab":
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = _HTTPServer((self.host, self.port), self)
        self.port = self._server.server_address[1]
        if self.tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(self.tls[0]), str(self.tls[1]))
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        # A short poll interval keeps stop() fast; tests start and stop many servers.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="sandbox-gitlab", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.close_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> "SandboxGitLab":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def api_url(self) -> str:
        return self.url + API_PREFIX

    def sleep(self, seconds: float) -> None:
        """Wait, but give up as soon as the server stops."""
        if seconds > 0:
            self._stopping.wait(seconds)

    # -- knobs -------------------------------------------------------------------------------

    def set_faults(self, spec: str | None) -> None:
        """Replace the fault rules (counters start over). Raises FaultSpecError."""
        self.injector = FaultInjector(spec)

    def set_rate_limit(self, rps: float | None) -> None:
        self.limiter = RateLimiter(rps) if rps else None

    def stats(self) -> dict[str, Any]:
        return self.counters.snapshot()

    def reset_stats(self) -> None:
        self.counters.reset()

    def rate_headers_for(self, token: str | None) -> dict[str, str]:
        if self.limiter is None:
            return {}
        return rate_headers(self.limiter.peek(token or ""), self.clock.now())

    def control(self, method: str, path: str, raw_body: bytes) -> tuple[int, Any]:
        return handle_control(self, method, path, raw_body)


def _encode_json(body: Any) -> bytes:
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:
        # A saved body may hold `\ud800` (valid JSON, not valid UTF-8): served escaped, as it was saved.
        return json.dumps(body, ensure_ascii=True, separators=(",", ":")).encode()
