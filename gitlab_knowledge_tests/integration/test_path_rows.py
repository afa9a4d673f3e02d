"""The paths each MR touched, kept by the graph layer (graph/path_rows.py), on the synced sample:
what they hold, checked against the file lists, notes and threads read here in Python; that both
lenses hide them as they hide the notes, threads and MRs they come from, so nothing hidden reaches
`file_history`; and that the purge of a project takes them with it."""

import shutil
from pathlib import Path
from typing import Any

import pytest

from gitlab_knowledge.config import parse_config
from gitlab_knowledge.graph import path_rows
from gitlab_knowledge.graph.history import history
from gitlab_knowledge.purge import RemovedProject, purge_store
from gitlab_knowledge.store.db import read_connection, write_connection
from gitlab_knowledge.store.reader import Lens, StoreReader
from gitlab_knowledge.store.viewer_lens import viewer_lens
from gitlab_knowledge.store.visibility import hidden_lens
from gitlab_knowledge.viewer import GUEST, Viewer
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.conftest import SampleStore


def read(path: Path, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with read_connection(path) as con:
        return con.execute(sql, params or []).fetchall()


@pytest.fixture
def own(sample: SampleStore, tmp_path: Path) -> Workspace:
    """A private copy of the sample's store (a test here changes it)."""
    shutil.copy(sample.config.duckdb_path, tmp_path / "gitlab_knowledge.duckdb")
    config = parse_config({"gitlab": {"url": sample.config.gitlab.url}, "projects": ["acme/platform", "acme/web-app"],
                           "storage": {"data_dir": str(tmp_path)}}, tmp_path, {}, "test")
    return Workspace(config)


def test_the_rows_are_what_the_file_lists_notes_and_threads_say(sample: SampleStore) -> None:
    path = sample.config.duckdb_path
    mrs = {r[0]: r[1:] for r in read(path, "SELECT id, project_id, iid, COALESCE(merged_at, updated_at), title, state, "
                                           "web_url, merged_at, updated_at, author_username FROM merge_requests")}
    expected = {(mrs[mr][0], mr, *mrs[mr][1:], None, pos, old, new, nf, rf, df, None, None, None, False, False, None)
                for mr, pos, old, new, nf, rf, df in read(path, "SELECT merge_request_id, position, old_path, new_path, "
                                                                "new_file, renamed_file, deleted_file FROM mr_files")}
    notes = read(path, "SELECT id, discussion_id, noteable_type, noteable_id, position, author_username, body, "
                       "created_at, coalesce(internal, false) FROM notes")
    internal = {r[1] for r in notes if r[8]} | {r[0] for r in read(path, "SELECT discussion_id FROM system_notes "
                                                                          "WHERE coalesce(internal, false)")}
    threads = {d: (resolvable, resolved) for d, resolvable, resolved in read(
        path, "SELECT id, resolvable, resolved FROM discussions WHERE noteable_type = 'MergeRequest'")}
    first: dict[str, tuple[Any, ...]] = {}
    for note in sorted((n for n in notes if n[2] == "MergeRequest" and n[4] is not None), key=lambda n: n[4]):
        first.setdefault(note[1], note)
    positions = dict((r[0], r[1:]) for r in read(path, "SELECT note_id, old_path, new_path, old_line, new_line "
                                                       "FROM note_positions"))
    for note_id, discussion, noteable_type, mr, pos, *_rest, is_internal in notes:
        if note_id not in positions or noteable_type != "MergeRequest" or mr not in mrs:
            continue
        old, new, old_line, new_line = positions[note_id]
        f = first.get(discussion)
        thread = None if f is None or discussion not in threads else {
            "author_username": f[5], "body": f[6], "created_at": f[7], "resolvable": threads[discussion][0],
            "resolved": threads[discussion][1]}
        expected.add((mrs[mr][0], mr, *mrs[mr][1:], note_id, pos, old, new, None, None, None, discussion, old_line,
                      new_line, is_internal, discussion in internal, _frozen(thread)))
    stored = read(path, "SELECT project_id, merge_request_id, iid, touched_at, title, state, web_url, merged_at, "
                        "updated_at, author_username, note_id, position, old_path, new_path, new_file, renamed_file, "
                        "deleted_file, discussion_id, old_line, new_line, internal, thread_internal, thread "
                        "FROM path_touches")
    frozen = {tuple(_frozen(v) for v in r) for r in stored}
    assert len(stored) == len(frozen) and frozen == expected
    assert any(r[10] is None for r in stored) and any(r[22] for r in stored)  # file rows and shown threads both


def _frozen(value: Any) -> Any:
    return tuple(sorted(value.items())) if isinstance(value, dict) else value


def _lenses(pid: int, url: str) -> dict[str, Lens]:
    # A Guest of an internal project sees its MRs but not its internal notes (below Planner).
    guest = Viewer(7002, "a.guest", access={pid: GUEST}, visibility={pid: "internal"})
    return {"config": hidden_lens(include_confidential=False, include_internal=False),
            "viewer": viewer_lens(guest, url, include_confidential=True, include_internal=True)}


def _threads(answer: dict[str, Any]) -> dict[str, set[str]]:
    return {m["reference"]: {t["discussion_id"] for t in m["threads"]} for m in answer["merge_requests"]}


@pytest.mark.parametrize("lens", ["config", "viewer"])
def test_an_internal_notes_rows_never_reach_file_history(own: Workspace, lens: str) -> None:
    """GitLab marks a review reply internal, and every note of another thread (the only one on its
    path): the graph layer rebuilds the MRs' rows. Through the lens the first thread is not shown
    (GitLab makes the whole thread internal) though its public note still counts its MR, and the
    second path's history is empty; without a lens both are there."""
    db = own.config.duckdb_path
    # A thread with a reply on the same path; and a path only one thread's notes are on.
    [(replied, mr_a, path_a, reply)] = read(db, """
        SELECT n.discussion_id, n.noteable_id, np.new_path, max(n.id) FILTER (WHERE n.position > 0)
        FROM notes n JOIN note_positions np ON np.note_id = n.id WHERE n.noteable_type = 'MergeRequest'
        GROUP BY ALL HAVING count(*) > 1 ORDER BY 1 LIMIT 1""")
    [(alone, mr_b, path_b)] = read(db, """
        SELECT any_value(n.discussion_id), any_value(n.noteable_id), np.new_path
        FROM notes n JOIN note_positions np ON np.note_id = n.id WHERE n.noteable_type = 'MergeRequest'
          AND np.new_path = np.old_path AND np.new_path <> ? AND n.discussion_id <> ?
        GROUP BY np.new_path HAVING count(DISTINCT n.discussion_id) = 1 AND count(DISTINCT n.noteable_id) = 1
        ORDER BY 3 LIMIT 1""", [path_a, replied])
    with write_connection(db) as con:
        con.execute("UPDATE notes SET internal = true WHERE id = ? OR discussion_id = ?", [reply, alone])
        # Its review notes are all that say an MR touched path_b (a note on a diff since rewritten).
        touched = [r[0] for r in con.execute("SELECT DISTINCT merge_request_id FROM mr_files "
                                             "WHERE new_path = ? OR old_path = ?", [path_b, path_b]).fetchall()]
        con.execute("DELETE FROM mr_files WHERE new_path = ? OR old_path = ?", [path_b, path_b])
        path_rows.rebuild(con, sorted({mr_a, mr_b, *touched}))
    [(pid,)] = read(db, "SELECT project_id FROM merge_requests WHERE id = ?", [mr_a])
    plain_a, plain_b = history(own, path_a).as_dict(), history(own, path_b).as_dict()
    assert any(replied in threads for threads in _threads(plain_a).values())
    assert plain_b["total"] == 1 and alone in set().union(*_threads(plain_b).values())
    reader = StoreReader(db)
    try:
        lensed = own.with_(lens=_lenses(pid, own.config.gitlab.url)[lens], reader=reader)
        with lensed.read() as con:
            assert not con.execute("SELECT * FROM path_touches WHERE internal").fetchall()
            assert not con.execute("SELECT * FROM path_touches WHERE discussion_id = ? AND thread IS NOT NULL",
                                   [replied]).fetchall()
        hidden_a, hidden_b = history(lensed, path_a).as_dict(), history(lensed, path_b).as_dict()
    finally:
        reader.close()
    assert {m["reference"] for m in hidden_a["merge_requests"]} == {m["reference"] for m in plain_a["merge_requests"]}
    assert not any(replied in threads for threads in _threads(hidden_a).values())
    assert hidden_b["total"] == 0 and hidden_b["merge_requests"] == []


def test_a_hidden_merge_requests_rows_never_reach_file_history(sample: SampleStore) -> None:
    """A private project's Guest does not see its MRs: their rows are behind the lens, and the
    history of a path only they touched is empty; a Guest of the same project made internal gets
    them."""
    db = sample.config.duckdb_path
    [(pid, path)] = read(db, """
        SELECT any_value(project_id), path FROM (SELECT project_id, new_path AS path FROM path_touches
                                                 UNION ALL SELECT project_id, old_path FROM path_touches)
        WHERE path IS NOT NULL GROUP BY path HAVING count(DISTINCT project_id) = 1 ORDER BY count(*) DESC, 2 LIMIT 1""")
    url = sample.config.gitlab.url
    private = viewer_lens(Viewer(7002, "a.guest", access={pid: GUEST}, visibility={pid: "private"}), url,
                          include_confidential=True, include_internal=True)
    internal = viewer_lens(Viewer(7002, "a.guest", access={pid: GUEST}, visibility={pid: "internal"}), url,
                           include_confidential=True, include_internal=True)
    plain = Workspace(sample.config)
    reader = StoreReader(db)
    try:
        hidden = plain.with_(lens=private, reader=reader)
        with hidden.read() as con:
            assert not con.execute("SELECT * FROM path_touches WHERE project_id = ?", [pid]).fetchall()
        assert history(hidden, path).as_dict()["total"] == 0
        shown = history(plain.with_(lens=internal, reader=reader), path).as_dict()
    finally:
        reader.close()
    every = history(plain, path).as_dict()  # (links to what the guest does not read aside)
    assert shown["total"] == every["total"] > 0
    assert [m["reference"] for m in shown["merge_requests"]] == [m["reference"] for m in every["merge_requests"]]


def test_the_purge_of_a_project_takes_its_rows(own: Workspace) -> None:
    db = own.config.duckdb_path
    [(pid, path, rows)] = read(db, "SELECT t.project_id, p.path_with_namespace, count(*) FROM path_touches t "
                                   "JOIN projects p ON p.id = t.project_id GROUP BY ALL ORDER BY 1 LIMIT 1")
    others = read(db, "SELECT count(*) FROM path_touches WHERE project_id <> ?", [pid])[0][0]
    assert rows and others
    purge_store(own, RemovedProject(pid, path, 0))
    assert read(db, "SELECT count(*) FROM path_touches WHERE project_id = ?", [pid]) == [(0,)]
    assert read(db, "SELECT count(*) FROM path_touches") == [(others,)]
