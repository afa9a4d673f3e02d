"""Two `python -m gitlab_knowledge sync` processes on one store, with kill -9 of either at random
points: the second is refused at once (exit 5, one line) whether it starts while the first fetches
or at the same moment, a kill of either leaves nothing behind that makes a later sync wait (no
pool slot held or assigned to a dead run), and the next sync completes with the store of a clean
sync, every layer agreeing (documents == vectors == lexical entries) and no run left "running".
GitLab changes before every attempt, so each has work to be killed in. This is the CLI's kill test
(its Dagster bookkeeping included); drills/test_kill_drill.py kills the sync job itself 20 times."""

import os
import random
import signal
import time
from pathlib import Path

import pytest

from gitlab_knowledge.config import load_config
from gitlab_knowledge_sandbox import SandboxGitLab, generate_dataset
from gitlab_knowledge_tests.conftest import write_config_file
from gitlab_knowledge_tests.helpers import (
    REFERENCE_LAYERS,
    change_gitlab,
    layer_counts,
    run_layers,
    scalar,
    snapshot,
)
from gitlab_knowledge_tests.support.zygote import Child, Zygote

ATTEMPTS = 2  # each attempt is two CLI processes (each a full sync, embeddings included): the suite's budget


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("concurrent")
    generate_dataset(out, projects=1, issues=12, mrs=6, seed=3, threads_per_parent_mean=2.0)
    return out


def cli_sync(zygote: Zygote, config: Path, cwd: Path) -> Child:
    # cwd without a dagster.yaml: the instance (runs, pool slots) lives under the data directory.
    return zygote.spawn("gitlab_knowledge", ["--config", str(config), "sync"], cwd=cwd)


def wait_until(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_second_sync_is_refused_at_once_and_killing_either_never_wedges_the_store(dataset, tmp_path, token_env, zygote):
    rng = random.Random(5)
    children: list[Child] = []
    try:
        with SandboxGitLab(dataset=dataset, latency_ms=100) as sb:
            config = write_config_file(tmp_path / "gitlab_knowledge.toml", sb, tmp_path / "data", per_page=3)
            refused = killed = 0
            for attempt in range(ATTEMPTS):
                change_gitlab(sb, rng, attempt)
                sb.reset_stats()
                first = cli_sync(zygote, config, tmp_path)
                if attempt == 0:
                    # The second starts while the first fetches and must be refused while the first
                    # lives; then the first is killed at a random point of what is left of its run.
                    wait_until(lambda child=first: child.poll() is not None or sb.stats()["requests"] >= 2, 60)
                    second = cli_sync(zygote, config, tmp_path)
                    order, victim, delay = (second, first), first, rng.uniform(0.0, 1.5)
                else:
                    # Both at the same moment, one killed at a random point of its start (holding
                    # the lock or not yet): the other completes or is refused, never waits.
                    second = cli_sync(zygote, config, tmp_path)
                    victim = rng.choice([first, second])
                    order, delay = (victim, first if victim is second else second), rng.uniform(0.1, 3.0)
                children += [first, second]
                for child in order:
                    if child is victim:
                        time.sleep(delay)
                        if child.poll() is None:
                            os.kill(child.pid, signal.SIGKILL)
                            killed += 1
                    err = child.communicate(timeout=120)[1].decode()
                    if child.returncode == -signal.SIGKILL:
                        continue
                    assert child.returncode in (0, 5), err[-2000:]
                    if child is second and attempt == 0:
                        # Refused while the first still runs: it did not wait for the first to end
                        # (how long a CLI process takes to start is a benchmark's business).
                        assert child.returncode == 5 and first.poll() is None, err[-2000:]
                    if child.returncode == 5:
                        refused += 1
                        lines = [line for line in err.splitlines() if line.strip()]
                        assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
                        assert "running" in lines[0] or "in progress" in lines[0], lines[0]
            assert refused >= 1 and killed >= 1, (refused, killed)
            final = cli_sync(zygote, config, tmp_path)
            children.append(final)
            err = final.communicate(timeout=120)[1].decode()
            assert final.returncode == 0, err[-2000:]
            # A clean sync of the same GitLab, up to its documents (what the layer counts compare to).
            reference = load_config(write_config_file(tmp_path / "reference.toml", sb, tmp_path / "reference",
                                                      per_page=3))
            run_layers(reference, reference.projects, REFERENCE_LAYERS)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait(30)
    victim = load_config(config)
    assert snapshot(victim) == snapshot(reference)
    # Every layer agrees after a killed CLI sync (the kill drill kills the sync job itself 20 times),
    # and the killed runs are not left "running".
    documents, vectors, lexical = layer_counts(victim)
    assert documents == vectors == lexical == scalar(reference, "SELECT count(*) FROM documents") > 0
    assert scalar(victim, "SELECT count(*) - count(DISTINCT id) FROM documents") == 0
    assert scalar(victim, "SELECT count(*) FROM sync_runs WHERE status = 'running'") == 0
