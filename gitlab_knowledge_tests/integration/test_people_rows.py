"""Each user's rows in the graph (graph/people_rows.py), on the synced sample: what they hold,
checked against the items and notes read here in Python, and that a lens hides them as it hides
the items and notes they come from, so nothing hidden reaches `me` or `person`."""

import threading
from collections import defaultdict
from datetime import datetime
from typing import Any

import pytest

from gitlab_knowledge import kinds
from gitlab_knowledge.graph import people
from gitlab_knowledge.store.db import read_connection
from gitlab_knowledge.store.reader import Lens, StoreReader
from gitlab_knowledge.store.viewer_lens import viewer_lens
from gitlab_knowledge.store.visibility import hidden_lens
from gitlab_knowledge.viewer import GUEST, Viewer
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.conftest import SampleStore

SINCE = datetime(2000, 1, 1)


def read(sample: SampleStore, sql: str) -> list[tuple[Any, ...]]:
    with read_connection(sample.config.duckdb_path) as con:
        return con.execute(sql).fetchall()


def test_each_users_rows_are_what_the_items_and_notes_say(sample):
    roles, commented, theirs = set(), defaultdict(list), defaultdict(set)
    for kind in kinds.ITEM_KINDS:
        reviewers = "reviewers" if kind is kinds.MERGE_REQUEST else "[]::TEXT[]"
        for item, pid, author, assignees, listed in read(
                sample, f"SELECT id, project_id, author_username, assignees, {reviewers} FROM {kind.table}"):
            people_of = {(author.lower(), "author")} if author else set()
            people_of |= {(a.lower(), "assignee") for a in assignees or []} | {(r.lower(), "reviewer") for r in listed or []}
            roles |= {(name, kind.name, item, pid, role, False, None, None) for name, role in people_of}
            theirs[(kind.noteable_type, item)] = {(name, kind.name, item, pid) for name, _ in people_of}
    on_theirs = set()
    for noteable_type, item, note, author, internal, created in read(
            sample, "SELECT noteable_type, noteable_id, id, author_username, internal, created_at FROM notes"):
        for name, kind, item_id, pid in theirs[(noteable_type, item)]:
            if (author or "").lower() != name:
                on_theirs.add((name, kind, item_id, pid, note, author, created, bool(internal)))
        if author:
            kind = kinds.by_noteable_type(noteable_type).name
            pid = next(iter(theirs[(noteable_type, item)] or {(None, None, None, None)}))[3]
            commented[(author.lower(), kind, item, bool(internal))].append((created, pid))
    expected = roles | {(name, kind, item, notes[0][1], "commenter", internal, len(notes), max(c for c, _ in notes))
                        for (name, kind, item, internal), notes in commented.items()}
    assert {r for r in read(sample, "SELECT * FROM user_items")} == expected
    assert set(read(sample, "SELECT * FROM user_item_notes")) == on_theirs
    assert any(r[5] for r in expected) and on_theirs  # the sample has internal notes and notes on others' items


def _lenses(sample: SampleStore, pid: int) -> dict[str, Lens]:
    guest = Viewer(7002, "a.guest", access={pid: GUEST}, visibility={pid: "internal"})
    return {"config": hidden_lens(include_confidential=False, include_internal=False),
            "viewer": viewer_lens(guest, sample.config.gitlab.url, include_confidential=True, include_internal=True)}


def _references(answer: Any) -> list[str]:
    """Every item reference an answer names, wherever."""
    if isinstance(answer, dict):
        return [*([answer["reference"]] if isinstance(answer.get("reference"), str) else []),
                *(r for v in answer.values() for r in _references(v))]
    if isinstance(answer, list | tuple):
        return [r for v in answer for r in _references(v)]
    return []


@pytest.mark.parametrize("lens", ["config", "viewer"])
def test_a_hidden_items_rows_never_reach_me_or_person(sample, lens):
    """A confidential issue someone else authored or is assigned: its rows are behind the lens
    (the guest is neither), and neither `me` nor `person` of its people names it; a row counting
    internal notes is behind it too, so `person` counts only the notes the lens shows."""
    [(issue, pid, iid, path, user)] = read(sample, """
        SELECT i.id, i.project_id, i.iid, p.path_with_namespace, lower(i.author_username) FROM issues i
        JOIN projects p ON p.id = i.project_id WHERE i.confidential ORDER BY i.id LIMIT 1""")
    reference = kinds.ISSUE.ref(iid, path)
    plain = Workspace(sample.config)
    reader = StoreReader(sample.config.duckdb_path)
    try:
        lensed = plain.with_(lens=_lenses(sample, pid)[lens], reader=reader)
        with lensed.read() as con:
            assert not con.execute("SELECT * FROM user_items WHERE item_type = 'issue' AND item_id = ?", [issue]).fetchall()
            assert not con.execute("SELECT * FROM user_items WHERE internal").fetchall()
            assert not con.execute("SELECT * FROM user_item_notes WHERE internal OR (item_type = 'issue' "
                                   "AND item_id = ?)", [issue]).fetchall()
        shown = (people.me(plain, user, SINCE, limit=None).as_dict(), people.person(plain, user, limit=1000).as_dict())
        hidden = (people.me(lensed, user, SINCE, limit=None).as_dict(), people.person(lensed, user, limit=1000).as_dict())
        assert reference in _references(shown) and reference not in _references(hidden)
        # Their notes per item, without the internal ones (by the notes the lens shows).
        with lensed.read() as con:
            visible = dict(((kind, item), n) for kind, item, n in con.execute(
                "SELECT noteable_type, noteable_id, count(*) FROM notes WHERE lower(author_username) = ? GROUP BY ALL",
                [user]).fetchall())
        counted = {(kinds.kind(e["type"]).noteable_type, e["reference"]): e["notes"] for e in hidden[1]["commented_on"]}
        with read_connection(sample.config.duckdb_path) as con:
            refs = dict(((kind.noteable_type, item), kind.ref(iid_, p)) for kind in kinds.ITEM_KINDS
                        for item, iid_, p in con.execute(f"SELECT t.id, t.iid, p.path_with_namespace FROM {kind.table} t "
                                                         "JOIN projects p ON p.id = t.project_id").fetchall())
        assert counted == {(kind, refs[(kind, item)]): n for (kind, item), n in visible.items()
                           if (kind, refs[(kind, item)]) in counted or n}
        assert hidden[1]["counts"]["commented_on"] == len(visible)
    finally:
        reader.close()


def test_me_reads_its_notes_beside_its_items_and_mentions(sample, monkeypatch):
    """`me` reads the user's items, the unresolved threads of the MRs they authored and the
    mentions it keeps in one query (graph/people.py `_mine`; the threads were a statement of their
    own) and meanwhile, on another connection on another thread, the new notes on their items and
    those notes' bodies: the call takes the longer of the two instead of their sum (it ran all
    four queries one after the other)."""
    [(user,)] = read(sample, """
        SELECT lower(t.author_username) FROM merge_requests t WHERE t.state = 'opened'
          AND lower(t.author_username) IN (SELECT username FROM user_item_notes)
        GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1""")
    executed: list[tuple[int, str]] = []
    reading = Workspace.read

    class Counting:
        def __init__(self, con: Any) -> None:
            self.con = con

        def execute(self, query: str, params: Any = None) -> Any:
            executed.append((threading.get_ident(), query))
            return self.con.execute(query, params or [])

        def cursor(self) -> Any:
            return Counting(self.con.cursor())

        def close(self) -> None:
            self.con.close()

    def counted(self: Workspace, wait: float | None = None) -> Any:
        import contextlib

        @contextlib.contextmanager
        def wrapped() -> Any:
            with reading(self, wait) as con:
                yield Counting(con)
        return wrapped()

    monkeypatch.setattr(Workspace, "read", counted)
    answer = people.me(Workspace(sample.config), user, SINCE, limit=None).as_dict()
    assert answer["authored_open_mrs"] and answer["changes"]["notes"]
    assert any(e["unresolved_threads"] for e in answer["authored_open_mrs"])
    here = [q for thread, q in executed if thread == threading.get_ident()]
    beside = [q for thread, q in executed if thread != threading.get_ident()]
    assert sum("user_items" in q and "mentions" in q and "discussions" in q for q in here) == 1, here
    assert not any("discussions" in q for q in here if "mentions" not in q), here
    assert [next(t for t in ("user_item_notes", "FROM notes", "discussions") if t in q) for q in beside] == [
        "user_item_notes", "FROM notes"], beside


def test_a_new_note_on_an_item_closed_before_since_keeps_its_item(sample):
    """The new notes' items are taken from `me`'s own read of the user's items, which holds the
    open ones and those closed since `since` only: a note written since on an item closed before
    is listed with its item all the same."""
    found = read(sample, """
        SELECT u.username, u.note_id, u.created_at, t.closed_at, p.path_with_namespace, t.iid, u.item_type
        FROM user_item_notes u
        JOIN (SELECT 'issue' AS kind, id, iid, state, closed_at, project_id FROM issues
              UNION ALL SELECT 'merge_request', id, iid, state, closed_at, project_id FROM merge_requests) t
          ON t.kind = u.item_type AND t.id = u.item_id JOIN projects p ON p.id = t.project_id
        WHERE t.state NOT IN ('opened', 'reopened') AND t.closed_at < u.created_at AND NOT u.internal
        ORDER BY u.created_at DESC, u.note_id LIMIT 1""")
    assert found, "the sample holds a note written after its item was closed"
    [(user, note, written, closed, path, iid, kind)] = found
    since = closed + (written - closed) / 2
    answer = people.me(Workspace(sample.config), user, since, limit=None).as_dict()
    listed = {n["note_id"]: n["item"]["reference"] for n in answer["changes"]["notes"]}
    assert listed[note] == kinds.kind(kind).ref(iid, path)
    mine = {e["reference"] for g in ("assigned_issues", "assigned_mrs", "review_requested", "authored_open_mrs")
            for e in answer[g]} | {s["item"]["reference"] for s in answer["changes"]["state_changes"]}
    assert kinds.kind(kind).ref(iid, path) not in mine  # not among the items `me` read for its lists
