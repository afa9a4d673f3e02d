"""Search you can trust, on the synced sample: "no good match", the item before its threads,
identifier pinning, `similar`, and `eval` (its command; a BEIR subset through the whole pipeline;
the golden queries run through it in test_search.py)."""

import json
import subprocess
import sys

import jsonschema
import pytest

from gitlab_knowledge.search.engine import Searcher
from gitlab_knowledge.search.output import render_human, response_json
from gitlab_knowledge.search.similar import similar
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.conftest import REPO, subprocess_env
from gitlab_knowledge_tests.helpers import rows

GOLDEN_FILE = REPO / "gitlab_knowledge_tests" / "fixtures" / "golden_queries.json"
SCHEMA = json.loads((REPO / "gitlab_knowledge" / "search" / "schema.json").read_text())
EVAL_SCHEMA = json.loads((REPO / "gitlab_knowledge" / "search" / "eval_schema.json").read_text())
MODES = ("lexical", "semantic", "hybrid")
NONSENSE = ["xyznonexistent123", "qwpeoiruty zmxncbv", "asdkjh 83742 lkjq", "a8f3e9c1d2",  # random strings
            "banana smoothie recipe with mango", "knitting patterns for winter scarves",  # words the corpus lacks
            "football world cup final score", "how to bake sourdough bread", "lorem ipsum dolor sit amet",
            "Wie spät ist es heute in Berlin?", "Quelle heure est-il à Paris", "¿Dónde está la biblioteca?",
            "東京の天気はどうですか"]  # other languages


@pytest.fixture(scope="module")
def searcher(sample) -> Searcher:
    return Workspace(sample.config).searcher()


@pytest.mark.parametrize("mode", MODES)
def test_nonsense_finds_no_good_match_in_every_mode(searcher, mode):
    for query in NONSENSE:
        response = searcher.search(query, mode=mode, limit=10)
        payload = response_json(response)
        jsonschema.validate(payload, SCHEMA)
        text = render_human(response, color=False)
        if not response.results:
            assert text.startswith(f'No results for "{query}"')
        if mode != "lexical":
            assert response.results == [] and response.no_good_match, (mode, query, response.results[:1])
            assert payload["no_good_match"].startswith("nothing relevant") and "Nothing relevant" in text
        elif response.results:
            # Keywords alone cannot judge meaning: the matches stay, each marked weak, under the reason.
            assert response.no_good_match and all(r["weak"] for r in payload["results"]), (query, payload["results"][:1])
            assert text.startswith(f'No good match for "{query}"') and "[weak match]" in text
        else:  # nothing was ranked at all: no query word is in the index
            assert response.total == 0


def test_golden_queries_clear_the_floor(searcher):
    for case in json.loads(GOLDEN_FILE.read_text()):
        response = searcher.search(case["query"], mode="hybrid", limit=10)
        assert response.no_good_match is None, case["query"]
        expected = [r for r in response.results if r.fields["url"] in case["expected_urls"]]
        assert expected and not all(r.weak for r in expected), case["query"]


def test_an_items_title_finds_the_item_before_its_threads(sample, searcher):
    """Every issue/MR of the sample with threads, searched by its exact title: the item ranks above
    all of its own threads for at least 95 % of them (hybrid and lexical)."""
    items = rows(sample.config, """
        SELECT d.id, d.title, d.project_path, d.parent_type, d.parent_iid FROM documents d
        WHERE d.source_type != 'discussion' AND EXISTS (SELECT 1 FROM documents t WHERE t.source_type = 'discussion'
              AND t.parent_type = d.parent_type AND t.parent_id = d.parent_id) ORDER BY d.id""")
    assert len(items) > 60
    for mode in ("hybrid", "lexical"):
        first = 0
        for doc_id, title, project, kind, iid in items:
            results = searcher.search(title, mode=mode, limit=100).results
            mine = [r.doc_id for r in results if (r.fields["project"], r.fields["parent_type"], r.fields["iid"])
                    == (project, kind, iid)]
            first += bool(mine) and mine[0] == doc_id
        assert first / len(items) >= 0.95, (mode, first, len(items))


def test_group_keeps_each_item_once_as_its_best_document(searcher):
    plain = searcher.search("why did we choose redis", limit=100)
    grouped = searcher.search("why did we choose redis", limit=10, group=True)
    keys = [(r.fields["project"], r.fields["parent_type"], r.fields["iid"]) for r in grouped.results]
    assert len(keys) == len(set(keys)) == 10 and plain.total > grouped.total
    # Each item appears as the first of its documents in the plain ranking, in the same order.
    firsts, seen = [], set()
    for r in plain.results:
        key = (r.fields["project"], r.fields["parent_type"], r.fields["iid"])
        if key not in seen:
            seen.add(key)
            firsts.append(r.doc_id)
    assert [r.doc_id for r in grouped.results] == firsts[:10]


def test_capitalised_words_are_not_pinned_but_code_is(searcher):
    for mode in ("hybrid", "lexical"):
        upper = searcher.search("PostgreSQL", mode=mode, limit=10)
        lower = searcher.search("postgresql", mode=mode, limit=10)
        assert all(r.match == "fused" for r in upper.results)
        assert [r.doc_id for r in upper.results] == [r.doc_id for r in lower.results]
        assert searcher.search("parseJwtClaims", mode=mode, limit=3).results[0].match == "exact_identifier"
    assert all(r.match == "fused" for r in searcher.search("real-time 0-dimensional", limit=10).results)


@pytest.mark.parametrize("mode", MODES)
def test_similar_finds_the_known_duplicate_and_leaves_out_the_item(sample, searcher, mode):
    # acme/platform#219 was closed as a duplicate of #212 (its thread says so).
    response = similar(searcher, "acme/platform#219", mode=mode, limit=3)
    refs = [f"{r.fields['project']}#{r.fields['iid']}" for r in response.results]
    assert "acme/platform#212" in refs, refs
    assert all(r.fields["source_type"] != "discussion" for r in response.results)
    back = similar(searcher, "https://gitlab.example.com/acme/platform/-/issues/212", mode=mode, limit=10)
    refs = [(r.fields["project"], r.fields["iid"]) for r in back.results]
    assert ("acme/platform", 219) in refs and ("acme/platform", 212) not in refs
    jsonschema.validate(response_json(back), SCHEMA)


@pytest.mark.parametrize("mode", MODES)
def test_similar_ranks_by_likeness_and_marks_what_the_item_links(searcher, mode):
    """acme/platform!847's description names #234, #245, !841 and acme/web-app!143: links, not
    exact matches; each keeps the rank its likeness earns, with `linked` beside its score."""
    response = similar(searcher, "acme/platform!847", mode=mode, limit=10)
    assert all(r.match == "fused" for r in response.results)
    assert [r.score for r in response.results] == sorted((r.score for r in response.results), reverse=True)
    linked = {f"{r.fields['project']}{'#' if r.fields['parent_type'] == 'issue' else '!'}{r.fields['iid']}"
              for r in response.results if r.linked}
    assert linked and linked <= {"acme/platform#234", "acme/platform#245", "acme/web-app!143", "acme/platform!841"}
    assert any(not r.linked for r in response.results)
    payload = response_json(response)
    jsonschema.validate(payload, SCHEMA)
    assert sum(r["linked"] for r in payload["results"]) == len(linked)
    assert "[linked]" in render_human(response, color=False)
    assert not any(r.linked for r in searcher.search("authentication redesign #234", mode=mode).results)


def test_similar_honours_filters_and_says_what_it_cannot_resolve(searcher):
    from gitlab_knowledge.errors import UsageError
    from gitlab_knowledge.search.filters import Filters

    response = similar(searcher, "acme/platform#219", Filters.build(types=["discussion"], project="acme/platform"))
    assert response.results and all(r.fields["source_type"] == "discussion" and r.fields["project"] == "acme/platform"
                                    and r.fields["iid"] != 219 for r in response.results)
    for bad in ("nonsense", "acme/platform#999999"):
        with pytest.raises(UsageError):
            similar(searcher, bad)


def _cli(args, config_path):
    return subprocess.run([sys.executable, "-m", "gitlab_knowledge", "--config", str(config_path), *args],
                          capture_output=True, text=True, env=subprocess_env(), timeout=300)


def test_eval_and_similar_commands(sample, tmp_path):
    result = _cli(["eval", str(GOLDEN_FILE), "--json", "--mode", "lexical", "--mode", "hybrid"], sample.config_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    jsonschema.Draft202012Validator(EVAL_SCHEMA).validate(report)
    assert [r["mode"] for r in report["runs"]] == ["lexical", "hybrid"]
    assert report["queries"] == len(json.loads(GOLDEN_FILE.read_text())) >= 32
    human = _cli(["eval", str(GOLDEN_FILE), "--mode", "lexical"], sample.config_path)
    assert human.returncode == 0 and "nDCG@10" in human.stdout and "lexical" in human.stdout
    rows_of = _cli(["eval", str(GOLDEN_FILE), "--mode", "lexical", "--per-query"], sample.config_path)
    assert rows_of.returncode == 0 and rows_of.stdout.startswith(human.stdout.split("\n")[0])
    queries = [case["query"] for case in json.loads(GOLDEN_FILE.read_text())]
    lexical_rows = [line for line in rows_of.stdout.splitlines() if line.startswith("lexical ")]
    assert len(lexical_rows) == 1 + len(queries), rows_of.stdout  # the summary, then one per query
    assert "first result" in rows_of.stdout and queries[0][:40] in rows_of.stdout
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    failed = _cli(["eval", str(bad)], sample.config_path)
    assert failed.returncode == 2 and failed.stderr.count("\n") == 1 and "Traceback" not in failed.stderr
    found = _cli(["similar", "acme/platform#219", "--json", "--limit", "3"], sample.config_path)
    assert found.returncode == 0, found.stderr
    jsonschema.validate(json.loads(found.stdout), SCHEMA)
    missing = _cli(["similar", "#999999"], sample.config_path)
    assert missing.returncode == 2 and missing.stderr.startswith("error: ")


def test_a_beir_subset_through_the_whole_pipeline(tmp_path):
    """Sandbox GitLab → the sync job → eval, on 41 SeaMonkey reports: each query's duplicate is
    found, its own report never counts."""
    from benchmarks.beir import run

    report = run(REPO / "gitlab_knowledge_tests" / "fixtures" / "seamonkey-mini", tmp_path, MODES, per_query=True)
    jsonschema.Draft202012Validator(EVAL_SCHEMA).validate(report)
    assert report["queries"] == 4
    runs = {r["mode"]: r for r in report["runs"]}
    assert runs["hybrid"]["recall_10"] == 1.0 and runs["hybrid"]["ndcg_10"] >= 0.8, runs
    assert runs["lexical"]["effective_modes"] == ["lexical"] and runs["semantic"]["model"]
    # `similar` from each query's own report (the same store: the second sync is a no-op).
    by_ref = run(REPO / "gitlab_knowledge_tests" / "fixtures" / "seamonkey-mini", tmp_path, ("hybrid",),
                 per_query=True, by_reference=True)
    jsonschema.Draft202012Validator(EVAL_SCHEMA).validate(by_ref)
    assert by_ref["queries"] == 4 and all(q["query"].startswith("eval/") for q in by_ref["per_query"])
    assert by_ref["runs"][0]["recall_10"] == 1.0, by_ref["per_query"]


def test_an_issue_made_confidential_after_its_mr_was_built_leaves_the_mrs_closes_line(sample, make_config, tmp_path):
    """An issue turned confidential after the document of the MR that closes it was built: the
    next incremental sync rebuilds the MR's document without the title (the MR did not change), so
    the title's words, searched with confidential items left out, no longer find the MR; made
    public again, the title comes back."""
    import re
    import shutil

    from gitlab_knowledge.search.filters import Filters
    from gitlab_knowledge_sandbox import SAMPLE_DATASET, SandboxGitLab
    from gitlab_knowledge_tests.helpers import run_layers

    def mr_document(config, iid):
        return rows(config, """SELECT id, content_text FROM documents WHERE source_type = 'merge_request'
                               AND project_path = 'acme/platform' AND parent_iid = ?""", [iid])[0]

    # An MR of the sample whose Closes: line names a public issue by a title whose words are
    # nowhere else in the MR's document.
    pairs = rows(sample.config, """
        SELECT m.iid, i.iid, i.title FROM item_references r
        JOIN merge_requests m ON m.id = r.source_id
        JOIN issues i ON i.project_id = r.target_project_id AND i.iid = r.target_iid
        WHERE r.kind = 'closes' AND r.source_type = 'merge_request' AND NOT i.confidential
          AND m.project_id = i.project_id AND i.project_id = (SELECT id FROM projects WHERE path_with_namespace = 'acme/platform')
        ORDER BY m.iid, i.iid""")
    chosen = None
    for mr_iid, issue_iid, title in pairs:
        _doc, text = mr_document(sample.config, mr_iid)
        rest = "\n".join(line for line in text.splitlines() if not line.startswith("Closes:")).lower()
        words = [w for w in re.findall(r"[a-z]{5,}", title.lower()) if w not in rest]
        if len(words) >= 2:
            chosen = mr_iid, issue_iid, title, " ".join(words[:4])
            break
    assert chosen, pairs
    mr_iid, issue_iid, title, words = chosen
    shutil.copytree(sample.config.data_dir, tmp_path / "store")
    hidden = Filters(exclude_confidential=True)
    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        config = make_config(sb, data_dir=tmp_path / "store")
        mr_doc, text = mr_document(config, mr_iid)
        assert f"#{issue_iid} {title}" in text
        assert mr_doc in [r.doc_id for r in Workspace(config).searcher().search(words, hidden, mode="lexical",
                                                                                 limit=50, floor=False).results]
        for confidential in (True, False):
            sb.clock.advance(3600)
            sb.state.update_issue("acme/platform", issue_iid, confidential=confidential)
            run_layers(config, ["acme/platform"], None)
            _doc, text = mr_document(config, mr_iid)
            closes = next(line for line in text.splitlines() if line.startswith("Closes:"))
            assert (title in closes) is not confidential, closes
            found = [r.doc_id for r in Workspace(config).searcher().search(words, hidden, mode="lexical", limit=50,
                                                                           floor=False).results]
            assert (mr_doc in found) is not confidential, (words, found[:5])


def test_an_mrs_closes_line_names_only_its_own_projects_public_issues_by_title(sample, tmp_path):
    """A shared server's reader of the MR may not read another project: an issue of another project
    is named by its reference alone in the MR's text, as a confidential one is."""
    import shutil

    from gitlab_knowledge.documents.refresh import _closed_issues
    from gitlab_knowledge.store.db import write_connection

    shutil.copytree(sample.config.data_dir, tmp_path / "data", ignore=shutil.ignore_patterns("*.sock"))
    with write_connection(tmp_path / "data" / sample.config.duckdb_path.name) as con:
        (platform, mr), (web, web_path) = con.execute(
            "SELECT m.project_id, m.id FROM merge_requests m JOIN projects p ON p.id = m.project_id "
            "WHERE p.path_with_namespace = 'acme/platform' ORDER BY m.iid LIMIT 1").fetchone(), con.execute(
            "SELECT id, path_with_namespace FROM projects WHERE path_with_namespace = 'acme/web-app'").fetchone()
        own_iid, own_title = con.execute("SELECT iid, title FROM issues WHERE project_id = ? AND NOT confidential "
                                         "ORDER BY iid LIMIT 1", [platform]).fetchone()
        other_iid, other_title = con.execute("SELECT iid, title FROM issues WHERE project_id = ? AND NOT confidential "
                                             "ORDER BY iid LIMIT 1", [web]).fetchone()
        con.execute("DELETE FROM item_references WHERE source_type = 'merge_request' AND source_id = ?", [mr])
        for path, iid, target in (("acme/platform", own_iid, platform), (web_path, other_iid, web)):
            con.execute("INSERT INTO item_references (project_id, source_type, source_id, found_in, kind, target_type, "
                        "target_path, target_iid, target_project_id, external) VALUES "
                        "(?, 'merge_request', ?, 'description', 'closes', 'issue', ?, ?, ?, false)",
                        [platform, mr, path, iid, target])
        closes = _closed_issues(con, [mr])[mr]
    assert closes == [(f"#{own_iid}", own_title), (f"{web_path}#{other_iid}", None)]
    assert other_title
