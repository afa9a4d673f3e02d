"""RRF arithmetic, filters and dates, identifier analysis, references, snippets."""

import dataclasses
import json

import pytest

from gitlab_knowledge.documents.columns import COLUMN
from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.lexical.analysis import identifier_terms, query_words, references, word_analyzer
from gitlab_knowledge.lexical.index import LexicalIndex
from gitlab_knowledge.search.__main__ import build_parser
from gitlab_knowledge.search.filters import FILTERS, Filters, Match
from gitlab_knowledge.search.graph_filters import RESOLVERS
from gitlab_knowledge.search.lexical_retriever import filter_queries
from gitlab_knowledge.search.rrf import normalized, rrf
from gitlab_knowledge.search.semantic import SQL, MemoryVectors, where_clause
from gitlab_knowledge.search.snippets import make_snippet
from gitlab_knowledge_tests.conftest import REPO


def test_rrf_sums_reciprocal_ranks_with_k():
    fused = rrf({"lexical": ["a", "b", "c"], "semantic": ["c", "a"]}, k=60)
    scores = {f.doc_id: f.score for f in fused}
    assert scores["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert scores["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert scores["b"] == pytest.approx(1 / 62)  # in one list only: that list's term alone
    assert [f.doc_id for f in fused] == ["a", "c", "b"]
    assert fused[0].ranks == {"lexical": 1, "semantic": 2}
    assert rrf({"lexical": ["a", "b"]}, k=1)[0].score == pytest.approx(1 / 2)


def test_rrf_k_changes_the_order():
    lists = {"lexical": ["x", "y", "z", "w"], "semantic": ["w", "z", "y", "x"]}
    # Small k rewards a single top rank; large k rewards agreement.
    assert rrf(lists, k=1)[0].doc_id in ("x", "w")
    small = {f.doc_id: f.score for f in rrf(lists, k=1)}
    assert small["x"] > small["y"]
    large = {f.doc_id: f.score for f in rrf(lists, k=1000)}
    assert large["x"] == pytest.approx(large["y"], rel=1e-3)


def test_rrf_ties_are_deterministic():
    # a and b tie on score and on best rank (1): the id decides.
    fused = rrf({"lexical": ["b", "a"], "semantic": ["a", "b"]}, k=60)
    assert [f.doc_id for f in fused] == ["a", "b"]
    assert rrf({"lexical": ["b", "a"], "semantic": ["a", "b"]}, k=60) == fused
    fused = rrf({"one": ["p", "q"], "two": ["q", "p"], "three": []}, k=60)
    assert [f.doc_id for f in fused] == ["p", "q"]


def test_rrf_ignores_duplicates_within_a_list_and_rejects_bad_k():
    assert rrf({"lexical": ["a", "a", "b"]})[1].ranks == {"lexical": 3}
    with pytest.raises(ValueError):
        rrf({"lexical": ["a"]}, k=0)
    assert normalized(2 / 61, 2, 60) == pytest.approx(1.0)


@pytest.mark.parametrize("bad", ["2024-1-1", "yesterday", "2024/01/01", "2024-02-30", "20240101", " 2024-01-01"])
def test_dates_must_be_iso(bad):
    with pytest.raises(UsageError) as err:
        Filters.build(after=bad)
    assert "YYYY-MM-DD" in str(err.value) and "\n" not in str(err.value)


def test_filters_are_normalized_and_validated():
    f = Filters.build(types=["mr", "Issue", "discussion", "mr"], author="@janedoe", labels=["a", "b", "a"],
                      after="2024-01-01", before="2024-06-01", project="g/p", state="merged")
    assert f.types == ("merge_request", "issue", "discussion")
    assert f.author == "janedoe" and f.labels == ("a", "b")
    with pytest.raises(UsageError):
        Filters.build(types=["epic"])
    with pytest.raises(UsageError):
        Filters.build(after="2024-06-01", before="2024-01-01")


def test_vector_filter_sql_quotes_values():
    where = where_clause(Filters.build(types=["issue"], author="o'brien", labels=["needs 'review'", "bug"],
                                       after="2024-01-01", before="2024-02-01", project="g/p", state="opened",
                                       exclude_confidential=True))
    assert "author = 'o''brien'" in where
    assert "array_has_all(labels, ['needs ''review''', 'bug'])" in where
    assert "created_at >= CAST('2024-01-01 00:00:00' AS TIMESTAMP)" in where
    assert "created_at < CAST('2024-02-01 00:00:00' AS TIMESTAMP)" in where
    assert "confidential = false" in where
    assert where_clause(Filters()) is None


EVERY_FILTER = {"types": ["mr", "discussion"], "author": "@janedoe", "labels": ["a", "b"], "after": "2024-01-01",
                "before": "2024-06-01", "project": "g/p", "state": "merged", "path": "./services/auth/",
                "participant": "@JaneDoe", "exclude_confidential": True, "exclude_internal": True}


def test_filters_derive_from_one_registry(tmp_path):
    # Then the graph filters once resolved to document ids, and a shared server's viewer's scope.
    assert [f.name for f in dataclasses.fields(Filters)] == [s.name for s in FILTERS] + ["doc_ids", "complement", "scope"]
    assert {s.column for s in FILTERS if s.match is not Match.GRAPH} <= set(COLUMN)
    # Every kind of match has a translation in each retriever, except graph filters: they reach the
    # retrievers resolved, as a set of ids (search/graph_filters.py resolves each of them).
    assert set(SQL) == set(MemoryVectors.MASKS) == set(Match) - {Match.GRAPH}
    assert {s.name for s in FILTERS if s.match is Match.GRAPH} == set(RESOLVERS)
    built = Filters.build(**EVERY_FILTER)
    assert [spec.name for spec, _ in built.active()] == [s.name for s in FILTERS]
    index = LexicalIndex(tmp_path / "tantivy", create=True)
    with pytest.raises(AssertionError, match="unresolved"):
        filter_queries(index, built)
    clauses = filter_queries(index, built.resolved(frozenset({"issue:1"})))
    # One clause per filter, except that --after and --before make one range, each label is a term
    # and the graph filters are one set of ids.
    assert len(clauses) == len(FILTERS) - 1 + (len(EVERY_FILTER["labels"]) - 1) - 1
    schema = json.loads((REPO / "gitlab_knowledge" / "search" / "schema.json").read_text())
    assert list(built.describe()) == schema["properties"]["filters"]["required"]


def test_the_command_line_builds_the_same_filters():
    args = build_parser().parse_args(["q", "--type", "mr", "--type", "discussion", "--author", "@janedoe", "--label",
                                      "a", "--label", "b", "--after", "2024-01-01", "--before", "2024-06-01",
                                      "--project", "g/p", "--state", "merged", "--path", "./services/auth/",
                                      "--participant", "@JaneDoe", "--no-confidential", "--no-internal"])
    assert Filters.from_args(args) == Filters.build(**EVERY_FILTER)
    assert Filters.from_args(build_parser().parse_args(["q"])) == Filters()
    assert Filters().is_empty() and not Filters.build(exclude_internal=True).is_empty()
    assert Filters.build(types=["Merge_Requests", "issues", "Discussions"]).types == (
        "merge_request", "issue", "discussion")
    with pytest.raises(UsageError, match="--type expects issue, mr, discussion, wiki or release, got 'epic'"):
        Filters.build(types=["epic"])
    with pytest.raises(UsageError, match="--after 2024-06-01 is not before --before 2024-06-01"):
        Filters.build(after="2024-06-01", before="2024-06-01")


@pytest.mark.parametrize("text,expected", [
    ("src/auth/login.ts", {"src/auth/login.ts", "src", "auth", "login.ts", "login", "ts"}),
    ("AUTH_TOKEN_TTL", {"auth_token_ttl", "auth", "token", "ttl"}),
    ("parseJwtClaims", {"parsejwtclaims", "parse", "jwt", "claims"}),
    ("OrderRepository.find_all()", {"orderrepository.find_all", "orderrepository", "order", "repository",
                                    "find_all", "find", "all"}),
    ("HTTPServerError", {"httpservererror", "http", "server", "error"}),
])
def test_identifiers_are_kept_whole_and_split(text, expected):
    assert set(identifier_terms(f"see `{text}` please")) == expected


def test_plain_words_are_not_identifiers():
    assert identifier_terms("The quick brown fox, jumps.") == []


def test_references_are_parsed():
    assert references("see #234, !847 and group/sub/project#12; not x#1 or &#39;") == [
        (None, "issue", 234), (None, "merge_request", 847), ("group/sub/project", "issue", 12)]


def test_query_words_drop_stopwords_unless_nothing_else_is_left():
    analyzer = word_analyzer()
    assert query_words(analyzer, "why did we choose Redis") == ["choos", "redi"]
    assert query_words(analyzer, "Searching searched searches") == ["search"]
    assert query_words(analyzer, "what is this") == ["what", "is", "this"]


def test_snippet_skips_the_header_and_highlights_query_terms():
    text = ("[Issue #196: Users are logged out] Discussion\n\n@johndoe (2024-03-13):\n"
            "Lots of unrelated words here. " * 20 + "We chose Redis because we need persistence and sorted sets.")
    snippet, ranges = make_snippet(text, "why did we choose redis")
    assert "Discussion" not in snippet
    highlighted = [snippet[a:b].lower() for a, b in ranges]
    assert "redis" in highlighted and "chose" not in highlighted  # chose ≠ choose after stemming
    assert len(snippet) <= 240
    snippet, ranges = make_snippet("Title\n\nfix in src/auth/login.ts today", "src/auth/login.ts")
    assert snippet[ranges[0][0]:ranges[0][1]] == "src/auth/login.ts"


@pytest.mark.parametrize("raw,shown", [
    ("\x1b[2JHello", "Hello"),  # CSI: clear screen
    ("\x1b]0;pwned\x07Title", "Title"),  # OSC: window title, BEL-terminated
    ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),  # OSC 8 hyperlink, ST-terminated
    ("a\u202eb\u2066c\u2069", "abc"),  # bidi override and isolate
    ("x\x9b31my\x85z", "xyz"),  # C1: 8-bit CSI, NEL
    ("tab\there\nnext\r\x00\x7f", "tab\there\nnext"),  # newline and tab kept
    ("\x1b(B\x1bcplain \x1b]2;unterminated\nnext line", "plain \nnext line"),  # an OSC ends at the line
    ("ordinary text · ünïcödé → ok", "ordinary text · ünïcödé → ok"),
])
def test_terminal_clean_drops_what_a_terminal_would_obey(raw, shown):
    from gitlab_knowledge.terminal import clean

    assert clean(raw) == shown
