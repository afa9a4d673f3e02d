"""A batch keeps the DuckDB store open across a project's store layers (`db.holding_open`): the
layers' many short opens become cursors of one connection, so the file is opened (and, on the
last close, checkpointed) once for them, not once per open; outside the hold, opens are short and
the file is free for other processes again."""

import subprocess
import sys
import threading
from pathlib import Path

import pytest

import gitlab_knowledge.store.db as db
from gitlab_knowledge.store import knocking


def other_process_can_read(path: Path) -> bool:
    code = f"import duckdb; duckdb.connect({str(path)!r}, read_only=True).close()"
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def test_opens_inside_a_hold_are_cursors_of_one_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "store.duckdb"
    with db.write_connection(path) as con:  # created, schema ensured
        con.execute("CREATE TABLE t (x INTEGER)")
    opens: list[bool] = []
    real_open = db._open

    def counting(p: Path, read_only: bool, wait: float):
        opens.append(read_only)
        return real_open(p, read_only, wait)

    monkeypatch.setattr(db, "_open", counting)
    with db.holding_open(path):
        for i in range(5):
            with db.write_connection(path) as con:
                con.execute("INSERT INTO t VALUES (?)", [i])
            with db.read_connection(path) as con:
                assert con.execute("SELECT count(*) FROM t").fetchone() == (i + 1,)
        with pytest.raises(RuntimeError), db.write_connection(path) as con:  # a failed write rolls back
            con.execute("BEGIN")
            con.execute("INSERT INTO t VALUES (99)")
            raise RuntimeError("boom")
    assert opens == [False]  # one open for the ten, not ten
    assert other_process_can_read(path)  # released: the file is free again
    with db.read_connection(path) as con:
        assert con.execute("SELECT count(*) FROM t").fetchone() == (5,)
    assert opens == [False, True]  # and opens are ordinary again


def test_under_one_writer_a_connection_of_another_thread_waits_for_its_turn(tmp_path: Path):
    # A batch's fetch threads commit while its own thread runs the store layers of the projects
    # already fetched (sync/many.py): each connection, held or not, is taken one at a time.
    import threading

    path = tmp_path / "store.duckdb"
    with db.write_connection(path) as con:
        con.execute("CREATE TABLE t (x INTEGER)")

    def other_thread_may_connect() -> bool:
        free: list[bool] = []

        def probe() -> None:
            turn = db._turn()  # outside one_writer: a context that never waits
            got = turn.acquire(blocking=False) if hasattr(turn, "acquire") else True
            if got and hasattr(turn, "release"):
                turn.release()
            free.append(got)

        thread = threading.Thread(target=probe)
        thread.start()
        thread.join()
        return free[0]

    with db.write_connection(path):
        assert other_thread_may_connect()  # outside a batch: no turns, as before
    with db.one_writer():
        with db.write_connection(path):
            assert not other_thread_may_connect()
        with db.holding_open(path):
            assert other_thread_may_connect()  # holding the store open is not a turn held for its span
            with db.read_connection(path):
                assert not other_thread_may_connect()
        assert other_thread_may_connect()


def _store_counting_opens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[bool]]:
    """A store with a table `t`, and the opens of the file from then on (read-only or not)."""
    path = tmp_path / "store.duckdb"
    with db.write_connection(path) as con:
        con.execute("CREATE TABLE t (x INTEGER)")
    opens: list[bool] = []
    real_open = db._open
    monkeypatch.setattr(db, "_open", lambda p, read_only, wait: opens.append(read_only) or real_open(p, read_only, wait))
    return path, opens


def test_a_kept_store_is_shared_by_the_holds_inside_it_and_freed_at_its_end(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch):
    path, opens = _store_counting_opens(tmp_path, monkeypatch)
    with db.kept_open(path, hold_s=600.0):
        for i in range(3):
            with db.holding_open(path), db.write_connection(path) as con:  # a pass inside: the kept connection
                con.execute("INSERT INTO t VALUES (?)", [i])
        assert not other_process_can_read(path)  # the passes' holds ended, the kept one did not
    assert opens == [False]
    assert other_process_can_read(path)


def _keeper_rounds(monkeypatch: pytest.MonkeyPatch, rounds: int) -> threading.Event:
    """An event set once the keeper of `kept_open` has asked `rounds` times whether anyone knocked."""
    asked, done, real = [0], threading.Event(), knocking.knocked_since

    def counting(path: Path, when: float) -> bool:
        asked[0] += 1
        if asked[0] >= rounds:
            done.set()
        return real(path, when)

    monkeypatch.setattr(knocking, "knocked_since", counting)
    return done


def test_a_kept_store_gives_no_gap_while_nobody_knocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Each gap closes the file (a checkpoint) and stops the batch's commits: with nobody waiting,
    the store stays held round after round (the old keeper gave a gap every round)."""
    path, opens = _store_counting_opens(tmp_path, monkeypatch)
    monkeypatch.setattr(db, "UNASKED_GAP_S", 600.0)
    rounds = _keeper_rounds(monkeypatch, 5)
    with db.kept_open(path, hold_s=0.01, gap_s=0.01):
        assert rounds.wait(60)
        with db.write_connection(path) as con:
            con.execute("INSERT INTO t VALUES (1)")
    assert opens == [False]  # one open for the whole span: no gap closed it


def test_a_process_that_knocks_gets_in_while_the_store_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "store.duckdb"
    with db.write_connection(path) as con:
        con.execute("CREATE TABLE t (x INTEGER)")
        con.execute("INSERT INTO t VALUES (7)")
    monkeypatch.setattr(db, "UNASKED_GAP_S", 600.0)  # only a knock opens a gap here
    code = ("import sys; from pathlib import Path; import gitlab_knowledge.store.db as db\n"
            f"with db.read_connection(Path({str(path)!r}), wait=120) as con:\n"
            "    sys.exit(0 if con.execute('SELECT x FROM t').fetchall() == [(7,)] else 3)")
    with db.one_writer(), db.kept_open(path, hold_s=0.05, gap_s=0.5):
        assert not other_process_can_read(path)  # a raw client does not knock: it is not let in
        reader = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert reader.returncode == 0, reader.stderr
        assert knocking.knock_path(path).exists()
        with db.write_connection(path) as con:  # and the hold came back: this process still writes
            con.execute("INSERT INTO t VALUES (8)")


def test_a_process_that_cannot_knock_still_gets_in_within_the_unasked_gap(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "store.duckdb"
    with db.write_connection(path) as con:
        con.execute("CREATE TABLE t (x INTEGER)")
    monkeypatch.setattr(db, "UNASKED_GAP_S", 0.2)
    code = ("import time, duckdb\n"
            "for _ in range(2400):\n"
            "    try:\n"
            f"        duckdb.connect({str(path)!r}, read_only=True).close(); break\n"
            "    except duckdb.Error:\n"
            "        time.sleep(0.05)\n"
            "else:\n"
            "    raise SystemExit(3)")
    with db.one_writer(), db.kept_open(path, hold_s=0.05, gap_s=0.5):
        raw = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert raw.returncode == 0, raw.stderr
    assert not knocking.knock_path(path).exists()
