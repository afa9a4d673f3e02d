"""What of a query each part of a search reads: the text itself validated, and the bounded
prefixes keyword search and the embedding model read (each cut says so in a warning)."""

import math
from typing import Any

from gitlab_knowledge.errors import BadValue, EmbeddingUnavailable, UsageError

MODES = ("hybrid", "lexical", "semantic")
MAX_LEXICAL_CHARS = 4096
EMBED_MAX_WORDS = 96
# Words alone do not bound the cost: one 3.5 MB "word" kept its whole length, and the tokenizer's
# work (54 s of CPU) grows with characters. 96 words of ordinary text fit well inside this.
EMBED_MAX_CHARS = 2048


def query_text(query: str, mode: str) -> str:
    """The query with its whitespace collapsed; an unknown mode or an empty query is a usage error."""
    if mode not in MODES:
        raise BadValue("mode", mode, MODES)
    text = " ".join((query or "").split())
    if not text:
        raise UsageError("nothing to search for: the query is empty")
    try:  # a lone surrogate: no index or model can read it (the CLI refuses it the same way)
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "backslashreplace").decode("utf-8")
        raise UsageError(f"query is not valid UTF-8 text: {shown[:80]!r}") from None
    return text


def keyword_text(text: str, warnings: list[str]) -> str:
    """The query as keyword search reads it: its first MAX_LEXICAL_CHARS characters."""
    if len(text) <= MAX_LEXICAL_CHARS:
        return text
    warnings.append(f"query is {len(text):,} characters; keyword search used the first {MAX_LEXICAL_CHARS:,}")
    return text[:MAX_LEXICAL_CHARS]


def embedding_text(text: str, warnings: list[str]) -> str:
    """The start of a long query: a model reads one window anyway (256 tokens for the embedded
    one), and a shorter one costs a fraction of the time (attention grows with its square).
    Its first EMBED_MAX_WORDS words, and of those its first EMBED_MAX_CHARS characters, with a
    warning when the characters' bound cut it (the words' bound drops nothing the model would read)."""
    words = text.split()
    text = " ".join(words[:EMBED_MAX_WORDS]) if len(words) > EMBED_MAX_WORDS else text
    if len(text) <= EMBED_MAX_CHARS:
        return text
    warnings.append(f"query is {len(text):,} characters; the semantic search embedded the first {EMBED_MAX_CHARS:,}")
    return text[:EMBED_MAX_CHARS]


def check_finite(vector: Any) -> None:
    """EmbeddingUnavailable for a query vector holding NaN or infinity: it is near nothing, so the
    vector search would answer nothing, silently; keywords answer instead, with a warning."""
    if not all(math.isfinite(float(x)) for x in vector):
        raise EmbeddingUnavailable("the embedding model returned a query vector with NaN or infinite values")
