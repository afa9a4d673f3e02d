"""A stand-in embedding provider for building large benchmark indexes quickly.

Embedding 100K documents with the real model takes about an hour on a 2-core machine; search
latency depends on the table's size, dimensions and index, not on which model made the vectors.
So the 100K-document vector table of the search benchmark is filled by feature hashing (a signed
bag of words projected to 384 dimensions, L2-normalised) and queries are embedded the same way
for the "excluding query embedding" numbers; the real model's query-embedding cost is measured
separately and reported on its own line. Never used outside benchmarks.
"""

import hashlib
import re

import numpy as np

from gitlab_knowledge.embeddings.provider import Chunk

_WORD = re.compile(r"\w+")


class HashingProvider:
    provider = "embedded"  # stands in for the embedded model's table (same name, same dims)
    model = "all-MiniLM-L6-v2-int8"

    @property
    def dims(self) -> int:
        return 384

    def _vector(self, text: str) -> np.ndarray:
        vec = np.zeros(384, dtype=np.float32)
        for word in _WORD.findall(text.lower()):
            digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
            index = int.from_bytes(digest[:2], "little") % 384
            vec[index] += 1.0 if digest[2] & 1 else -1.0
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm else vec

    def embed_documents(self, texts: list[str]) -> list[list[Chunk]]:
        return [[Chunk(self._vector(t), t[:1500])] for t in texts]

    def embed_query(self, text: str) -> np.ndarray:
        return self._vector(text)

    def check(self) -> str:
        return "feature hashing (benchmark stand-in)"
