"""The providers there are, and the one the config (or a command's --model) picks.

Apart from the interface (embeddings/provider.py), which every provider implements: a provider
imports the interface, this module imports the providers, and nothing imports back.
"""

from gitlab_knowledge.config import Config
from gitlab_knowledge.embeddings.provider import EmbeddingProvider


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
