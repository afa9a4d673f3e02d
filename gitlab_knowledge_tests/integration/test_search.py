"""Search over the synced sample dataset: golden queries, filters pushed down into both
retrievers, exact references, degradation, hostile input, the JSON contract, the CLI."""

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.search.engine import UNAVAILABLE, Searcher
from gitlab_knowledge.search.filters import Filters
from gitlab_knowledge.search.output import render_human, response_json
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.conftest import REPO, forked, subprocess_env
from gitlab_knowledge_tests.helpers import rows, scalar

GOLDEN = json.loads((REPO / "gitlab_knowledge_tests" / "fixtures" / "golden_queries.json").read_text())
SCHEMA = json.loads((REPO / "gitlab_knowledge" / "search" / "schema.json").read_text())


@pytest.fixture(scope="session")
def searcher(sample) -> Searcher:
    return Workspace(sample.config).searcher()


def test_golden_queries(sample):
    """The golden queries are an eval file, run through `eval`'s own code: every expected document
    in the top 10 in hybrid, and in lexical for the cases that must work on keywords alone."""
    from gitlab_knowledge.search.evaluate import evaluate, load_cases

    cases = load_cases(REPO / "gitlab_knowledge_tests" / "fixtures" / "golden_queries.json")
    report = evaluate(sample.config, cases, modes=("hybrid", "lexical"), per_query=True)
    by_mode = {m: [d for d in report["per_query"] if d["mode"] == m] for m in ("hybrid", "lexical")}
    assert [d["query"] for d in by_mode["hybrid"]] == [c.query[:200] for c in cases]
    failures = []
    for case, hybrid, lexical in zip(GOLDEN, by_mode["hybrid"], by_mode["lexical"], strict=True):
        for mode, result in (("hybrid", hybrid), ("lexical", lexical)):
            if (mode == "hybrid" or case["lexical"]) and result["recall_10"] < 1.0:
                failures.append(f"{mode}: {case['query']!r} ({case['why']}): top {result['top']}")
    assert not failures, "\n".join(failures)
    hybrid_run = next(r for r in report["runs"] if r["mode"] == "hybrid")
    assert hybrid_run["recall_10"] == 1.0 and hybrid_run["ndcg_10"] >= 0.78


@pytest.mark.parametrize("query,first", [
    ("#234", "https://gitlab.example.com/acme/platform/-/issues/234"),
    ("!847", "https://gitlab.example.com/acme/platform/-/merge_requests/847"),
    ("acme/web-app#67", "https://gitlab.example.com/acme/web-app/-/issues/67"),
    ("what happened in !847", "https://gitlab.example.com/acme/platform/-/merge_requests/847"),
])
def test_exact_references_come_first(searcher, query, first):
    response = searcher.search(query, limit=5)
    assert response.results[0].fields["url"] == first
    assert response.results[0].match == "exact_reference"


@pytest.mark.parametrize("identifier", ["src/auth/login.ts", "AUTH_TOKEN_TTL", "parseJwtClaims",
                                        "OrderRepository.find_all", "migrations/0042_add_sessions.sql"])
def test_identifiers_and_paths_surface_documents_that_contain_them_first(sample, searcher, identifier):
    config = sample.config
    for mode in ("hybrid", "lexical"):
        response = searcher.search(identifier, mode=mode, limit=3)
        top = response.results[0]
        text = rows(config, "SELECT content_text FROM documents WHERE id = ?", [top.doc_id])[0][0]
        assert identifier.lower() in text.lower(), (mode, top.fields["url"])


FILTER_CASES = [
    ({"types": ["discussion"]}, lambda f: f["source_type"] == "discussion"),
    ({"types": ["mr", "issue"]}, lambda f: f["source_type"] in ("merge_request", "issue")),
    ({"author": "johndoe"}, lambda f: f["author"] == "johndoe"),
    ({"labels": ["auth", "security"]}, lambda f: {"auth", "security"} <= set(f["labels"])),
    ({"after": "2025-01-01"}, lambda f: f["created_at"].year >= 2025),
    ({"before": "2024-06-01"}, lambda f: f["created_at"].isoformat() < "2024-06-01"),
    ({"project": "acme/web-app"}, lambda f: f["project"] == "acme/web-app"),
    ({"state": "merged"}, lambda f: f["state"] == "merged"),
    ({"exclude_confidential": True}, lambda f: not f["confidential"]),
    ({"exclude_internal": True}, lambda f: not f["internal"]),
]


@pytest.mark.parametrize("mode", ["lexical", "semantic", "hybrid"])
@pytest.mark.parametrize("filters,holds", FILTER_CASES, ids=[str(c[0]) for c in FILTER_CASES])
def test_every_filter_applies_in_every_retriever(searcher, mode, filters, holds):
    # Every result must hold half of the query's words or be close in meaning (the relevance
    # floor): a two-word query keeps the filtered lists non-empty in every retriever.
    response = searcher.search("authentication tokens", Filters.build(**filters), mode, 50)
    assert response.results, f"{filters} should match something in {mode}"
    assert all(holds(r.fields) for r in response.results)


def test_filters_are_applied_before_the_top_n_cut(sample, searcher):
    config = sample.config
    # Only 2 closed MRs exist; neither is in the unfiltered top 50 for a query about something else.
    closed = {r[0] for r in rows(config, "SELECT id FROM documents WHERE source_type = 'merge_request' "
                                         "AND state = 'closed'")}
    assert closed
    unfiltered = {r.doc_id for r in searcher.search("authentication redesign", mode="semantic", limit=50).results}
    assert not closed <= unfiltered
    # Neither is about the query: without the relevance floor, to see the filter alone at work.
    filtered = searcher.search("authentication redesign", Filters.build(types=["mr"], state="closed"),
                               "semantic", 50, floor=False)
    assert {r.doc_id for r in filtered.results} == closed
    lexical = searcher.search("the", Filters.build(types=["mr"], state="closed"), "lexical", 50, floor=False)
    assert {r.doc_id for r in lexical.results} == closed


def test_label_filters_must_all_match(sample, searcher):
    config = sample.config
    both = {r[0] for r in rows(config, "SELECT id FROM documents WHERE list_contains(labels, 'auth') "
                                       "AND list_contains(labels, 'security') "
                                       "AND regexp_matches(content_text, '(?i)\\bthe\\b')")}
    assert len(both) > 3
    response = searcher.search("the", Filters.build(labels=["auth", "security"]), "lexical", 100)
    assert {r.doc_id for r in response.results} == both
    assert searcher.search("the", Filters.build(labels=["auth", "no-such-label"]), "lexical", 100).results == []


def test_degrades_to_lexical_when_the_embedding_service_is_down(sample, tmp_path):
    config = sample.config
    from gitlab_knowledge.embeddings.ollama_provider import OllamaProvider
    from gitlab_knowledge.embeddings.vectors import VectorStore

    unreachable = OllamaProvider(host="http://127.0.0.1:9", timeout=2)
    down = Workspace(config, embedder_factory=lambda *_: unreachable).searcher(provider="ollama",
                                                                            model="nomic-embed-text")
    down._vectors = VectorStore(config.lancedb_dir, "embedded", "all-MiniLM-L6-v2-int8")  # a table exists
    response = down.search("why did we choose redis", limit=5)
    assert response.effective_mode == "lexical" and response.mode == "hybrid"
    assert UNAVAILABLE in response.warnings
    assert response.results
    assert down.search("why did we choose redis", mode="semantic").effective_mode == "lexical"


HOSTILE = ['"unbalanced quote', "title:redis AND(", "field:value OR", "((()))", "*", "-redis", "redis~2^3",
           "🔥🚀 deploy", "🔥", "\\", "a\x00b", "[x](javascript:alert(1))", "SELECT * FROM documents; --",
           "x" * 10_000, "redis " * 2_000, "' OR 1=1 --", "#", "!", "#0", "!99999999999", "../../etc/passwd"]


@pytest.mark.parametrize("mode", ["hybrid", "lexical", "semantic"])
def test_hostile_queries_never_crash(searcher, mode):
    for query in HOSTILE:
        response = searcher.search(query, mode=mode, limit=5)
        jsonschema.validate(response_json(response), SCHEMA)
        render_human(response, color=False)
    for empty in ("", "   ", "\n\t"):
        with pytest.raises(UsageError):
            searcher.search(empty, mode=mode)


def test_json_output_validates_against_the_shipped_schema(searcher):
    validator = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
    for query, filters in (("why did we choose redis", {}), ("#234", {}), ("tokens", {"types": ["discussion"]}),
                           ("nothing matches this zzqxv", {"project": "acme/web-app"})):
        payload = response_json(searcher.search(query, Filters.build(**filters), "hybrid", 10))
        validator.validate(json.loads(json.dumps(payload)))


def test_human_output(searcher):
    # Not exactly #234's title, "Authentication redesign", which would be marked [title match].
    text = render_human(searcher.search("the authentication redesign", limit=3), color=False)
    lines = text.splitlines()
    assert lines[0].startswith("Found ") and "(hybrid search, " in lines[0]
    assert lines[2].startswith("[1] ") and lines[2].rstrip().endswith(")")
    assert lines[3].strip().startswith("@") and " · " in lines[3]
    assert any(line.strip().startswith("https://gitlab.example.com/") for line in lines)
    assert "\x1b[" not in text
    colored = render_human(searcher.search("authentication redesign", limit=3), color=True)
    assert "\x1b[" in colored
    empty = render_human(searcher.search("zzqxv qqqxz", mode="lexical"), color=False)
    assert empty.startswith('No results for "zzqxv qqqxz"')


def _cli(args: list[str], config_path: Path, **env: str) -> subprocess.CompletedProcess:
    return forked(["gitlab_knowledge.search", *args, "--config", str(config_path)], env=subprocess_env(**env),
                  timeout=120)


def test_cli_json_and_degradation_and_bad_input(sample):
    path = sample.config_path
    ok = _cli(["why did we choose redis", "--json", "--limit", "3"], path)
    assert ok.returncode == 0, ok.stderr
    payload = json.loads(ok.stdout)
    jsonschema.validate(payload, SCHEMA)
    assert payload["effective_mode"] == "hybrid" and len(payload["results"]) == 3

    dead = sample.dead_ollama
    down = _cli(["why did we choose redis", "--json"], path, GITLAB_KNOWLEDGE_EMBEDDING="ollama", OLLAMA_HOST=dead)
    assert down.returncode == 0
    payload = json.loads(down.stdout)
    assert UNAVAILABLE in payload["warnings"] and payload["effective_mode"] == "lexical" and payload["results"]
    human = _cli(["why did we choose redis"], path, GITLAB_KNOWLEDGE_EMBEDDING="ollama", OLLAMA_HOST=dead)
    assert human.returncode == 0 and UNAVAILABLE in human.stderr and human.stdout.startswith("Found ")

    for bad in (["redis", "--after", "2024-13-01"], ["redis", "--before", "tomorrow"], ["redis", "--limit", "0"],
                ["redis", "--mode", "fuzzy"], ["redis", "--type", "epic"], [""]):
        result = _cli(bad, path)
        assert result.returncode == 2, (bad, result.stderr)
        assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
        assert "Traceback" not in result.stderr


def test_json_errors_validate_against_the_shipped_schema(sample):
    validator = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
    for bad in (["redis", "--model", "bogus"], ["redis", "--after", "2024-13-01"], [""]):
        result = _cli([*bad, "--json"], sample.config_path)
        error = json.loads(result.stdout)
        validator.validate(error)
        assert error["exit_code"] == result.returncode == 2 and result.stderr == f"error: {error['error']}\n"
        if "--model" in bad:
            assert error["details"] == {"field": "model", "value": "bogus", "valid": ["embedded", "ollama"]}
            assert error["error"] == "--model expects embedded or ollama[:MODEL], got 'bogus'"


def test_search_works_while_a_writer_holds_the_duckdb_file(sample):
    config, path = sample.config, sample.config_path
    holder = subprocess.Popen([sys.executable, "-c",
                               "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True); "
                               "time.sleep(120)", str(config.duckdb_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        result = _cli(["authentication redesign", "--json", "--limit", "2"], path)
        assert result.returncode == 0, result.stderr
        assert len(json.loads(result.stdout)["results"]) == 2
    finally:
        holder.kill()
        holder.wait()
    assert scalar(config, "SELECT count(*) FROM documents") > 0


@pytest.mark.parametrize("filters", [{}, {"types": ["discussion"]}, {"labels": ["auth"], "after": "2024-06-01"},
                                     {"project": "acme/web-app", "exclude_internal": True}])
def test_in_memory_vectors_rank_exactly_like_the_lancedb_scan(sample, filters):
    cold, warm = Workspace(sample.config).searcher(), Workspace(sample.config).searcher(warm=True)
    for query in ("why did we choose redis", "roll back a deploy", "translations"):
        a = cold.search(query, Filters.build(**filters), "semantic", 20, floor=False).results
        b = warm.search(query, Filters.build(**filters), "semantic", 20, floor=False).results
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            # Both are exact; only documents within float rounding of each other may swap places.
            assert x.doc_id == y.doc_id or abs(x.retriever_scores["semantic"] - y.retriever_scores["semantic"]) < 1e-5
            assert x.retriever_scores["semantic"] == pytest.approx(y.retriever_scores["semantic"], abs=1e-5)
        assert [r.snippet for r in b if r.snippet] and all(r.fields["url"] for r in b)


class _Recording:
    """The embedded model's name and size, answering every query with `vector`; keeps the texts it was handed."""

    provider, model, dims = "embedded", "all-MiniLM-L6-v2-int8", 384

    def __init__(self, vector) -> None:
        self.vector, self.texts = vector, []

    def embed_query(self, text: str):
        self.texts.append(text)
        return self.vector


def _recording_searcher(sample, vector) -> tuple[Searcher, _Recording]:
    fake = _Recording(vector)
    searcher = Workspace(sample.config, embedder_factory=lambda *_: fake).searcher(
        provider="embedded", model=_Recording.model)
    return searcher, fake


def test_a_long_one_word_query_is_embedded_by_its_first_characters_with_a_warning(sample):
    """Issue 28, point 6: the words' bound kept a 3.5 MB word whole; the characters' bound cuts it."""
    import numpy as np

    from gitlab_knowledge.search.query_text import EMBED_MAX_CHARS

    searcher, fake = _recording_searcher(sample, np.ones(384, np.float32) / 384 ** 0.5)
    response = searcher.search("redis" + "x" * 3_500_000, mode="hybrid", limit=5)
    assert [len(t) for t in fake.texts] == [EMBED_MAX_CHARS]
    assert any("3,500,005 characters" in w and "embedded the first" in w for w in response.warnings), \
        response.warnings
    searcher.search("why did we choose redis", mode="hybrid", limit=5)  # a short query: whole, no warning
    assert fake.texts[-1] == "why did we choose redis"


def test_a_lone_surrogate_in_the_query_is_a_usage_error(searcher):
    """Issue 28, point 7: the Searcher API raised TypeError (a traceback in the resident socket's log)."""
    with pytest.raises(UsageError, match="not valid UTF-8"):
        searcher.search("redis \ud800 cache", mode="lexical")
    with pytest.raises(UsageError, match="not valid UTF-8"):
        searcher.search("\udcff", mode="hybrid")


IMPOSSIBLE = [
    (["--state", "weird"], "--state expects one of opened, closed, merged, locked, reopened, all, got 'weird'"),
    (["--project", "nope/nope"],
     "project 'nope/nope' is not in the store (synced projects: acme/platform, acme/web-app)"),
    (["--label", "auth,backend"], "repeat it, --label auth --label backend"),
    (["--label", ",0\n0"], "repeat it, once per label"),  # what the property test found: a newline echoed
    (["--label", " "], "--label expects a label name, got ' '"),
    (["--type", "epic"], "--type expects issue, mr, discussion, wiki or release, got 'epic'"),
]


def test_impossible_filters_are_refused_naming_the_valid_values(sample, searcher):
    """What `list` refuses, search refuses the same way (one line, exit 2), instead of 'No results'."""
    for args, message in IMPOSSIBLE:
        result = _cli(["redis", *args], sample.config_path, GITLAB_KNOWLEDGE_RESIDENT="off")
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
        assert message in result.stderr and not result.stdout
    listed = forked(["gitlab_knowledge", "list", "issues", "--state", "weird", "--config", str(sample.config_path)],
                    env=subprocess_env(), timeout=120)
    assert listed.returncode == 2 and listed.stderr == f"error: {IMPOSSIBLE[0][1]}\n"
    # What a project is named by in the store, another case or `all` included, still searches.
    response = searcher.search("redis", Filters.build(project="ACME/Platform", state="all"), "lexical", 20)
    assert response.results and {r.fields["project"] for r in response.results} == {"acme/platform"}
    assert response.filters.describe()["project"] == "acme/platform" and response.filters.state is None
    assert Filters.build(state="Merged").state == "merged"


def test_the_mcp_search_tool_refuses_them_in_words_an_agent_can_act_on(sample):
    import asyncio

    from mcp import Client

    from gitlab_knowledge.mcp.resident import Resident
    from gitlab_knowledge.mcp.server import build_server

    server = build_server(Resident(sample.config, local_socket=False).context)

    async def ask(arguments: dict) -> list:
        async with Client(server) as client:
            return [await client.call_tool("search", {"query": "redis", "mode": "lexical", **extra})
                    for extra in arguments]

    state, project, label, fine = asyncio.run(ask([{"state": "weird"}, {"project": "nope/nope"},
                                                   {"label": ["auth,backend"]}, {"project": "ACME/Platform"}]))
    assert state.is_error and "'weird' is not one of ['opened', 'closed', 'merged', 'locked', 'reopened', 'all']" \
        in state.content[0].text
    assert project.is_error and project.content[0].text == IMPOSSIBLE[1][1]
    assert label.is_error and "--label auth --label backend" in label.content[0].text
    assert not fine.is_error and fine.structured_content["filters"]["project"] == "acme/platform"
