"""A fake Ollama server: real HTTP on 127.0.0.1 speaking `/api/embed` as the official client (0.6) uses it.

POST /api/embed {"model", "input": str | [str], "truncate", "options", "keep_alive", "dimensions"}
  → {"model", "embeddings": [[float, ...], ...], "total_duration", "load_duration", "prompt_eval_count"}
An unknown model answers 404 {"error": "model \"X\" not found, try pulling it first"}, as Ollama does.
Embeddings are a signed, hashed bag of words projected to the model's dims: identical texts get identical
vectors and texts sharing words similar ones. They are deliberately NOT unit length (the provider must
normalise). GET /, /api/version and /api/tags answer plausibly. Every request is recorded.
`poison(nan)` makes every vector it answers all NaN (JSON `NaN`, as a broken model's server sends it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_MODELS = {"nomic-embed-text": 768}
VERSION = "0.6.8"
DEFAULT_NUM_CTX = 2048  # what Ollama loads a model with unless options.num_ctx says otherwise
_WORD = re.compile(r"\w+")


def model_key(name: str) -> str:
    """`nomic-embed-text:latest` and `nomic-embed-text` are the same model to Ollama."""
    return name.removesuffix(":latest")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def fake_embedding(text: str, dims: int) -> list[float]:
    """The vector the fake answers for `text` (prefixes included): deterministic, not all zero in practice."""
    vector = [0.0] * dims
    for word in ["<s>", *words(text)]:
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        for k in (0, 4):  # two signed buckets per word
            index = int.from_bytes(digest[k:k + 3], "big") % dims
            vector[index] += 1.0 if digest[k + 3] & 1 else -1.0
    return vector


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    body: Any  # parsed JSON (None for a GET or a body that is not JSON)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() shuts connections down itself; never wait for idle keep-alives

    def __init__(self, fake: FakeOllama, port: int) -> None:
        self.fake = fake
        super().__init__(("127.0.0.1", port), _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeOllama/1"
    sys_version = ""
    timeout = 30  # an idle keep-alive connection must not pin a thread forever
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.server.fake._track(self.connection, add=True)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        self.server.fake._track(self.connection, add=False)

    def _send(self, status: int, payload: Any, content_type: str = "application/json") -> None:
        data = (json.dumps(payload) if content_type == "application/json" else str(payload)).encode()
        with contextlib.suppress(OSError):  # the client may have given up (timeout) meanwhile
            self.send_response(status)
            self.send_header("Content-Type", f"{content_type}; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    def do_GET(self) -> None:
        fake = self.server.fake
        fake._record(Recorded("GET", self.path, None))
        if self.path == "/":
            self._send(200, "Ollama is running", "text/plain")
        elif self.path == "/api/version":
            self._send(200, {"version": VERSION})
        elif self.path == "/api/tags":
            self._send(200, {"models": [_tag(name, dims) for name, dims in fake.models.items()]})
        else:
            self._send(404, "404 page not found", "text/plain")

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = None
        with contextlib.suppress(ValueError):
            body = json.loads(raw)
        fake = self.server.fake
        fake._record(Recorded("POST", self.path, body))
        if self.path != "/api/embed":
            self._send(404, "404 page not found", "text/plain")
            return
        answer = fake._answer(body)
        if answer is None:  # stopped while stalling: drop the connection
            self.close_connection = True
            return
        self._send(*answer)


def _tag(name: str, dims: int) -> dict[str, Any]:
    return {"name": f"{name}:latest", "model": f"{name}:latest", "modified_at": "2025-01-01T00:00:00Z",
            "size": dims * 360_000, "digest": hashlib.sha256(name.encode()).hexdigest(),
            "details": {"format": "gguf", "family": "bert", "parameter_size": "137M", "quantization_level": "F16"}}


class FakeOllama:
    """`with FakeOllama() as fake: OllamaProvider(fake.url)`; models maps names to dims."""

    def __init__(self, models: dict[str, int] | None = None, port: int = 0) -> None:
        self.models = dict(DEFAULT_MODELS if models is None else models)
        self.port = port
        self.requests: list[Recorded] = []
        self.stalled = threading.Event()  # set when a request starts stalling (see hang)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._failures, self._fail_status, self._fail_error = 0, 500, ""
        self._hang = 0.0
        self._poison: float | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def fail_next(self, n: int, status: int = 500, error: str = "llama runner process has terminated") -> None:
        """The next `n` embed requests answer HTTP `status` with {"error": error}."""
        with self._lock:
            self._failures, self._fail_status, self._fail_error = n, status, error

    def hang(self, seconds: float) -> None:
        """Stall every embed request `seconds` before answering (0 turns it off); stop() ends a stall."""
        with self._lock:
            self._hang = seconds

    def poison(self, value: float | None) -> None:
        """Answer every vector filled with `value` (None: honest vectors again)."""
        with self._lock:
            self._poison = value

    @property
    def embed_bodies(self) -> list[Any]:
        with self._lock:
            return [r.body for r in self.requests if r.path == "/api/embed"]

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()

    def start(self) -> FakeOllama:
        if self._server is None:
            self._stopping.clear()
            self._server = _Server(self, self.port)
            self.port = self._server.server_address[1]
            self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                            name="fake-ollama", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOllama:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _track(self, conn: socket.socket, add: bool) -> None:
        with self._lock:
            (self._connections.add if add else self._connections.discard)(conn)

    def _record(self, request: Recorded) -> None:
        with self._lock:
            self.requests.append(request)

    def _answer(self, body: Any) -> tuple[int, dict[str, Any]] | None:
        with self._lock:
            stall, failing, poison = self._hang, self._failures > 0, self._poison
            self._failures -= failing
        if stall > 0:
            self.stalled.set()
            if self._stopping.wait(stall):
                return None
        if failing:
            return self._fail_status, {"error": self._fail_error}
        if not isinstance(body, dict):
            return 400, {"error": "invalid request body"}
        name = body.get("model")
        if not isinstance(name, str) or not name:
            return 400, {"error": "model is required"}
        dims = self.models.get(model_key(name))
        if dims is None:
            return 404, {"error": f'model "{name}" not found, try pulling it first'}
        inputs = body.get("input", [])
        inputs = [inputs] if isinstance(inputs, str) else inputs
        if not isinstance(inputs, list) or not all(isinstance(t, str) for t in inputs):
            return 400, {"error": "invalid input type"}
        options = body.get("options") or {}
        num_ctx = options.get("num_ctx", DEFAULT_NUM_CTX)
        counts = [len(words(t)) + 2 for t in inputs]  # +[CLS]/[SEP], roughly tokens
        if body.get("truncate") is False and any(c > num_ctx for c in counts):
            return 400, {"error": "the input length exceeds the context length"}
        size = body.get("dimensions") or dims  # Ollama truncates to `dimensions` when asked
        embeddings = [fake_embedding(t, dims)[:size] if poison is None else [poison] * size for t in inputs]
        return 200, {"model": name, "embeddings": embeddings, "total_duration": 1_000_000 * (1 + len(inputs)),
                     "load_duration": 500_000, "prompt_eval_count": sum(min(c, num_ctx) for c in counts)}
