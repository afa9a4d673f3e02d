"""`ui` stopping: a run whose termination request did not take effect is interrupted directly.

A real Dagster instance and a real process standing in for a run worker: it records its PID on
the run as a batch run does (`tag_process`) and, on SIGINT, ends as an interrupted run does. No
code server answers the termination request here, which is the failure being covered."""

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

import dagster as dg
import pytest

from gitlab_knowledge.defs.cancel import cancel_runs, interrupt_process
from gitlab_knowledge.defs.run_slots import HOST_TAG, PID_TAG, PROCESS_START_TAG
from gitlab_knowledge.sync.runs import HOSTNAME, process_start

WORKER = """
import signal, sys
def interrupted(*_):
    print("interrupted", flush=True)
    sys.exit(0)
signal.signal(signal.SIGINT, interrupted)
print("ready", flush=True)
sys.stdin.read()  # until the test closes it: ends without a signal
print("not interrupted", flush=True)
"""


@dg.op
def _noop() -> None:
    return None


@dg.job
def _job() -> None:
    _noop()


@pytest.fixture
def worker() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _run(instance: dg.DagsterInstance, pid: int, start: str | None, host: str = HOSTNAME) -> str:
    run = instance.create_run_for_job(_job, status=dg.DagsterRunStatus.STARTED,
                                      tags={PID_TAG: str(pid), HOST_TAG: host, PROCESS_START_TAG: start or ""})
    return run.run_id


def _ended(proc: subprocess.Popen[str]) -> str:
    """What the worker printed last, once it has ended (its stdin closed if it had not)."""
    assert proc.stdin is not None and proc.stdout is not None
    if proc.poll() is None:
        proc.stdin.close()
    proc.wait(timeout=60)
    return proc.stdout.read().strip()


def test_a_run_still_going_after_the_request_is_interrupted_directly(worker):
    with dg.instance_for_test() as instance:
        run_id = _run(instance, worker.pid, process_start(worker.pid))

        def sleep(seconds: float) -> None:  # once the worker has ended, the run is CANCELED, as a run worker's is
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.wait(timeout=seconds)
                instance.report_run_canceled(instance.get_run_by_id(run_id))

        cancel_runs(instance, [run_id], wait_s=60, sleep=sleep, resend_s=0)
        assert _ended(worker) == "interrupted"
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.CANCELED


def test_no_signal_before_the_request_had_its_time(worker):
    with dg.instance_for_test() as instance:
        run_id = _run(instance, worker.pid, process_start(worker.pid))
        # The run ends on its own during the first wait, well before `resend_s`.
        cancel_runs(instance, [run_id], wait_s=600, resend_s=600,
                    sleep=lambda _s: instance.report_run_canceled(instance.get_run_by_id(run_id)))
        assert _ended(worker) == "not interrupted"


@pytest.mark.parametrize("case", ["pid reused", "no start recorded", "another host"])
def test_no_signal_to_a_process_that_may_not_be_the_runs(worker, case):
    start = process_start(worker.pid)
    assert start is not None
    tags = {"pid reused": (str(float(start) - 3600), HOSTNAME), "no start recorded": (None, HOSTNAME),
            "another host": (start, "elsewhere")}[case]
    with dg.instance_for_test() as instance:
        run_id = _run(instance, worker.pid, tags[0], host=tags[1])
        assert interrupt_process(instance, run_id) is False
        assert _ended(worker) == "not interrupted"


def test_no_signal_to_the_stopping_process_itself():
    with dg.instance_for_test() as instance:
        run_id = _run(instance, os.getpid(), process_start(os.getpid()))
        assert interrupt_process(instance, run_id) is False
