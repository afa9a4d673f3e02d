"""Each asset check passes on a consistent store and fails on a store broken on purpose, through
Dagster (a job of every check, run in-process, scope: all projects)."""

import json
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

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
    state = LexicalIndex._state
    monkeypatch.setattr(LexicalIndex, "_state",
                        lambda self, searcher, project: asked.append(project) or state(self, searcher, project))
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


def partition_checks(config_path: Path) -> dict[tuple[str, str], Any]:
    """(partition, check) -> the evaluation of each per-project check, as the check steps of each
    project's own partition run evaluate it, through Dagster."""
    from gitlab_knowledge.defs import defs
    from gitlab_knowledge.defs.partitions import PARTITIONS_NAME

    keys = [k for c in defs.asset_checks if c.partitions_def is not None for k in c.check_keys]
    job = dg.Definitions.merge(defs, dg.Definitions(jobs=[dg.define_asset_job(
        "project_checks", selection=dg.AssetSelection.checks(*keys), executor_def=dg.in_process_executor)]))
    out = {}
    projects = list(load_config(config_path).projects)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(PARTITIONS_NAME, projects)
        for project in projects:
            result = job.resolve_job_def("project_checks").execute_in_process(
                instance=instance, raise_on_error=False, tags={"dagster/partition": project},
                run_config={"resources": {"workspace": {"config": {"config_path": str(config_path)}}}})
            assert result.success
            for event in result.all_events:
                if event.event_type_value == "ASSET_CHECK_EVALUATION":
                    out[(project, event.event_specific_data.check_name)] = event.event_specific_data
    return out


def break_one_project(config) -> str:
    """Break the first project for every index check and the layers' watermark (and a store rule
    somewhere), leaving the second healthy; returns the broken project."""
    broken = config.projects[0]
    with read_connection(config.duckdb_path) as con:
        docs = [d for (d,) in con.execute("SELECT id FROM documents WHERE project_path = ? ORDER BY id LIMIT 3",
                                          [broken]).fetchall()]
        (pid,) = con.execute("SELECT project_id FROM sync_runs WHERE project_path = ? AND project_id IS NOT NULL "
                             "LIMIT 1", [broken]).fetchone()
    sql(config, "UPDATE documents SET content_hash = 'not-the-embedded-text' WHERE id = ?", [docs[0]])
    sql(config, "UPDATE layer_state SET watermark = 0 WHERE layer = 'normalized' AND project_id = ?", [pid])
    sql(config, "UPDATE raw_payloads SET discussions_fetched_at = NULL WHERE id = (SELECT max(id) FROM raw_payloads "
                "WHERE project_id = ? AND resource_type = 'issue')", [pid])
    index = LexicalIndex(config.tantivy_dir, create=True)
    with index.writer() as writer:
        writer.delete_documents_by_term("doc_id", docs[1])
        writer.commit()
    store = VectorStore(config.lancedb_dir, "embedded", "all-MiniLM-L6-v2-int8")
    store.delete_docs([docs[2]])
    store.record_failures([{"doc_id": docs[2], "project": broken, "content_hash": "x", "error": "unavailable: down",
                            "attempts": 2, "failed_at": utcnow()}])
    break_raw_payload(config)
    return broken


def test_a_batchs_checks_give_each_partition_what_its_own_check_steps_give(consistent, tmp_path):
    # The checks of a batch read the store and the indexes once for all its projects (issue 24):
    # each partition's results are still those of its own run's check steps, failing and healthy.
    from gitlab_knowledge import layers
    from gitlab_knowledge.backlog import backlog
    from gitlab_knowledge.defs import checks
    from gitlab_knowledge.workspace import Workspace

    path, config = copy_store(consistent, tmp_path)
    broken = break_one_project(config)
    workspace = Workspace.load(str(path))
    projects = workspace.config.projects
    expected = partition_checks(path)
    done = {p: {layer.asset for layer in layers.LAYERS} for p in projects}
    got = {(e.partition, e.check_name): e for e in checks.evaluate_partitions(workspace, done)}
    assert set(got) == set(expected)
    for key, evaluation in expected.items():
        mine = got[key]
        assert (mine.passed, mine.severity, mine.description) == (evaluation.passed, evaluation.severity,
                                                                  evaluation.description), key
        assert mine.metadata == evaluation.metadata, key
    failing = {p for (p, _name), e in got.items() if not e.passed}
    assert broken in failing and set(projects) - failing  # a failing and a healthy project
    for name in ("vectors_match_documents", "lexical_matches_documents", "no_failed_embeddings", "layers_caught_up"):
        assert not got[(broken, name)].passed, name
    # The backlog of all of them at once is each one's own.
    together = backlog(workspace, projects)
    assert together == {p: backlog(workspace, [p])[p] for p in projects}
    assert together[broken].pending and together[broken].failed_embeddings == 1
    assert together[broken].provider_unavailable and together[broken].failed_at is not None


def test_a_batchs_checks_read_the_store_and_the_indexes_no_more_for_more_projects(consistent, monkeypatch):
    # One project at a time, the checks of a batch of 300 projects took ~3 s in reads per project
    # (the backlog's, the index states', the project ids'): a batch reads each once for all.
    import contextlib

    from gitlab_knowledge import layers
    from gitlab_knowledge.defs import checks
    from gitlab_knowledge.store import db
    from gitlab_knowledge.workspace import Workspace

    counts = {"statements": 0, "vector scans": 0, "lexical readers": 0}
    real_read = db.read_connection

    class Counting:
        def __init__(self, con):
            self._con = con

        def execute(self, *args, **kwargs):
            counts["statements"] += 1
            return self._con.execute(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(self._con, name)

    @contextlib.contextmanager
    def reading(*args, **kwargs):
        with real_read(*args, **kwargs) as con:
            yield Counting(con)

    def counted(name, real):
        def call(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(db, "read_connection", reading)
    monkeypatch.setattr(VectorStore, "_scan", counted("vector scans", VectorStore._scan))
    class Readers:  # a Tantivy index counting the readers (searchers) opened on it
        def __init__(self, index):
            self._index = index

        def searcher(self):
            counts["lexical readers"] += 1
            return self._index.searcher()

        def __getattr__(self, name):
            return getattr(self._index, name)

    real_init = LexicalIndex.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.index = Readers(self.index)

    monkeypatch.setattr(LexicalIndex, "__init__", init)
    workspace = Workspace.load(str(consistent / "gitlab_knowledge.toml"))
    projects = workspace.config.projects
    assert len(projects) >= 2
    seen = []
    for n in (1, len(projects)):
        counts.update({k: 0 for k in counts})
        evaluations = checks.evaluate_partitions(workspace, {p: {layer.asset for layer in layers.LAYERS}
                                                             for p in projects[:n]})
        assert {e.partition for e in evaluations} == set(projects[:n])
        seen.append(dict(counts))
    assert seen[0] == seen[1] and seen[0]["statements"] and seen[0]["lexical readers"], seen
