"""An interrupt is recognised in every form it reaches our code: among them DuckDB's, which
replaces the exception a signal handler raised during a query with a RuntimeError of its own.
Real DuckDB, a real SIGINT, and Dagster's own interrupt error raised by the handler, as inside a run."""

import os
import signal
import threading
from collections.abc import Iterator

import duckdb
import pytest
from dagster._core.errors import DagsterExecutionInterruptedError

from gitlab_knowledge.errors import StoreError, is_interrupt


@pytest.fixture
def dagster_handler() -> Iterator[None]:
    """SIGINT raises DagsterExecutionInterruptedError, as Dagster's handler does in a run's step."""
    def raise_interrupt(*_: object) -> None:
        raise DagsterExecutionInterruptedError()

    previous = signal.signal(signal.SIGINT, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _signal_during_a_query(rows: int, delay: float = 0.1) -> BaseException | None:
    """What a DuckDB query over `rows` rows in this (the main) thread raises when SIGINT comes
    `delay` s after it began; if the query ended first, what the wait for the signal raises.
    DuckDB sees the signal when the query ends, and raises then."""
    con = duckdb.connect()
    began = threading.Event()

    def send() -> None:
        began.wait()
        threading.Event().wait(delay)
        os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=send)
    sender.start()
    try:
        began.set()
        con.execute("SELECT count(*) FROM range(?) t(i) WHERE i % 7 = 3", [rows]).fetchall()
        sender.join()  # the query ended before the signal: it comes here
    except BaseException as exc:  # noqa: BLE001 - what arrives is the subject
        return exc
    finally:
        sender.join()
        con.close()
    return None


def test_a_signal_during_a_duckdb_query_is_an_interrupt(dagster_handler):
    # The signal can come before the query has begun (a loaded machine: the handler's own
    # exception arrives) or after it ended (a fast one): larger queries until DuckDB's form is seen.
    forms: list[BaseException | None] = []
    for attempt in range(6):
        forms.append(_signal_during_a_query(100_000_000 * 2 ** attempt))
        if isinstance(forms[-1], RuntimeError):
            break
    from_duckdb = [exc for exc in forms if isinstance(exc, Exception)]
    assert from_duckdb, forms
    for exc in from_duckdb:
        assert isinstance(exc, Exception)  # what an `except Exception` takes for a failure
        assert is_interrupt(exc), repr(exc)
        wrapped = StoreError("reading the store failed")
        wrapped.__cause__ = exc
        assert is_interrupt(wrapped)
    assert all(is_interrupt(exc) for exc in forms if exc is not None)


@pytest.mark.parametrize("exc", [RuntimeError("Query interrupted by the user's own code?"), RuntimeError("boom"),
                                 duckdb.IOException("Query interrupted"), ValueError("Query interrupted")])
def test_other_errors_are_not_interrupts(exc):
    assert not is_interrupt(exc)


def test_wrapped_interrupts_are_found_through_their_causes():
    inner = KeyboardInterrupt()
    outer = StoreError("wrapped")
    outer.__context__ = inner
    assert is_interrupt(outer)
    assert is_interrupt(DagsterExecutionInterruptedError())
