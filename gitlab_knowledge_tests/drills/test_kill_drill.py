"""kill -9 at twenty or more random points across syncs of every layer (fetching, page commits,
normalization, documents, embedding writes, index writes), GitLab changing between attempts; then
one sync to the end. The store must equal a clean sync of the same GitLab, every asset check must
pass, and documents == vectors == lexical entries. GK_DRILL_KILLS raises the count."""

import os
import random
import sys
import time
from pathlib import Path

import pytest

from gitlab_knowledge.config import load_config
from gitlab_knowledge_sandbox import SandboxGitLab, generate_dataset
from gitlab_knowledge_tests.conftest import write_config_file
from gitlab_knowledge_tests.helpers import (
    REFERENCE_LAYERS,
    kill_at_random_points,
    layer_counts,
    rows,
    run_checks,
    scalar,
    snapshot,
)
from gitlab_knowledge_tests.support.zygote import Child, Zygote

KILLS = int(os.environ.get("GK_DRILL_KILLS", "20"))


def runner(zygote: Zygote, config_path: Path) -> Child:
    return zygote.spawn("gitlab_knowledge_tests.support.pipeline_runner", [str(config_path)])


def finish(child: Child) -> None:
    _out, err = child.communicate(timeout=300)
    assert child.returncode == 0, err.decode()[-3000:]


@pytest.fixture(scope="module")
def drill_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("drill")
    generate_dataset(out, projects=1, issues=14, mrs=6, seed=9, threads_per_parent_mean=2.0)
    return out


def test_kill_9_anywhere_twenty_times_then_the_store_equals_a_clean_sync(drill_dataset, tmp_path, zygote):
    rng = random.Random(7)
    with SandboxGitLab(dataset=drill_dataset, latency_ms=5) as sb:
        victim_path = write_config_file(tmp_path / "victim.toml", sb, tmp_path / "victim", per_page=3)
        started = time.monotonic()
        finish(runner(zygote, victim_path))
        full = time.monotonic() - started
        by_kind = kill_at_random_points(lambda: runner(zygote, victim_path), sb, rng, KILLS, full)
        landed = sum(by_kind.values())
        assert landed >= KILLS, f"only {landed} kill points landed"
        assert min(by_kind.values()) >= KILLS // 3, by_kind
        # The last sync and the clean one of the same GitLab run side by side: both only read it
        # now. The reference is compared up to its documents, so it stops there.
        last = runner(zygote, victim_path)
        reference_path = write_config_file(tmp_path / "ref.toml", sb, tmp_path / "ref", per_page=3)
        reference_run = zygote.spawn("gitlab_knowledge_tests.support.pipeline_runner",
                                     [str(reference_path), *REFERENCE_LAYERS])
        finish(last)
        finish(reference_run)

    victim, reference = load_config(victim_path), load_config(reference_path)
    assert snapshot(victim) == snapshot(reference)
    assert scalar(victim, "SELECT count(*) - count(DISTINCT id) FROM notes") == 0
    assert scalar(victim, "SELECT count(*) - count(DISTINCT id) FROM documents") == 0
    documents, vectors, lexical = layer_counts(victim)
    assert documents == vectors == lexical == scalar(reference, "SELECT count(*) FROM documents")
    assert rows(victim, "SELECT count(*) FROM sync_runs WHERE status = 'running'") == [(0,)]
    evaluations = run_checks(victim_path)
    assert {name: e.metadata for name, e in evaluations.items() if not e.passed} == {}


@pytest.mark.slow
def test_kill_9_sixty_times_on_a_larger_dataset(tmp_path, tmp_path_factory, monkeypatch, zygote):
    """The same drill, larger: 60 kill points over a dataset of two projects (--runslow)."""
    dataset = tmp_path_factory.mktemp("drill-large")
    generate_dataset(dataset, projects=2, issues=60, mrs=30, seed=13, threads_per_parent_mean=3.0)
    monkeypatch.setattr(sys.modules[__name__], "KILLS", 60)
    test_kill_9_anywhere_twenty_times_then_the_store_equals_a_clean_sync(dataset, tmp_path, zygote)
