"""The keyword retriever: BM25 over the lexical index, with the filters as Tantivy must-clauses.

Queries are built from terms, never parsed: a user's `AND(`, `field:value` or unbalanced quote is
just text here, so lexical syntax can never make a search fail. The index itself (schema, writes,
stored fields) is lexical/index.py; this module is what a search asks of it.
"""

import math
from dataclasses import dataclass
from datetime import datetime

import tantivy

from gitlab_knowledge import kinds
from gitlab_knowledge.documents.columns import COLUMN, DOC_ID, DocFields
from gitlab_knowledge.lexical.analysis import code_identifiers, identifier_terms, query_terms, references
from gitlab_knowledge.lexical.index import LexicalIndex, as_utc
from gitlab_knowledge.search.filters import DATES, Filters, Match, start_of
from gitlab_knowledge.store.viewer_lens import IndexScope

# A query with more distinct words than this is a pasted document ("find similar"): see text_query.
LONG_QUERY_TERMS = 32
TF_WEIGHT = True
BOOST = {"title": 0.5, "body": 1.0, "ident_whole": 4.0, "ident_part": 1.0, "ref": 30.0, "mention": 2.0}
ID_SETS = (Match.IN_SET, Match.NOT_IN_SET)  # how resolved graph filters reach the retrievers


@dataclass
class LexicalHit:
    doc_id: str
    score: float
    fields: DocFields


def id_set_query(schema: tantivy.Schema, field: str, ids: frozenset[str], match: Match) -> tantivy.Query:
    """The Tantivy clause of resolved graph filters: the document id is (not) one of `ids`."""
    in_set = tantivy.Query.term_set_query(schema, field, sorted(ids))
    if match is Match.IN_SET:
        return in_set
    return tantivy.Query.boolean_query([(tantivy.Occur.Must, tantivy.Query.all_query()),
                                        (tantivy.Occur.MustNot, in_set)])


def _any_project(index: LexicalIndex, paths: frozenset[str]) -> tantivy.Query:
    # Term queries, not a term set: a set reads every posting of its terms into a bitset up front
    # (a whole project's), where a union of terms is skipped through beside the scoring clause.
    return tantivy.Query.boolean_query([(tantivy.Occur.Should, index.term("project", p)) for p in sorted(paths)])


def _merge_requests_of(index: LexicalIndex, paths: frozenset[str]) -> tantivy.Query:
    """The merge request documents (the MR's own and its threads') of these projects."""
    return tantivy.Query.boolean_query([(tantivy.Occur.Must, index.term("parent_type", kinds.MERGE_REQUEST.name)),
                                        (tantivy.Occur.Must, _any_project(index, paths))])


def scope_query(index: LexicalIndex, scope: IndexScope) -> tantivy.Query:
    """A viewer's scope as one clause: a readable project's document, unless, in a project where
    they do not see confidential things, it is an internal thread or a confidential document
    other than the allowed ones (their own confidential issues')."""
    clauses: list[tuple[tantivy.Occur, tantivy.Query]] = [(tantivy.Occur.Must, tantivy.Query.all_query())]
    if not scope.every_project:
        clauses = [(tantivy.Occur.Must, _any_project(index, scope.projects))] if scope.projects else \
            [(tantivy.Occur.MustNot, tantivy.Query.all_query())]
    if scope.guarded:
        confidential = index.term("confidential", True)
        if scope.allowed:
            confidential = tantivy.Query.boolean_query([
                (tantivy.Occur.Must, confidential),
                (tantivy.Occur.MustNot, tantivy.Query.term_set_query(index.schema, DOC_ID, sorted(scope.allowed)))])
        unseen = tantivy.Query.boolean_query([(tantivy.Occur.Should, index.term("internal", True)),
                                              (tantivy.Occur.Should, confidential)])
        if not scope.all_guarded:
            unseen = tantivy.Query.boolean_query([(tantivy.Occur.Must, unseen),
                                                  (tantivy.Occur.Must, _any_project(index, scope.guarded))])
        clauses.append((tantivy.Occur.MustNot, unseen))
    if scope.no_merge_requests:
        clauses.append((tantivy.Occur.MustNot, _merge_requests_of(index, scope.no_merge_requests)))
    if scope.denied:  # hidden by what GitLab said since the sync (store/overlay.py), not by a flag
        clauses.append((tantivy.Occur.MustNot, tantivy.Query.term_set_query(index.schema, DOC_ID, sorted(scope.denied))))
    # Scored 0: a filter, not evidence (a term's BM25 would differ by project and reorder results).
    return tantivy.Query.const_score_query(tantivy.Query.boolean_query(clauses), 0.0)


def filter_queries(index: LexicalIndex, filters: Filters) -> list[tantivy.Query]:
    """The filters as must-clauses; the two bounds on a date column make one range query."""
    active = list(filters.pushed())
    bounds: dict[str, list[datetime | None]] = {}
    for spec, value in active:
        if spec.match in DATES:
            field = COLUMN[spec.column].field
            bounds.setdefault(field, [None, None])[spec.match is Match.BEFORE] = as_utc(start_of(value))
    must: list[tantivy.Query] = []
    for spec, value in active:
        field = COLUMN[spec.column].field if spec.column in COLUMN else spec.column
        if spec.match is Match.SCOPE:
            must.append(scope_query(index, value))
        elif spec.match in ID_SETS:  # resolved graph filters, on the document id (search/graph_filters.py)
            must.append(id_set_query(index.schema, field, value, spec.match))
        elif spec.match in DATES:
            if field in bounds:
                must.append(_range(index, field, *bounds.pop(field)))
        elif spec.match is Match.ANY_OF:
            must.append(tantivy.Query.term_set_query(index.schema, field, list(value)))
        elif spec.match is Match.ALL_OF:
            must += [index.term(field, v) for v in value]
        elif spec.match is Match.EXACT:
            must.append(index.term(field, value))
        elif spec.match is Match.EXCLUDE_TRUE:
            must.append(index.term(field, False))
        else:
            raise AssertionError(f"no Tantivy clause for {spec.match}")
    return must


def _range(index: LexicalIndex, field: str, lower: datetime | None, upper: datetime | None) -> tantivy.Query:
    # On or after the lower bound, before the upper one (the upper bound is exclusive).
    return tantivy.Query.range_query(index.schema, field, tantivy.FieldType.Date, lower, upper,
                                     include_lower=True, include_upper=upper is None)


def text_query(index: LexicalIndex, text: str) -> tantivy.Query | None:
    """The scoring part of a query, or None when the text has nothing to search for.

    Words score on the body (which holds the title too) and on the title; a long query (a
    whole issue pasted in) keeps its LONG_QUERY_TERMS most distinctive words, weighted by
    how often it repeats them, which bounds its cost and drops words that only add noise.
    Only code identifiers (analysis.code_identifiers) are asked of the identifier field:
    version numbers, URLs and user-agent strings in a report are not code."""
    should: list[tantivy.Query] = []

    def add(field: str, value: str, boost: float) -> None:
        query = index.term(field, value)
        should.append(tantivy.Query.boost_query(query, boost) if boost != 1.0 else query)

    counts = query_terms(index.words, text)
    long_query = len(counts) > LONG_QUERY_TERMS
    terms = _distinctive(index, counts) if long_query else {t: 1 for t in counts}
    for term, weight in terms.items():
        if BOOST["title"]:
            add("title", term, BOOST["title"] * weight)
        add("body", term, BOOST["body"] * weight)
    for identifier in code_identifiers(text):
        add("idents", identifier, BOOST["ident_whole"])
        if not long_query:
            for part in identifier_terms(identifier)[1:]:
                add("idents", part, BOOST["ident_part"])
    for project, kind, iid in references(text):
        sigil = kinds.kind(kind).sigil
        add("refs", f"{project}{sigil}{iid}" if project else f"{sigil}{iid}", BOOST["ref"])
        add("mentions", f"{project}{sigil}{iid}" if project else f"{sigil}{iid}", BOOST["mention"])
    if not should:
        return None
    return tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in should])


def _distinctive(index: LexicalIndex, counts: dict[str, int]) -> dict[str, float]:
    """The long query's most distinctive terms (query frequency x IDF in the body), each
    weighted by how often the query repeats it (damped)."""
    searcher = index.searcher()
    total = max(searcher.num_docs, 1)
    scored = []
    for term, count in counts.items():
        df = searcher.doc_freq("body", term)
        if df == 0:
            continue
        idf = math.log(1 + (total - df + 0.5) / (df + 0.5))
        scored.append((-(1 + math.log(count)) * idf, term))
    scored.sort()
    return {term: 1 + math.log(counts[term]) if TF_WEIGHT else 1.0 for _, term in scored[:LONG_QUERY_TERMS]}


def search_lexical(index: LexicalIndex, text: str, filters: Filters, limit: int) -> list[LexicalHit]:
    """The BM25 top `limit` documents for `text` among those passing `filters`."""
    scoring = text_query(index, text)
    if scoring is None:
        return []
    clauses = [(tantivy.Occur.Must, scoring)] + [(tantivy.Occur.Must, q) for q in filter_queries(index, filters)]
    return [LexicalHit(fields.doc_id, score, fields)
            for score, fields in index.find(tantivy.Query.boolean_query(clauses), limit)]
