"""Each asset check passes on a consistent store and fails on a store broken on purpose, through
Dagster (a job of every check, run in-process, scope: all projects)."""

import json
import shutil
from datetime import timedelta
from pathlib import Path

import dagster as dg
import pytest
import tomli_w

from gitlab_knowledge.config import load_config
from gitlab_knowledge.defs.checks import ALL_CHECKS
from gitlab_knowledge.embeddings.vectors import VectorStore
from gitlab_knowledge.lexical.index import LexicalIndex
from gitlab_knowledge.store.db import read_connection, transaction, write_connection
from gitlab_knowledge.timeutil import utcnow
from gitlab_knowledge_tests.conftest import store_config
from gitlab_knowledge_tests.helpers import run_checks

CHECK_NAMES = {k.name for c in ALL_CHECKS for k in c.check_keys}


@pytest.fixture(scope="module")
def consistent(small_store, tmp_path_factory):
    """The session's synced small store (a copy: syncing and embedding it again here cost ~20 s of
    CPU), its runs marked finished now: the session may have synced it longer ago than the
    freshness check allows, and a consistent store is one synced recently."""
    base = tmp_path_factory.mktemp("consistent")
    shutil.copytree(small_store, base / "data")
    config = store_config(base / "data")
    with read_connection(config.duckdb_path) as con:
        projects = [p for (p,) in con.execute("SELECT path_with_namespace FROM projects ORDER BY id").fetchall()]
    sql(config, "UPDATE sync_runs SET finished_at = ? WHERE finished_at IS NOT NULL", [utcnow()])
    (base / "gitlab_knowledge.toml").write_text(tomli_w.dumps({
        "projects": projects, "gitlab": {"url": "http://127.0.0.1:9"}, "storage": {"data_dir": str(base / "data")}}),
        encoding="utf-8")
    return base


def copy_store(base: Path, tmp_path: Path):
    shutil.copytree(base / "data", tmp_path / "data")
    text = (base / "gitlab_knowledge.toml").read_text().replace(str(base / "data"), str(tmp_path / "data"))
    path = tmp_path / "gitlab_knowledge.toml"
    path.write_text(text)
    return path, load_config(path)


def sql(config, statement: str, params=None) -> None:
    with write_connection(config.duckdb_path) as con, transaction(con):
        con.execute(statement, params or [])


def break_raw_payload(config):
    sql(config, "UPDATE raw_payloads SET deleted_at = now() WHERE id = (SELECT min(raw_payload_id) FROM issues)")


def break_system_note(config):
    with write_connection(config.duckdb_path) as con, transaction(con):
        note_id, raw_id, text = con.execute("SELECT n.id, r.id, r.json FROM notes n JOIN raw_payloads r "
                                            "ON r.id = n.raw_payload_id LIMIT 1").fetchone()
        thread = json.loads(text)
        for note in thread["notes"]:
            if note["id"] == note_id:
                note["system"] = True
        con.execute("UPDATE raw_payloads SET json = ? WHERE id = ?", [json.dumps(thread), raw_id])


def break_orphan(config):
    sql(config, "INSERT INTO notes (id, discussion_id, project_id, noteable_type, noteable_id, body, position) "
                "SELECT 999999999, 'no-such-thread', project_id, 'Issue', 1, 'orphan', 0 FROM issues LIMIT 1")


def break_thread_notes(config):
    sql(config, "UPDATE discussions SET individual_note = true WHERE id = (SELECT id FROM discussions "
                "WHERE note_count > 1 LIMIT 1)")


def break_note_dates(config):
    sql(config, "UPDATE discussions SET first_note_at = last_note_at + INTERVAL 1 DAY "
                "WHERE id = (SELECT min(id) FROM discussions)")


def break_cursor(config):
    sql(config, "UPDATE sync_cursors SET updated_at_cursor = '2099-01-01T00:00:00.000Z' "
                "WHERE resource_type = 'issue'")


def break_vector(config):
    sql(config, "UPDATE documents SET content_hash = 'not-the-embedded-text' WHERE id = (SELECT min(id) FROM documents)")


def break_lexical(config):
    index = LexicalIndex(config.tantivy_dir, create=True)
    victim = next(iter(index.state()))
    with index.writer() as writer:
        writer.delete_documents_by_term("doc_id", victim)
        writer.commit()


def break_embedding_failure(config):
    store = VectorStore(config.lancedb_dir, "embedded", "all-MiniLM-L6-v2-int8")
    victim = next(iter(store.document_state()))
    store.delete_docs([victim])
    store.record_failures([{"doc_id": victim, "project": config.projects[0], "content_hash": "x",
                            "error": "simulated", "attempts": 2, "failed_at": utcnow()}])


def break_layers_caught_up(config):
    sql(config, "UPDATE layer_state SET watermark = 0 WHERE layer = 'normalized'")


def break_freshness(config):
    sql(config, "UPDATE sync_runs SET finished_at = ?", [utcnow() - timedelta(hours=2)])


def break_file_list(config):
    sql(config, "UPDATE raw_payloads SET deleted_at = now() WHERE id = (SELECT min(id) FROM raw_payloads "
                "WHERE resource_type = 'merge_request_diffs')")


def break_reference(config):
    sql(config, "INSERT INTO item_references SELECT * REPLACE (99999 AS target_iid, 'issue' AS target_type) "
                "FROM item_references WHERE NOT external LIMIT 1")


def break_system_note_document(config):
    # A document built for a thread of system notes only (the store holds no such discussion).
    sql(config, "INSERT INTO documents SELECT documents.* REPLACE ('discussion:' || s.discussion_id AS id, "
                "s.discussion_id AS source_id) FROM documents, (SELECT discussion_id FROM system_notes "
                "WHERE discussion_id NOT IN (SELECT id FROM discussions) LIMIT 1) s "
                "WHERE documents.source_type = 'discussion' LIMIT 1")


BREAKAGES = {
    "mrs_have_file_lists": break_file_list,
    "references_resolved": break_reference,
    "no_system_note_in_documents": break_system_note_document,
    "items_have_raw_payloads": break_raw_payload,
    "no_system_notes": break_system_note,
    "no_orphan_notes_or_threads": break_orphan,
    "threads_have_their_notes": break_thread_notes,
    "note_dates_ordered": break_note_dates,
    "cursors_within_data": break_cursor,
    "vectors_match_documents": break_vector,
    "lexical_matches_documents": break_lexical,
    "no_failed_embeddings": break_embedding_failure,
    "layers_caught_up": break_layers_caught_up,
    "projects_synced_recently": break_freshness,
}


def test_every_check_is_covered_here():
    assert set(BREAKAGES) == CHECK_NAMES


def test_all_checks_pass_on_a_consistent_store(consistent, tmp_path):
    path, _ = copy_store(consistent, tmp_path)
    evaluations = run_checks(path)
    assert set(evaluations) == CHECK_NAMES
    assert {n: e.metadata for n, e in evaluations.items() if not e.passed} == {}


@pytest.mark.parametrize("name", sorted(BREAKAGES))
def test_each_check_fails_on_a_store_broken_for_it(consistent, tmp_path, name):
    path, config = copy_store(consistent, tmp_path)
    BREAKAGES[name](config)
    evaluations = run_checks(path, only={name})
    assert not evaluations[name].passed, f"{name} did not notice"
    assert evaluations[name].metadata["violations"].value >= 1
    warn_only = ("no_failed_embeddings", "projects_synced_recently", "layers_caught_up", "references_resolved")
    expected = dg.AssetCheckSeverity.WARN if name in warn_only else dg.AssetCheckSeverity.ERROR
    assert evaluations[name].severity == expected


def test_vectors_match_documents_counts_the_missing_vectors_and_names_their_project(consistent, tmp_path):
    path, config = copy_store(consistent, tmp_path)
    project = config.projects[0]
    with write_connection(config.duckdb_path) as con:
        victims = [d for (d,) in con.execute("SELECT id FROM documents WHERE project_path = ? ORDER BY id LIMIT 3",
                                             [project]).fetchall()]
    assert len(victims) == 3
    VectorStore(config.lancedb_dir, "embedded", "all-MiniLM-L6-v2-int8").delete_docs(victims)
    evaluation = run_checks(path, only={"vectors_match_documents"})["vectors_match_documents"]
    assert not evaluation.passed
    assert evaluation.metadata["violations"].value == 3  # three vectors, not one project
    assert project in evaluation.metadata["rule"].value


def test_a_partitions_check_reads_only_its_projects_index_state(consistent, monkeypatch):
    # A sync of N projects runs the index checks once per project: each reading every project's
    # state made the first sync of a large group quadratic (issue 24).
    from gitlab_knowledge.backlog import backlog
    from gitlab_knowledge.defs.checks import _index_status
    from gitlab_knowledge.workspace import Workspace

    workspace = Workspace.load(str(consistent / "gitlab_knowledge.toml"))
    first, second = workspace.config.projects[:2]
    asked: list[str | None] = []
    state = LexicalIndex.state
    monkeypatch.setattr(LexicalIndex, "state", lambda self, project=None: asked.append(project) or state(self, project))
    status = _index_status(workspace, first)
    assert [p["project"] for p in status["projects"]] == [first] and status["projects"][0]["documents"]
    backlog(workspace, [second])
    assert asked == [first, second]


STORE_RULES = ["items_have_raw_payloads", "no_system_notes", "no_orphan_notes_or_threads", "threads_have_their_notes",
               "note_dates_ordered", "cursors_within_data", "mrs_have_file_lists", "references_resolved",
               "no_system_note_in_documents"]


def test_a_batchs_checks_run_each_rule_once_for_all_projects_with_each_projects_outcome(consistent, tmp_path,
                                                                                           monkeypatch):
    # A batch of many projects ran every store rule once per project (~0.44-0.8 s a project,
    # issue 24); now each rule is one pass over the store grouped by project, and each partition
    # gets what the rule scoped to its project says, on a store broken in several projects.
    from gitlab_knowledge import layers
    from gitlab_knowledge.defs import checks
    from gitlab_knowledge.store import integrity
    from gitlab_knowledge.store.projects import project_id_for
    from gitlab_knowledge.workspace import Workspace

    path, config = copy_store(consistent, tmp_path)
    assert set(STORE_RULES) == set(integrity.RULES)
    for name in STORE_RULES:
        if name != "no_system_note_in_documents":  # needs a thread the store lacks; the rest break one project each
            BREAKAGES[name](config)
    workspace = Workspace.load(str(path))
    projects = workspace.config.projects
    assert len(projects) >= 2
    with read_connection(config.duckdb_path) as con:
        ids = {p: project_id_for(con, p) for p in projects}
        expected = {(p, name): integrity.RULES[name][0](con, ids[p]) for p in projects for name in STORE_RULES}
    assert any(not o.passed for o in expected.values()) and any(o.passed for o in expected.values())
    calls: list[str] = []
    for name, (rule, layer) in list(integrity.RULES.items()):
        monkeypatch.setitem(integrity.RULES, name,
                            (lambda con, pid, rule=rule, name=name: calls.append(name) or rule(con, pid), layer))
    done = {p: {layer.asset for layer in layers.LAYERS} for p in projects}
    got = {(e.partition, e.check_name): e for e in checks.evaluate_partitions(workspace, done)
           if e.check_name in STORE_RULES}
    assert calls == []  # no rule evaluated project by project
    assert set(got) == set(expected)
    for key, outcome in expected.items():
        evaluation = got[key]
        assert (evaluation.passed, evaluation.description) == (outcome.passed, outcome.description), key
        assert evaluation.metadata["violations"].value == outcome.violations, key
        assert evaluation.metadata["scope"].value == key[0]
        assert (sorted(evaluation.metadata["examples"].value.splitlines()) if "examples" in evaluation.metadata
                else []) == sorted(f"- `{s}`" for s in outcome.samples), key
