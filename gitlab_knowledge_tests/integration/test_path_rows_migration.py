"""Migration 11 (store/migration_path_rows.py) on a real store written before it: upgraded, it holds
the paths each MR touched at once, as the graph layer would build them, and `history` answers."""

from pathlib import Path
from typing import Any

import pytest

from gitlab_knowledge.store import migrations
from gitlab_knowledge.store.db import forget_schema_cache, write_connection
from gitlab_knowledge_tests.integration.test_migrations import (
    _offline_workspace,
    import_fixture,
    query,
    upgrade,
    version,
)


@pytest.fixture
def v1_store(tmp_path: Path) -> Path:
    forget_schema_cache()
    yield import_fixture(tmp_path / "data" / "gitlab_knowledge.duckdb")
    forget_schema_cache()


def test_migration_11_upgrades_a_store_written_before_it(v1_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store at schema 10 (normalized, with file lists): upgraded, `path_touches` is filled from
    its rows (no sync, no graph run: the migration has all it needs, so the layer is not made due),
    the same rows the graph layer builds, and `history` gives the same answers before and after
    that rebuild, renames followed."""
    from gitlab_knowledge.graph import path_rows
    from gitlab_knowledge.graph.history import history
    from gitlab_knowledge.normalized import refresh as normalize

    every = migrations.MIGRATIONS
    monkeypatch.setattr(migrations, "MIGRATIONS", every[:10])
    with write_connection(v1_store):
        pass
    assert version(v1_store) == 10
    projects, workspace = _offline_workspace(v1_store)
    for project in projects:
        normalize.refresh(workspace, project)
    with write_connection(v1_store) as con:
        # The file lists as the schema-10 graph layer kept them (this fixture predates them): each
        # MR's files are the paths its review notes are on, the first of them renamed from legacy/.
        con.execute("""
            INSERT INTO mr_files SELECT mr, pid, row_number() OVER (PARTITION BY mr ORDER BY path) - 1 AS pos,
                                        path, path, false, false, false, NULL
            FROM (SELECT DISTINCT n.noteable_id AS mr, n.project_id AS pid, np.new_path AS path
                  FROM notes n JOIN note_positions np ON np.note_id = n.id
                  WHERE n.noteable_type = 'MergeRequest' AND np.new_path IS NOT NULL)""")
        con.execute("UPDATE mr_files SET old_path = 'legacy/' || new_path, renamed_file = true WHERE position = 0")
        graph_state = con.execute("SELECT * FROM layer_state WHERE layer = 'graph' ORDER BY ALL").fetchall()
    paths = [r[0] for r in query(v1_store, "SELECT DISTINCT new_path FROM mr_files ORDER BY 1 LIMIT 8")]
    assert paths and query(v1_store, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'path_touches'") == [(0,)]
    upgrade(v1_store, monkeypatch, every)
    assert version(v1_store) == migrations.latest_version() >= 11
    with write_connection(v1_store) as con:
        assert con.execute("SELECT * FROM layer_state WHERE layer = 'graph' ORDER BY ALL").fetchall() == graph_state

    def rows() -> list[Any]:
        return sorted(query(v1_store, "SELECT * FROM path_touches"), key=repr)

    filled = rows()
    assert any(r[10] is None for r in filled) and any(r[10] is not None for r in filled)  # file and note rows
    answers = [history(workspace, p).as_dict() for p in paths]
    assert all(a["total"] for a in answers) and any(a["renames"] for a in answers)
    with write_connection(v1_store) as con:  # what the graph layer builds for every MR
        path_rows.rebuild(con, [r[0] for r in con.execute("SELECT id FROM merge_requests").fetchall()])
    assert rows() == filled
    assert [history(workspace, p).as_dict() for p in paths] == answers
