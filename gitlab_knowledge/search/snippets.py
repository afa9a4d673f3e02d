"""Snippets: the ~240 characters of a document that best show why it matched.

The document's header (its `Issue #234: …` / `[Issue #234: …] Discussion` lines) is skipped, white
space is folded, and the window with the most distinct query terms (stemmed words, or whole code
identifiers) wins; those terms are returned as highlight ranges within the snippet.
"""

import re
from functools import lru_cache

from gitlab_knowledge.lexical.analysis import STOPWORDS, identifier_terms, word_analyzer

SNIPPET_CHARS = 240
_WORD = re.compile(r"\w+", re.UNICODE)
_analyzer = word_analyzer()


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    terms = _analyzer.analyze(word)
    return terms[0] if terms else ""


def body_of(text: str) -> str:
    """Text without the document header (everything up to the first blank line)."""
    head, sep, rest = text.partition("\n\n")
    return rest if sep and rest.strip() else text


def make_snippet(text: str, query: str, chars: int = SNIPPET_CHARS) -> tuple[str, list[tuple[int, int]]]:
    flat = " ".join(body_of(text).split())
    if not flat:
        return "", []
    words = [w for w in _WORD.findall(query.lower()) if w not in STOPWORDS] or _WORD.findall(query.lower())
    wanted = {_stem(w) for w in words} - {""}
    spans: list[tuple[int, int, str]] = []
    for m in _WORD.finditer(flat):
        stem = _stem(m.group(0).lower())
        if stem in wanted:
            spans.append((m.start(), m.end(), stem))
    lowered = flat.lower()
    for ident in identifier_terms(query):
        if any(ch in ident for ch in "_./:-") or len(ident) > 3:
            for m in re.finditer(re.escape(ident), lowered):
                spans.append((m.start(), m.end(), ident))
    if not spans:
        return _cut(flat, 0, chars), []
    spans.sort()
    # One pass with a sliding window (a long query makes thousands of spans): the window opening
    # at span i holds the spans that start within `chars` of it.
    best_start, best_score = spans[0][0], -1
    inside: dict[str, int] = {}
    j = 0
    for i, (start, _end, _term) in enumerate(spans):
        while j < len(spans) and spans[j][0] < start + chars:
            inside[spans[j][2]] = inside.get(spans[j][2], 0) + 1
            j += 1
        if len(inside) > best_score:
            best_start, best_score = start, len(inside)
        term = spans[i][2]
        inside[term] -= 1
        if not inside[term]:
            del inside[term]
    # Open the window a little before the first hit so it reads as a sentence fragment.
    start = max(0, best_start - chars // 5)
    start = flat.rfind(" ", 0, start) + 1 if start > 0 else 0
    snippet = _cut(flat, start, chars)
    ranges = _merge([(s - start, e - start) for s, e, _ in spans if s >= start and e <= start + len(snippet)])
    return snippet, ranges


def _cut(text: str, start: int, chars: int) -> str:
    piece = text[start:start + chars]
    if start + chars < len(text) and " " in piece[chars // 2:]:
        piece = piece[:piece.rfind(" ")]
    return piece


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out
