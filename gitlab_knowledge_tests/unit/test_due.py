"""The sensor's decision as a pure function: work that remains after a run always gets a new run
key on the next tick; the same state gives the same key; nothing to do, nothing requested."""

from datetime import datetime, timedelta

from gitlab_knowledge.backlog import Backlog
from gitlab_knowledge.defs.due import (
    MAX_BACKOFF_INTERVALS,
    RETRY_EMBEDDINGS,
    RETRY_FAILED_RUN,
    RunHistory,
    decide,
)
from gitlab_knowledge.errors import GitLabError
from gitlab_knowledge.sync.probe import Probe

NOW = datetime(2026, 11, 1, 12, 0, 30)
QUIET = Probe("acme/platform", changed=False, fingerprint="issues=2026-11-01T11:00:00Z#7|merge_requests=-")


def test_nothing_to_do_requests_nothing():
    decision = decide(QUIET, Backlog(), in_flight=False, attempt=0, now=NOW)
    assert not decision.run and "no change" in decision.skip


def test_a_change_in_gitlab_requests_a_run_and_a_retried_tick_repeats_its_key():
    changed = Probe("acme/platform", changed=True, reasons=["issues updated"], fingerprint="issues=T2#8")
    first = decide(changed, Backlog(), in_flight=False, attempt=0, now=NOW)
    again = decide(changed, Backlog(), in_flight=False, attempt=0, now=NOW)
    assert first.run and first.run_key == again.run_key


def test_a_recheck_still_pending_after_a_run_gets_a_new_key():
    # The first recheck landed inside GitLab's 60 s window: the parent is still pending, but its
    # discussions were fetched again, so the identity moved and the next tick asks once more.
    before = Backlog(pending=1, pending_identity="a1", pending_due=datetime(2026, 11, 1, 12, 1, 2))
    after = Backlog(pending=1, pending_identity="b2", pending_due=datetime(2026, 11, 1, 12, 1, 2))
    one = decide(QUIET, before, in_flight=False, attempt=0, now=NOW)
    two = decide(QUIET, after, in_flight=False, attempt=0, now=NOW)
    assert one.run and two.run and one.run_key != two.run_key
    assert "settles after 12:01:02" in one.reasons[0]


def test_failed_embeddings_are_work_and_each_new_attempt_moves_the_key():
    one = decide(QUIET, Backlog(failed_embeddings=170, failed_identity="x"), in_flight=False, attempt=0, now=NOW)
    two = decide(QUIET, Backlog(failed_embeddings=170, failed_identity="y"), in_flight=False, attempt=0, now=NOW)
    assert one.run and two.run and one.run_key != two.run_key
    assert "170 document(s) failed to embed" in one.reasons[0]


def test_a_layer_behind_its_upstream_is_work():
    behind = Backlog(behind=("normalized: raw seq 120 > watermark 100",))
    decision = decide(QUIET, behind, in_flight=False, attempt=0, now=NOW)
    assert decision.run and "behind upstream" in decision.reasons[0]
    caught_up = Backlog(behind=("normalized: raw seq 130 > watermark 120",))
    assert decide(QUIET, caught_up, in_flight=False, attempt=0, now=NOW).run_key != decision.run_key


def test_a_sync_in_flight_is_not_doubled_and_a_failed_run_gets_a_new_key():
    work = Backlog(behind=("documents: items seq 9 > watermark 8",))
    assert not decide(QUIET, work, in_flight=True, attempt=0, now=NOW).run
    assert decide(QUIET, work, in_flight=False, attempt=1, now=NOW).run_key != \
        decide(QUIET, work, in_flight=False, attempt=0, now=NOW).run_key


def test_a_failed_probe_requests_nothing_and_says_why():
    failed = Probe("acme/platform", changed=False, error=GitLabError("GitLab answered 503"))
    decision = decide(failed, Backlog(behind=("x",)), in_flight=False, attempt=0, now=NOW)
    assert not decision.run and "probe failed: GitLab answered 503" in decision.skip


INTERVAL = 600.0


def test_a_failed_run_with_nothing_new_is_retried_on_backoff_each_retry_its_own_key():
    # Run n failed at `ended`; with nothing new in GitLab the partition would stay red forever.
    ended = datetime(2026, 11, 1, 12, 0, 0)
    waits = []
    keys = set()
    for failed in range(1, 9):
        def at(seconds, failed=failed):
            history = RunHistory(failed=failed, failed_at=ended, now=ended + timedelta(seconds=seconds))
            return decide(QUIET, Backlog(), in_flight=False, attempt=failed, now=NOW, history=history,
                          interval_seconds=INTERVAL)
        wait = INTERVAL * min(2 ** (failed - 1), MAX_BACKOFF_INTERVALS)
        early, due = at(wait - 1), at(wait)
        assert not early.run and f"the last {failed} run(s) failed: retry {failed} after" in early.skip
        assert due.run and due.retry == RETRY_FAILED_RUN and f"retry {failed}" in due.reasons[0]
        assert at(wait + 5).run_key == due.run_key  # a retried tick repeats its key
        keys.add(due.run_key)
        waits.append(wait / INTERVAL)
    assert waits == [1, 2, 4, 8, 16, 32, 32, 32]
    assert len(keys) == 8  # each retry a new key, so Dagster launches it


def test_a_provider_outage_is_one_retry_schedule_not_a_run_per_tick():
    failed_at = datetime(2026, 11, 1, 12, 0, 0)
    runs = []
    for minute in range(0, 60):  # one tick a minute for an hour, the provider down all along
        retries = len(runs)
        # Each retry records a new failed_at (and so a new identity) when it fails again.
        last = runs[-1][1] if runs else failed_at
        work = Backlog(failed_embeddings=170, failed_identity=f"id{retries}", failed_at=last,
                       provider_unavailable=True)
        now = failed_at + timedelta(minutes=minute)
        # Every run the outage touched failed (its embeddings step could not reach the provider).
        history = RunHistory(failed=retries + 1, failed_at=last, embedding_retries=retries, now=now)
        decision = decide(QUIET, work, in_flight=False, attempt=0, now=NOW, history=history, interval_seconds=60)
        if decision.run:
            assert decision.retry == RETRY_EMBEDDINGS and "provider is unavailable" in decision.reasons[0]
            runs.append((decision.run_key, now))
        else:
            assert "failed to embed (the embedding provider is unavailable): retry" in decision.skip
    # 1, 2, 4, 8, 16, 32 minutes apart: 5 runs in the hour, not 60.
    assert [int((b[1] - a[1]).total_seconds() // 60) for a, b in zip(runs, runs[1:], strict=False)] == [2, 4, 8, 16]
    assert [t for _k, t in runs][0] == failed_at + timedelta(minutes=1)
    assert len({k for k, _t in runs}) == len(runs)


def test_failed_embeddings_ride_along_with_a_run_that_is_due_anyway():
    changed = Probe("acme/platform", changed=True, reasons=["issues updated"], fingerprint="issues=T2#8")
    history = RunHistory(embedding_retries=3, now=NOW)
    work = Backlog(failed_embeddings=2, failed_identity="x", failed_at=NOW)
    decision = decide(changed, work, in_flight=False, attempt=0, now=NOW, history=history)
    assert decision.run and not decision.retry and "2 document(s) failed to embed: retrying" in decision.reasons
