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

On a shared server every word is weighed within what the asking user may read (their scope): a word
only documents hidden from them hold counts as unknown, and is never what they are told their word
was searched as, nor the spelling shown (a word of a hidden title is part of that title).
"""

import re
from dataclasses import dataclass

import tantivy

from gitlab_knowledge.lexical.analysis import STOPWORDS, query_words
from gitlab_knowledge.lexical.index import LexicalIndex
from gitlab_knowledge.search.lexical_retriever import scope_query
from gitlab_knowledge.search.relevance import COVERAGE_FLOOR
from gitlab_knowledge.store.viewer_lens import IndexScope

MIN_CHARS = 4
MIN_PREFIX_CHARS = 4
MAX_TOLERATED_WORDS = 32  # a longer query is a pasted document: its unknown words are names, not typos
# Within a scope, the most frequent prefix words of the whole index are recounted in the scope, at
# most this many (a search each).
SCOPED_PREFIX_CANDIDATES = 64
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


class _Vocabulary:
    """The index's words as one reader sees them: every document's, or (`scope`) only those of the
    documents a shared server's user may read."""

    def __init__(self, index: LexicalIndex, scope: IndexScope | None) -> None:
        self.index = index
        self.searcher = index.searcher()
        self.scope = scope_query(index, scope) if scope is not None else None
        self._counts: dict[str, int] = {}

    def within(self, query: tantivy.Query) -> tantivy.Query:
        if self.scope is None:
            return query
        return tantivy.Query.boolean_query([(tantivy.Occur.Must, query), (tantivy.Occur.Must, self.scope)])

    def count(self, term: str) -> int:
        """How many documents the reader may see hold `term`."""
        if self.scope is None:
            return int(self.searcher.doc_freq(FIELD, term))
        if term not in self._counts:
            found = self.searcher.search(self.within(self.index.term(FIELD, term)), limit=1, count=True)
            self._counts[term] = int(found.count or 0)  # type: ignore[attr-defined]
        return self._counts[term]

    def most_frequent(self, prefix: str, limit: int) -> list[str]:
        """The `limit` words beginning with `prefix` the most documents the reader sees hold."""
        if self.scope is None:
            return [t for t, _n in self.searcher.terms_with_prefix(FIELD, prefix, limit=limit)]
        counted = [(self.count(t), t) for t, _n in
                   self.searcher.terms_with_prefix(FIELD, prefix, limit=SCOPED_PREFIX_CANDIDATES)]
        return [t for n, t in sorted(counted, key=lambda c: (-c[0], c[1])) if n][:limit]


def _replacement(vocabulary: _Vocabulary, word: str, term: str) -> tuple[str, str] | None:
    """(index term, how) for a word whose term no document holds, or None."""
    if len(word) >= MIN_PREFIX_CHARS:
        for prefix in dict.fromkeys((word, term)):
            found = [t for t in vocabulary.most_frequent(prefix, 2) if t != term]
            if found:
                return found[0], "prefix"
    bound = max_distance(term)
    if not bound:
        return None
    best: tuple[int, int, str] | None = None
    for candidate, count in vocabulary.searcher.terms_with_prefix(FIELD, term[0]):
        if candidate == term or abs(len(candidate) - len(term)) > bound:
            continue
        distance = edit_distance(term, candidate, bound)
        if distance > bound:
            continue
        if vocabulary.scope is not None:  # counted only for the few within the distance
            count = vocabulary.count(candidate)
        if count and (best is None or (distance, -count, candidate) < best):
            best = (distance, -count, candidate)
    return (best[2], "typo") if best else None


def _as_written(vocabulary: _Vocabulary, term: str) -> str:
    """A word that stems to `term`, as the first document holding it (that the reader sees) writes
    it (lowercased)."""
    index, searcher = vocabulary.index, vocabulary.searcher
    hits = searcher.search(vocabulary.within(index.term(FIELD, term)), limit=1, count=False).hits
    if hits:
        body = searcher.doc(hits[0][1])[FIELD][0]
        for match in re.finditer(r"[^\W_]+", body):
            if index.words.analyze(match.group(0).lower()) == [term]:
                return match.group(0).lower()
    return term


def tolerate(index: LexicalIndex, text: str, scope: IndexScope | None = None) -> tuple[str, list[Expansion]]:
    """`text` with each plain word no document holds replaced by its nearest index word, and
    what was replaced (empty when every word is known, or the query is a pasted document);
    `scope`: the documents a shared server's user may read are the only ones weighed."""
    if len(text.split()) > MAX_TOLERATED_WORDS:
        return text, []
    vocabulary = _Vocabulary(index, scope)
    terms = query_words(index.words, text)
    known = sum(1 for t in terms if vocabulary.count(t))
    if not terms or known >= COVERAGE_FLOOR * len(terms):
        return text, []
    expansions: dict[str, Expansion] = {}
    for match in _WORD.finditer(text):
        word = match.group(0).lower()
        if len(word) < MIN_CHARS or word in STOPWORDS or word in expansions:
            continue
        terms = index.words.analyze(word)
        if len(terms) != 1 or vocabulary.count(terms[0]):
            continue
        found = _replacement(vocabulary, word, terms[0])
        if found is not None:
            expansions[word] = Expansion(word, _as_written(vocabulary, found[0]), found[1])
    if not expansions:
        return text, []

    def replace(match: re.Match[str]) -> str:
        known = expansions.get(match.group(0).lower())
        return known.matched if known else match.group(0)

    return _WORD.sub(replace, text), list(expansions.values())
