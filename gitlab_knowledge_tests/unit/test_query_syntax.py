"""What a typed query's marks mean (search/query_plan.py), the edit distance of typo tolerance
(search/tolerance.py) and the title key (lexical/analysis.py): pure functions, no store."""

import pytest

from gitlab_knowledge.lexical.analysis import title_key
from gitlab_knowledge.search.query_plan import OPERATOR_MAX_WORDS, _operators
from gitlab_knowledge.search.tolerance import edit_distance, max_distance


@pytest.mark.parametrize("query,kept,phrases,excluded", [
    ('"session store" redis', "session store redis", ["session store"], []),
    ("cache -redis", "cache", [], ["redis"]),
    ('cache -"session store" -redis.', "cache", [], ["session store", "redis"]),
    ('"a  b" "a b" c', "a b a b c", ["a b"], []),
    # Not operators: a dash inside a word or before a number or a dash, an unbalanced or empty quote.
    ("real-time updates", "real-time updates", [], []),
    ("off by -1", "off by -1", [], []),
    ("git commit --amend", "git commit --amend", [], []),
    ("a - b", "a - b", [], []),
    ('an "unbalanced quote', 'an "unbalanced quote', [], []),
    ('empty "" quotes', 'empty "" quotes', [], []),
    ('say"glued" words', 'say"glued" words', [], []),
])
def test_operators(query, kept, phrases, excluded):
    assert _operators(query) == (kept, phrases, excluded)


def test_a_pasted_document_has_no_operators():
    text = " ".join(["word"] * OPERATOR_MAX_WORDS) + ' "a phrase" -dash'
    assert _operators(text) == (text, [], [])


def test_exclusions_alone_are_words():
    # Nothing would be left to rank, and any text is a query.
    assert _operators('-redis -"session store"') == ('-redis -"session store"', [], [])


@pytest.mark.parametrize("a,b,distance", [
    ("reddi", "redi", 1), ("recieve", "receive", 1), ("sesion", "session", 1), ("kubernet", "kubernet", 0),
    ("abcd", "dcba", 3), ("deploymnet", "deploy", 3),
])
def test_edit_distance(a, b, distance):
    bound = 2
    assert edit_distance(a, b, bound) == min(distance, bound + 1)
    assert edit_distance(b, a, bound) == min(distance, bound + 1)


def test_the_allowed_distance_grows_with_the_word():
    assert [max_distance(t) for t in ("redi", "reddi", "sesion", "kubernet")] == [0, 1, 1, 2]


@pytest.mark.parametrize("title,key", [
    ("Checkout v2 behind the `enable_new_checkout` flag", "checkout v2 behind the enable_new_checkout flag"),
    ("  Dark   MODE!  ", "dark mode"),
    ("Straße: ÄRGER", "strasse ärger"),
    ("!!!", None),
    (None, None),
    ("x" * 600, None),
])
def test_title_key(title, key):
    assert title_key(title) == key
