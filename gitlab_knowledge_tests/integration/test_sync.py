"""Sync core against the sandbox GitLab over real sockets: counts, idempotence, every kind of
change, GitLab's ThrottledTouch, --full reconciliation, faults, single-flight."""

import threading
from datetime import timedelta

import pytest

from gitlab_knowledge.errors import GitLabError, StoreError, SyncInProgressError
from gitlab_knowledge.store.db import transaction, write_connection
from gitlab_knowledge.sync.engine import ProjectSync
from gitlab_knowledge.timeutil import utcnow
from gitlab_knowledge_sandbox import SandboxGitLab
from gitlab_knowledge_tests.conftest import store_config
from gitlab_knowledge_tests.helpers import rows, scalar, snapshot, sync, sync_all, workspace


def dataset_counts(sb: SandboxGitLab) -> dict[str, int]:
    counts = {"issues": 0, "merge_requests": 0, "threads": 0, "notes": 0, "system": 0, "system_fetched": 0}
    for project in sb.state.list_projects():
        for kind in ("issues", "merge_requests"):
            for item in sb.state.list_items(project["id"], kind):
                counts[kind] += 1
                threads = sb.state.discussions(project["id"], kind, item["iid"])
                for thread in threads:
                    user = [n for n in thread["notes"] if not n.get("system")]
                    counts["system"] += len(thread["notes"]) - len(user)
                    # Every item's threads are fetched, also of one without user notes: its system
                    # notes are GitLab's links ("closed via merge request !12").
                    counts["system_fetched"] += len(thread["notes"]) - len(user)
                    counts["notes"] += len(user)
                    counts["threads"] += bool(user)
    return counts


def test_initial_sync_matches_the_dataset(sandbox, make_config):
    config = make_config(sandbox)
    results = sync_all(config)
    expected = dataset_counts(sandbox)
    assert expected["system"] > 0, "the dataset must contain system notes for this test to mean anything"
    assert scalar(config, "SELECT count(*) FROM issues") == expected["issues"]
    assert scalar(config, "SELECT count(*) FROM merge_requests") == expected["merge_requests"]
    assert scalar(config, "SELECT count(*) FROM discussions") == expected["threads"]
    assert scalar(config, "SELECT count(*) FROM notes") == expected["notes"]
    # System notes are kept apart from the user notes: every one of an item whose threads were
    # fetched is in system_notes, none in notes.
    system_ids = {n["id"] for p in sandbox.state.list_projects() for k in ("issues", "merge_requests")
                  for it in sandbox.state.list_items(p["id"], k)
                  for t in sandbox.state.discussions(p["id"], k, it["iid"]) for n in t["notes"] if n.get("system")}
    stored = {r[0] for r in rows(config, "SELECT id FROM notes")}
    assert not stored & system_ids
    kept = {r[0] for r in rows(config, "SELECT id FROM system_notes")}
    assert kept <= system_ids and len(kept) == expected["system_fetched"] > 0
    # Every issue/MR has its live raw payload; every note's discussion and parent exist.
    for table in ("issues", "merge_requests"):
        assert scalar(config, f"SELECT count(*) FROM {table} t LEFT JOIN raw_payloads r ON r.id = t.raw_payload_id "
                              "WHERE r.id IS NULL OR r.deleted_at IS NOT NULL") == 0
    assert scalar(config, "SELECT count(*) FROM notes n LEFT JOIN discussions d ON d.id = n.discussion_id "
                          "WHERE d.id IS NULL") == 0
    assert scalar(config, "SELECT count(*) FROM discussions WHERE individual_note AND note_count <> 1") == 0
    assert scalar(config, "SELECT count(*) FROM note_positions") > 0
    # Parents without user notes cost one discussions call each, like the others.
    no_notes = sum(1 for p in sandbox.state.list_projects() for k in ("issues", "merge_requests")
                   for it in sandbox.state.list_items(p["id"], k) if it["user_notes_count"] == 0)
    assert no_notes > 0
    fetched = sum(r.threads_fetched for r in results.values())
    assert fetched == expected["issues"] + expected["merge_requests"]


def test_second_sync_changes_nothing_and_costs_one_list_call_per_resource(sandbox, make_config):
    config = make_config(sandbox)
    sync_all(config)
    before = snapshot(config)
    sandbox.reset_stats()
    results = sync_all(config)
    assert snapshot(config) == before
    for result in results.values():
        assert (result.items_new, result.items_updated, result.items_deleted, result.threads_new) == (0, 0, 0, 0)
    by_route = sandbox.stats()["by_route"]
    projects = len(config.projects)
    assert by_route.get("issues") == projects and by_route.get("merge_requests") == projects
    assert by_route.get("issue_discussions", 0) + by_route.get("merge_request_discussions", 0) == 0
    assert by_route.get("wikis") == projects  # the wiki listing: one call, change found by content hash
    assert by_route.get("releases") == projects  # the releases listing: one call, change found by content hash
    assert sandbox.stats()["requests"] == 5 * projects  # the project itself + two lists + wiki + releases


def _note_ids(config, body: str) -> list[int]:
    return [r[0] for r in rows(config, "SELECT id FROM notes WHERE body = ?", [body])]


def test_new_edited_and_deleted_notes_and_new_issue_are_reflected(sandbox, make_config):
    config = make_config(sandbox)
    project = config.projects[0]
    sync_all(config)
    pid = project  # the sandbox state takes a path or an id
    issue = sandbox.state.list_items(pid, "issues")[0]
    sandbox.clock.advance(3600)  # past the throttle window of anything in the dataset
    note = sandbox.state.add_note(pid, "issues", issue["iid"], "A brand new comment about Redis eviction")
    sync(config, project)
    assert _note_ids(config, "A brand new comment about Redis eviction") == [note["id"]]

    sandbox.clock.advance(120)
    sandbox.state.edit_note(pid, "issues", issue["iid"], note["id"], "Edited: Redis eviction uses allkeys-lru")
    sync(config, project)
    assert _note_ids(config, "Edited: Redis eviction uses allkeys-lru") == [note["id"]]
    assert _note_ids(config, "A brand new comment about Redis eviction") == []

    sandbox.clock.advance(120)
    new_issue = sandbox.state.create_issue(pid, "Brand new issue about websocket reconnects", description="body")
    sync(config, project)
    assert scalar(config, "SELECT title FROM issues WHERE id = ?", [new_issue["id"]]) == new_issue["title"]

    # Deleting a note does not touch the parent (note.rb touches after_save only): an incremental
    # sync cannot see it; --full reconciles it.
    sandbox.clock.advance(120)
    sandbox.state.delete_note(pid, "issues", issue["iid"], note["id"])
    sync(config, project)
    assert _note_ids(config, "Edited: Redis eviction uses allkeys-lru") == [note["id"]]
    sync(config, project, full=True)
    assert _note_ids(config, "Edited: Redis eviction uses allkeys-lru") == []


def test_notes_added_or_edited_within_the_throttle_window_are_caught(sandbox, make_config):
    config = make_config(sandbox)
    project = config.projects[0]
    sync_all(config)
    pid = project  # the sandbox state takes a path or an id
    first, second = sandbox.state.list_items(pid, "issues")[:2]
    sandbox.clock.set(sandbox.clock.now() + timedelta(days=1))  # frozen from here on
    sandbox.state.update_issue(pid, first["iid"], description="touched: updated_at = T")
    updated_at = sandbox.state.get(pid, "issues", first["iid"])["updated_at"]
    sync(config, project)  # fetches `first` and its threads at T
    sandbox.clock.advance(5)
    sandbox.state.update_issue(pid, second["iid"], description="touched at T+5: the cursor moves past `first`")
    sync(config, project)
    sandbox.clock.advance(5)
    note = sandbox.state.add_note(pid, "issues", first["iid"], "Throttled note: the parent's updated_at stays T")
    assert sandbox.state.get(pid, "issues", first["iid"])["updated_at"] == updated_at  # GitLab's throttle
    result = sync(config, project)
    assert _note_ids(config, "Throttled note: the parent's updated_at stays T") == [note["id"]]
    assert result.threads_rechecked >= 1
    # The parent's own payload was refreshed too (its user_notes_count moved, its updated_at did not).
    assert scalar(config, "SELECT user_notes_count FROM issues WHERE id = ?", [first["id"]]) == \
        sandbox.state.get(pid, "issues", first["iid"])["user_notes_count"]

    # A throttled edit leaves even the parent's payload unchanged; the recheck still sees it.
    sandbox.clock.advance(5)
    sandbox.state.edit_note(pid, "issues", first["iid"], note["id"], "Throttled edit")
    assert sandbox.state.get(pid, "issues", first["iid"])["updated_at"] == updated_at
    sync(config, project)
    assert _note_ids(config, "Throttled edit") == [note["id"]]

    # Once its threads were fetched more than 60 s after its update, a parent is settled.
    sandbox.clock.advance(120)
    sync(config, project)
    sandbox.reset_stats()
    result = sync(config, project)
    assert result.threads_rechecked == 0
    assert sandbox.stats()["by_route"].get("issue_discussions", 0) == 0


def test_full_sync_removes_a_deleted_issue_and_its_threads(sandbox, make_config):
    config = make_config(sandbox)
    project = config.projects[0]
    sync_all(config)
    pid = project  # the sandbox state takes a path or an id
    victim = next(i for i in sandbox.state.list_items(pid, "issues") if i["user_notes_count"] > 0)
    sandbox.state.delete(pid, "issues", victim["iid"])
    sync(config, project)
    assert scalar(config, "SELECT count(*) FROM issues WHERE id = ?", [victim["id"]]) == 1  # invisible to incremental
    result = sync(config, project, full=True)
    assert result.items_deleted == 1
    assert scalar(config, "SELECT count(*) FROM issues WHERE id = ?", [victim["id"]]) == 0
    assert scalar(config, "SELECT count(*) FROM discussions WHERE issue_id = ?", [victim["id"]]) == 0
    assert scalar(config, "SELECT count(*) FROM notes WHERE noteable_type = 'Issue' AND noteable_id = ?",
                  [victim["id"]]) == 0
    assert scalar(config, "SELECT deleted_at IS NOT NULL FROM raw_payloads WHERE resource_type = 'issue' "
                          "AND gitlab_key = ?", [str(victim["id"])])


def test_items_with_equal_timestamps_across_page_boundaries_are_all_synced(tmp_path, make_config):
    """GitLab orders equal updated_at arbitrarily (the sandbox: id descending) and the tie run here
    is longer than a page, so neither id order nor offset paging alone would be correct."""
    from gitlab_knowledge_sandbox import generate_dataset

    generate_dataset(tmp_path / "ds", projects=1, issues=260, mrs=5, seed=3, threads_per_parent_mean=0.5)
    with SandboxGitLab(dataset=tmp_path / "ds") as sb:
        config = make_config(sb, per_page=20)
        pid = sb.state.list_projects()[0]["id"]
        stamps = [i["updated_at"] for i in sb.state.list_items(pid, "issues")]
        assert max(stamps.count(s) for s in set(stamps)) > 20, "the dataset must hold a tie run longer than a page"
        sync_all(config)
        assert scalar(config, "SELECT count(*) FROM issues") == 260
        sb.reset_stats()
        sync_all(config)
        assert scalar(config, "SELECT count(*) FROM issues") == 260


@pytest.mark.parametrize("spec", [
    "429:count=3,retry_after=1,path=/issues$",
    "429:count=2,retry_after=none,path=/discussions",
    "503:count=3",
    "truncate:count=2,path=/merge_requests$",
    "drop:count=2,path=/discussions",
])
def test_transient_faults_are_survived(small_dataset, small_store, make_config, spec):
    with SandboxGitLab(dataset=small_dataset, faults=spec) as sb:
        config = make_config(sb)
        sync_all(config)
        assert sum(sb.stats()["faults"].values()) >= 2
    # The session's store is a clean sync of the same dataset: the reference, not synced again here.
    assert snapshot(config) == snapshot(store_config(small_store))


def test_persistent_errors_fail_cleanly_and_the_next_sync_resumes(small_dataset, small_store, make_config):
    with SandboxGitLab(dataset=small_dataset) as sb:
        config = make_config(sb, per_page=5, max_retries=2)
        project = config.projects[0]
        sb.set_faults("500:after=2,path=/issues$")  # the third issues page onwards fails
        with pytest.raises(GitLabError) as failure:
            ProjectSync(workspace(config), project).run()
        assert "500" in str(failure.value) and "\n" not in str(failure.value)
        status, error = rows(config, "SELECT status, error FROM sync_runs ORDER BY id DESC LIMIT 1")[0]
        assert status == "failed" and "500" in error
        cursor = rows(config, "SELECT updated_at_cursor FROM sync_cursors WHERE resource_type = 'issue'")
        assert cursor, "pages committed before the failure keep their cursor"
        stored = scalar(config, "SELECT count(*) FROM raw_payloads WHERE resource_type = 'issue'")
        assert stored > 0
        sb.set_faults(None)
        sync_all(config)
    assert snapshot(config) == snapshot(store_config(small_store))  # a clean sync's


class _Gate:
    """SyncProgress that parks the sync in the middle of its first resource."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.release = threading.Event()

    def resource_started(self, project, resource, total):
        pass

    def advance(self, project, resource, items):
        if not self.inside.is_set():
            self.inside.set()
            assert self.release.wait(30)

    def message(self, text):
        pass

    def warning(self, text):
        pass


def test_a_second_concurrent_sync_is_refused(sandbox, make_config):
    config = make_config(sandbox, per_page=5)
    project = config.projects[0]
    gate = _Gate()
    errors: list[BaseException] = []

    def first() -> None:
        try:
            ProjectSync(workspace(config), project, progress=gate).run()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    worker = threading.Thread(target=first)
    worker.start()
    try:
        assert gate.inside.wait(30)
        with pytest.raises(SyncInProgressError) as refused:
            ProjectSync(workspace(config), project).run()
        assert "already running" in str(refused.value)
        with pytest.raises(SyncInProgressError):
            ProjectSync(workspace(config), project, force=True).run()  # --force never takes over a live sync
    finally:
        gate.release.set()
        worker.join(60)
    assert not errors
    assert [r[0] for r in rows(config, "SELECT status FROM sync_runs ORDER BY id")] == ["succeeded"]


def test_stale_run_needs_force_and_dead_process_is_taken_over(sandbox, make_config):
    config = make_config(sandbox)
    project = config.projects[0]
    long_ago = utcnow() - timedelta(hours=2)
    with write_connection(config.duckdb_path) as con, transaction(con):
        con.execute("""INSERT INTO sync_runs (id, project_path, mode, status, started_at, heartbeat_at, pid, hostname)
                       VALUES (nextval('sync_run_ids'), ?, 'incremental', 'running', ?, ?, 4242, 'another-host')""",
                    [project, long_ago, long_ago])
    with pytest.raises(SyncInProgressError) as refused:
        ProjectSync(workspace(config), project).run()
    assert "--force" in str(refused.value)
    ProjectSync(workspace(config), project, force=True).run()
    statuses = [r[0] for r in rows(config, "SELECT status FROM sync_runs ORDER BY id")]
    assert statuses == ["abandoned", "succeeded"]
    # A run left 'running' by a process of this host that no longer exists is taken over silently.
    with write_connection(config.duckdb_path) as con, transaction(con):
        from gitlab_knowledge.sync.runs import HOSTNAME

        con.execute("""INSERT INTO sync_runs (id, project_path, mode, status, started_at, heartbeat_at, pid, hostname)
                       VALUES (nextval('sync_run_ids'), ?, 'incremental', 'running', now(), now(), 999999, ?)""",
                    [project, HOSTNAME])
    ProjectSync(workspace(config), project).run()
    statuses = [r[0] for r in rows(config, "SELECT status FROM sync_runs ORDER BY id")]
    assert statuses == ["abandoned", "succeeded", "abandoned", "succeeded"]



def test_a_page_commits_while_the_next_pages_threads_are_fetched(sandbox, make_config, monkeypatch):
    # At a rate limit, a commit that holds up the next requests is time lost on every page.
    config = make_config(sandbox, per_page=5)
    next_page_fetching = threading.Event()
    fetches: list[int] = []
    overlapped: list[bool] = []
    commit, fetch_threads = ProjectSync._commit_parents, ProjectSync._fetch_threads

    def slow_first_commit(self, *args, **kwargs):
        if not overlapped:
            # Page 1 commits here. A sequential sync cannot start on page 2 before this returns,
            # so the wait runs out and the test fails.
            overlapped.append(next_page_fetching.wait(15))
        return commit(self, *args, **kwargs)

    async def spy_fetch_threads(self, client, parents):
        fetches.append(len(parents))  # called once per list page, threads or not
        if len(fetches) == 2:
            next_page_fetching.set()
        return await fetch_threads(self, client, parents)

    monkeypatch.setattr(ProjectSync, "_commit_parents", slow_first_commit)
    monkeypatch.setattr(ProjectSync, "_fetch_threads", spy_fetch_threads)
    reference = make_config(sandbox, data_dir=config.data_dir.parent / "reference", per_page=5)
    sync(config, config.projects[0])
    assert overlapped == [True]
    monkeypatch.setattr(ProjectSync, "_commit_parents", commit)
    monkeypatch.setattr(ProjectSync, "_fetch_threads", fetch_threads)
    sync(reference, reference.projects[0])
    assert snapshot(config) == snapshot(reference)


def test_a_failed_page_commit_stops_the_sync_with_earlier_pages_and_their_cursor_kept(sandbox, make_config,
                                                                                        monkeypatch):
    config = make_config(sandbox, per_page=5)
    project = config.projects[0]
    commit = ProjectSync._commit_parents
    calls: list[tuple[list[int], int]] = []

    def failing_second_commit(self, kind, resource, parents, stats, cursor_item, **kwargs):
        calls.append(([p.gitlab_id for p in parents], int(cursor_item["id"])))
        if len(calls) == 2:
            raise StoreError("cannot write the store: No space left on device")
        return commit(self, kind, resource, parents, stats, cursor_item, **kwargs)

    monkeypatch.setattr(ProjectSync, "_commit_parents", failing_second_commit)
    with pytest.raises(StoreError, match="(?i)no space left"):
        sync(config, project)
    assert len(calls) == 2, "no page after the failed one may be committed"
    (first_page, first_cursor), (second_page, _) = calls
    assert len(first_page) == 5 and not set(first_page) & set(second_page)
    stored = rows(config, "SELECT CAST(gitlab_key AS BIGINT) FROM raw_payloads WHERE resource_type = 'issue'")
    assert sorted(r[0] for r in stored) == sorted(first_page)
    assert [r[0] for r in rows(config, "SELECT tie_breaker_id FROM sync_cursors")] == [first_cursor]
    assert [r[0] for r in rows(config, "SELECT status FROM sync_runs")] == ["failed"]
    monkeypatch.setattr(ProjectSync, "_commit_parents", commit)
    sync(config, project)
    assert scalar(config, "SELECT count(*) FROM issues") == len(
        sandbox.state.list_items(sandbox.state.list_projects()[0]["id"], "issues"))
