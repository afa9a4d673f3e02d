"""The workspace: the one object between whoever runs the pipeline and the layers.

Dagster assets, the CLI, tests, benchmarks and drills all hand the layers a `Workspace`. It owns
the validated settings and builds every handle a layer needs: short-lived DuckDB connections, the
vector store of a model, the lexical index, GitLab clients, embedding providers and the progress
sink. No layer reads the config file or opens a store on its own, so a test can give a whole
Dagster run a fake GitLab or a fake embedder by building the workspace with them.

In Dagster the workspace is the `workspace` resource (defs/resources.py builds it from the config
file named in run config); `dg.materialize(..., resources={"workspace": ws})` or
`execute_in_process(resources=...)` hands a run a ready-made one instead.
"""

import contextlib
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitlab_knowledge.config import Config, load_config
from gitlab_knowledge.progress import LogProgress, SyncProgress

if TYPE_CHECKING:
    import duckdb

    from gitlab_knowledge.embeddings.provider import EmbeddingProvider
    from gitlab_knowledge.embeddings.vectors import VectorStore
    from gitlab_knowledge.gitlab.client import GitLabClient
    from gitlab_knowledge.lexical.index import LexicalIndex
    from gitlab_knowledge.search.engine import Searcher
    from gitlab_knowledge.store.reader import Lens, StoreReader

GitLabFactory = Callable[[Config], "GitLabClient"]
# Scratch directories are named <prefix><pid>-<random>; the PID says whether their owner is alive.
_SCRATCH = re.compile(r"^gk-[a-z]+-(?:(\d+)-)?[A-Za-z0-9_]+$")
_UNOWNED_SCRATCH_AGE_S = 3600.0  # named before they carried a PID: removed once surely abandoned


def private_dir(path: Path) -> Path:
    """Create `path` (and its parents) if missing; the directory itself readable by its owner only:
    it will hold confidential titles and internal notes. One that exists already is tightened to
    0700 when it is ours (see `tighten_if_ours`)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    tighten_if_ours(path)
    return path


def tighten_if_ours(path: Path) -> bool:
    """Make an existing directory 0700 when this user owns it and everything directly in it; True
    if its mode is (now) private. Git cannot track 0700, so a fresh clone's `data/` is 0755; a
    directory holding another user's files was shared on purpose and is left for `doctor` to
    name."""
    try:
        st = path.stat()
        if st.st_mode & 0o077 == 0:
            return True
        uid = os.getuid()
        if st.st_uid != uid or any(entry.lstat().st_uid != uid for entry in path.iterdir()):
            return False
        path.chmod(0o700)
    except OSError:  # gone, unreadable or on a read-only mount: the writers say so themselves
        return False
    return True


def remove_scratch_leftovers(data_dir: Path) -> list[str]:
    """Remove the scratch directories of processes that are gone (kill -9 skips every cleanup, and
    they hold Parquet copies of document text); returns their names."""
    import psutil

    removed: list[str] = []
    try:
        entries = list(data_dir.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = _SCRATCH.match(entry.name)
        if match is None or not entry.is_dir():
            continue
        pid = int(match.group(1)) if match.group(1) else None
        if pid is not None and (pid == os.getpid() or psutil.pid_exists(pid)):
            continue  # its owner (this process included) is alive: in use
        try:
            if pid is None and time.time() - entry.stat().st_mtime < _UNOWNED_SCRATCH_AGE_S:
                continue
        except OSError:
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry.name)
    return removed
EmbedderFactory = Callable[[Config, "str | None", "str | None"], "EmbeddingProvider"]


def real_gitlab(config: Config) -> "GitLabClient":
    from gitlab_knowledge.gitlab.client import GitLabClient

    return GitLabClient(config.gitlab, config.token())


def real_embedder(config: Config, provider: str | None = None, model: str | None = None) -> "EmbeddingProvider":
    from gitlab_knowledge.embeddings.providers import get_provider

    return get_provider(config, provider, model)


@dataclass(frozen=True)
class Workspace:
    """Settings plus the factories of everything a layer touches."""

    config: Config
    gitlab_factory: GitLabFactory = real_gitlab
    embedder_factory: EmbedderFactory = real_embedder
    progress: SyncProgress | None = None  # None: the run's own log (LogProgress)
    config_path: str | None = None  # the file the settings came from, for subprocesses and Dagster
    # What a reader may see, and how a long-lived process reads: every `read()` goes through them,
    # so no query filters what it was handed (store/visibility.py, store/reader.py).
    lens: "Lens | None" = None  # None: every row
    reader: "StoreReader | None" = field(default=None, compare=False, repr=False)  # None: open the file per read
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def load(cls, config_path: str | os.PathLike[str] | None = None, **factories: Any) -> "Workspace":
        """From a config file (or the usual lookup: $GITLAB_KNOWLEDGE_CONFIG, ./gitlab_knowledge.toml)."""
        return cls(load_config(config_path), config_path=str(config_path) if config_path else None, **factories)

    def with_(self, **changes: Any) -> "Workspace":
        """A copy with some factories, the progress sink, the lens or the reader replaced (and a
        fresh handle cache)."""
        return replace(self, _cache={}, **changes)

    # -- DuckDB: short-lived connections, never held across a layer -------------------------

    def write(self, wait: float = 120.0) -> "contextlib.AbstractContextManager[duckdb.DuckDBPyConnection]":
        from gitlab_knowledge.store.db import write_connection

        return write_connection(self.config.duckdb_path, wait=wait)

    def read(self, wait: float | None = None) -> "contextlib.AbstractContextManager[duckdb.DuckDBPyConnection]":
        """A read-only connection, seeing what the workspace's lens lets through; `wait` defaults to
        the configured lock wait of read commands."""
        wait = self.config.sync.lock_wait_seconds if wait is None else wait
        if self.reader is None and self.lens is None:
            from gitlab_knowledge.store.db import read_connection

            return read_connection(self.config.duckdb_path, wait)
        from gitlab_knowledge.store.reader import StoreReader

        # A lens is a schema of views in a resident instance: without a shared reader, a fresh one
        # (for this read only: it lets the store go as the read ends).
        reader = self.reader if self.reader is not None else StoreReader(self.config.duckdb_path, linger=0)
        return reader.read(wait, self.lens)

    # -- the index stores -------------------------------------------------------------------

    def vectors(self, provider: str, model: str) -> "VectorStore":
        from gitlab_knowledge.embeddings.vectors import VectorStore

        return VectorStore(self.config.lancedb_dir, provider, model)

    def lexical(self, *, create: bool = False) -> "LexicalIndex":
        from gitlab_knowledge.lexical.index import LexicalIndex

        return LexicalIndex(self.config.tantivy_dir, create=create)

    @contextlib.contextmanager
    def scratch(self, prefix: str) -> Iterator[Path]:
        """A private (0700) temporary directory under the data directory (staging files), named
        with this process's PID so that the next process removes it if this one is killed."""
        import tempfile

        data_dir = private_dir(self.config.data_dir)
        remove_scratch_leftovers(data_dir)
        with tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-", dir=data_dir) as tmp:
            yield Path(tmp)

    # -- outside services -------------------------------------------------------------------

    def gitlab(self) -> "GitLabClient":
        """A new GitLab client (async context manager); one per sync run."""
        return self.gitlab_factory(self.config)

    def embedder(self, provider: str | None = None, model: str | None = None) -> "EmbeddingProvider":
        """The embedding provider (the configured one unless named); loaded once per workspace."""
        key = f"embedder:{provider}:{model}"
        if key not in self._cache:
            self._cache[key] = self.embedder_factory(self.config, provider, model)
        embedder: EmbeddingProvider = self._cache[key]
        return embedder

    def progress_for(self, log: Any) -> SyncProgress:
        return self.progress or LogProgress(log)

    # -- the read side ----------------------------------------------------------------------

    def searcher(self, *, warm: bool = False, provider: str | None = None, model: str | None = None) -> "Searcher":
        """A searcher over this workspace's lexical index, vector stores and embedder (the configured
        model's unless `provider`/`model` name one); `warm` holds the vectors in memory."""
        from gitlab_knowledge.search.engine import Searcher

        return Searcher(self, provider, model, warm)

