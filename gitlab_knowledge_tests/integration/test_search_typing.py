"""Keyword search for people who type (issue 26, point 5), over the synced sample: a word no
document holds is searched as the nearest word the index has (typo) or the word it begins
(prefix), and the output says so; `"exact phrases"` and `-excluded` words hold in every mode."""

import json
import re

import jsonschema
import pytest

from gitlab_knowledge.search.output import render_human, response_json
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.conftest import REPO, forked, subprocess_env

SCHEMA = json.loads((REPO / "gitlab_knowledge" / "search" / "schema.json").read_text())
MODES = ("hybrid", "lexical", "semantic")


@pytest.fixture(scope="module")
def searcher(sample):
    return Workspace(sample.config).searcher(warm=True)


def _bodies(searcher, response) -> list[str]:
    texts = searcher.lexical().bodies([r.doc_id for r in response.results])
    return [texts[r.doc_id].lower() for r in response.results]


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
@pytest.mark.parametrize("typed,matched,how", [("reddis", "redis", "typo"), ("kubern", "kubernetes", "prefix"),
                                                ("sesion stor", "session", "typo")])
def test_a_word_no_document_holds_is_searched_as_the_nearest_one(searcher, mode, typed, matched, how):
    """`reddis` and `kubern` found nothing (no result, or only weak ones) before."""
    response = searcher.search(typed, mode=mode, limit=5)
    assert response.results and not response.no_good_match
    assert (response.expanded[0].word, response.expanded[0].matched, response.expanded[0].how) == \
        (typed.split()[0], matched, how)
    assert matched in _bodies(searcher, response)[0]
    assert not any(r.weak for r in response.results[:1])
    payload = response_json(response)
    jsonschema.validate(payload, SCHEMA)
    assert payload["expanded"][0] == {"word": typed.split()[0], "matched": matched, "how": how}
    human = render_human(response, color=False)
    said = [line for line in human.splitlines() if line.startswith("No document has")]
    assert len(said) == 1 and f'"{typed.split()[0]}": searched "{matched}" instead' in said[0]


def test_known_words_are_searched_as_typed(searcher):
    """A question with one word the corpus lacks is answered by its other words: `offline` is not
    a typo of `online` (a golden query; replacing it cost its expected thread the first place)."""
    query = "why not just take the site offline for a couple of hours to switch databases"
    response = searcher.search(query, limit=5)
    assert response.expanded == []
    assert "No document has" not in render_human(response, color=False)
    assert response_json(response)["expanded"] == []
    assert searcher.search("redis", limit=3).expanded == []


@pytest.mark.parametrize("mode", MODES)
def test_a_quoted_phrase_is_required_in_that_order(searcher, mode):
    response = searcher.search('"session store"', mode=mode, limit=10)
    assert response.phrases == ["session store"] and response.results
    for body in _bodies(searcher, response):
        assert re.search(r"\bsession\w*\W+stor\w*", body), body[:200]
    assert searcher.search('"store session"', mode=mode, limit=10).results == []
    # Without quotes the same words find documents holding them apart too.
    loose = searcher.search("store session", mode=mode, limit=50)
    assert len(loose.results) > len(response.results)
    jsonschema.validate(response_json(response), SCHEMA)


@pytest.mark.parametrize("mode", MODES)
def test_an_excluded_word_leaves_out_every_document_holding_it(searcher, mode):
    before = searcher.search("session store", mode=mode, limit=10)
    assert any("redis" in body for body in _bodies(searcher, before))
    response = searcher.search("session store -redis", mode=mode, limit=10)
    assert response.excluded == ["redis"] and response.results
    assert not any(re.search(r"\bredis", body) for body in _bodies(searcher, response))
    excluded_phrase = searcher.search('session store -"redis-backed"', mode=mode, limit=10)
    assert excluded_phrase.excluded == ["redis-backed"]
    assert not any("redis-backed" in body for body in _bodies(searcher, excluded_phrase))
    payload = response_json(response)
    jsonschema.validate(payload, SCHEMA)
    assert payload["excluded"] == ["redis"] and payload["phrases"] == []


def test_exclusions_apply_to_pinned_references_and_with_graph_filters(searcher):
    assert searcher.search("!812", limit=3).results[0].fields["iid"] == 812
    assert all(r.fields["iid"] != 812 or r.fields["project"] != "acme/platform"
               for r in searcher.search("!812 -redis", limit=10).results)
    from gitlab_knowledge.search.filters import Filters

    response = searcher.search("deploy -kubernetes", Filters.build(participant="johndoe"), limit=20)
    assert response.results and not any("kubernetes" in b for b in _bodies(searcher, response))


def test_operators_are_text_where_they_are_not_operators(searcher):
    for query in ("real-time updates", "off by -1", "git commit --amend", 'an "unbalanced quote'):
        response = searcher.search(query, limit=3)
        assert (response.phrases, response.excluded) == ([], []), query
    pasted = " ".join(["word"] * 30) + ' "session store" -redis and more words here'
    response = searcher.search(pasted, mode="lexical", limit=3)
    assert (response.phrases, response.excluded, response.expanded) == ([], [], [])


def test_a_query_of_exclusions_alone_is_words(sample, searcher):
    response = searcher.search("-redis -cache", mode="lexical", limit=3)
    assert (response.phrases, response.excluded) == ([], []) and response.results
    run = forked(["gitlab_knowledge.search", "-redis -cache", "--config", str(sample.config_path), "--mode", "lexical",
                  "--json"], env=subprocess_env(), timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["excluded"] == []


def test_the_cli_says_what_it_searched_instead(sample):
    run = forked(["gitlab_knowledge.search", "reddis", "--config", str(sample.config_path), "--mode", "lexical"],
                 env=subprocess_env(), timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("Found ")
    assert lines[1] == 'No document has "reddis": searched "redis" instead (the nearest word).'


def _text_of(searcher, project: str) -> str:
    lexical = searcher.lexical()
    return " ".join(lexical.bodies(list(lexical.state(project))).values()).lower()


def test_a_shared_servers_user_is_never_told_a_word_only_hidden_documents_hold(searcher):
    """Tolerance weighs words within what the asking user may read. Before, a reader of acme/web-app
    alone was told their word was searched as a word only acme/platform's documents hold (the same
    answer a reader of everything gets, which `leaked` below counts)."""
    from gitlab_knowledge.search.filters import Filters
    from gitlab_knowledge.store.viewer_lens import IndexScope

    scope = IndexScope(projects=frozenset({"acme/web-app"}), guarded=frozenset(), allowed=frozenset())
    visible = set(re.findall(r"[a-z]+", _text_of(searcher, "acme/web-app")))
    hidden_only = sorted({w for w in re.findall(r"[a-z]+", _text_of(searcher, "acme/platform"))
                          if len(w) >= 8} - visible)
    told, leaked = [], []
    for word in hidden_only[::max(1, len(hidden_only) // 40)]:
        for typed in (word[:3] + word[4:], word[:5]):  # a typo (a letter lost) and a prefix
            everyone = searcher.search(typed, mode="lexical", limit=5)
            leaked += [(typed, e.matched) for e in everyone.expanded if e.matched not in visible]
            for mode in ("lexical", "hybrid"):
                response = searcher.search(typed, Filters().scoped(scope), mode=mode, limit=5)
                told += [(typed, e.matched) for e in response.expanded if e.matched not in visible]
                assert all(r.fields["project"] == "acme/web-app" for r in response.results)
    assert len(leaked) >= 10, leaked  # what the scope would have been told before
    assert told == []
