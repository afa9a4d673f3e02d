"""Typo and prefix tolerance for keyword search: a query word no document holds is searched as the
index's word nearest to it.

It applies when the exact words cannot find anything good: when fewer than COVERAGE_FLOOR (half)
of the query's words are in any document, no document can hold the share of the query's words
that makes a keyword match count (search/relevance.py). Then each word no document holds
(`reddis`, `kubern`) is replaced; a word some document holds is left as typed, however rare (a
fuzzy pass over known words would let `rails` find `nails`). A longer question with one word the
corpus lacks (`offline`) is answered by its other words, as typed: replacing a correct word by its
nearest neighbour (`online`) would change the question. The replacement, in this order:

1. prefix: the most frequent index word the typed word begins (`kubern` → kubernetes), for words of
   at least MIN_PREFIX_CHARS characters;
2. typo: the index words within an edit distance (adjacent transpositions count one) of its
   stem: none for stems under 5 letters, 1 up to 7, 2 from 8 (`max_distance`: stricter than
   Elasticsearch's "AUTO", since a word the corpus lacks is often a real word, and a loose bound
   finds it a neighbour: `recipe` → redis), starting with its first letter (a typo there is rare,
   and the candidates are read per first letter); the nearest, then the most frequent
   (`reddis` → redis).

The replacement is a real index term searched like any word (BM25), rather than Tantivy's
FuzzyTermQuery or a prefix query: those score every match the same (1.0, no term frequency or
IDF), so their hits come in index order. The candidates are read from the term dictionary
(`Searcher.terms_with_prefix`). Words are compared as the index keeps them (stemmed), and the replacement is shown and searched as
a document writes it (the first word of a document holding it that stems to it). Only plain words
are tolerated: code identifiers, paths, references and numbers are asked exactly, and words shorter
than MIN_CHARS (too many neighbours) or stopwords are left alone. Both retrievers keep the typed
words for the embedding: a model reads a typo well enough, and the replacement is a keyword guess.
"""

import re
from dataclasses import dataclass

import tantivy

from gitlab_knowledge.lexical.analysis import STOPWORDS, query_words
from gitlab_knowledge.lexical.index import LexicalIndex
from gitlab_knowledge.search.relevance import COVERAGE_FLOOR

MIN_CHARS = 4
MIN_PREFIX_CHARS = 4
MAX_TOLERATED_WORDS = 32  # a longer query is a pasted document: its unknown words are names, not typos
FIELD = "body"
# A plain word: letters only, not part of an identifier, path, URL, reference or e-mail address.
_WORD = re.compile(r"(?<![\w./:#!@$&\\-])[^\W\d_]+(?![\w/:#!@$&-]|\.\w)")


@dataclass(frozen=True)
class Expansion:
    """A query word no document holds, and what keyword search looked for instead."""

    word: str  # as typed, lowercased
    matched: str  # the index's word it was searched as, as a document writes it (lowercased)
    how: str  # "prefix" | "typo"


def max_distance(term: str) -> int:
    """The edit distance a word's index term may be corrected by: none under 5 letters (too many
    neighbours: `mango` is 1 from `mongo`, `recip` 2 from `redi`), 1 up to 7, 2 from 8."""
    return 0 if len(term) < 5 else 1 if len(term) < 8 else 2


def edit_distance(a: str, b: str, bound: int) -> int:
    """Optimal string alignment distance (insert, delete, substitute, swap two adjacent letters),
    or bound + 1 when it is larger than `bound`."""
    if abs(len(a) - len(b)) > bound:
        return bound + 1
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                current[j] = min(current[j], previous2[j - 2] + 1)
        if min(current) > bound:
            return bound + 1
        previous2, previous = previous, current
    return previous[-1] if previous[-1] <= bound else bound + 1


def _replacement(index: LexicalIndex, searcher: tantivy.Searcher, word: str, term: str) -> tuple[str, str] | None:
    """(index term, how) for a word whose term no document holds, or None."""
    if len(word) >= MIN_PREFIX_CHARS:
        for prefix in dict.fromkeys((word, term)):
            found = [(t, n) for t, n in searcher.terms_with_prefix(FIELD, prefix, limit=2)
                     if t != term]
            if found:
                return found[0][0], "prefix"
    bound = max_distance(term)
    if not bound:
        return None
    best: tuple[int, int, str] | None = None
    for candidate, count in searcher.terms_with_prefix(FIELD, term[0]):
        if candidate == term or abs(len(candidate) - len(term)) > bound:
            continue
        distance = edit_distance(term, candidate, bound)
        if distance <= bound and (best is None or (distance, -count, candidate) < best):
            best = (distance, -count, candidate)
    return (best[2], "typo") if best else None


def _as_written(index: LexicalIndex, searcher: tantivy.Searcher, term: str) -> str:
    """A word that stems to `term`, as the first document holding it writes it (lowercased)."""
    hits = searcher.search(index.term(FIELD, term), limit=1, count=False).hits
    if hits:
        body = searcher.doc(hits[0][1])[FIELD][0]
        for match in re.finditer(r"[^\W_]+", body):
            if index.words.analyze(match.group(0).lower()) == [term]:
                return match.group(0).lower()
    return term


def tolerate(index: LexicalIndex, text: str) -> tuple[str, list[Expansion]]:
    """`text` with each plain word no document holds replaced by its nearest index word, and
    what was replaced (empty when every word is known, or the query is a pasted document)."""
    if len(text.split()) > MAX_TOLERATED_WORDS:
        return text, []
    searcher = index.searcher()
    terms = query_words(index.words, text)
    known = sum(1 for t in terms if searcher.doc_freq(FIELD, t))
    if not terms or known >= COVERAGE_FLOOR * len(terms):
        return text, []
    expansions: dict[str, Expansion] = {}
    for match in _WORD.finditer(text):
        word = match.group(0).lower()
        if len(word) < MIN_CHARS or word in STOPWORDS or word in expansions:
            continue
        terms = index.words.analyze(word)
        if len(terms) != 1 or searcher.doc_freq(FIELD, terms[0]):
            continue
        found = _replacement(index, searcher, word, terms[0])
        if found is not None:
            expansions[word] = Expansion(word, _as_written(index, searcher, found[0]), found[1])
    if not expansions:
        return text, []

    def replace(match: re.Match[str]) -> str:
        known = expansions.get(match.group(0).lower())
        return known.matched if known else match.group(0)

    return _WORD.sub(replace, text), list(expansions.values())
