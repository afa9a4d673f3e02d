"""Two `python -m gitlab_knowledge sync` processes on one store, with kill -9 of either at random
points: the second is refused at once (exit 5, one line) whether it starts while the first fetches
or at the same moment, a kill of either leaves nothing behind that makes a later sync wait (no
pool slot held or assigned to a dead run), and the next sync completes with the store of a clean
sync. GitLab changes before every attempt, so each has work to be killed in."""

import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitlab_knowledge.config import load_config
from gitlab_knowledge_sandbox import SandboxGitLab, generate_dataset
from gitlab_knowledge_tests.conftest import subprocess_env, write_config_file
from gitlab_knowledge_tests.helpers import change_gitlab, snapshot, sync_all
from gitlab_knowledge_tests.support.zygote import Child, Zygote

ATTEMPTS = 2  # each attempt is two CLI processes (each a full sync, embeddings included): the suite's budget


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("concurrent")
    generate_dataset(out, projects=1, issues=12, mrs=6, seed=3, threads_per_parent_mean=2.0)
    return out


@pytest.fixture(scope="module")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Zygote]:
    """Each `python -m gitlab_knowledge sync` below is a process of its own, forked from one that
    imported the product once (support/zygote.py), not five fresh interpreters importing Dagster."""
    with Zygote(subprocess_env(), tmp_path_factory.mktemp("zygote")) as parent:
        yield parent  # its close SIGKILLs any child still running


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
            reference = write_config_file(tmp_path / "reference.toml", sb, tmp_path / "reference", per_page=3)
            sync_all(load_config(reference))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait(30)
    assert snapshot(load_config(config)) == snapshot(load_config(reference))
