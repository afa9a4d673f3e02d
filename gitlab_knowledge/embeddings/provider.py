"""The embedding provider interface, and picking one from the config."""

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from gitlab_knowledge.config import Config


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


def get_provider(config: Config, provider: str | None = None, model: str | None = None) -> EmbeddingProvider:
    name = provider or config.embedding.provider
    chosen_model = model or (config.embedding.model if name == config.embedding.provider else None)
    if name == "ollama":
        from gitlab_knowledge.embeddings.ollama_provider import OllamaProvider

        return OllamaProvider(host=config.embedding.ollama_host, model=chosen_model or OllamaProvider.DEFAULT_MODEL,
                              timeout=config.embedding.timeout, batch_size=config.embedding.batch_size)
    from gitlab_knowledge.embeddings.embedded import EmbeddedProvider

    if chosen_model and chosen_model != EmbeddedProvider.MODEL:
        from gitlab_knowledge.errors import ConfigError

        raise ConfigError(f"config field embedding.model: the embedded provider has one model, "
                          f"{EmbeddedProvider.MODEL!r}, not {chosen_model!r}")
    return EmbeddedProvider()
