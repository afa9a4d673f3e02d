"""The embedding provider interface (embeddings/providers.py picks one from the config)."""

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass
class Chunk:
    """One embedded window of a text: the vector and the text it covers."""

    vector: np.ndarray
    text: str


class EmbeddingProvider(Protocol):
    provider: str  # "embedded" | "ollama"
    model: str

    @property
    def dims(self) -> int: ...

    def embed_documents(self, texts: list[str]) -> list[list[Chunk]]:
        """Each text's chunks (at least one); raises EmbeddingUnavailable or another error."""
        ...

    def embed_query(self, text: str) -> np.ndarray: ...

    def check(self) -> str:
        """A one-line description of a working provider, or EmbeddingUnavailable."""
        ...
