"""The Ollama provider: `nomic-embed-text` (768 dims) by default, over the official client.

nomic-embed-text was trained with task prefixes (`search_document: ` / `search_query: `) and
scores worse without them. Ollama loads it with a 2,048-token context unless told otherwise, so
`num_ctx` is raised to the model's 8,192: a document (≤ ~8,000 tokens) is one chunk.

The client has no timeout of its own (a hung server would block forever), an unreachable server
raises ConnectionError, HTTP errors are ResponseError with .status_code (ollama 0.6, measured):
each becomes an EmbeddingUnavailable saying what to do. A query is embedded with a much shorter
timeout than documents: a person waits for it, and search answers by keyword instead.
"""

import httpx
import numpy as np
import ollama

from gitlab_knowledge.embeddings.provider import Chunk
from gitlab_knowledge.errors import EmbeddingUnavailable

PREFIXED_MODELS = ("nomic-embed-text",)
KNOWN_DIMS = {"nomic-embed-text": 768, "mxbai-embed-large": 1024, "all-minilm": 384}
EXCERPT_CHARS = 1500
QUERY_TIMEOUT_S = 10.0  # one short text on a warm model takes milliseconds; loading the model, seconds


class OllamaProvider:
    provider = "ollama"
    DEFAULT_MODEL = "nomic-embed-text"

    def __init__(self, host: str, model: str = DEFAULT_MODEL, timeout: float = 60.0, batch_size: int = 32,
                 num_ctx: int = 8192) -> None:
        self.host = host
        self.model = model
        self.batch_size = batch_size
        self.num_ctx = num_ctx
        self._dims = KNOWN_DIMS.get(model.split(":")[0])
        self.timeout = timeout
        self._client = ollama.Client(host=host, timeout=timeout)
        self.query_timeout = min(timeout, QUERY_TIMEOUT_S)
        self._query_client = ollama.Client(host=host, timeout=self.query_timeout)
        self._prefixed = model.split(":")[0] in PREFIXED_MODELS

    @property
    def dims(self) -> int:
        if self._dims is None:
            self._dims = len(self._embed(["dimension probe"], "search_query: ")[0])
        return self._dims

    def _embed(self, texts: list[str], prefix: str, *, query: bool = False) -> list[list[float]]:
        inputs = [(prefix if self._prefixed else "") + (t or " ") for t in texts]
        client, timeout = (self._query_client, self.query_timeout) if query else (self._client, self.timeout)
        try:
            response = client.embed(model=self.model, input=inputs, truncate=True, options={"num_ctx": self.num_ctx})
        except ConnectionError as exc:
            raise EmbeddingUnavailable(f"Ollama is not reachable at {self.host}: start it (`ollama serve`) or set "
                                       f"OLLAMA_HOST ({exc})") from None
        except httpx.TimeoutException:
            raise EmbeddingUnavailable(f"Ollama at {self.host} did not answer within {timeout:g}s") from None
        except httpx.HTTPError as exc:
            raise EmbeddingUnavailable(f"Ollama at {self.host} failed: {type(exc).__name__}: {exc}") from None
        except ollama.ResponseError as exc:
            if exc.status_code == 404 or "not found" in str(exc.error).lower():
                raise EmbeddingUnavailable(f"Ollama has no model {self.model!r}: run `ollama pull {self.model}`") from None
            raise EmbeddingUnavailable(f"Ollama refused to embed with {self.model} "
                                       f"({exc.status_code}: {exc.error})") from None
        vectors = [list(v) for v in response.embeddings or []]
        if len(vectors) != len(texts):
            raise EmbeddingUnavailable(f"Ollama returned {len(vectors)} embeddings for {len(texts)} inputs")
        if vectors and self._dims is None:
            self._dims = len(vectors[0])
        return vectors

    def embed_documents(self, texts: list[str]) -> list[list[Chunk]]:
        out: list[list[Chunk]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start:start + self.batch_size]
            for text, vector in zip(batch, self._embed(batch, "search_document: "), strict=True):
                out.append([Chunk(_unit(vector), text[:EXCERPT_CHARS])])
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return _unit(self._embed([text], "search_query: ", query=True)[0])

    def check(self) -> str:
        vector = self._embed(["doctor"], "search_query: ")[0]
        return f"ollama {self.model} at {self.host} ({len(vector)} dims)"


def _unit(vector: list[float]) -> np.ndarray:
    # Cosine ranking becomes a dot product; LanceDB then ranks by L2 on unit vectors identically.
    array = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    return array / norm if norm > 0 else array
