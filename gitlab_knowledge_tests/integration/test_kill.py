"""kill -9 of a real process running `python -m gitlab_knowledge sync` at random points (each forked
from a parent that imported the product once, support/zygote.py: what is killed is the sync, not
its imports), then a sync that runs to the end: the store must equal a from-scratch sync of the
same GitLab (same rows, no duplicates), and every layer must agree (documents == vectors ==
lexical entries).

GitLab changes between attempts (new notes, edits, a new issue), so every attempt has work to be
killed in. Kill points alternate between "after N API requests" (inside fetching and page commits)
and "after T seconds" (anywhere, including documents, embeddings and index writes).
"""

import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitlab_knowledge_sandbox import SandboxGitLab, generate_dataset
from gitlab_knowledge_tests.conftest import subprocess_env, write_config_file
from gitlab_knowledge_tests.helpers import (
    REFERENCE_LAYERS,
    kill_at_random_points,
    layer_counts,
    rows,
    scalar,
    snapshot,
)
from gitlab_knowledge_tests.support.zygote import Child, Zygote

KILLS = int(os.environ.get("GK_KILL_POINTS", "2"))  # the CLI path; drills/ kills 20 times


@pytest.fixture(scope="module")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Zygote]:
    with Zygote(subprocess_env(), tmp_path_factory.mktemp("zygote")) as parent:
        yield parent  # its close SIGKILLs any child still running: no orphans


def _sync(zygote: Zygote, config_path: Path, cwd: Path) -> Child:
    return zygote.spawn("gitlab_knowledge", ["--config", str(config_path), "sync"], cwd=cwd)


def _finish(child: Child) -> None:
    _out, err = child.communicate(timeout=180)
    assert child.returncode == 0, err.decode()


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny")
    generate_dataset(out, projects=1, issues=18, mrs=8, seed=5, threads_per_parent_mean=2.5)
    return out


def test_kill_9_at_random_points_then_sync_equals_a_clean_sync(tiny_dataset, tmp_path, make_config, zygote):
    rng = random.Random(20261122)
    with SandboxGitLab(dataset=tiny_dataset, latency_ms=10) as sb:
        config_path = write_config_file(tmp_path / "victim.toml", sb, tmp_path / "victim-data", per_page=4)
        started = time.monotonic()
        _finish(_sync(zygote, config_path, tmp_path))  # a first complete sync: the store has every layer
        full_run = time.monotonic() - started
        landed = kill_at_random_points(lambda: _sync(zygote, config_path, tmp_path), sb, rng, KILLS, full_run)
        assert sum(landed.values()) == KILLS, f"only {landed} of {KILLS} kill points landed while a sync ran"
        last = _sync(zygote, config_path, tmp_path)
        # A clean sync of the same GitLab, side by side with the last one (both only read it now),
        # compared up to its documents: it stops there.
        reference_path = write_config_file(tmp_path / "ref.toml", sb, tmp_path / "ref-data", per_page=4)
        reference = zygote.spawn("gitlab_knowledge_tests.support.pipeline_runner",
                                 [str(reference_path), *REFERENCE_LAYERS], cwd=tmp_path)
        _finish(last)
        _finish(reference)

    victim_config = make_config(sb, data_dir=tmp_path / "victim-data")
    reference_config = make_config(sb, data_dir=tmp_path / "ref-data")
    assert snapshot(victim_config) == snapshot(reference_config)
    assert scalar(victim_config, "SELECT count(*) - count(DISTINCT id) FROM notes") == 0
    assert scalar(victim_config, "SELECT count(*) FROM notes WHERE body LIKE 'attempt %'") >= 3 * KILLS
    documents, vectors, lexical = layer_counts(victim_config)
    assert documents == vectors == lexical == scalar(reference_config, "SELECT count(*) FROM documents")
    statuses = {status for (status,) in rows(victim_config, "SELECT status FROM sync_runs")}
    assert "running" not in statuses, "killed runs are marked abandoned by the next sync"
