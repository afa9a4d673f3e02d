"""What a typed query asks for, before the retrievers run: the words each one reads, and the
documents the query's own operators allow.

- A pasted URL of a synced issue or MR is read as its reference (`group/project#5`): the item is
  pinned first and scored like `#5` (search/pinned.py). A URL of an item this store does not hold
  stays words.
- `"exact phrase"`: only documents holding those words in that order (stemmed, like every word)
  are returned, in every mode; the phrase's words also score as words. `-word` (and
  `-"a phrase"`): documents holding it (a word also as a part of code: `-redis` drops
  `RedisSessionStore`) are left out, in every mode, and it scores nothing. Both
  are read only in a typed query (at most OPERATOR_MAX_WORDS words): a pasted report's quotes and
  dashes are its text. Unbalanced quotes are words, and so is a query of exclusions alone
  (`-redis`: there is nothing to rank).
- A word no document holds (`reddis`, `kubern`) is searched as the index's words it is a prefix
  of, or else its nearest words within an edit distance (search/tolerance.py), and the response
  says so (`expanded`).

Phrases and exclusions are resolved through the lexical index into the set of allowed document
ids and pushed into both retrievers before their cut, the way graph filters are
(search/graph_filters.py); in semantic mode a phrase is thus a filter: results are ranked by
meaning among the documents holding it.
"""

import re
from dataclasses import dataclass, field

import tantivy

from gitlab_knowledge import kinds
from gitlab_knowledge.lexical.index import LexicalIndex
from gitlab_knowledge.search.filters import Filters
from gitlab_knowledge.search.tolerance import Expansion, tolerate

# A query of more words than this is a pasted document: its quotes and dashes are text.
OPERATOR_MAX_WORDS = 32
# `"…"` with something inside, or `-"…"`; `-word` at the start of a word, a letter after the dash
# (`-1`, `--amend`, `real-time` and `a - b` are text).
_PHRASE = re.compile(r'(?<!\S)(-?)"([^"]*\w[^"]*)"(?!\S)')
_EXCLUDED = re.compile(r"(?<!\S)-([^\W\d][\w.\-/]*)")
_URL_EDGE = "<>()[]{}'\"`,;.!?"


@dataclass
class QueryPlan:
    """A query as the retrievers read it."""

    keyword: str  # what BM25, the pins, snippets and the relevance floor read
    semantic: str  # what is embedded
    filters: Filters  # the search's filters with the operators' documents resolved into them
    phrases: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)
    expanded: list[Expansion] = field(default_factory=list)


def urls_as_references(index: LexicalIndex, text: str, gitlab_url: str | None) -> str:
    """`text` with each URL of a synced issue or MR (with or without `/-/`, `#note_N`, `/diffs`)
    replaced by its reference, as `kinds.parse_url` reads it: first as a URL of the configured
    GitLab, then of any host (the stored `web_url`s name the host GitLab calls itself). A GitLab
    under a relative root (`https://host/gitlab/group/project/-/issues/5`) is found by dropping the
    path's leading segments until a synced project's reference is left."""
    if "://" not in text:
        return text
    searcher = index.searcher()
    out = []
    for word in text.split(" "):
        ref = None
        if "://" in word:
            url = word.strip(_URL_EDGE)
            for parsed in (kinds.parse_url(url, gitlab_url) if gitlab_url else None, kinds.parse_url(url)):
                if parsed is None or parsed.project is None:
                    continue
                segments = parsed.project.split("/")
                candidates = (parsed.kind.ref(parsed.iid, "/".join(segments[i:])) for i in range(len(segments) - 1))
                ref = next((c for c in candidates if searcher.doc_freq("refs", c)), None)
                if ref:
                    break
        out.append(ref or word)
    return " ".join(out)


def _operators(text: str) -> tuple[str, list[str], list[str]]:
    """(the text without the operators' marks and excluded words, phrases, excluded words/phrases)."""
    if len(text.split()) > OPERATOR_MAX_WORDS:
        return text, [], []
    phrases: list[str] = []
    excluded: list[str] = []

    def phrase(match: re.Match[str]) -> str:
        inner = " ".join(match[2].split())
        if match[1]:
            excluded.append(inner)
            return " "
        phrases.append(inner)
        return " " + inner + " "

    def word(match: re.Match[str]) -> str:
        excluded.append(match[1].rstrip(".-/"))
        return " "

    kept = _EXCLUDED.sub(word, _PHRASE.sub(phrase, text))
    kept = " ".join(kept.split())
    if not kept:  # `-redis` alone asks for nothing to rank: any text is a query, so it is words
        return text, [], []
    return kept, list(dict.fromkeys(phrases)), list(dict.fromkeys(excluded))


def _words_query(index: LexicalIndex, words: str) -> tantivy.Query | None:
    """Documents whose body holds `words` in this order (one word: a term), as the index analyzes them."""
    terms: list[str | tuple[int, str]] = [t for w in re.findall(r"\w+", words.lower()) for t in index.words.analyze(w)]
    if not terms:
        return None
    if len(terms) == 1:
        return index.term("body", str(terms[0]))
    return tantivy.Query.phrase_query(index.schema, "body", terms)


def _matching(index: LexicalIndex, searcher: tantivy.Searcher, query: tantivy.Query) -> set[str]:
    hits = searcher.search(query, limit=max(searcher.num_docs, 1), count=False).hits
    return {searcher.doc(address)["doc_id"][0] for _score, address in hits}


def _resolve(index: LexicalIndex, filters: Filters, phrases: list[str], excluded: list[str]) -> Filters:
    """`filters` with the documents the operators allow folded into the resolved document ids."""
    searcher = index.searcher()
    musts = [q for q in (_words_query(index, p) for p in phrases) if q is not None]
    nots = [q for q in (_words_query(index, e) for e in excluded) if q is not None]
    # An excluded word is also excluded as a part of code (`-redis`: `RedisSessionStore.touch()`).
    nots += [index.term("idents", e.lower()) for e in excluded if re.fullmatch(r"\w+", e)]
    if not musts and not nots:
        return filters
    allowed: set[str] | None = None
    if musts:
        allowed = _matching(index, searcher, tantivy.Query.boolean_query([(tantivy.Occur.Must, q) for q in musts]))
    dropped = _matching(index, searcher, tantivy.Query.boolean_query(
        [(tantivy.Occur.Should, q) for q in nots])) if nots else set()
    # Combined with the graph filters' documents (search/graph_filters.py), resolved already.
    ids, complement = filters.doc_ids, filters.complement
    if ids is not None and not complement and allowed is None:
        allowed = set(ids)
    elif ids is not None and allowed is not None:
        allowed = (allowed - set(ids)) if complement else (allowed & set(ids))
    if allowed is not None:
        return filters.resolved(frozenset(allowed - dropped))
    return filters.resolved(frozenset(dropped | (set(ids) if ids is not None else set())), complement=True)


def plan(index: LexicalIndex | None, text: str, filters: Filters, gitlab_url: str | None,
         warnings: list[str], typed: bool = True) -> QueryPlan:
    """The query `text` (validated, white space folded) as each part of a search reads it;
    `typed=False`: a document's text (`similar`), read as it is."""
    if index is None:  # no lexical index: nothing to resolve URLs, phrases or words against
        kept, phrases, excluded = _operators(text) if typed else (text, [], [])
        if phrases or excluded:
            warnings.append("\"phrases\" and -exclusions were read as words: they need the lexical index")
        return QueryPlan(text, text, filters)
    text = urls_as_references(index, text, gitlab_url)
    kept, phrases, excluded = _operators(text)
    keyword, expanded = tolerate(index, kept, filters.scope)
    return QueryPlan(keyword, kept, _resolve(index, filters, phrases, excluded), phrases, excluded, expanded)
