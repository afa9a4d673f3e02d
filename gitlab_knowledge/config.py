"""Configuration: a TOML file plus a few environment overrides.

Where the file comes from, first match wins: `--config PATH`, `$GITLAB_KNOWLEDGE_CONFIG`,
`./gitlab_knowledge.toml`. The token itself is never in the file, only the NAME of the environment
variable that holds it. Every problem is reported as one line naming the field.

The checks are hand-written rather than a pydantic model: pydantic reports locations such as
`projects.1.str` and `projects.1.P.path` for one bad entry, several errors per field and its own
wording, so keeping these messages would need a translation layer on top of the models, plus
validators for the environment overrides and paths relative to the file: more code, not less.
"""

import os
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from gitlab_knowledge.errors import ConfigError
from gitlab_knowledge.redact import register_secret

DEFAULT_CONFIG_NAME = "gitlab_knowledge.toml"
CONFIG_ENV = "GITLAB_KNOWLEDGE_CONFIG"
EMBEDDING_PROVIDERS = ("embedded", "ollama")


@dataclass(frozen=True)
class GitLabSettings:
    url: str
    token_env: str = "GITLAB_TOKEN"
    ca_bundle: Path | None = None
    rate_limit: float = 10.0  # requests per second; 0 turns the client-side limiter off
    concurrency: int = 4  # requests in flight at once (per-parent discussion fetches)
    timeout: float = 30.0
    per_page: int = 100
    max_retries: int = 6

    @property
    def api_url(self) -> str:
        return self.url.rstrip("/") + "/api/v4"


@dataclass(frozen=True)
class EmbeddingSettings:
    provider: str = "embedded"
    model: str | None = None  # None: the provider's default
    ollama_host: str = "http://127.0.0.1:11434"
    batch_size: int = 32
    timeout: float = 60.0


@dataclass(frozen=True)
class SearchSettings:
    rrf_k: int = 60
    candidates: int = 50  # each retriever's top-N before fusion


@dataclass(frozen=True)
class SyncSettings:
    stale_after_minutes: float = 15.0  # a running sync silent this long may be taken over with --force
    lock_wait_seconds: float = 10.0  # how long read commands wait for a busy DuckDB file


@dataclass(frozen=True)
class Config:
    gitlab: GitLabSettings
    projects: tuple[str, ...]
    data_dir: Path
    embedding: EmbeddingSettings = field(default_factory=EmbeddingSettings)
    search: SearchSettings = field(default_factory=SearchSettings)
    sync: SyncSettings = field(default_factory=SyncSettings)
    source: str = "defaults"  # where the config came from, for `doctor`

    @property
    def duckdb_path(self) -> Path:
        return self.data_dir / "gitlab_knowledge.duckdb"

    @property
    def lancedb_dir(self) -> Path:
        return self.data_dir / "lancedb"

    @property
    def tantivy_dir(self) -> Path:
        return self.data_dir / "tantivy"

    @property
    def dagster_home(self) -> Path:
        return self.data_dir / "dagster"

    def token(self) -> str:
        """The GitLab token from the environment variable the config names."""
        value = os.environ.get(self.gitlab.token_env, "").strip()
        if not value:
            raise ConfigError(
                f"{self.gitlab.token_env} is not set: export a GitLab personal access token "
                f"(scope read_api) in {self.gitlab.token_env} (gitlab.token_env names the variable)"
            )
        register_secret(value)
        return value


def _expect(value: Any, kind: type | tuple[type, ...], name: str) -> Any:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # TOML booleans are ints to Python; `rate_limit = true` is still a mistake.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        expected = " or ".join(t.__name__ for t in kinds)
        raise ConfigError(f"config field {name} must be {expected}, got {value!r}")
    return value


def _positive(value: Any, name: str, *, allow_zero: bool = False) -> float:
    number = _expect(value, (int, float), name)
    if number < 0 or (number == 0 and not allow_zero):
        raise ConfigError(f"config field {name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return number


def _check_url(url: str, name: str) -> str:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConfigError(f"config field {name} must be an http(s) URL like https://gitlab.example.com, got {url!r}")
    return url.rstrip("/")


def _check_project(path: Any, name: str) -> str:
    path = _expect(path, str, name).strip().strip("/")
    if not path or "/" not in path or any(not part for part in path.split("/")):
        raise ConfigError(f"config field {name} must be a project path like group/project, got {path!r}")
    return path


def _parse_projects(raw: Any) -> list[str]:
    if raw is None:
        return []
    _expect(raw, list, "projects")
    out = []
    for i, item in enumerate(raw):
        if isinstance(item, dict):
            if "path" not in item:
                raise ConfigError(f"config field projects[{i}].path is missing")
            out.append(_check_project(item["path"], f"projects[{i}].path"))
        else:
            out.append(_check_project(item, f"projects[{i}]"))
    return out


def _section(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return _expect(doc.get(name, {}), dict, f"[{name}]")


def _unknown(section: dict[str, Any], allowed: set[str], prefix: str) -> None:
    for key in section:
        if key not in allowed:
            raise ConfigError(f"config field {prefix}{key} is not a known setting (known: {', '.join(sorted(allowed))})")


def parse_config(doc: dict[str, Any], base_dir: Path, env: dict[str, str], source: str) -> Config:
    """Build a Config from a parsed TOML document and the environment (overrides win)."""
    _unknown(doc, {"gitlab", "projects", "storage", "embedding", "search", "sync"}, "")
    gl = _section(doc, "gitlab")
    _unknown(gl, {"url", "token_env", "ca_bundle", "rate_limit", "concurrency", "timeout", "per_page", "max_retries"}, "gitlab.")
    url = env.get("GITLAB_URL") or gl.get("url")
    if not url:
        raise ConfigError("config field gitlab.url is missing (or set GITLAB_URL)")
    url = _check_url(_expect(url, str, "gitlab.url"), "gitlab.url")
    token_env = _expect(gl.get("token_env", "GITLAB_TOKEN"), str, "gitlab.token_env")
    if not token_env.replace("_", "").isalnum():
        raise ConfigError(f"config field gitlab.token_env must be an environment variable name, got {token_env!r}")
    ca_bundle = gl.get("ca_bundle")
    if ca_bundle is not None:
        ca_path = base_dir / Path(_expect(ca_bundle, str, "gitlab.ca_bundle")).expanduser()
        if not ca_path.is_file():
            raise ConfigError(f"config field gitlab.ca_bundle: no such file {ca_path}")
        ca_bundle = ca_path
    per_page = int(_positive(gl.get("per_page", 100), "gitlab.per_page"))
    if per_page > 100:
        raise ConfigError("config field gitlab.per_page must be <= 100 (GitLab's maximum)")
    gitlab = GitLabSettings(
        url=url,
        token_env=token_env,
        ca_bundle=ca_bundle,
        rate_limit=float(_positive(gl.get("rate_limit", 10.0), "gitlab.rate_limit", allow_zero=True)),
        concurrency=int(_positive(gl.get("concurrency", 4), "gitlab.concurrency")),
        timeout=float(_positive(gl.get("timeout", 30.0), "gitlab.timeout")),
        per_page=per_page,
        max_retries=int(_positive(gl.get("max_retries", 6), "gitlab.max_retries", allow_zero=True)),
    )

    if env.get("GITLAB_PROJECTS"):
        projects = [_check_project(p, "GITLAB_PROJECTS") for p in env["GITLAB_PROJECTS"].split(",") if p.strip()]
    else:
        projects = _parse_projects(doc.get("projects"))
    if not projects:
        raise ConfigError("config field projects is empty: list project paths like [\"group/project\"] (or set GITLAB_PROJECTS)")
    if len(set(projects)) != len(projects):
        raise ConfigError("config field projects lists the same project twice")

    storage = _section(doc, "storage")
    _unknown(storage, {"data_dir"}, "storage.")
    if env.get("GITLAB_KNOWLEDGE_DATA"):
        data_dir = Path(env["GITLAB_KNOWLEDGE_DATA"]).expanduser()
    else:
        data_dir = base_dir / Path(_expect(storage.get("data_dir", "data"), str, "storage.data_dir")).expanduser()
    data_dir = data_dir.expanduser().resolve()

    emb = _section(doc, "embedding")
    _unknown(emb, {"provider", "model", "ollama_host", "batch_size", "timeout"}, "embedding.")
    provider = env.get("GITLAB_KNOWLEDGE_EMBEDDING") or emb.get("provider", "embedded")
    if provider not in EMBEDDING_PROVIDERS:
        raise ConfigError(f"config field embedding.provider must be one of {', '.join(EMBEDDING_PROVIDERS)}, got {provider!r}")
    model = emb.get("model")
    if model is not None:
        _expect(model, str, "embedding.model")
    ollama_host = ollama_url(env.get("OLLAMA_HOST")
                             or _expect(emb.get("ollama_host", "127.0.0.1:11434"), str, "embedding.ollama_host"))
    embedding = EmbeddingSettings(
        provider=provider,
        model=model or None,
        ollama_host=_check_url(ollama_host, "embedding.ollama_host"),
        batch_size=int(_positive(emb.get("batch_size", 32), "embedding.batch_size")),
        timeout=float(_positive(emb.get("timeout", 60.0), "embedding.timeout")),
    )

    srch = _section(doc, "search")
    _unknown(srch, {"rrf_k", "candidates"}, "search.")
    search = SearchSettings(
        rrf_k=int(_positive(srch.get("rrf_k", 60), "search.rrf_k")),
        candidates=int(_positive(srch.get("candidates", 50), "search.candidates")),
    )
    snc = _section(doc, "sync")
    _unknown(snc, {"stale_after_minutes", "lock_wait_seconds"}, "sync.")
    sync = SyncSettings(
        stale_after_minutes=float(_positive(snc.get("stale_after_minutes", 15.0), "sync.stale_after_minutes")),
        lock_wait_seconds=float(_positive(snc.get("lock_wait_seconds", 10.0), "sync.lock_wait_seconds", allow_zero=True)),
    )
    return Config(gitlab=gitlab, projects=tuple(projects), data_dir=data_dir, embedding=embedding,
                  search=search, sync=sync, source=source)


def ollama_url(host: str) -> str:
    """OLLAMA_HOST as Ollama reads it: a bare `host` or `host:port` is http on port 11434 by
    default, while an explicit `http(s)://host` keeps its scheme's default port."""
    host = host.strip().rstrip("/") or "127.0.0.1:11434"
    if "://" in host:
        return host
    if host.startswith(":"):
        host = "127.0.0.1" + host
    authority, slash, path = host.partition("/")
    bracketed = authority.startswith("[")
    has_port = authority.rsplit("]", 1)[-1].count(":") == 1 if bracketed else authority.count(":") == 1
    if not has_port:
        authority += ":11434"
    return f"http://{authority}{slash}{path}"


def config_path(explicit: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None) -> Path | None:
    """The config file to read, or None when there is none and the environment must carry it."""
    env = dict(os.environ) if env is None else env
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        return path
    if env.get(CONFIG_ENV):
        path = Path(env[CONFIG_ENV]).expanduser()
        if not path.is_file():
            raise ConfigError(f"config file {path} (from {CONFIG_ENV}) does not exist")
        return path
    default = Path.cwd() / DEFAULT_CONFIG_NAME
    return default if default.is_file() else None


def load_config(explicit: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None) -> Config:
    """Read the config file (if any) and apply environment overrides."""
    env = dict(os.environ) if env is None else env
    path = config_path(explicit, env)
    if path is None:
        if not env.get("GITLAB_URL") and not env.get("GITLAB_PROJECTS"):
            raise ConfigError(
                f"no configuration: create ./{DEFAULT_CONFIG_NAME}, pass --config PATH or set {CONFIG_ENV} "
                "(or set GITLAB_URL and GITLAB_PROJECTS)"
            )
        return parse_config({}, Path.cwd(), env, "environment")
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror}") from None
    return parse_config(doc, path.parent.resolve(), env, str(path))


def with_overrides(config: Config, **changes: Any) -> Config:
    """A copy with top-level fields replaced (tests and the demo use it)."""
    return replace(config, **changes)
