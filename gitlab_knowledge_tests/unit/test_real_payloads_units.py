"""Units behind issue 16 and issue 19 point 9: payload checks, the transform's version fallbacks,
de-duplication within a batch, cleanup that never masks the real error, the CLI's help and states."""

from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest

from gitlab_knowledge.normalized.transform import issue_row, merge_request_row, thread_rows
from gitlab_knowledge.store import payloads, raw
from gitlab_knowledge.store.db import transaction, write_connection
from gitlab_knowledge.store.queries import author_label

ISSUE = {"id": 5, "iid": 2, "project_id": 9, "title": "t", "state": "opened",
         "created_at": "2020-01-01T00:00:00Z", "updated_at": "2020-01-02T00:00:00+02:00"}


# -- store/payloads.py -------------------------------------------------------------------------------


@pytest.mark.parametrize(("change", "problem"), [
    ({"title": ["a", "list"]}, "title is a list, not text"),
    ({"id": None}, "id is missing"),
    ({"iid": 1e23}, "iid is 1e+23 (not an integer)"),
    ({"iid": 2**40}, f"iid {2**40} is out of range"),
    ({"id": True}, "id is a boolean"),
    ({"updated_at": "last tuesday"}, "updated_at 'last tuesday' is not an ISO 8601 timestamp"),
    ({"updated_at": None}, "updated_at is missing"),
    ({"description": "half \ud800 pair"}, "description holds a lone UTF-16 surrogate (not valid Unicode)"),
    ({"labels": "bug"}, "labels is 'bug', not a list"),
    ({"labels": [{"name": 3}]}, "a label is 3, not a name"),
])
def test_item_problems_name_the_field(change, problem) -> None:
    assert payloads.item_problem({**ISSUE, **change}) == problem


def test_good_items_of_every_era_pass() -> None:
    assert payloads.item_problem(ISSUE) is None
    assert payloads.item_problem({**ISSUE, "labels": [{"name": "x", "id": 1}], "description": None,
                                  "author": None, "updated_at": "2016-01-04T15:31:51+01:00"}) is None


def test_screening_keeps_the_rest_of_the_page_and_names_each_reject() -> None:
    lines: list[str] = []
    page = [ISSUE, {**ISSUE, "id": 6, "iid": 3, "title": ["x"]}, {k: v for k, v in ISSUE.items() if k != "id"},
            "not an object"]
    kept = payloads.screen_items("issue", page, lines.append)
    assert kept == [ISSUE]
    assert lines == ["issue iid 3 (id 6) rejected: title is a list, not text",
                     "issue iid 2 rejected: id is missing",
                     "issue #4 of its page rejected: the item is 'not an object', not an object"]


def test_thread_screening_keeps_rejected_ids_for_their_stored_versions() -> None:
    good = {"id": "a1", "notes": [{"id": 1, "body": "ok"}]}
    surrogate = {"id": "b2", "notes": [{"id": 2, "body": "bad \udfff"}]}
    no_id = {"notes": [{"id": 3, "body": "who am I"}]}
    floats = {"id": "c3", "notes": [{"id": 4, "body": "x", "position": {"new_line": 1.5}}]}
    lines: list[str] = []
    ok, rejected, anonymous = payloads.screen_threads("issue iid 7", [good, surrogate, no_id, floats], lines.append)
    assert ok == [good] and rejected == {"b2", "c3"} and anonymous
    assert lines[0] == "issue iid 7: discussion b2 rejected: notes[0].body holds a lone UTF-16 surrogate (not valid Unicode)"
    assert lines[1] == "issue iid 7: discussion #3 rejected: id is missing"
    assert lines[2] == "issue iid 7: discussion c3 rejected: note 4: position new_line is 1.5 (not an integer)"


# -- normalized/transform.py: fields across GitLab versions ------------------------------------------------


def test_singular_assignee_is_read_when_there_is_no_assignees_list() -> None:
    old = {**ISSUE, "assignee": {"username": "bob", "name": "Bob"}}
    assert issue_row(old, 1)["assignees"] == ["bob"]
    assert merge_request_row({**old, "work_in_progress": True}, 1)["assignees"] == ["bob"]
    assert issue_row({**old, "assignees": [{"username": "amy"}]}, 1)["assignees"] == ["amy"]
    assert issue_row({**old, "assignees": []}, 1)["assignees"] == []  # the list is the truth when present
    assert issue_row({**ISSUE, "assignee": None}, 1)["assignees"] == []


def _positions(position: dict) -> dict:
    thread = {"id": "t", "notes": [{"id": 1, "body": "b", "type": "DiffNote", "position": position}]}
    return thread_rows(thread, parent_type="merge_request", parent_id=3, project_id=9, position=0,
                       raw_payload_id=1)[2][0]


def test_multi_line_diff_notes_keep_both_ends() -> None:
    new = _positions({"new_line": 11, "line_range": {
        "start": {"line_code": "abc_9_10", "type": "new", "old_line": None, "new_line": 10},
        "end": {"line_code": "abc_10_11", "type": "new", "old_line": None, "new_line": 11}}})
    assert (new["line_range_start_new_line"], new["line_range_end_new_line"]) == (10, 11)
    assert (new["line_range_start_type"], new["line_range_end_line_code"]) == ("new", "abc_10_11")
    # GitLab 13.x sent only line codes: `<sha of the path>_<old>_<new>`, 0 where a side has none.
    old = _positions({"old_line": 21, "line_range": {"start": {"line_code": "abc_20_0", "type": "old"},
                                                     "end": {"line_code": "abc_21_0", "type": "old"}}})
    assert (old["line_range_start_old_line"], old["line_range_end_old_line"]) == (20, 21)
    assert (old["line_range_start_new_line"], old["line_range_end_new_line"]) == (None, None)
    single = _positions({"new_line": 5})
    assert single["line_range_start_line_code"] is None and single["line_range_end_new_line"] is None


# -- store/raw.py: one object twice in one batch; cleanup never masks the error ----------------------


def _row(key: str, updated: str, body: str) -> raw.RawRow:
    return raw.RawRow.for_discussion("issue", 1, 0, {"id": key, "notes": [{"id": 1, "body": body,
                                                                            "updated_at": updated}]})


def test_dedupe_keeps_the_newest_then_the_later() -> None:
    a_old, a_new = _row("a", "2024-01-01T00:00:00Z", "old"), _row("a", "2024-01-02T00:00:00Z", "new")
    b_first, b_second = _row("b", "2024-01-01T00:00:00Z", "first"), _row("b", "2024-01-01T00:00:00Z", "second")
    assert raw.dedupe([a_new, b_first, a_old, b_second]) == [a_new, b_second]
    # An issue listed twice in one response (an edit between two offset pages): the newest wins.
    newer = raw.RawRow.for_item("issue", {**ISSUE, "title": "newer", "updated_at": "2020-01-03T00:00:00Z"})
    older = raw.RawRow.for_item("issue", ISSUE)
    assert raw.dedupe([newer, older]) == [newer]


def _prov() -> raw.Provenance:
    return raw.Provenance(project_id=9, sync_run_id=None, dagster_run_id=None,
                          fetched_at=datetime.now(UTC).replace(tzinfo=None))


def test_a_repeated_thread_in_one_batch_is_written_once(tmp_path: Path, caplog) -> None:
    rows = [_row("a", "2024-01-01T00:00:00Z", "old"), _row("a", "2024-01-02T00:00:00Z", "new")]
    with write_connection(tmp_path / "s.duckdb") as con, transaction(con):
        counts = raw.replace_discussions(con, [raw.ParentDiscussions("issue", 1, [
            {"id": "a", "notes": [{"id": 1, "body": "old", "updated_at": "2024-01-01T00:00:00Z"}]},
            {"id": "a", "notes": [{"id": 1, "body": "new", "updated_at": "2024-01-02T00:00:00Z"}]}])], _prov())
        stored = con.execute("SELECT json FROM raw_payloads").fetchall()
    assert counts.new == 1 and len(stored) == 1 and '"new"' in stored[0][0]
    assert raw.dedupe(rows) == rows[1:]
    assert any("discussion a appears more than once" in r.getMessage() for r in caplog.records)


def test_a_failing_write_raises_its_own_error_not_the_cleanup_one(tmp_path: Path) -> None:
    # A NULL resource_type violates NOT NULL inside the registered block; unregistering then meets
    # an aborted transaction, which must not replace the constraint error.
    bad = raw.RawRow(resource_type=None, gitlab_key="1", json="{}", updated_at=None)  # type: ignore[arg-type]
    with write_connection(tmp_path / "s.duckdb") as con:
        with pytest.raises(duckdb.Error) as err, transaction(con):
            raw.upsert_rows(con, [bad], _prov())
        assert "NOT NULL" in str(err.value) and "aborted" not in str(err.value)
        # The same in replace_discussions: its tombstoning statement fails (here: made to).
        with pytest.raises(duckdb.ConversionException) as err, transaction(con):
            raw.replace_discussions(_FailingTombstone(con), [raw.ParentDiscussions("issue", 1, [
                {"id": "x", "notes": [{"id": 1, "body": "b"}]}])], _prov())
        assert "aborted" not in str(err.value)
        assert con.execute("SELECT count(*) FROM raw_payloads").fetchone()[0] == 0


class _FailingTombstone:
    """A connection whose tombstoning UPDATE fails as a constraint would: with a real DuckDB error
    that aborts the real transaction."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con

    def execute(self, sql: str, *args: object) -> duckdb.DuckDBPyConnection:
        if "gk_keep" in sql:
            return self._con.execute("SELECT CAST('not a number' AS INTEGER)")
        return self._con.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self._con, name)


# -- CLI ------------------------------------------------------------------------------------------


def test_help_of_every_command_exits_0(capsys) -> None:
    from gitlab_knowledge.cli import build_parser, main

    commands = build_parser()._subparsers._group_actions[0].choices  # noqa: SLF001
    for argv in (["--help"], *([name, "--help"] for name in commands)):
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 0, argv
    assert "embedded %," in capsys.readouterr().out


def test_author_label() -> None:
    assert author_label("bob", "Bob") == "@bob"
    assert author_label(None, "Legacy Importer") == "Legacy Importer"
    assert author_label(None, None) == author_label(None, "  ") == "@unknown"


class _Statements:
    """A connection that counts the statements run through it."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con, self.sql = con, []

    def execute(self, sql: str, *args: object) -> duckdb.DuckDBPyConnection:
        self.sql.append(" ".join(sql.split())[:30])
        return self._con.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self._con, name)


def test_a_first_syncs_upsert_is_one_statement_and_counts_a_row_stored_before_as_the_look_up_does(
        tmp_path: Path) -> None:
    """`Provenance.fresh` (the store held no row of the project): the rows are inserted with those
    already stored left out, one statement where the look-up and the insert were two; a row stored
    before (here under another project) is still counted and written as the look-up path does."""
    def item(key: int, title: str) -> raw.RawRow:
        return raw.RawRow.for_item("issue", {"id": key, "title": title, "updated_at": "2024-01-01T00:00:00Z"})

    fresh = raw.Provenance(**{**_prov().__dict__, "fresh": True})
    results = {}
    for way, prov in (("fresh", fresh), ("looked up", _prov())):
        with write_connection(tmp_path / f"{way}.duckdb") as con:
            with transaction(con):
                raw.upsert_rows(con, [item(1, "stored"), item(2, "same")], raw.Provenance(**{**_prov().__dict__,
                                                                                         "project_id": 8}))
            counting = _Statements(con)
            with transaction(con):
                first = raw.upsert_rows(counting, [item(3, "a"), item(4, "b")], prov)
                statements = len(counting.sql)
                again = raw.upsert_rows(counting, [item(1, "changed"), item(2, "same"), item(5, "c")], prov)
            table = con.execute("SELECT project_id, gitlab_key, json FROM raw_payloads ORDER BY ALL").fetchall()
        results[way] = (first, again, table, statements)
    (first, again, table, statements), (old_first, old_again, old_table, old_statements) = (results["fresh"],
                                                                                         results["looked up"])
    assert (first, again, table) == (old_first, old_again, old_table)
    assert (first.new, again.new, again.updated, again.unchanged) == (2, 1, 1, 1)
    # The old code (and the look-up path): a look-up, then the insert.
    assert (statements, old_statements) == (1, 2)


@pytest.mark.parametrize("stored_before", [False, True])
def test_a_first_syncs_page_writes_its_items_files_and_threads_in_one_insert_and_stores_what_one_each_did(
        tmp_path: Path, stored_before: bool) -> None:
    """A page of MRs in a first sync (`Provenance.fresh`): its items, their file lists and their
    threads are inserted in one statement (the old code: one each, three). The rows and counts are
    those of the look-up path, also when an MR of the page was stored before (under another
    project): it is left out of the insert and written as the look-up path writes it."""
    from dataclasses import asdict

    from gitlab_knowledge.sync import writes
    from gitlab_knowledge.sync.parents import Parent
    from gitlab_knowledge.sync.stats import ResourceStats

    def mr(i: int) -> dict:
        return {"id": 100 + i, "iid": i, "title": f"mr {i}", "updated_at": f"2024-01-0{i}T00:00:00Z"}

    def page() -> list[Parent]:
        return [Parent("merge_request", 100 + i, i, mr(i), fetched_at=datetime(2024, 1, 5),
                       threads=[{"id": f"d{i}{j}", "notes": [{"id": 10 * i + j, "body": "b",
                                                               "updated_at": "2024-01-01T00:00:00Z"}]} for j in (1, 2)],
                       files=[{"old_path": f"f{i}.py", "new_path": f"f{i}.py"}]) for i in (1, 2)]

    results = {}
    for way, prov in (("fresh", raw.Provenance(**{**_prov().__dict__, "fresh": True})), ("looked up", _prov())):
        with write_connection(tmp_path / f"{way}.duckdb") as con:
            if stored_before:
                with transaction(con):
                    raw.upsert_rows(con, [raw.RawRow.for_item("merge_request", {**mr(1), "title": "old"})],
                                    raw.Provenance(**{**_prov().__dict__, "project_id": 8}))
            counting, stats = _Statements(con), ResourceStats()
            with transaction(con):
                writes.write_parents(counting, prov, "merge_request", page(), stats, None)
            table = con.execute("""SELECT project_id, resource_type, gitlab_key, parent_type, parent_id, position, json,
                                          deleted_at IS NULL FROM raw_payloads ORDER BY ALL""").fetchall()
        inserts = [s for s in counting.sql if s.startswith("INSERT INTO raw_payloads")]
        results[way] = (asdict(stats), table, len(inserts))
    (counts, table, inserts), (old_counts, old_table, old_inserts) = results["fresh"], results["looked up"]
    assert (counts, table) == (old_counts, old_table)
    assert len(table) == 8 and counts["new"] == 2 - stored_before  # 2 MRs, their file lists, 4 threads
    if not stored_before:
        assert (inserts, old_inserts) == (1, 3)
