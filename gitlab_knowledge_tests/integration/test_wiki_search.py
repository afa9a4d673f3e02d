"""Wiki pages on the read side, over the synced sample (whose acme/platform has a wiki):
`--type wiki`, list, count, show, explain of a section hit, related naming the pages that mention
an item, the integrity checks' documents == vectors == lexical entries, and a lens that hides a
project hides its pages."""

from typing import Any

import pytest

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.explain import explain
from gitlab_knowledge.graph.queries import related
from gitlab_knowledge.search.filters import Filters
from gitlab_knowledge.search.output import response_json
from gitlab_knowledge.store import keyed_queries, queries
from gitlab_knowledge.store.reader import ALIAS, Lens, StoreReader
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.helpers import scalar

RUNBOOK = "https://gitlab.example.com/acme/platform/-/wikis/runbooks/postgresql-failover"


def test_search_type_wiki_finds_a_runbook_section(sample: Any) -> None:
    searcher = Workspace(sample.config).searcher()
    response = searcher.search("promote a replica with patronictl", filters=Filters.build(types=["wiki"]), limit=5)
    assert response.results and {r.fields["source_type"] for r in response.results} == {kinds.WIKI_PAGE.name}
    top = response_json(response)["results"][0]
    assert top["url"] == f"{RUNBOOK}#promote-the-replica"
    assert top["reference"] == "wiki:runbooks/postgresql-failover" and top["iid"] is None
    assert top["title"] == "Runbook: PostgreSQL primary failover › Promote the replica"
    # A section hit is explained: every layer of its chain, fresh.
    why = explain(Workspace(sample.config), top["url"])
    assert why.document_id == top["document_id"] and why.verdict == "fresh", why.reasons
    assert why.chain["normalized"]["table"] == "wiki_pages" and why.chain["vector"]["present"]
    assert why.chain["lexical"]["present"] and len(why.related) >= 3  # the page's other sections


def test_list_count_and_show_wiki_pages(sample: Any) -> None:
    workspace = Workspace(sample.config)
    listed = keyed_queries.list_keyed(workspace, kinds.WIKI_PAGE, "acme/platform", 100)
    slugs = [r["key"] for r in listed]
    assert "runbooks/postgresql-failover" in slugs and "operations/pager-rotation" in slugs
    assert queries.count(workspace, "wiki", "acme/platform") == len(listed)
    assert queries.count(workspace, "wiki", "acme/web-app") == 0  # its wiki is turned off
    adr = keyed_queries.show_keyed(workspace, kinds.WIKI_PAGE, "wiki:adr/ADR-012-jwt-access-tokens", None)
    assert adr["format"] == "markdown" and "## Decision" in adr["content"]
    assert {"acme/platform#234", "acme/platform!847"} <= {link["reference"] for link in adr["links"]}
    with pytest.raises(UsageError, match="no wiki page wiki:nope"):
        keyed_queries.show_keyed(workspace, kinds.WIKI_PAGE, "nope", None)


def test_related_names_the_wiki_pages_that_mention_an_item(sample: Any) -> None:
    answer = related(Workspace(sample.config), "acme/platform#234").as_dict()
    pages = [link for link in answer["links"]["mentioned_in"] if link["type"] == kinds.WIKI_PAGE.name]
    assert [p["reference"] for p in pages] == ["acme/platform wiki:adr/ADR-012-jwt-access-tokens"]
    assert pages[0]["via"] == ["text"]


def test_every_wiki_document_has_its_vector_and_lexical_entry(sample: Any) -> None:
    from gitlab_knowledge.embeddings.vectors import VectorStore
    from gitlab_knowledge.lexical.index import LexicalIndex

    config = sample.config
    docs = scalar(config, "SELECT count(*) FROM documents WHERE parent_type = 'wiki_page'")
    assert docs > scalar(config, "SELECT count(*) FROM wiki_pages") > 0  # long pages by section
    ids = {r["doc_id"] for r in VectorStore(config.lancedb_dir, "embedded", "all-MiniLM-L6-v2-int8").table()
           .search().select(["doc_id"]).limit(None).to_arrow().to_pylist()}
    assert len({i for i in ids if i.startswith("wiki_page:")}) == docs
    assert len([d for d in LexicalIndex(config.tantivy_dir).state("acme/platform") if d.startswith("wiki_page:")]) == docs


def test_a_lens_hiding_a_project_hides_its_wiki_pages(sample: Any) -> None:
    """The per-user lens keys on the project: wiki rows carry project_id and are read through
    Workspace.read(), so a view over them is all a lens needs."""
    at, store = "memory.gk_no_platform", f"{ALIAS}.main"
    lens = Lens("gk_no_platform", (
        f"CREATE OR REPLACE VIEW {at}.wiki_pages AS SELECT * FROM {store}.wiki_pages WHERE project_id <> 101",))
    reader = StoreReader(sample.config.duckdb_path)
    try:
        lensed = Workspace(sample.config).with_(lens=lens, reader=reader)
        assert queries.count(lensed, "wiki", None) == 0
        assert keyed_queries.list_keyed(lensed, kinds.WIKI_PAGE, None, 100) == []
        with pytest.raises(UsageError):
            keyed_queries.show_keyed(lensed, kinds.WIKI_PAGE, "home", None)
        links = related(lensed, "acme/platform#234").as_dict()["links"]["mentioned_in"]
        assert not [link for link in links if link["type"] == kinds.WIKI_PAGE.name]
    finally:
        reader.close()


def test_the_index_checks_hold_with_wiki_documents(sample: Any) -> None:
    """documents == vectors == lexical entries, the asset checks' rule, counts the wiki sections too."""
    from gitlab_knowledge_tests.helpers import run_checks

    evaluations = run_checks(sample.config_path, only={"vectors_match_documents", "lexical_matches_documents"})
    assert len(evaluations) == 2 and {n: e.metadata for n, e in evaluations.items() if not e.passed} == {}


def test_explain_live_compares_a_page_with_what_gitlab_serves(sample: Any, make_config: Any, tmp_path: Any) -> None:
    """`explain --live` of a wiki document asks GitLab for the page by its URL-encoded slug: the
    same text is fresh, another text or a 404 is stale, naming what the next sync does."""
    import shutil

    from gitlab_knowledge_sandbox import SAMPLE_DATASET, SandboxGitLab

    shutil.copytree(sample.config.data_dir, tmp_path / "data", ignore=shutil.ignore_patterns("*.sock", "dagster"))
    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        workspace = Workspace(make_config(sb, data_dir=tmp_path / "data"))
        ref = f"{RUNBOOK}#verify"
        assert explain(workspace, ref, live=True).verdict == "fresh"
        sb.state.edit_wiki_page("acme/platform", "runbooks/postgresql-failover", content="# Gone quiet")
        assert "another text than the raw payload" in explain(workspace, ref, live=True).reasons[0]
        sb.state.delete_wiki_page("acme/platform", "runbooks/postgresql-failover")
        gone = explain(workspace, ref, live=True)
        assert gone.chain["gitlab"] == {"exists": False} and "(404)" in gone.reasons[0]
