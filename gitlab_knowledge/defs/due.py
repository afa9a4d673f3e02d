"""What work is due for a project, and whether the change sensor should run its sync.

The sensor asks GitLab what changed (sync/probe.py) and the store what is left undone (`Backlog`
here): ThrottledTouch rechecks not settled yet, a layer behind the one upstream of it, index
entries behind the documents, documents whose embedding failed. `decide` is a pure function of
those facts. Its run key is made of them, and each of them moves when a run does its work (a
recheck moves `discussions_fetched_at`, a layer moves its watermark, a failed embedding records a
new `failed_at`), so work that remains after a run always yields a new key on the next tick,
while a tick retried over the same state yields the same key (Dagster drops the repeat).

Two kinds of leftover work are not retried on every tick but on a backoff of 1, 2, 4 … sensor
intervals (capped at `MAX_BACKOFF_INTERVALS`), counted from the Dagster instance's run history
(`RunHistory`): a partition whose last run failed while GitLab has nothing new (else it would stay
red until the project next changes), and documents whose embedding failed while nothing else is due
(a provider outage would otherwise launch a whole run on every tick).
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

# The backlog is read from the stores alone (`sync-status` shows it without loading Dagster).
from gitlab_knowledge.backlog import Backlog, digest
from gitlab_knowledge.sync.probe import Probe
from gitlab_knowledge.timeutil import naive_utc


@dataclass(frozen=True)
class RunHistory:
    """What the Dagster instance says about one partition's recent sync runs."""

    failed: int = 0  # consecutive failed (or canceled) runs since the last success
    failed_at: datetime | None = None  # when the newest of them ended (UTC)
    embedding_retries: int = 0  # consecutive newest runs launched only to retry failed embeddings
    now: datetime | None = None  # this machine's clock (UTC), which those times are on


# A retry waits 1, 2, 4 … sensor intervals after the previous attempt, at most this many.
MAX_BACKOFF_INTERVALS = 32
RETRY_FAILED_RUN = "failed-run"
RETRY_EMBEDDINGS = "embeddings"


def backoff(retries: int, interval_seconds: float) -> timedelta:
    """The wait before retry number `retries + 1`: 1, 2, 4 … intervals, capped."""
    return timedelta(seconds=interval_seconds * min(2 ** max(retries, 0), MAX_BACKOFF_INTERVALS))


@dataclass(frozen=True)
class Decision:
    project: str
    run: bool
    run_key: str = ""
    reasons: tuple[str, ...] = ()
    skip: str = ""  # why not, when run is False
    retry: str = ""  # RETRY_FAILED_RUN or RETRY_EMBEDDINGS when the run is a retry on backoff


@dataclass
class _Parts:
    key: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)


def decide(probe: Probe, work: Backlog | None, *, in_flight: bool, attempt: int,
           now: datetime | None = None, history: RunHistory | None = None,
           interval_seconds: float = 600.0) -> Decision:
    """Whether to run `probe.project`'s sync now, and under which run key.

    `now` is GitLab's clock (the throttle's); `history.now` this machine's (the backoff's).
    """
    project = probe.project
    if probe.error is not None:
        return Decision(project, False, skip=f"{project}: probe failed: {probe.error}")
    parts = _Parts(key=[project, probe.fingerprint])
    if probe.changed:
        parts.reasons += probe.reasons
    work = work or Backlog()
    history = history or RunHistory()
    if work.pending:
        due = ""
        if work.pending_due is not None and now is not None and work.pending_due > naive_utc(now):
            due = f", settles after {work.pending_due:%H:%M:%S}"
        parts.reasons.append(f"{work.pending} thread recheck(s) pending (GitLab's 60 s note throttle{due})")
        parts.key.append(f"pending={work.pending_identity}")
    if work.behind:
        parts.reasons += [f"behind upstream: {b}" for b in work.behind]
        parts.key.append("behind=" + digest(list(work.behind)))
    retry = ""
    waits: list[str] = []
    if work.failed_embeddings:
        cause = "the embedding provider is unavailable" if work.provider_unavailable else "retrying"
        reason = f"{work.failed_embeddings} document(s) failed to embed ({cause})"
        if parts.reasons:  # a run is due anyway: it retries them too
            parts.reasons.append(f"{work.failed_embeddings} document(s) failed to embed: retrying")
            parts.key.append(f"failed={work.failed_identity}")
        else:  # only the failures: one retry schedule, not a run per tick
            wait = _wait(history.embedding_retries, work.failed_at, history.now, interval_seconds)
            if wait is None:
                parts.reasons.append(f"{reason}: retry {history.embedding_retries + 1} on backoff")
                parts.key += [f"failed={work.failed_identity}", f"retry={history.embedding_retries + 1}"]
                retry = RETRY_EMBEDDINGS
            else:
                waits.append(f"{reason}: retry {history.embedding_retries + 1} after {wait:%H:%M:%S}")
    if not parts.reasons and history.failed and not work.failed_embeddings:
        # Nothing new, but the last run failed: retry it on backoff, or the partition stays red
        # until GitLab next changes. (Failed embeddings have their own schedule above: an outage
        # fails the runs, and a second schedule would double the retries and reset the first.)
        wait = _wait(history.failed - 1, history.failed_at, history.now, interval_seconds)
        if wait is None:
            parts.reasons.append(f"the last {history.failed} run(s) failed: retry {history.failed} on backoff")
            if history.failed_at is not None:  # unique even if a later success resets the count
                parts.key.append(f"retry-of={history.failed_at:%Y%m%dT%H%M%S}")
            retry = RETRY_FAILED_RUN
        else:
            waits.append(f"the last {history.failed} run(s) failed: retry {history.failed} after {wait:%H:%M:%S}")
    if not parts.reasons:
        return Decision(project, False, skip=f"{project}: {'; '.join(waits)}" if waits else f"{project}: no change")
    if in_flight:
        return Decision(project, False, reasons=tuple(parts.reasons),
                        skip=f"{project}: {'; '.join(parts.reasons)}, but a sync is already running")
    parts.key.append(f"attempt={attempt}")
    return Decision(project, True, run_key="|".join(parts.key), reasons=tuple(parts.reasons), retry=retry)


def _wait(retries: int, last: datetime | None, now: datetime | None, interval_seconds: float) -> datetime | None:
    """When the next retry is due, or None if it is due now (or nothing says when the last was)."""
    if last is None or now is None:
        return None
    due = naive_utc(last) + backoff(retries, interval_seconds)
    return due if naive_utc(now) < due else None
