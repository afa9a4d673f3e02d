"""Exact-identifier rules, eval metrics and eval files, the relevance floor's rule, BEIR loading."""

import json
import math

import pytest

from benchmarks.beir import to_dataset
from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.lexical.analysis import code_identifiers, is_code_identifier
from gitlab_knowledge.search import relevance
from gitlab_knowledge.search.evaluate import Case, judge, load_cases, ndcg, score_case
from gitlab_knowledge_tests.conftest import REPO

MINI = REPO / "gitlab_knowledge_tests" / "fixtures" / "seamonkey-mini"


@pytest.mark.parametrize("token", ["parseJwtClaims", "OrderRepository", "XMLHttpRequest", "find_all", "AUTH_TOKEN_TTL",
                                   "__init__", "OrderRepository.find_all", "os.path.join", "Foo::Bar", "login.ts",
                                   "src/auth/login.ts", "migrations/0042_add_sessions.sql", "/etc/hosts"])
def test_code_identifiers_are_pinned(token):
    assert is_code_identifier(token)


@pytest.mark.parametrize("token", ["PostgreSQL", "postgresql", "Redis", "GITLAB", "0-dimensional", "real-time",
                                   "end-to-end", "2.53.1", "and/or", "read/write", "e.g.", "U.S.", "Mozilla/5.0",
                                   "https://example.com/a/b", "x", "ab"])
def test_words_versions_and_prose_are_not(token):
    assert not is_code_identifier(token.strip("."))


def test_code_identifiers_of_a_query_are_lowercased_stripped_and_unique():
    assert code_identifiers("why does `parseJwtClaims` (in ./src/auth/jwt.ts) call parsejwtclaims, PostgreSQL?") == [
        "parsejwtclaims", "src/auth/jwt.ts"]


def test_ndcg_recall_and_mrr():
    assert ndcg([1, 0, 0], 1) == 1.0
    assert ndcg([0, 1], 1) == pytest.approx(1 / math.log2(3))
    assert ndcg([0, 1, 1], 2) == pytest.approx((1 / math.log2(3) + 1 / math.log2(4)) / (1 + 1 / math.log2(3)))
    scored = score_case([0, 0, 1] + [0] * 60 + [1], 2)
    assert scored["recall_10"] == 0.5 and scored["recall_50"] == 0.5 and scored["rr"] == pytest.approx(1 / 3)
    assert score_case([0] * 5, 1) == {"ndcg_10": 0.0, "recall_10": 0.0, "recall_50": 0.0, "rr": 0.0}


def _doc(project, iid, kind="issue", source="issue", url=None):
    return {"project": project, "parent_type": kind, "iid": iid, "source_type": source, "url": url}


def test_judge_counts_each_target_once_and_drops_excluded_items():
    case = Case("q", ("g/p#2", "https://x/g/p/-/issues/3#note_9"), exclude=("g/p#1",))
    ranking = [_doc("g/p", 1), _doc("g/p", 2, source="discussion"), _doc("g/p", 2), _doc("g/p", 4),
               _doc("g/p", 3, source="discussion", url="https://x/g/p/-/issues/3#note_9")]
    # #1 is gone; #2's thread meets the #2 target, #2 itself adds nothing more.
    assert judge(ranking, case) == [1, 0, 0, 1]
    assert judge([_doc("other/p", 2, kind="merge_request")], Case("q", ("!2",))) == [1]


def test_eval_files_are_checked(tmp_path):
    path = tmp_path / "cases.json"
    for content, fragment in (("[]", "non-empty"), ("{", "not JSON"), ('[{"query": ""}]', "query"),
                              ('[{"query": "x"}]', "expected"), ('[{"query": "x", "expected": ["#1"], "exclude": 3}]',
                                                                 "exclude"),
                              ('[{"query": "x", "expected": ["#1"], "filters": {"colour": "red"}}]', "filters")):
        path.write_text(content)
        with pytest.raises(UsageError, match=fragment):
            load_cases(path)
    with pytest.raises(UsageError, match="cannot read"):
        load_cases(tmp_path / "missing.json")
    golden = load_cases(REPO / "gitlab_knowledge_tests" / "fixtures" / "golden_queries.json")
    assert len(golden) >= 30 and all(c.expected for c in golden)


@pytest.mark.parametrize("similarity,covered,weak", [
    (None, None, True), (0.34, 0.29, True), (0.29, 0.29, True), (0.27, 0.45, True),
    (0.35, None, False), (None, 0.5, False), (0.30, 0.33, False),
])
def test_the_floor_needs_a_retriever_or_both_to_vouch(similarity, covered, weak):
    assert relevance.is_weak("fused", similarity, covered) is weak
    assert relevance.is_weak("exact_identifier", similarity, covered) is False


def test_thin_threads_move_below_their_item():
    fields = {"t1": _doc("g/p", 1, source="discussion"), "i1": _doc("g/p", 1), "t2": _doc("g/p", 2, source="discussion"),
              "i2": _doc("g/p", 2), "x": _doc("g/p", 3)}
    texts = {"t1": "[Issue #1: Title] Discussion\n\n@a (2024-01-01):\nLGTM",
             "t2": "[Issue #2: Other] Discussion\n\n@a (2024-01-01):\n" + "a long thread " * 60}
    ranked = ["t1", "x", "t2", "i1", "i2"]
    assert relevance.items_before_threads(ranked, fields, lambda ids: {i: texts[i] for i in ids}) == \
        ["i1", "t1", "x", "t2", "i2"]


def test_a_thin_thread_that_says_more_of_the_query_than_its_item_keeps_its_place():
    # A one-line decision note found by its own words is the answer, not noise in front of its issue.
    fields = {"t1": _doc("g/p", 1, source="discussion"), "i1": _doc("g/p", 1)}
    texts = {"t1": "[Issue #1: Cache settings] Discussion\n\n@a (2024-01-01):\nwe cap redis memory (zebrafish)",
             "i1": "[Issue #1: Cache settings]\n\nTune the cache."}

    def says_more(notes: str, item: str) -> bool:
        return ("zebrafish" in notes) > ("zebrafish" in item)

    assert relevance.items_before_threads(["t1", "i1"], fields, lambda ids: {i: texts[i] for i in ids},
                                          says_more) == ["t1", "i1"]
    assert relevance.items_before_threads(["t1", "i1"], fields, lambda ids: {i: texts[i] for i in ids}) == \
        ["i1", "t1"]


def test_a_beir_set_becomes_a_sandbox_dataset_and_eval_cases(tmp_path):
    from gitlab_knowledge_sandbox.dataset import load_dataset

    cases = to_dataset(MINI, tmp_path / "ds", "eval/mini")
    data = load_dataset(tmp_path / "ds")
    issues = data.issues[1]
    corpus = [json.loads(line) for line in (MINI / "corpus.jsonl").read_text().splitlines()]
    assert [i["iid"] for i in issues] == list(range(1, len(corpus) + 1))
    assert issues[0]["title"] == corpus[0]["title"] and issues[0]["description"] == corpus[0]["text"]
    assert len(cases) == 4
    line = {d["_id"]: n for n, d in enumerate(corpus, start=1)}
    assert cases[0]["expected"] == [f"eval/mini#{line['1611120']}"]
    assert cases[0]["exclude"] == [f"eval/mini#{line['1610468']}"]


def test_embedding_models_to_keep_current_are_validated(tmp_path):
    from gitlab_knowledge.config import parse_config
    from gitlab_knowledge.embeddings.tables import kept_models
    from gitlab_knowledge.errors import ConfigError

    def config(models):
        return parse_config({"gitlab": {"url": "http://127.0.0.1:9"}, "projects": ["g/p"],
                             "embedding": {"models": models}}, tmp_path, {}, "test")

    kept = config(["ollama:nomic-embed-text", "embedded", "ollama:nomic-embed-text"])
    assert kept.embedding.models == ("ollama:nomic-embed-text", "embedded")
    assert kept_models(kept) == [("ollama", "nomic-embed-text")]  # the configured model is not "another"
    for bad in (["openai:ada"], [3], "ollama"):
        with pytest.raises(ConfigError, match="embedding.models"):
            config(bad)
