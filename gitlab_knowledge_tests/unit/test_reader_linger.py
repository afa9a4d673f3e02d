"""A server's reader keeps the store attached for a moment after a read (store/reader.py `linger`),
so the calls of a burst attach it once; it never answers from an older version of the store than
a fresh attach would, whoever wrote it, and it lets the file go once the moment is over."""

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from gitlab_knowledge.store.db import read_connection
from gitlab_knowledge.store.reader import StoreReader
from gitlab_knowledge.store.visibility import hidden_lens
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.conftest import store_config

REPO = Path(__file__).resolve().parents[2]


def make_store(tmp_path: Path) -> Workspace:
    workspace = Workspace(store_config(tmp_path))
    with workspace.write() as con:
        con.execute("INSERT INTO projects (id, path_with_namespace) VALUES (1, 'acme/platform')")
        con.execute("INSERT INTO issues (id, project_id, iid, title, state, confidential, change_seq) VALUES "
                    "(10, 1, 1, 'open', 'opened', false, 1), (11, 1, 2, 'secret', 'opened', true, 1)")
    return workspace


def counted(reader: StoreReader) -> list[int]:
    """How many times `reader` attaches the store."""
    attaches: list[int] = []
    attach = reader._attach

    def counting(instance: Any, wait: float) -> None:
        attaches.append(1)
        attach(instance, wait)

    reader._attach = counting  # type: ignore[method-assign]
    return attaches


def titles(workspace: Workspace) -> list[str]:
    with workspace.read() as con:
        return [r[0] for r in con.execute("SELECT title FROM issues ORDER BY id").fetchall()]


def test_a_burst_of_reads_attaches_once_and_each_lens_sees_its_own(tmp_path: Path) -> None:
    workspace = make_store(tmp_path)
    reader = StoreReader(workspace.config.duckdb_path, linger=3600.0)
    attaches = counted(reader)
    hidden = workspace.with_(reader=reader, lens=hidden_lens(include_confidential=False, include_internal=False))
    everything = workspace.with_(reader=reader, lens=None)
    seen = [titles(hidden), titles(everything), titles(hidden), titles(everything)]
    assert seen == [["open"], ["open", "secret"], ["open"], ["open", "secret"]]
    assert len(attaches) == 1  # each read attached and detached the store before
    reader.close()


def test_a_write_of_this_process_is_seen_by_the_next_read(tmp_path: Path) -> None:
    workspace = make_store(tmp_path)
    reader = StoreReader(workspace.config.duckdb_path, linger=3600.0)
    attaches = counted(reader)
    served = workspace.with_(reader=reader, lens=hidden_lens(include_confidential=False, include_internal=False))
    assert titles(served) == ["open"]
    # The store is still attached: the write's open makes the reader let it go (DuckDB refuses a
    # file another database of the process has attached), and the next read attaches it again.
    with workspace.write() as con:
        con.execute("INSERT INTO issues (id, project_id, iid, title, state, change_seq) VALUES (12, 1, 3, 'later', 'opened', 2)")
    assert titles(served) == ["open", "later"]
    with read_connection(workspace.config.duckdb_path) as con:  # a plain read of this process opens it too
        assert con.execute("SELECT count(*) FROM issues").fetchone() == (3,)
    other = StoreReader(workspace.config.duckdb_path, linger=3600.0)  # so does another reader
    assert titles(workspace.with_(reader=other)) == ["open", "secret", "later"]
    assert titles(served) == ["open", "later"]
    assert len(attaches) == 3
    reader.close()
    other.close()


def test_the_lens_copies_of_a_users_rows_follow_each_write(tmp_path: Path) -> None:
    """The hidden lens keeps copies of a user's rows, mentions and threads (store/visibility.py
    COPIED), not views: a write makes the next read copy them again, so a row written since shows
    and an issue made confidential since takes its rows with it."""
    workspace = make_store(tmp_path)
    reader = StoreReader(workspace.config.duckdb_path, linger=3600.0)
    served = workspace.with_(reader=reader, lens=hidden_lens(include_confidential=False, include_internal=False))
    people = ("SELECT 'user_items', item_id FROM user_items UNION ALL SELECT 'user_item_notes', item_id FROM "
              "user_item_notes UNION ALL SELECT 'mentions', item_id FROM mentions UNION ALL SELECT 'discussions', "
              "issue_id FROM discussions ORDER BY ALL")

    def rows() -> list[tuple[str, int]]:
        with served.read() as con:
            return con.execute(people).fetchall()

    def write(*statements: str) -> None:
        with workspace.write() as con:
            for statement in statements:
                con.execute(statement)

    def of_issue(issue: int) -> tuple[str, ...]:
        return (f"INSERT INTO user_items (username, item_type, item_id, project_id, role, internal) "
                f"VALUES ('ana', 'issue', {issue}, 1, 'author', false)",
                f"INSERT INTO user_item_notes (username, item_type, item_id, project_id, note_id, author_username, "
                f"created_at, internal) VALUES ('ana', 'issue', {issue}, 1, {issue}00, 'bo', '2026-01-02', false)",
                f"INSERT INTO mentions (project_id, item_type, item_id, found_in, username, author_username) "
                f"VALUES (1, 'issue', {issue}, 'description', 'ana', 'bo')",
                f"INSERT INTO discussions (id, project_id, noteable_type, issue_id, individual_note, note_count) "
                f"VALUES ('d{issue}', 1, 'Issue', {issue}, false, 1)")

    write(*of_issue(11))
    assert rows() == []  # the confidential issue's
    write(*of_issue(10))
    assert rows() == [("discussions", 10), ("mentions", 10), ("user_item_notes", 10), ("user_items", 10)]
    write("UPDATE issues SET confidential = true WHERE id = 10")
    assert rows() == []
    write("UPDATE issues SET confidential = false")
    assert [table for table, _ in rows()] == ["discussions"] * 2 + ["mentions"] * 2 + ["user_item_notes"] * 2 + ["user_items"] * 2
    reader.close()


def test_a_file_replaced_under_an_attachment_is_read_anew(tmp_path: Path) -> None:
    workspace = make_store(tmp_path)
    path = workspace.config.duckdb_path
    reader = StoreReader(path, linger=3600.0)
    served = workspace.with_(reader=reader)
    assert titles(served) == ["open", "secret"]
    # A copy written elsewhere and moved over the store (a restore): nothing of this process
    # opened the store's path, so only the files' stamp tells the attachment is old.
    copy = tmp_path / "copy" / path.name
    copy.parent.mkdir()
    shutil.copy(path, copy)
    copied = Workspace(store_config(copy.parent))
    with copied.write() as con:
        con.execute("DELETE FROM issues WHERE id = 11")
    os.replace(copy, path)
    assert titles(served) == ["open"]
    reader.close()


def test_another_process_writes_once_the_linger_is_over_and_the_next_read_sees_it(tmp_path: Path) -> None:
    workspace = make_store(tmp_path)
    reader = StoreReader(workspace.config.duckdb_path, linger=0.05)
    served = workspace.with_(reader=reader)
    assert titles(served) == ["open", "secret"]
    # The writer meets the lock while the reader lingers and gets in with its ordinary retries.
    script = ("import sys; from pathlib import Path; from gitlab_knowledge.store.db import write_connection\n"
              "with write_connection(Path(sys.argv[1]), wait=60) as con:\n"
              "    con.execute(\"INSERT INTO issues (id, project_id, iid, title, state, change_seq) VALUES (12, 1, 3, 'later', 'opened', 2)\")\n")
    done = subprocess.run([sys.executable, "-c", script, str(workspace.config.duckdb_path)], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert titles(served) == ["open", "secret", "later"]
    reader.close()


def test_the_store_is_let_go_after_the_linger_and_at_once_without_one(tmp_path: Path) -> None:
    workspace = make_store(tmp_path)
    lingering = StoreReader(workspace.config.duckdb_path, linger=0.01)
    titles(workspace.with_(reader=lingering))
    let_go = threading.Event()

    def watch() -> None:  # the detacher's thread detaches it: no read or open of this process asks it to
        while lingering._attached:
            threading.Event().wait(0.01)
        let_go.set()

    threading.Thread(target=watch, daemon=True).start()
    assert let_go.wait(60)
    assert lingering._instance is not None  # the instance (and its lenses) stays; only the file goes
    lingering.close()
    once = StoreReader(workspace.config.duckdb_path, linger=0)
    titles(workspace.with_(reader=once))
    assert not once._attached
    once.close()


@pytest.mark.parametrize("linger", [0.0, 3600.0])
def test_reads_on_several_threads_share_one_attachment(tmp_path: Path, linger: float) -> None:
    workspace = make_store(tmp_path)
    reader = StoreReader(workspace.config.duckdb_path, linger=linger)
    attaches = counted(reader)
    served = workspace.with_(reader=reader)
    both_in = threading.Barrier(2, timeout=30)
    seen: list[list[str]] = []

    def read() -> None:
        with served.read() as con:
            both_in.wait()
            seen.append([r[0] for r in con.execute("SELECT title FROM issues ORDER BY id").fetchall()])

    threads = [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [["open", "secret"]] * 2 and len(attaches) == 1
    reader.close()


def test_a_process_exiting_while_its_reader_lingers_exits_cleanly_and_lets_the_store_go(tmp_path: Path) -> None:
    workspace = make_store(tmp_path)
    script = ("import sys; from pathlib import Path; from gitlab_knowledge.store.reader import StoreReader\n"
              "reader = StoreReader(Path(sys.argv[1]), linger=3600.0)\n"
              "with reader.read(5.0) as con:\n"
              "    print(con.execute('SELECT count(*) FROM issues').fetchone()[0])\n"
              "print(reader._attached)\n")  # exits with the store attached: the exit lets it go
    done = subprocess.run([sys.executable, "-c", script, str(workspace.config.duckdb_path)], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.split(), done.stderr) == (0, ["2", "True"], "")
    with workspace.write(wait=0) as con:  # nothing of it is left holding the file
        con.execute("DELETE FROM issues WHERE id = 11")
