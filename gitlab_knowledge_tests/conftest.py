"""Shared fixtures: generated datasets, a sandbox GitLab on 127.0.0.1, configs on tmp data dirs."""

import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gitlab_knowledge.config import Config, parse_config
from gitlab_knowledge_sandbox import DEFAULT_TOKEN, SAMPLE_DATASET, SandboxGitLab, generate_dataset
from gitlab_knowledge_tests.support.zygote import Zygote

REPO = Path(__file__).resolve().parents[1]
TOKEN_ENV = "GITLAB_TOKEN"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False, help="also run the larger, slower drills")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two projects, 60 issues+MRs, a few hundred threads: generated, deterministic."""
    out = tmp_path_factory.mktemp("small-dataset")
    generate_dataset(out, projects=2, issues=36, mrs=24, seed=11, threads_per_parent_mean=3.0)
    return out


@pytest.fixture
def sandbox(small_dataset: Path) -> Iterator[SandboxGitLab]:
    with SandboxGitLab(dataset=small_dataset) as sb:
        yield sb


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One project, six issues and three MRs: for a test that needs a whole sync (every layer, the
    embedded model included) but proves nothing by its size. Syncing the small dataset embeds
    ~10x as many documents."""
    out = tmp_path_factory.mktemp("tiny-dataset")
    generate_dataset(out, projects=1, issues=6, mrs=3, seed=5, threads_per_parent_mean=2.0)
    return out


@pytest.fixture
def tiny_sandbox(tiny_dataset: Path) -> Iterator[SandboxGitLab]:
    with SandboxGitLab(dataset=tiny_dataset) as sb:
        yield sb


@pytest.fixture
def token_env(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(TOKEN_ENV, DEFAULT_TOKEN)
    for name in ("GITLAB_URL", "GITLAB_PROJECTS", "GITLAB_KNOWLEDGE_DATA", "GITLAB_KNOWLEDGE_EMBEDDING",
                 "GITLAB_KNOWLEDGE_CONFIG", "DAGSTER_HOME"):
        monkeypatch.delenv(name, raising=False)
    return DEFAULT_TOKEN


@dataclass
class SampleStore:
    config: Config
    config_path: Path
    dead_ollama: str  # an Ollama URL that built a vector table, then went away


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """A private copy of what `build(directory)` makes, built once per test session. Under xdist the
    first worker to ask builds it under the session's shared temp root while the others wait on a
    lock, then each copies it (a store synced and embedded costs 20-30 s of CPU; a copy, well under
    one): every worker still reads and writes only a copy of its own."""
    import fcntl
    import shutil

    mine = tmp_path_factory.mktemp(name)
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        build(mine)
        return mine
    root = tmp_path_factory.getbasetemp().parent  # this session's, shared by its workers only
    shared, done = root / f"shared-{name}", root / f"shared-{name}.done"
    with open(root / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, even if build() raises
        if not done.exists():
            shutil.rmtree(shared, ignore_errors=True)  # what a worker that failed here left
            shared.mkdir()
            build(shared)
            done.touch()
    shutil.rmtree(mine)
    shutil.copytree(shared, mine, ignore=shutil.ignore_patterns("*.sock"))
    return mine


def _build_sample(base: Path) -> None:
    """The bundled sample synced through every layer into base/data, plus a second vector table
    from an Ollama that then went away (its URL in base/dead_ollama)."""
    from gitlab_knowledge.embeddings import refresh as embeddings
    from gitlab_knowledge.embeddings.ollama_provider import OllamaProvider
    from gitlab_knowledge.workspace import Workspace
    from gitlab_knowledge_tests.helpers import index_all, sync_all
    from gitlab_knowledge_tests.support.fake_ollama import FakeOllama

    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        config = parse_config(sample_doc(base, sb.url), base, {}, "test")
        sync_all(config)
        index_all(config)
        (base / "gitlab_url").write_text(sb.url)
    # A second vector table, from an Ollama that then goes away: what degradation looks like.
    with FakeOllama() as fake:
        for project in config.projects:
            embeddings.refresh(Workspace(config), project, provider=OllamaProvider(host=fake.url))
        (base / "dead_ollama").write_text(fake.url)


def sample_doc(base: Path, url: str) -> dict[str, Any]:
    return {"gitlab": {"url": url, "rate_limit": 0}, "projects": ["acme/platform", "acme/web-app"],
            "storage": {"data_dir": str(base / "data")}}


@pytest.fixture(scope="session")
def sample(tmp_path_factory: pytest.TempPathFactory) -> SampleStore:
    """The bundled sample, synced through every layer once for the whole session."""
    os.environ.setdefault(TOKEN_ENV, DEFAULT_TOKEN)
    base = built_once(tmp_path_factory, "sample-store", _build_sample)
    config = parse_config(sample_doc(base, (base / "gitlab_url").read_text()), base, {}, "test")
    path = base / "gitlab_knowledge.toml"
    path.write_text('projects = ["acme/platform", "acme/web-app"]\n[gitlab]\nurl = "http://127.0.0.1:9"\n'
                    f'[storage]\ndata_dir = "{base / "data"}"\n')
    return SampleStore(config, path, (base / "dead_ollama").read_text())


def build_store(base: Path, dataset: Path) -> Config:
    """`dataset` synced through every layer into `base / "data"` (every project it serves)."""
    from gitlab_knowledge_tests.helpers import index_all, sync_all

    with SandboxGitLab(dataset=dataset) as sb:
        doc = {"gitlab": {"url": sb.url, "rate_limit": 0}, "projects": project_paths(sb),
               "storage": {"data_dir": str(base / "data")}}
        config = parse_config(doc, base, {}, "test")
        sync_all(config)
        index_all(config)
    return config


@pytest.fixture(scope="session")
def small_store(small_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small dataset synced through every layer once per session: tests that only need a
    synced store start from a copy of it instead of syncing and embedding again."""
    os.environ.setdefault(TOKEN_ENV, DEFAULT_TOKEN)
    return built_once(tmp_path_factory, "small-store", lambda base: build_store(base, small_dataset)) / "data"


def store_config(data_dir: Path) -> Config:
    """A config that only reads a store (no GitLab needed)."""
    return parse_config({"gitlab": {"url": "http://127.0.0.1:9"}, "projects": ["store/only"],
                         "storage": {"data_dir": str(data_dir)}}, data_dir, {}, "test")


@pytest.fixture
def synced(sandbox: SandboxGitLab, small_store: Path, make_config: Callable[..., Config], tmp_path: Path) -> Config:
    """A config on a private copy of the synced small store, pointed at a fresh sandbox serving
    the same dataset."""
    import shutil

    shutil.copytree(small_store, tmp_path / "synced")
    return make_config(sandbox, data_dir=tmp_path / "synced")


def project_paths(sb: SandboxGitLab) -> list[str]:
    return [p["path_with_namespace"] for p in sb.state.list_projects(order_by="id", sort="asc")]


@pytest.fixture
def make_config(tmp_path: Path, token_env: str) -> Callable[..., Config]:
    def factory(sb: SandboxGitLab, data_dir: Path | None = None, **gitlab: Any) -> Config:
        doc = {
            "gitlab": {"url": sb.url, "rate_limit": 0, "max_retries": 4, "timeout": 5, **gitlab},
            "projects": project_paths(sb),
            "storage": {"data_dir": str(data_dir or tmp_path / "data")},
        }
        return parse_config(doc, tmp_path, {}, "test")

    return factory


def write_config_file(path: Path, sb: SandboxGitLab, data_dir: Path, **gitlab: Any) -> Path:
    import tomli_w

    doc = {
        "projects": project_paths(sb),
        "gitlab": {"url": sb.url, "rate_limit": 0, "max_retries": 4, "timeout": 5, **gitlab},
        "storage": {"data_dir": str(data_dir)},
    }
    path.write_text(tomli_w.dumps(doc), encoding="utf-8")
    return path


_zygote: Zygote | None = None


def shared_zygote() -> Zygote:
    """One parent per test process that imported the product once (support/zygote.py), started
    on first use: a test that runs `python -m gitlab_knowledge ...` as a process of its own forks
    it from here instead of paying a fresh interpreter's imports (~2 s of CPU, several on a
    loaded machine) per command. Closed at the session's end (pytest_sessionfinish)."""
    global _zygote
    if _zygote is None:
        import tempfile

        _zygote = Zygote(subprocess_env(), Path(tempfile.mkdtemp(prefix="gitlab-knowledge-tests-zygote-")))
    return _zygote


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    global _zygote
    if _zygote is not None:
        import shutil

        _zygote.close()  # SIGKILLs any child still running: no orphans
        shutil.rmtree(_zygote.workdir, ignore_errors=True)
        _zygote = None


@pytest.fixture
def zygote() -> Zygote:
    return shared_zygote()


def forked(argv: list[str], *, env: dict[str, str], cwd: Path | None = None,
           timeout: float | None = None) -> "subprocess.CompletedProcess[str]":
    """`subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, env=env,
    cwd=cwd, timeout=timeout)`, the process forked from the shared zygote: the same exit code,
    stdout and stderr. Not for a test about what a fresh interpreter imports, or one that feeds
    stdin (the child's is /dev/null)."""
    return shared_zygote().run(argv[0], argv[1:], cwd=cwd or Path.cwd(), env=env, timeout=timeout)


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITLAB", "DAGSTER_HOME", "OLLAMA"))}
    env.update({TOKEN_ENV: DEFAULT_TOKEN, "NO_COLOR": "1", **extra})
    return env
