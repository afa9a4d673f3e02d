"""A hostile HTTP proxy on 127.0.0.1 in front of the sandbox GitLab: it forwards every request
and, for the requests its rules pick, lies the way broken GitLabs and the boxes in front of them
do: a 404/410/403 on one endpoint, `Link` headers that loop or lead to a 404, listings whose
pagination headers were stripped, bodies larger than anything sane, gzip bombs, a listing with one
row GitLab never sends (its `id` missing or not an integer).

    with HostileProxy(sandbox.url) as proxy:
        proxy.add(Rule(r"/issues/3/discussions$", "status", status=404, count=1))
        config = ...url=proxy.url...

A rule fires at most `count` times (then requests pass through untouched), so the sync after a
hostile one meets an honest GitLab.
"""

import gzip
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import httpx

ACTIONS = ("status", "link_loop", "link_404", "strip_paging", "huge", "gzip_bomb", "empty", "bad_row")
PAGING_HEADERS = ("link", "x-next-page", "x-page", "x-total", "x-total-pages", "x-per-page", "x-prev-page")


@dataclass
class Rule:
    path: str  # a regex searched in the request's path (without the query)
    action: str  # one of ACTIONS
    status: int = 404
    count: int | None = 1  # None: for ever
    size: int = 4 * 2**20  # bytes of body for `huge` and `gzip_bomb` (decompressed)
    query: str | None = None  # a regex the query string must match too
    iid: int | None = None  # `bad_row`: the listed item whose row is spoilt
    bad_id: Any = None  # `bad_row`: the value its `id` becomes (None: the key is dropped)
    fired: int = 0
    spoilt: int = 0  # `bad_row`: rows spoilt (a page without the item spoils none)
    pattern: re.Pattern[str] = field(init=False)

    def __post_init__(self) -> None:
        assert self.action in ACTIONS, self.action
        self.pattern = re.compile(self.path)

    def wants(self, path: str, query: str) -> bool:
        if self.count is not None and self.fired >= self.count:
            return False
        if not self.pattern.search(path) or (self.query is not None and not re.search(self.query, query)):
            return False
        self.fired += 1
        return True


class HostileProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.rules: list[Rule] = []
        self.lock = threading.Lock()
        self._client = httpx.Client(timeout=30.0)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base class signature
                pass

            def do_GET(self) -> None:
                proxy._handle(self)

            do_POST = do_PUT = do_DELETE = do_GET

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "HostileProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._client.close()

    def add(self, *rules: Rule) -> None:
        with self.lock:
            self.rules.extend(rules)

    def clear(self) -> list[Rule]:
        with self.lock:
            rules, self.rules = self.rules, []
        return rules

    # -- one request ------------------------------------------------------------------------

    def _pick(self, path: str, query: str) -> Rule | None:
        with self.lock:
            return next((r for r in self.rules if r.wants(path, query)), None)

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        rule = self._pick(parts.path, parts.query)
        if rule is not None and rule.action == "status":
            return self._send(handler, rule.status, json.dumps({"message": f"{rule.status} Hostile"}).encode(), {})
        if rule is not None and rule.action == "huge":
            return self._send_huge(handler, rule.size)
        if rule is not None and rule.action == "gzip_bomb":
            bomb = gzip.compress(b"[" + b" " * rule.size + b"]", compresslevel=9)
            return self._send(handler, 200, bomb, {"Content-Encoding": "gzip"})
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in ("host", "content-length",
                                                                                   "accept-encoding", "connection")}
        reply = self._client.request(handler.command, self.upstream + handler.path, headers=headers, content=body)
        out = {k: v for k, v in reply.headers.items()
               if k.lower() not in ("content-length", "content-encoding", "transfer-encoding", "connection")}
        content = reply.content
        if rule is not None and rule.action == "empty":
            content = b"[]"
        elif rule is not None and rule.action == "bad_row":
            content = self._spoil_row(content, rule)
        elif rule is not None and rule.action == "strip_paging":
            out = {k: v for k, v in out.items() if k.lower() not in PAGING_HEADERS}
        elif rule is not None and rule.action == "link_loop":
            own = f"{self.url}{handler.path}"
            out = {k: v for k, v in out.items() if k.lower() not in PAGING_HEADERS}
            out["Link"] = f'<{own}>; rel="next"'
        elif rule is not None and rule.action == "link_404":
            out = {k: v for k, v in out.items() if k.lower() not in PAGING_HEADERS}
            out["Link"] = f'<{self.url}{parts.path}/nowhere?page=2>; rel="next"'
        self._send(handler, reply.status_code, content, out)

    @staticmethod
    def _spoil_row(content: bytes, rule: Rule) -> bytes:
        rows = json.loads(content)
        for row in rows:
            if row.get("iid") == rule.iid:
                row.pop("id", None)
                if rule.bad_id is not None:
                    row["id"] = rule.bad_id
                rule.spoilt += 1
        return json.dumps(rows).encode()

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, payload: bytes, headers: dict[str, str]) -> None:
        handler.send_response(status)
        headers = {"Content-Type": "application/json", **headers, "Content-Length": str(len(payload))}
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(payload)

    @staticmethod
    def _send_huge(handler: BaseHTTPRequestHandler, size: int) -> None:
        # Chunked, without a length: a client must stop reading by itself.
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        block = b" " * 65536
        try:
            sent = 0
            handler.wfile.write(b"1\r\n[\r\n")
            while sent < size:
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(block), block))
                sent += len(block)
            handler.wfile.write(b"1\r\n]\r\n0\r\n\r\n")
        except OSError:
            pass  # the client stopped reading: what it should do
        handler.close_connection = True
