"""Schema migrations on a real version-1 store (fixtures/store-v1, written by the pre-migration code)."""

import hashlib
import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest

from gitlab_knowledge.errors import StoreError
from gitlab_knowledge.store import bulk, migrations
from gitlab_knowledge.store.db import forget_schema_cache, read_connection, write_connection
from gitlab_knowledge.store.schema import BASELINE_DDL
from gitlab_knowledge_sandbox import SAMPLE_DATASET, SandboxGitLab

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "store-v1"
COUNTS: dict[str, int] = json.loads((FIXTURE / "counts.json").read_text())
CURSOR_KIND = "CASE resource_type WHEN 'issues' THEN 'issue' WHEN 'merge_requests' THEN 'merge_request' END"
# Migration 1 is what every store before numbered migrations holds: its text must never change.
BASELINE_SHA256 = "c8c4203babb9e9a9946caf2fbcb9eb7df94720631a6f3ffe3d4d04cf019140f6"


def import_fixture(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(path))
    try:
        con.execute(f"IMPORT DATABASE '{FIXTURE / 'export'}'")
    finally:
        con.close()
    return path


def query(path: Path, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    """Straight through DuckDB: what is in the file, without the code under test migrating it."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def version(path: Path) -> int:
    return int(query(path, "SELECT value FROM schema_info WHERE key = 'version'")[0][0])


def differences(path: Path, reference: Path, tables: list[str], ignore: tuple[str, ...] = ()) -> dict[str, int]:
    """Rows that differ (both directions, duplicates counted) between the store and the reference,
    in the reference's columns (later migrations add some) less `ignore`; sync_cursors is compared
    with the reference's resource types renamed as migration 2 does, layer_state with the
    normalized and documents watermarks reset as migrations 3 and 5 do; raw_payloads without
    `discussions_fetched_at`, which migration 5 clears to refetch threads (tested on its own)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        con.execute(f"ATTACH '{reference}' AS ref (READ_ONLY)")
        out = {}
        for table in tables:
            skip = (*ignore, "discussions_fetched_at") if table == "raw_payloads" else ignore
            columns = [r[0] for r in con.execute(f"DESCRIBE ref.{table}").fetchall() if r[0] not in skip]
            names = ", ".join(columns)
            theirs = f"SELECT {names} FROM ref.{table}"
            if table == "sync_cursors":
                theirs = (f"SELECT project_id, {CURSOR_KIND} AS resource_type, updated_at_cursor, tie_breaker_id, "
                          "moved_at, sync_run_id FROM ref.sync_cursors")
            if table == "layer_state" and "watermark" in columns:
                reset = "CASE WHEN layer IN ('normalized', 'documents') THEN 0 ELSE watermark END AS watermark"
                theirs = f"SELECT {names.replace('watermark', reset)} FROM ref.layer_state"
            ours = f"SELECT {names} FROM {table}"
            out[table] = con.execute(f"SELECT (SELECT count(*) FROM ({ours} EXCEPT ALL {theirs})) "
                                     f"+ (SELECT count(*) FROM ({theirs} EXCEPT ALL {ours}))").fetchone()[0]
        return out
    finally:
        con.close()


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    forget_schema_cache()
    yield
    forget_schema_cache()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture imported once and never opened by the code under test."""
    return import_fixture(tmp_path_factory.mktemp("reference") / "reference.duckdb")


@pytest.fixture
def v1_store(tmp_path: Path) -> Path:
    return import_fixture(tmp_path / "data" / "gitlab_knowledge.duckdb")


def test_baseline_is_frozen() -> None:
    assert hashlib.sha256(BASELINE_DDL.encode()).hexdigest() == BASELINE_SHA256
    assert [m.number for m in migrations.MIGRATIONS] == list(range(1, migrations.latest_version() + 1))


def test_the_fixture_is_a_version_1_store_with_real_rows(reference: Path) -> None:
    assert version(reference) == 1
    assert {t: query(reference, f"SELECT count(*) FROM {t}")[0][0] for t in COUNTS} == COUNTS
    assert min(n for t, n in COUNTS.items() if t != "schema_info") > 0
    assert sorted(r[0] for r in query(reference, "SELECT DISTINCT resource_type FROM sync_cursors")) == [
        "issues", "merge_requests"]


def test_write_open_migrates_and_keeps_every_row(v1_store: Path, reference: Path) -> None:
    with write_connection(v1_store) as con:
        assert migrations.current_version(con) == migrations.latest_version() >= 2
    assert version(v1_store) == migrations.latest_version()
    tables = [t for t in COUNTS if t != "schema_info"]
    assert {t: query(v1_store, f"SELECT count(*) FROM {t}")[0][0] for t in COUNTS} == COUNTS
    assert differences(v1_store, reference, tables) == dict.fromkeys(tables, 0)
    assert sorted(r[0] for r in query(v1_store, "SELECT resource_type FROM sync_cursors")) == [
        "issue", "issue", "merge_request", "merge_request"]


def test_a_second_open_is_a_no_op(v1_store: Path) -> None:
    with write_connection(v1_store):
        pass
    before = query(v1_store, "SELECT * FROM sync_cursors ORDER BY ALL")
    forget_schema_cache()  # as a new process would: the migrations are looked at again
    with write_connection(v1_store) as con:
        assert migrations.migrate(con) == []
    assert version(v1_store) == migrations.latest_version()
    assert query(v1_store, "SELECT * FROM sync_cursors ORDER BY ALL") == before


def test_a_fresh_store_gets_every_migration(tmp_path: Path) -> None:
    path = tmp_path / "new.duckdb"
    with write_connection(path) as con:
        assert con.execute("SELECT count(*) FROM sync_cursors").fetchone()[0] == 0
    assert version(path) == migrations.latest_version()


def test_a_first_open_leaves_no_unfinished_result_for_the_callers_relation(tmp_path: Path) -> None:
    """The version check of a process's first open ran on the caller's connection; a result it
    left unfinished made DuckDB refuse the caller's first `con.sql(...)` (benchmarks/embed_bench.py
    did exactly that)."""
    path = tmp_path / "new.duckdb"
    with write_connection(path):
        pass
    for connect in (read_connection, write_connection):
        forget_schema_cache()  # as a new process would: the version is read again
        with connect(path) as con:
            assert con.sql("SELECT count(*) AS n FROM sync_cursors").to_arrow_table().column("n").to_pylist() == [0]


def test_a_reader_migrates_an_older_store(v1_store: Path, reference: Path) -> None:
    with read_connection(v1_store) as con:
        kinds = sorted(r[0] for r in con.execute("SELECT DISTINCT resource_type FROM sync_cursors").fetchall())
        with pytest.raises(duckdb.Error):
            con.execute("DELETE FROM notes")  # still a read-only connection
    assert kinds == ["issue", "merge_request"]
    assert version(v1_store) == migrations.latest_version()
    tables = [t for t in COUNTS if t != "schema_info"]
    assert differences(v1_store, reference, tables) == dict.fromkeys(tables, 0)


def test_a_read_only_older_store_says_which_command_upgrades_it(v1_store: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests run as root, where no file is read-only: the permission check is what is replaced.
    monkeypatch.setattr("gitlab_knowledge.store.db.os.access", lambda path, mode: False)
    with pytest.raises(StoreError) as err, read_connection(v1_store):
        pass
    assert "\n" not in str(err.value)
    assert "read-only" in str(err.value) and "python -m gitlab_knowledge sync" in str(err.value)
    assert version(v1_store) == 1


def test_a_store_from_a_newer_version_is_refused(v1_store: Path) -> None:
    con = duckdb.connect(str(v1_store))
    con.execute("UPDATE schema_info SET value = '99' WHERE key = 'version'")
    con.close()
    for opener in (write_connection, read_connection):
        forget_schema_cache()
        with pytest.raises(StoreError) as err, opener(v1_store):
            pass
        assert "\n" not in str(err.value)
        assert "newer gitlab_knowledge" in str(err.value) and "99" in str(err.value)
    assert version(v1_store) == 99
    assert sorted(r[0] for r in query(v1_store, "SELECT DISTINCT resource_type FROM sync_cursors")) == [
        "issues", "merge_requests"]


def test_a_failing_migration_stops_at_the_last_good_version(v1_store: Path, reference: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    good = migrations.latest_version()

    def half_done(con: duckdb.DuckDBPyConnection) -> None:
        con.execute("ALTER TABLE issues ADD COLUMN weight INTEGER")
        con.execute("UPDATE issues SET title = 'clobbered'")
        raise RuntimeError("disk on fire")

    broken = migrations.Migration(good + 1, "half done", half_done)
    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, broken])
    with pytest.raises(StoreError) as err, write_connection(v1_store):
        pass
    assert "\n" not in str(err.value)
    assert f"schema {good + 1} (half done) failed, it stays at schema {good}: disk on fire" in str(err.value)
    assert version(v1_store) == good
    assert "weight" not in [r[0] for r in query(v1_store, "DESCRIBE issues")]
    tables = [t for t in COUNTS if t != "schema_info"]
    assert differences(v1_store, reference, tables) == dict.fromkeys(tables, 0)

    # Once the migration is fixed, the next open resumes from there.
    fixed = migrations.Migration(good + 1, "issue weight",
                                 lambda con: con.execute("ALTER TABLE issues ADD COLUMN weight INTEGER"))
    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS[:-1], fixed])
    forget_schema_cache()
    with write_connection(v1_store):
        pass
    assert version(v1_store) == good + 1
    assert query(v1_store, "SELECT count(weight), count(*) FROM issues")[0] == (0, COUNTS["issues"])


def test_a_migration_in_this_process_refreshes_the_bulk_schemas(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    row = {"id": 1, "project_id": 101, "iid": 99999, "title": "heavy", "weight": 8}
    with write_connection(tmp_path / "current.duckdb") as con:
        # The insert caches the Arrow schema of `issues` (no weight yet) for this process.
        bulk.insert_rows(con, "issues", [row], {"change_seq": "nextval('change_seq')"})
    weight = migrations.Migration(migrations.latest_version() + 1, "issue weight",
                                  lambda con: con.execute("ALTER TABLE issues ADD COLUMN weight INTEGER"))
    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, weight])
    older = import_fixture(tmp_path / "older.duckdb")
    with write_connection(older) as con:
        bulk.insert_rows(con, "issues", [row], {"change_seq": "nextval('change_seq')"})
    assert query(older, "SELECT weight FROM issues WHERE id = 1") == [(8,)]


def test_the_first_sync_after_upgrading_fetches_threads_and_file_lists_once(v1_store: Path, reference: Path,
                                                                            make_config: Any) -> None:
    """A store from before migration 5 has neither system notes nor MR file lists. The first sync
    after the upgrade refetches the threads of every item and every MR's file list,
    and nothing else; the one after it fetches nothing. What people wrote is unchanged."""
    from gitlab_knowledge.graph import refresh as graph
    from gitlab_knowledge.normalized import refresh as normalize
    from gitlab_knowledge.store import integrity
    from gitlab_knowledge.sync.engine import ProjectSync
    from gitlab_knowledge.workspace import Workspace

    with write_connection(v1_store):
        pass
    # Migration 5 asks again for the threads of every item with notes, migration 6 for those of
    # every item without (their system notes): every item's, once.
    items = query(reference, """
        SELECT count(*) FROM raw_payloads WHERE resource_type IN ('issue', 'merge_request') AND deleted_at IS NULL
        """)[0][0]
    assert query(v1_store, "SELECT count(*) FROM raw_payloads WHERE resource_type IN ('issue', 'merge_request') "
                           "AND discussions_fetched_at IS NULL")[0][0] == items > 0
    # What the list calls return when the cursors are understood: the items at or after each
    # cursor (`updated_after` is inclusive). Without them every stored item would be listed again.
    at_cursor = query(reference, f"""
        SELECT count(*) FROM raw_payloads r
        JOIN (SELECT project_id, {CURSOR_KIND} AS kind,
                     CAST(replace(updated_at_cursor, 'Z', '') AS TIMESTAMP) AS cursor FROM sync_cursors) c
          ON c.project_id = r.project_id AND c.kind = r.resource_type
        WHERE r.deleted_at IS NULL AND r.updated_at >= c.cursor
    """)[0][0]
    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        workspace = Workspace(make_config(sb, data_dir=v1_store.parent))
        assert workspace.config.duckdb_path == v1_store
        results = [ProjectSync(workspace, project).run() for project in workspace.config.projects]
        normalized = [normalize.refresh(workspace, project) for project in workspace.config.projects]
        linked = [graph.refresh(workspace, project) for project in workspace.config.projects]
        again = [ProjectSync(workspace, project).run().totals() for project in workspace.config.projects]
    assert sorted(workspace.config.projects) == ["acme/platform", "acme/web-app"]
    totals = [r.totals() for r in results]
    assert sum(t["deleted"] for t in totals) == 0
    listed = sum(r.resources[kind].listed for r in results for kind in ("issues", "merge_requests"))
    assert listed == at_cursor < COUNTS["issues"] + COUNTS["merge_requests"]
    assert sum(t["rechecked"] for t in totals) == items
    assert sum(t["file_fetches"] for t in totals) == COUNTS["merge_requests"]
    assert all(t["fetched"] == t["file_fetches"] == t["rechecked"] == 0 for t in again)
    # Migrations 3 and 5 reset the normalized watermark: the layer re-reads every stored payload
    # once (no GitLab call), now with the system notes the sync kept.
    assert sum(s.raw_changes for s in normalized) > COUNTS["raw_payloads"]
    assert sum(s.system_notes for s in normalized) > 0 and sum(s.references for s in linked) > 0
    with write_connection(v1_store) as con:
        assert integrity.mrs_have_file_lists(con, None).passed
    assert query(v1_store, "SELECT resource_type, count(*) FROM sync_cursors GROUP BY 1 ORDER BY 1") == [
        ("issue", 2), ("merge_request", 2)]
    unchanged = ["projects", "labels", "issue_labels", "mr_labels", "notes", "note_positions",
                 "documents", "document_labels"]
    assert differences(v1_store, reference, unchanged) == dict.fromkeys(unchanged, 0)
    # A thread's position is now its place among all of GitLab's threads, system-only ones too.
    assert differences(v1_store, reference, ["discussions"], ignore=("position",)) == {"discussions": 0}
    assert query(v1_store, "SELECT status, count(*) FROM sync_runs GROUP BY 1") == [("succeeded", 6)]


def test_migration_3_gives_stored_diff_notes_their_line_ranges(v1_store: Path, reference: Path,
                                                              make_config: Any) -> None:
    """Written before migration 3, the store has no line ranges; after the upgrade the normalized
    layer rebuilds them from the kept raw payloads, without calling GitLab."""
    from gitlab_knowledge.normalized import refresh as normalize
    from gitlab_knowledge.workspace import Workspace

    assert "line_range_start_new_line" not in [r[0] for r in query(reference, "DESCRIBE note_positions")]
    with write_connection(v1_store):
        pass
    assert version(v1_store) >= 3
    assert query(v1_store, "SELECT count(*) FROM layer_state WHERE layer = 'normalized' AND watermark = 0") == [(2,)]
    assert query(v1_store, "SELECT count(line_range_start_line_code) FROM note_positions") == [(0,)]
    expected = query(reference, """
        SELECT count(*) FROM raw_payloads r, unnest(CAST(json_extract(r.json, '$.notes') AS JSON[])) AS t(note)
        WHERE r.resource_type = 'discussion' AND r.deleted_at IS NULL
          AND json_extract(note, '$.position.line_range') IS NOT NULL
          AND json_type(json_extract(note, '$.position.line_range')) = 'OBJECT'
    """)[0][0]
    assert expected > 0
    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb:  # never called: the config only needs a URL
        workspace = Workspace(make_config(sb, data_dir=v1_store.parent))
        for project in workspace.config.projects:
            normalize.refresh(workspace, project)
        assert sb.stats()["requests"] == 0
    assert query(v1_store, "SELECT count(line_range_start_line_code), count(line_range_end_line_code) "
                           "FROM note_positions") == [(expected, expected)]
    assert query(v1_store, "SELECT count(*) FROM note_positions") == [(COUNTS["note_positions"],)]


def test_upgrading_a_store_with_data_says_a_sync_completes_it(v1_store: Path, tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="gitlab_knowledge.store.migrations"), write_connection(v1_store):
        pass
    said = [r.getMessage() for r in caplog.records]
    assert any("schema 5 (knowledge graph)" in m and "run a sync" in m for m in said), said
    caplog.clear()
    with caplog.at_level("WARNING", logger="gitlab_knowledge.store.migrations"), \
            write_connection(tmp_path / "fresh" / "gitlab_knowledge.duckdb"):
        pass
    assert not caplog.records  # a new, empty store has nothing to complete


def test_migration_6_upgrades_a_store_written_before_it(v1_store: Path, make_config: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A store at schema 5 whose sync skipped the threads of items nobody commented on, and whose
    graph folded duplicate notes into `related`: upgraded, it gains `project_aliases`, its graph
    is rebuilt, and the next sync fetches those items' threads once (their system notes' links)."""
    from gitlab_knowledge.graph import refresh as graph
    from gitlab_knowledge.normalized import refresh as normalize
    from gitlab_knowledge.sync.engine import ProjectSync
    from gitlab_knowledge.workspace import Workspace

    every = migrations.MIGRATIONS
    monkeypatch.setattr(migrations, "MIGRATIONS", every[:5])
    with write_connection(v1_store) as con:
        # What a sync before schema 6 left: every item's threads settled (the uncommented ones
        # "fetched" without a call), and the graph at its end.
        con.execute("UPDATE raw_payloads SET discussions_fetched_at = updated_at + INTERVAL 1 HOUR "
                    "WHERE resource_type IN ('issue', 'merge_request')")
        con.execute("INSERT INTO layer_state (project_id, layer, watermark) SELECT DISTINCT project_id, 'graph', "
                    "1000000000 FROM raw_payloads WHERE project_id IS NOT NULL")
    assert version(v1_store) == 5
    upgrade(v1_store, monkeypatch, every)
    assert version(v1_store) == migrations.latest_version() >= 6
    assert query(v1_store, "SELECT count(*) FROM project_aliases") == [(0,)]
    assert query(v1_store, "SELECT DISTINCT watermark FROM layer_state WHERE layer = 'graph'") == [(0,)]
    uncommented = query(v1_store, """
        SELECT count(*) FROM raw_payloads WHERE resource_type IN ('issue', 'merge_request') AND deleted_at IS NULL
          AND COALESCE(TRY_CAST(json_extract(json, '$.user_notes_count') AS BIGINT), 0) = 0""")[0][0]
    assert uncommented > 0
    assert query(v1_store, "SELECT count(*) FROM raw_payloads WHERE resource_type IN ('issue', 'merge_request') "
                           "AND discussions_fetched_at IS NULL")[0][0] == uncommented
    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        workspace = Workspace(make_config(sb, data_dir=v1_store.parent))
        results = [ProjectSync(workspace, project).run().totals() for project in workspace.config.projects]
        for project in workspace.config.projects:
            normalize.refresh(workspace, project)
            graph.refresh(workspace, project)
    assert sum(t["rechecked"] for t in results) == uncommented
    assert query(v1_store, """
        SELECT r.kind, r.target_iid FROM item_references r JOIN issues i ON i.id = r.source_id
        WHERE r.source_type = 'issue' AND i.project_id = 101 AND i.iid = 259""") == [("blocked_by", 258)]
    assert query(v1_store, "SELECT path, project_id FROM project_aliases ORDER BY path") == [
        ("acme/marketing-site", None), ("acme/webapp", 102)]


def test_migration_7_upgrades_a_store_written_before_it(v1_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store at schema 6 whose graph was built without mentions: upgraded, it gains `mentions`,
    its graph is rebuilt by the next run from what it holds (no GitLab call), and `me` finds the
    mention by the table."""
    from gitlab_knowledge.graph import people
    from gitlab_knowledge.graph import refresh as graph
    from gitlab_knowledge.normalized import refresh as normalize

    every = migrations.MIGRATIONS
    monkeypatch.setattr(migrations, "MIGRATIONS", every[:6])
    with write_connection(v1_store) as con:
        con.execute("INSERT INTO layer_state (project_id, layer, watermark) SELECT DISTINCT project_id, 'graph', "
                    "1000000000 FROM raw_payloads WHERE project_id IS NOT NULL")
    assert version(v1_store) == 6
    assert query(v1_store, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'mentions'") == [(0,)]
    upgrade(v1_store, monkeypatch, every)
    assert version(v1_store) == migrations.latest_version() >= 7
    assert query(v1_store, "SELECT count(*) FROM mentions") == [(0,)]
    assert query(v1_store, "SELECT DISTINCT watermark FROM layer_state WHERE layer = 'graph'") == [(0,)]
    projects, workspace = _offline_workspace(v1_store)
    for project in projects:
        normalize.refresh(workspace, project)
        graph.refresh(workspace, project)
    # The @names the fixture's texts hold (its one in a note), found by the rebuilt graph; `me` reads it back.
    assert ("axe-core", "note") in query(v1_store, "SELECT DISTINCT username, found_in FROM mentions")
    mentions = people.me(workspace, "axe-core", since=datetime(2000, 1, 1)).as_dict()["mentions"]
    assert [m["reason"] for m in mentions] == ["mentioned in a note"] and "@axe-core" in mentions[0]["excerpt"]


def test_migration_8_upgrades_a_store_written_before_it(v1_store: Path, make_config: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A store at schema 7, written before wiki pages: upgraded, it gains an empty `wiki_pages`,
    keeps everything it held, and the next sync brings the sample's wiki through the raw,
    normalized and documents layers (a long page as one document per section)."""
    from gitlab_knowledge.documents import refresh as documents
    from gitlab_knowledge.normalized import refresh as normalize
    from gitlab_knowledge.sync.engine import ProjectSync
    from gitlab_knowledge.workspace import Workspace

    every = migrations.MIGRATIONS
    monkeypatch.setattr(migrations, "MIGRATIONS", every[:7])
    with write_connection(v1_store):
        pass
    assert version(v1_store) == 7
    assert not query(v1_store, "SELECT 1 FROM information_schema.tables WHERE table_name = 'wiki_pages'")
    issues = query(v1_store, "SELECT count(*) FROM issues")
    upgrade(v1_store, monkeypatch, every)
    assert version(v1_store) == migrations.latest_version() >= 8
    assert query(v1_store, "SELECT count(*) FROM wiki_pages") == [(0,)]
    assert query(v1_store, "SELECT count(*) FROM issues") == issues
    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        workspace = Workspace(make_config(sb, data_dir=v1_store.parent))
        served = len(sb.state.wiki_pages("acme/platform"))
        for project in workspace.config.projects:
            ProjectSync(workspace, project).run()
            normalize.refresh(workspace, project)
            documents.refresh(workspace, project)
    assert query(v1_store, "SELECT count(*) FROM wiki_pages") == [(served,)]
    sections = query(v1_store, "SELECT count(*) FROM documents WHERE parent_type = 'wiki_page' AND id LIKE '%#%'")
    assert sections[0][0] > 0


def test_migration_10_upgrades_a_store_written_before_it(v1_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store at schema 9 (normalized, graph built without rows per user): upgraded, it holds each
    user's items and the notes on them at once, filled from its normalized rows as the graph layer
    fills them (the next graph run, due for the mentions' excerpts, rebuilds the same rows), and
    `me` and `person` answer the same before that run (mentions' excerpts read from the text) and
    after it (kept in the rows)."""
    from gitlab_knowledge.graph import people
    from gitlab_knowledge.graph import refresh as graph
    from gitlab_knowledge.normalized import refresh as normalize

    every = migrations.MIGRATIONS
    monkeypatch.setattr(migrations, "MIGRATIONS", every[:9])
    with write_connection(v1_store):
        pass
    assert version(v1_store) == 9
    projects, workspace = _offline_workspace(v1_store)
    for project in projects:
        normalize.refresh(workspace, project)
    with write_connection(v1_store) as con:  # the graph as schema 9 built it: mentions without excerpts
        con.execute("INSERT INTO mentions (project_id, item_type, item_id, note_id, discussion_id, found_in, username, "
                    "author_username, created_at, resolvable, resolved) SELECT project_id, 'issue', noteable_id, id, "
                    "discussion_id, 'note', 'axe-core', author_username, created_at, resolvable, resolved FROM notes "
                    "WHERE noteable_type = 'Issue' AND body LIKE '%@axe-core%'")
        con.execute("INSERT INTO layer_state (project_id, layer, watermark) SELECT DISTINCT project_id, 'graph', "
                    "1000000000 FROM raw_payloads WHERE project_id IS NOT NULL")
    assert query(v1_store, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'user_items'") == [(0,)]
    upgrade(v1_store, monkeypatch, every)
    assert version(v1_store) == migrations.latest_version() >= 10
    assert query(v1_store, "SELECT DISTINCT watermark FROM layer_state WHERE layer = 'graph'") == [(0,)]
    assert query(v1_store, "SELECT count(*) FROM mentions WHERE excerpt IS NOT NULL") == [(0,)]
    tables = ("user_items", "user_item_notes")
    filled = {t: sorted(query(v1_store, f"SELECT * FROM {t}"), key=repr) for t in tables}
    assert filled["user_items"] and filled["user_item_notes"]
    users = ["axe-core", *sorted({r[0] for r in filled["user_items"] if r[4] != "commenter"})[:5]]
    since = datetime(2000, 1, 1)

    def answers() -> list[Any]:  # (axe-core is only mentioned: `person` does not know them)
        return [(people.me(workspace, u, since).as_dict(), u == "axe-core" or people.person(workspace, u).as_dict())
                for u in users]

    before = answers()
    for project in projects:
        graph.refresh(workspace, project)
    assert {t: sorted(query(v1_store, f"SELECT * FROM {t}"), key=repr) for t in tables} == filled
    assert query(v1_store, "SELECT count(*) FROM mentions WHERE excerpt IS NULL") == [(0,)]
    assert answers() == before
    mentioned = before[0][0]["mentions"]
    assert mentioned and "@axe-core" in mentioned[0]["excerpt"]


def upgrade(store: Path, monkeypatch: pytest.MonkeyPatch, every: Any) -> None:
    """Open a store an earlier version wrote (the migrations cut short to it) with every migration
    back, as this version's first command would."""
    monkeypatch.setattr(migrations, "MIGRATIONS", every)
    forget_schema_cache()
    with write_connection(store):
        pass


def _offline_workspace(store: Path) -> tuple[list[str], Any]:
    """The store's projects, and a workspace over it whose GitLab is nowhere (the layers that
    rebuild from stored rows only)."""
    from gitlab_knowledge.config import parse_config
    from gitlab_knowledge.workspace import Workspace

    projects = [r[0] for r in query(store, "SELECT path_with_namespace FROM projects ORDER BY 1")]
    config = parse_config({"gitlab": {"url": "http://127.0.0.1:9"}, "projects": projects,
                           "storage": {"data_dir": str(store.parent)}}, store.parent, {}, "test")
    return projects, Workspace(config)
