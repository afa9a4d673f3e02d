"""Freshness drill through the real Dagster daemon: twenty changes to GitLab — notes (pairs inside
GitLab's 60 s touch window among them), new items, edits — with an embedding outage, a run
materialized from the UI, and a CLI sync killed with SIGKILL in between. Every change must be
searchable within two sensor intervals of its last cause clearing, with no hand-holding: only the
sensors run the pipeline. At the end every asset check is green and nothing is left behind.

The latencies are printed (pytest -s shows them): the closing note of issue 17 quotes them."""

import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

from gitlab_knowledge.config import load_config
from gitlab_knowledge.errors import StoreError
from gitlab_knowledge.search.filters import Filters
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_sandbox import SAMPLE_DATASET, SandboxGitLab
from gitlab_knowledge_tests.conftest import subprocess_env, write_config_file
from gitlab_knowledge_tests.helpers import run_checks
from gitlab_knowledge_tests.support.dagster_dev import DagsterDev
from gitlab_knowledge_tests.support.fake_ollama import FakeOllama

INTERVAL = 15  # seconds between sensor ticks (600 in production)
PROJECTS = ("acme/platform", "acme/web-app")


@dataclass
class Change:
    word: str  # a canary only this change writes
    cleared: float = 0.0  # when its last cause cleared (monotonic)
    found: float | None = None

    @property
    def latency(self) -> float | None:
        return None if self.found is None else self.found - self.cleared


@dataclass
class Drill:
    sb: SandboxGitLab
    config_path: object
    changes: list[Change] = field(default_factory=list)
    iids: dict[str, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Fixed at the start: new issues must not shift which issue "the k-th" is.
        self.iids = {p: sorted(i["iid"] for i in self.sb.state.list_items(p, "issues")) for p in PROJECTS}

    def word(self) -> str:
        # Letters only, so no analyzer splits it into pieces other documents share.
        n = len(self.changes)
        return "zqcanary" + chr(97 + n // 26) + chr(97 + n % 26)

    def issue(self, project: str, k: int) -> dict:
        return self.sb.state.get(project, "issues", self.iids[project][k])

    def note(self, project: str, k: int) -> Change:
        change = Change(self.word())
        self.sb.state.add_note(project, "issues", self.issue(project, k)["iid"], f"{change.word}: a new note")
        return self._made(change)

    def new_issue(self, project: str) -> Change:
        change = Change(self.word())
        self.sb.state.create_issue(project, f"{change.word} a brand new issue", description="made by the drill")
        return self._made(change)

    def edit_title(self, project: str, k: int) -> Change:
        change = Change(self.word())
        issue = self.issue(project, k)
        self.sb.state.update_issue(project, issue["iid"], title=f"{issue['title']} {change.word}")
        return self._made(change)

    def throttled_pair(self, project: str, k: int) -> list[Change]:
        """Two notes ten seconds apart: GitLab does not move the parent's updated_at for the second."""
        first = self.note(project, k)
        self.sb.clock.advance(10)
        second = Change(self.word())
        before = self.issue(project, k)["updated_at"]
        self.sb.state.add_note(project, "issues", self.issue(project, k)["iid"], f"{second.word}: a throttled note")
        assert self.issue(project, k)["updated_at"] == before, "the sandbox must throttle the touch"
        return [first, self._made(second)]

    def _made(self, change: Change) -> Change:
        change.cleared = time.monotonic()
        self.changes.append(change)
        return change

    def wait_searchable(self, changes: list[Change], timeout: float) -> None:
        config = load_config(self.config_path)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(c.found is None for c in changes):
            searcher = Workspace(config).searcher()
            for change in changes:
                try:
                    hits = searcher.search(change.word, Filters(), "lexical", 5).results
                except StoreError:  # no index yet: the first sync has not got there
                    break
                if change.found is None and hits:
                    change.found = time.monotonic()
            time.sleep(0.5)


def test_every_change_is_searchable_within_two_sensor_intervals(tmp_path):
    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb, FakeOllama() as ollama:
        config_path = write_config_file(tmp_path / "gitlab_knowledge.toml", sb, tmp_path / "data")
        with config_path.open("a") as f:
            f.write(f'[embedding]\nprovider = "ollama"\nollama_host = "{ollama.url}"\ntimeout = 5\n')
        env = subprocess_env(GITLAB_KNOWLEDGE_CONFIG=str(config_path), GITLAB_KNOWLEDGE_SENSOR_INTERVAL=str(INTERVAL))
        drill = Drill(sb, config_path)
        with DagsterDev(tmp_path, env) as dagster:
            # The sensors are on by default: the first ticks sync both projects, never synced yet.
            initial = [drill.note(p, 0) for p in PROJECTS]
            drill.wait_searchable(initial, 180)
            assert all(c.found for c in initial), dagster.log.read_text()[-5000:]

            plain = [drill.note(PROJECTS[0], 1), drill.new_issue(PROJECTS[1]), drill.edit_title(PROJECTS[0], 2),
                     drill.note(PROJECTS[1], 3)]
            pairs = drill.throttled_pair(PROJECTS[0], 4) + drill.throttled_pair(PROJECTS[1], 5)
            drill.wait_searchable(plain + pairs, 4 * INTERVAL)

            # An embedding outage: keyword search keeps up, and once the provider is back the
            # failed embeddings are retried by the automation alone.
            ollama.fail_next(10_000, status=503, error="model is loading")
            outage = [drill.note(PROJECTS[0], 6), drill.new_issue(PROJECTS[0]), drill.note(PROJECTS[1], 7)]
            drill.wait_searchable(outage, 4 * INTERVAL)
            ollama.fail_next(0)
            recovered = time.monotonic()

            # A CLI sync killed mid-way must not block the sensor's runs behind it.
            cli = subprocess.Popen([sys.executable, "-m", "gitlab_knowledge", "--config", str(config_path), "sync"],
                                   env={**env, "DAGSTER_HOME": str(dagster.home)}, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
            time.sleep(4)
            if cli.poll() is None:
                os.kill(cli.pid, signal.SIGKILL)
            cli.wait(30)
            after_kill = [drill.note(PROJECTS[0], 8), drill.edit_title(PROJECTS[1], 9)]
            # A run launched from the UI (GraphQL, as the Launchpad does) in the middle of it all.
            ui_run = dagster.launch("sync_project", PROJECTS[1])
            ui_changes = [drill.note(PROJECTS[1], 10), drill.new_issue(PROJECTS[1]), drill.note(PROJECTS[0], 11),
                          drill.edit_title(PROJECTS[0], 12), drill.note(PROJECTS[1], 13)]
            drill.wait_searchable(after_kill + ui_changes, 6 * INTERVAL)
            assert dagster.wait_run(ui_run) in ("SUCCESS", "FAILURE")

            # The outage's documents get their vectors without anyone asking.
            deadline = time.monotonic() + 6 * INTERVAL
            embedded_at = None
            while time.monotonic() < deadline and embedded_at is None:
                from gitlab_knowledge.index_status import index_status

                status = index_status(Workspace(load_config(config_path)))["projects"]
                if all(p["vectors"]["failed"] + p["vectors"]["unindexed"] + p["vectors"]["stale"] == 0
                       for p in status):
                    embedded_at = time.monotonic()
                time.sleep(1)
            assert embedded_at is not None, status
            # No run is left hanging (the killed CLI run was reaped, the others finished). The
            # change sensor stops first: a run it launched after this wait would be cancelled half
            # way by the server's exit, its later layers left behind for the checks below to see.
            dagster.stop_sensor("gitlab_change_sensor")
            deadline = time.monotonic() + 120
            hanging: list = ["?"]
            while hanging and time.monotonic() < deadline:
                # Partition runs, and the sensor's batch runs (one per tick, no partition tag).
                runs = [r for p in PROJECTS for r in dagster.runs("dagster/partition", p)]
                runs += dagster.runs("gitlab_knowledge/trigger", "sensor")
                hanging = [r for r in runs if r["status"] not in ("SUCCESS", "FAILURE", "CANCELED")]
                time.sleep(1)
            assert not hanging, (hanging, dagster.log.read_text()[-6000:])

    latencies = [c.latency for c in drill.changes]
    missing = [c.word for c in drill.changes if c.found is None]
    assert not missing, f"never searchable: {missing}"
    assert len(drill.changes) == 20
    print(f"\nfreshness drill: {len(latencies)} changes, sensor interval {INTERVAL}s; latency from the cause "
          f"clearing to searchable: min {min(latencies):.1f}s, median {statistics.median(latencies):.1f}s, "
          f"max {max(latencies):.1f}s; re-embedded {embedded_at - recovered:.1f}s after the outage ended")
    assert max(latencies) <= 2 * INTERVAL + 30, latencies  # two intervals, plus one run's own time
    evaluations = run_checks(config_path)
    assert {n: e.metadata for n, e in evaluations.items() if not e.passed} == {}
