"""A full disk or a read-only data directory: a clear one-line error, nothing half-written (the
next sync, once there is room, ends with the same store as a clean sync), no temp files left. The
disk fills in each layer in turn (raw, normalized, graph, documents, embeddings, lexical) and under
Dagster's own storage: one line naming where, the same exit code, and the next sync completes.

The data directory is a small tmpfs mounted for the test; where mounting is not permitted the
test says so and skips."""

import contextlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from gitlab_knowledge.config import load_config
from gitlab_knowledge.defs.partitions import ensure_partitions
from gitlab_knowledge.defs.runner import instance_yaml, run_sync
from gitlab_knowledge.errors import StoreError
from gitlab_knowledge.layers import EMBEDDINGS, LAYERS
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_sandbox import SandboxGitLab
from gitlab_knowledge_tests.conftest import forked, store_config, subprocess_env, write_config_file
from gitlab_knowledge_tests.helpers import layer_counts, run_layers, scalar, shared_instance, snapshot
from gitlab_knowledge_tests.support.tmpfs import mounted_tmpfs


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "mnt", "3m") as mount:
        yield mount


def remount(mount: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(mount)], check=True, capture_output=True)


def sync(config: Path) -> subprocess.CompletedProcess:
    return forked(["gitlab_knowledge", "--config", str(config), "sync"], env=subprocess_env(), timeout=300)


def assert_one_line_error(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert any(all(w.lower() in line.lower() for w in words) for line in errors), errors


@contextlib.contextmanager
def filled(mount: Path) -> Iterator[None]:
    """Every byte of the mount taken by a ballast file, freed on exit."""
    ballast = mount / "ballast"
    chunk = b"\0" * (1 << 20)
    with ballast.open("wb", buffering=0) as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(chunk)
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 4096)
    try:
        yield
    finally:
        ballast.unlink()


def leftovers(data: Path) -> list[str]:
    return [p.name for p in data.rglob("gk-*")]


def test_a_full_disk_fails_cleanly_and_the_next_sync_completes(small_dataset, small_store, tmpfs, tmp_path):
    with SandboxGitLab(dataset=small_dataset) as sb:
        config = write_config_file(tmp_path / "gitlab_knowledge.toml", sb, tmpfs / "data")
        full = sync(config)
        assert_one_line_error(full, "No space left on device")
        assert leftovers(tmpfs) == []
        remount(tmpfs, "size=256m")
        again = sync(config)
        assert again.returncode == 0, again.stderr[-2000:]
    assert snapshot(load_config(config)) == snapshot(store_config(small_store))  # a clean sync's
    documents, vectors, lexical = layer_counts(load_config(config))
    assert documents == vectors == lexical > 0
    assert leftovers(tmpfs) == []


def test_a_read_only_data_directory_fails_cleanly_and_search_still_reads(small_dataset, small_store, tmpfs,
                                                                         tmp_path):
    remount(tmpfs, "size=256m")
    # A synced store (the session's, copied: a first sync here would embed it all again), then a
    # sync with nothing new, so the CLI's own Dagster instance exists before the disk turns read-only.
    shutil.copytree(small_store, tmpfs / "data")
    with SandboxGitLab(dataset=small_dataset) as sb:
        config = write_config_file(tmp_path / "gitlab_knowledge.toml", sb, tmpfs / "data")
        assert sync(config).returncode == 0
        before = snapshot(load_config(config))
        project = sb.state.list_projects()[0]["path_with_namespace"]
        title = sb.state.list_items(sb.state.list_projects()[0]["id"], "issues")[0]["title"]
        sb.clock.advance(3600)
        sb.state.create_issue(project, "written while the disk is read-only")
        remount(tmpfs, "ro")
        try:
            assert_one_line_error(sync(config), "read-only")
            embed = forked(["gitlab_knowledge", "--config", str(config), "embed", "--all"], env=subprocess_env(),
                           timeout=300)
            assert_one_line_error(embed, "embeddings layer cannot write", str(tmpfs / "data"), "read-only file system")
            # One line for the whole command (the next project would meet the same disk), no raw
            # OSError, and stdout does not claim the vectors are current.
            assert len([line for line in embed.stderr.splitlines() if line.startswith("error: ")]) == 1, embed.stderr
            assert "OSError" not in embed.stderr and "current" not in embed.stdout, embed.stdout
            assert embed.returncode == 1
            for mode in ("hybrid", "lexical"):
                search = forked(["gitlab_knowledge.search", title, "--json", "--mode", mode, "--config", str(config)],
                                env=subprocess_env(), timeout=120)
                assert search.returncode == 0, search.stderr[-2000:]
                answer = json.loads(search.stdout)
                # Both retrievers read a read-only store: no silent fall back to one of them.
                assert answer["effective_mode"] == mode and answer["results"], answer["warnings"]
        finally:
            remount(tmpfs, "rw")
        assert snapshot(load_config(config)) == before
        assert sync(config).returncode == 0


def test_a_full_disk_in_each_layer_is_one_line_naming_the_layer(small_dataset, small_store, tmpfs, tmp_path,
                                                                 capfd, token_env):
    """For each layer in turn: a new issue brings every layer before it up to date with room to
    spare, then the disk fills and the rest of the job runs. The layer that meets the full disk
    fails with one line naming itself, the path and the cause, exit code 1, nothing else printed
    (no library's own lines); with room again the next sync completes and every layer agrees."""
    remount(tmpfs, "size=64m")
    shutil.copytree(small_store, tmpfs / "data")
    with SandboxGitLab(dataset=small_dataset) as sb:
        config = load_config(write_config_file(tmp_path / "gitlab_knowledge.toml", sb, tmpfs / "data"))
        project = sb.state.list_projects()[0]["path_with_namespace"]
        # In the order a run executes them: the keyword index runs before the embeddings (its
        # priority tag keeps it current through an embedding outage).
        order = [each for each in LAYERS if each is not EMBEDDINGS] + [EMBEDDINGS]
        for i, layer in enumerate(order):
            sb.clock.advance(3600)
            sb.state.create_issue(project, f"written before the disk fills in the {layer.name} layer")
            if i:
                run_layers(config, [project], [each.asset for each in order[:i]])
            capfd.readouterr()
            with filled(tmpfs):
                outcome, = run_sync(Workspace(config), [project], instance=shared_instance(),
                                    selection=[each.asset for each in order[i:]])
                out, err = capfd.readouterr()
            assert isinstance(outcome.error, StoreError), outcome.message
            message = outcome.message or ""
            assert outcome.exit_code == 1 and "\n" not in message, message
            assert message.startswith(f"the {layer.name} layer cannot write {tmpfs / 'data'}"), message
            assert message.endswith(": no space left on device"), message
            assert (out, err) == ("", ""), err[-2000:]
            assert leftovers(tmpfs) == []
        # Dagster's own storage on the same disk (the default layout: <data_dir>/dagster), created
        # and holding the partition while there was room: the run cannot even be recorded.
        home = tmpfs / "data" / "dagster"
        home.mkdir()
        (home / "dagster.yaml").write_text(instance_yaml(home))
        instance = dg.DagsterInstance.from_config(str(home))
        ensure_partitions(instance, [project])
        capfd.readouterr()
        with filled(tmpfs), pytest.raises(StoreError) as stopped:
            run_sync(Workspace(config), list(config.projects), instance=instance)
        out, err = capfd.readouterr()
        message = str(stopped.value)
        assert message.startswith(f"Dagster's run storage cannot write {home}: "), message
        assert "\n" not in message and "SQL" not in message and (out, err) == ("", ""), (message, err[-2000:])
        run_layers(config, list(config.projects), None)
    documents, vectors, lexical = layer_counts(config)
    assert documents == vectors == lexical > 0
    assert scalar(config, "SELECT count(*) FROM issues WHERE title LIKE 'written before the disk fills%'") == len(LAYERS)
