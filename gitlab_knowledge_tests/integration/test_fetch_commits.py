"""What a small project's fetch costs the store (sync/commits.py): its writes commit with its
sync's end, so a batch opens the DuckDB file a few times per project, not once per listing, page
and look-up; a failure after its listings keeps what it fetched, as page commits did; a project
of more than a page commits page by page, as before; a request does not search sys.path for a
module that is not installed. Against the sandbox over 127.0.0.1, on real DuckDB files."""

import asyncio
import importlib.machinery
from pathlib import Path

import pytest

from gitlab_knowledge.errors import GitLabError
from gitlab_knowledge.store import db
from gitlab_knowledge.store.projects import project_id_for
from gitlab_knowledge.sync import engine
from gitlab_knowledge.sync.engine import ProjectSync
from gitlab_knowledge.sync.known import Known, read_batch_known, read_known, read_stored
from gitlab_knowledge.sync.many import Fetches
from gitlab_knowledge.sync.redirects import known_paths
from gitlab_knowledge_sandbox import SandboxGitLab, generate_dataset
from gitlab_knowledge_tests.helpers import rows, workspace

PROJECTS = 4
OPENS_PER_SMALL_PROJECT = 3  # its begin, the reads its listings start from (once its id is known), its end


@pytest.fixture(scope="module")
def four_small_projects(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("four-small-projects")
    generate_dataset(out, projects=PROJECTS, issues=12, mrs=6, seed=34, threads_per_parent_mean=1.0)
    return out


def count_opens(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Every open of a DuckDB file from here on (True: read-only)."""
    opens: list[bool] = []
    real = db._open

    def counting(path, read_only, wait):
        opens.append(read_only)
        return real(path, read_only, wait)

    monkeypatch.setattr(db, "_open", counting)
    return opens


def stored(config) -> list[tuple]:
    return rows(config, "SELECT project_id, resource_type, gitlab_key, payload_hash, deleted_at IS NULL "
                        "FROM raw_payloads ORDER BY ALL") + rows(
        config, "SELECT project_id, resource_type, updated_at_cursor, tie_breaker_id FROM sync_cursors ORDER BY ALL")


def test_a_batch_of_small_projects_opens_the_store_a_few_times_per_project_and_stores_what_page_commits_do(
        four_small_projects, make_config, tmp_path, monkeypatch):
    with SandboxGitLab(dataset=four_small_projects) as sb:
        config = make_config(sb)
        projects = list(config.projects)
        with db.write_connection(config.duckdb_path):
            pass  # the store exists and its schema is current before the count starts
        with monkeypatch.context() as patched:
            opens = count_opens(patched)
            with db.one_writer(), Fetches(workspace(config), projects, in_flight=2) as fetches:
                landed = list(fetches.landed())
        assert [one.error for one in landed] == [None] * PROJECTS
        assert all(one.result is not None and one.result.client["api_calls"] > 5 for one in landed)
        # The token's user once for the batch (a read, then its record) and what every project's
        # begin starts from (one read for all, sync/known.py `read_batch_known`), then each
        # project's few: on the old code a small project opened the file once per listing's state,
        # page, recheck, wiki, releases and look-up (14 here).
        assert len(opens) <= 3 + OPENS_PER_SMALL_PROJECT * PROJECTS, len(opens)
        # Again, nothing changed: each project's id is known from its last sync, so what its
        # listings start from is read with its begin: two opens a project.
        with monkeypatch.context() as patched:
            opens = count_opens(patched)
            with db.one_writer(), Fetches(workspace(config), projects, in_flight=2) as fetches:
                again = list(fetches.landed())
        assert [one.error for one in again] == [None] * PROJECTS
        assert all(one.result is not None and one.result.resources["issues"].fetched == 0 for one in again)
        assert len(opens) <= 3 + 2 * PROJECTS, len(opens)

        # One page per parent, each its own commit (what every page did before): the same rows.
        reference = make_config(sb, data_dir=tmp_path / "reference", per_page=1)
        for project in projects:
            sync = ProjectSync(workspace(reference), project)
            sync.run()
            assert sync.commits.transactions > OPENS_PER_SMALL_PROJECT + 2  # a page a parent: no queue
    assert stored(config) == stored(reference)
    assert rows(config, "SELECT DISTINCT status FROM sync_runs") == [("succeeded",)]


def test_a_small_project_failing_after_its_listings_keeps_what_it_fetched_and_records_the_failure(
        four_small_projects, make_config, monkeypatch):
    with SandboxGitLab(dataset=four_small_projects) as sb:
        config = make_config(sb)
        project = config.projects[0]

        async def refused(*args, **kwargs):
            raise GitLabError("GitLab answered 502 to GET /projects/1/releases", status=502)

        sync = ProjectSync(workspace(config), project)
        with monkeypatch.context() as patched, pytest.raises(GitLabError, match="502"):
            patched.setattr(engine.releases, "sync_releases", refused)
            sync.run()
        assert sync.commits.transactions == OPENS_PER_SMALL_PROJECT
        # Its listings' items, threads and cursors are stored with the failure, as their page
        # commits kept them; the run says what it fetched.
        (status, error), = rows(config, "SELECT status, error FROM sync_runs")
        assert status == "failed" and "502" in error
        kinds = {k for (k,) in rows(config, "SELECT DISTINCT resource_type FROM raw_payloads")}
        assert {"project", "issue", "merge_request", "discussion"} <= kinds
        assert len(rows(config, "SELECT * FROM sync_cursors")) == 2

        again = ProjectSync(workspace(config), project)
        result = again.run()
    assert result.resources["issues"].new == 0 and result.resources["merge_requests"].new == 0
    assert [s for (s,) in rows(config, "SELECT status FROM sync_runs ORDER BY id")] == ["failed", "succeeded"]


def test_a_queued_write_that_fails_at_the_end_fails_the_sync_and_is_recorded(four_small_projects, make_config,
                                                                              monkeypatch):
    from gitlab_knowledge.errors import StoreError
    from gitlab_knowledge.sync import writes

    with SandboxGitLab(dataset=four_small_projects) as sb:
        config = make_config(sb)
        project = config.projects[0]

        def full_disk(*args, **kwargs):
            raise StoreError("cannot write the store: No space left on device")

        with monkeypatch.context() as patched, pytest.raises(StoreError, match="No space left"):
            patched.setattr(writes, "write_parents", full_disk)
            ProjectSync(workspace(config), project).run()
        (status, error), = rows(config, "SELECT status, error FROM sync_runs")
        assert status == "failed" and "No space left" in error
        assert rows(config, "SELECT * FROM sync_cursors") == []  # nothing half-written
        ProjectSync(workspace(config), project).run()
    assert [s for (s,) in rows(config, "SELECT status FROM sync_runs ORDER BY id")] == ["failed", "succeeded"]
    assert len(rows(config, "SELECT * FROM sync_cursors")) == 2


def test_a_project_of_many_pages_commits_page_by_page(four_small_projects, make_config, monkeypatch):
    with SandboxGitLab(dataset=four_small_projects) as sb:
        config = make_config(sb, per_page=2)
        project = config.projects[0]
        issues = len(sb.state.list_items(sb.state.list_projects(order_by="id", sort="asc")[0]["id"], "issues"))
        sync = ProjectSync(workspace(config), project)
        sync.run()
    # Every full page commits as it lands (with its cursor), so a kill loses at most a page.
    assert sync.commits.transactions >= issues // 2, (sync.commits.transactions, issues)


def test_a_first_sync_inserts_each_listings_first_cursor_and_stores_the_cursors_replacing_did(
        four_small_projects, make_config, monkeypatch, tmp_path):
    """A project the store holds nothing of: the first cursor of each listing is a plain insert
    (no row can be there; replacing costs ~4x its CPU), the later pages' replace it, and the
    cursors, rows and counts are those of replacing every time (the old code, which replaced all)."""
    from gitlab_knowledge.sync import known

    with SandboxGitLab(dataset=four_small_projects) as sb:
        fresh, replaced = make_config(sb, per_page=2), make_config(sb, data_dir=tmp_path / "replaced", per_page=2)
        statements: dict[str, list[str]] = {"fresh": [], "replaced": []}
        for way, config in (("fresh", fresh), ("replaced", replaced)):
            with monkeypatch.context() as patched:
                real_open = db._open
                patched.setattr(db, "_open", lambda path, read_only, wait, way=way, real_open=real_open: StatementsOf(
                    real_open(path, read_only, wait), statements[way]))
                if way == "replaced":  # as if the project had rows stored: every cursor replaced
                    patched.setattr(known, "_holds_any", lambda con, project_id: True)
                ProjectSync(workspace(config), config.projects[0]).run()
    assert stored_in_full(fresh) == stored_in_full(replaced)
    cursors = {way: [s for s in sql if "INTO sync_cursors" in s] for way, sql in statements.items()}
    assert [s.startswith("INSERT INTO") for s in cursors["fresh"]].count(True) == 2  # issues, merge requests
    assert len(cursors["fresh"]) == len(cursors["replaced"]) > 2
    assert all(s.startswith("INSERT OR REPLACE") for s in cursors["replaced"])


def test_a_request_does_not_search_for_a_module_that_is_not_installed(tiny_sandbox, make_config, monkeypatch):
    # httpcore asks `import sniffio` several times per request; without sniffio installed, each
    # failed import searched every sys.path entry again (~80 us each, ~0.5 ms of CPU a request
    # on the fetch loop's thread).
    config = make_config(tiny_sandbox)
    searched: list[str] = []
    real = importlib.machinery.PathFinder.find_spec

    def spying(name, path=None, target=None):
        searched.append(name)
        return real(name, path, target)

    async def some_requests() -> None:
        async with workspace(config).gitlab() as client:
            await client.project(config.projects[0])  # the first: whatever loads lazily loads
            searched.clear()
            for _ in range(3):
                await client.project(config.projects[0])

    with monkeypatch.context() as patched:
        patched.setattr(importlib.machinery.PathFinder, "find_spec", spying)
        asyncio.run(some_requests())
    assert searched == []


class CountingStatements:
    def __init__(self, con) -> None:
        self.con, self.statements = con, 0

    def execute(self, *args, **kwargs):
        self.statements += 1
        return self.con.execute(*args, **kwargs)


def test_what_a_first_sync_starts_from_is_two_statements_and_the_same_as_reading_it_all(four_small_projects,
                                                                                       make_config):
    with SandboxGitLab(dataset=four_small_projects) as sb:
        config = make_config(sb)
        synced_path = config.projects[0]
        ProjectSync(workspace(config), synced_path).run()
    with db.write_connection(config.duckdb_path) as con:
        synced = project_id_for(con, synced_path)
        assert synced is not None
        statements = {}
        for project_id in (synced + 10_000, synced):  # one the store holds nothing of, then one it holds
            for full in (False, True):
                counting = CountingStatements(con)
                quick = read_known(counting, project_id, full=full, configured=config.projects)
                statements[project_id, full] = counting.statements
                everything = read_stored(con, Known(project_id=project_id, paths=known_paths(con, config.projects)),
                                         full=full)
                assert quick.fresh is (project_id != synced)  # it holds nothing of the project
                quick.fresh = False
                assert quick == everything, (project_id, full)
        assert everything.states["issue"].known  # the synced project's were read
    # The old code read thirteen (nine with --full: each kind's cursor, hashes, rechecks and their
    # threads, the MRs without files, four statements of known paths) for a project it held nothing of.
    assert statements[synced + 10_000, False] == statements[synced + 10_000, True] == 2


class StatementsOf:
    """Every statement run on a connection `db._open` hands out (and its cursors)."""

    def __init__(self, con, counts: list[str]) -> None:
        self._con, self._counts = con, counts

    def execute(self, sql, *args, **kwargs):
        self._counts.append(" ".join(str(sql).split())[:40])
        return self._con.execute(sql, *args, **kwargs)

    def executemany(self, sql, *args, **kwargs):
        self._counts.append(" ".join(str(sql).split())[:40])
        return self._con.executemany(sql, *args, **kwargs)

    def cursor(self):
        return StatementsOf(self._con.cursor(), self._counts)

    def __getattr__(self, name):
        return getattr(self._con, name)


def stored_in_full(config) -> list[tuple]:
    """The raw layer, its cursors and each run's counts: what a first sync leaves, without when it ran."""
    import json

    return stored(config) + rows(config, """
        SELECT project_id, resource_type, gitlab_key, parent_type, parent_id, position, updated_at, json,
               discussions_fetched_at IS NULL, deleted_at IS NULL FROM raw_payloads ORDER BY ALL""") + sorted(
        (path, status, json.dumps({k: v for k, v in json.loads(stats)["resources"].items()}, sort_keys=True))
        for path, status, stats in rows(config, "SELECT project_path, status, stats FROM sync_runs"))


def test_a_first_sync_runs_no_tombstone_pass_it_cannot_need_and_stores_what_the_passes_stored(
        four_small_projects, make_config, tmp_path, monkeypatch):
    """A project the store holds nothing of (`raw.Provenance.fresh`) and parents stored for the
    first time: no tombstone pass over threads, wiki pages or releases they cannot have stored;
    the rows, cursors and counts are those of the writes with the passes, then and on the next sync."""
    from gitlab_knowledge.sync import known, many

    def batch(config, statements: list[str]) -> list:
        with monkeypatch.context() as patched:
            real_open = db._open
            patched.setattr(db, "_open", lambda path, read_only, wait: StatementsOf(real_open(path, read_only, wait),
                                                                                    statements))
            with db.one_writer(), Fetches(workspace(config), list(config.projects), in_flight=2) as fetches:
                landed = list(fetches.landed())
        assert [one.error for one in landed] == [None] * PROJECTS
        return landed

    with SandboxGitLab(dataset=four_small_projects) as sb:
        fresh, looked_up = make_config(sb), make_config(sb, data_dir=tmp_path / "looked-up")
        fresh_statements: list[str] = []
        batch(fresh, fresh_statements)
        with monkeypatch.context() as patched:  # as if every project had rows stored: the old writes
            patched.setattr(known, "_holds_any", lambda con, project_id: True)
            patched.setattr(many, "_batch_known", lambda workspace: None)  # each project reads its own
            old_statements: list[str] = []
            batch(looked_up, old_statements)
        assert stored_in_full(fresh) == stored_in_full(looked_up)
        # The tombstone passes a first sync cannot need: the threads' (a page of issues, one of
        # MRs), the wiki's and the releases' look-up of stored ones (the old code ran them all).
        passes = [s for s in old_statements if s.startswith(("UPDATE raw_payloads SET deleted",
                                                             "SELECT gitlab_key FROM raw_payloads"))]
        assert len(passes) >= 2 * PROJECTS
        assert not [s for s in fresh_statements if s in passes]
        for config in (fresh, looked_up):
            again = batch(config, [])
            assert all(one.result.resources["issues"].fetched == 0 for one in again)
        assert stored_in_full(fresh) == stored_in_full(looked_up)


def test_a_sync_run_begins_in_one_statement_when_no_run_of_its_path_is_running(tmp_path):
    """Each project of a batch begins its run: the check for a run of its path still marked
    running and the insert are one statement when there is none (the old code: two), and a run
    still marked running is refused or marked abandoned as before."""
    from datetime import timedelta

    from gitlab_knowledge.errors import SyncInProgressError
    from gitlab_knowledge.sync import runs

    def begin(con) -> int:
        return runs.begin_run(con, "g/p", "incremental", force=False, stale_after=timedelta(minutes=10),
                              dagster_run_id=None)

    with db.write_connection(tmp_path / "s.duckdb") as con:
        counting = CountingStatements(con)
        with db.transaction(con):
            first = begin(counting)
        assert counting.statements == 1
        with pytest.raises(SyncInProgressError, match="already running"), db.transaction(con):
            begin(con)  # this process's run, alive
        con.execute("UPDATE sync_runs SET pid = 2147483646 WHERE id = ?", [first])  # a process that ended
        with db.transaction(con):
            second = begin(con)
        assert con.execute("SELECT id, status FROM sync_runs ORDER BY id").fetchall() == [
            (first, "abandoned"), (second, "running")]


def test_a_batch_reads_what_its_projects_begin_from_once_and_each_begin_starts_from_the_same(
        four_small_projects, make_config):
    """`read_batch_known` once, then each project's begin reads no statement for a project the
    store holds nothing of and only its stored rows for one it holds: what it starts from is what
    a begin of its own reads."""
    with SandboxGitLab(dataset=four_small_projects) as sb:
        config = make_config(sb)
        ProjectSync(workspace(config), config.projects[0]).run()
    with db.write_connection(config.duckdb_path) as con:
        synced = project_id_for(con, config.projects[0])
        assert synced is not None
        batch = read_batch_known(con, config.projects)
        assert batch.holding == {synced}
        for project_id in (synced + 10_000, synced):
            for full in (False, True):
                shared, alone = CountingStatements(con), CountingStatements(con)
                assert read_known(shared, project_id, full=full, configured=config.projects, batch=batch) == \
                    read_known(alone, project_id, full=full, configured=config.projects)
                # The old code (and a sync of its own) read the known paths and whether the store
                # holds the project: two statements more.
                assert shared.statements == alone.statements - 2 == (0 if project_id != synced else shared.statements)
