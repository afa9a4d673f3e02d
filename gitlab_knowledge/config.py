"""Configuration: a TOML file plus a few environment overrides.

Where the file comes from, first match wins: `--config PATH`, `$GITLAB_KNOWLEDGE_CONFIG`,
`./gitlab_knowledge.toml`. The token itself is never in the file, only the NAME of the environment
variable that holds it. Every problem is reported as one line naming the field.

The checks are hand-written rather than a pydantic model: pydantic reports locations such as
`projects.1.str` and `projects.1.P.path` for one bad entry, several errors per field and its own
wording, so keeping these messages would need a translation layer on top of the models, plus
validators for the environment overrides and paths relative to the file: more code, not less.
"""

import math
import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlsplit, urlunsplit

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

    @property
    def display_url(self) -> str:
        """The URL without a user or password in it, for output."""
        return without_userinfo(self.url)


@dataclass(frozen=True)
class EmbeddingSettings:
    provider: str = "embedded"
    model: str | None = None  # None: the provider's default
    ollama_host: str = "http://127.0.0.1:11434"
    batch_size: int = 32
    timeout: float = 60.0
    # Other models whose vector tables sync keeps current beside the configured one ("provider" or
    # "provider:model"), e.g. to compare them with `eval --model` or to switch without a gap.
    models: tuple[str, ...] = ()


@dataclass(frozen=True)
class SearchSettings:
    # RRF's k: with two retrievers of 50 candidates, 60 flattens rank 1 vs rank 10 to 13 %; 20 lets
    # a retriever's confident top ranks count (measured with `eval`: README, Search quality).
    rrf_k: int = 20
    candidates: int = 50  # each retriever's top-N before fusion


@dataclass(frozen=True)
class SyncSettings:
    stale_after_minutes: float = 15.0  # a running sync silent this long may be taken over with --force
    lock_wait_seconds: float = 10.0  # how long read commands wait for a busy DuckDB file


@dataclass(frozen=True)
class McpSettings:
    """The MCP server (`python -m gitlab_knowledge.mcp`): what agents may see and how HTTP is guarded."""

    include_confidential: bool = False  # confidential issues and their threads are left out unless true
    include_internal: bool = False  # internal notes are left out unless true
    bearer_token_env: str | None = None  # the NAME of a variable holding the token HTTP clients must send


@dataclass(frozen=True)
class Config:
    gitlab: GitLabSettings
    projects: tuple[str, ...]
    data_dir: Path
    embedding: EmbeddingSettings = field(default_factory=EmbeddingSettings)
    search: SearchSettings = field(default_factory=SearchSettings)
    sync: SyncSettings = field(default_factory=SyncSettings)
    mcp: McpSettings = field(default_factory=McpSettings)
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
        # An HTTP header cannot carry these; found here, not as seven "connection errors" later.
        if not (value.isascii() and value.isprintable()) or any(ch.isspace() for ch in value):
            raise ConfigError(f"{self.gitlab.token_env} holds characters no GitLab token has (non-ASCII, a space or "
                              "a control character such as a newline): set it to the token alone")
        return value


def without_userinfo(url: str) -> str:
    """`url` with any `user:password@` removed."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    return urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[1], parts.path, parts.query, parts.fragment))


def _show(value: Any) -> str:
    """A value as an error message shows it: repr, one line, bounded."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _key(name: Any) -> str:
    # TOML keys may be quoted strings holding newlines; a message stays one line.
    return name if isinstance(name, str) and name.isprintable() else _show(name)


def _expect(value: Any, kind: type | tuple[type, ...], name: str) -> Any:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # TOML booleans are ints to Python; `rate_limit = true` is still a mistake.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        expected = " or ".join(t.__name__ for t in kinds)
        raise ConfigError(f"config field {name} must be {expected}, got {_show(value)}")
    if isinstance(value, str) and ("\x00" in value or not _utf8(value)):
        raise ConfigError(f"config field {name} holds a NUL or an unencodable character: {_show(value)}")
    return value


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates
        return False
    return True


# Upper bounds: past them a value is a typo, and some would overflow what reads them (a timedelta
# of 1e300 minutes, a semaphore of 10**30 permits).
MAXIMA = {"gitlab.rate_limit": 100_000, "gitlab.concurrency": 256, "gitlab.timeout": 86_400, "gitlab.per_page": 100,
          "gitlab.max_retries": 100, "embedding.batch_size": 100_000, "embedding.timeout": 86_400,
          "search.rrf_k": 1_000_000, "search.candidates": 100_000, "sync.stale_after_minutes": 5_256_000,
          "sync.lock_wait_seconds": 86_400}


def _positive(value: Any, name: str, *, allow_zero: bool = False, integer: bool = False) -> float:
    number = _expect(value, (int, float), name)
    if not math.isfinite(number):
        raise ConfigError(f"config field {name} must be a finite number, got {_show(value)}")
    if integer and number != int(number):
        raise ConfigError(f"config field {name} must be a whole number, got {_show(value)}")
    if number < 0 or (number == 0 and not allow_zero):
        raise ConfigError(f"config field {name} must be {'>= 0' if allow_zero else '> 0'}, got {_show(value)}")
    if number > MAXIMA[name]:
        raise ConfigError(f"config field {name} must be <= {MAXIMA[name]:,}, got {_show(value)}")
    return int(number) if integer else number


def _check_url(url: str, name: str) -> str:
    example = "https://gitlab.example.com"
    try:
        parsed = urlparse(url)
        parsed.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError as exc:
        raise ConfigError(f"config field {name} is not a valid URL ({exc}), got {_show(url)}") from None
    if parsed.scheme not in ("http", "https") or not parsed.hostname or not url.isprintable() or " " in url:
        raise ConfigError(f"config field {name} must be an http(s) URL like {example}, got {_show(url)}")
    if parsed.password:
        register_secret(parsed.password)  # a password in the URL is as secret as the token
    return url.rstrip("/")


# GitLab's own rule for a namespace or project path segment (letters, digits, '_', '-', '.').
_SEGMENT = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.\-]*")


def _check_project(path: Any, name: str) -> str:
    path = _expect(path, str, name).strip().strip("/")
    parts = path.split("/")
    if len(parts) < 2 or any(not _SEGMENT.fullmatch(p) or p in (".", "..") for p in parts):
        raise ConfigError(f"config field {name} must be a project path like group/project (letters, digits, "
                          f"'_', '-' and '.' between slashes), got {_show(path)}")
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
            raise ConfigError(f"config field {prefix}{_key(key)} is not a known setting "
                              f"(known: {', '.join(sorted(allowed))})")


def _path(base_dir: Path, value: str, name: str) -> Path:
    try:
        return (base_dir / Path(value).expanduser()).resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"config field {name} is not a usable path ({type(exc).__name__}): {_show(value)}") from None


def parse_config(doc: dict[str, Any], base_dir: Path, env: dict[str, str], source: str) -> Config:
    """Build a Config from a parsed TOML document and the environment (overrides win)."""
    _unknown(doc, {"gitlab", "projects", "storage", "embedding", "search", "sync", "mcp"}, "")
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
        ca_path = _path(base_dir, _expect(ca_bundle, str, "gitlab.ca_bundle"), "gitlab.ca_bundle")
        if not ca_path.is_file():
            raise ConfigError(f"config field gitlab.ca_bundle: no such file {ca_path}")
        ca_bundle = ca_path
    per_page = int(_positive(gl.get("per_page", 100), "gitlab.per_page", integer=True))
    gitlab = GitLabSettings(
        url=url,
        token_env=token_env,
        ca_bundle=ca_bundle,
        rate_limit=float(_positive(gl.get("rate_limit", 10.0), "gitlab.rate_limit", allow_zero=True)),
        concurrency=int(_positive(gl.get("concurrency", 4), "gitlab.concurrency", integer=True)),
        timeout=float(_positive(gl.get("timeout", 30.0), "gitlab.timeout")),
        per_page=per_page,
        max_retries=int(_positive(gl.get("max_retries", 6), "gitlab.max_retries", allow_zero=True, integer=True)),
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
        data_dir = _path(Path.cwd(), env["GITLAB_KNOWLEDGE_DATA"], "storage.data_dir (GITLAB_KNOWLEDGE_DATA)")
    else:
        data_dir = _path(base_dir, _expect(storage.get("data_dir", "data"), str, "storage.data_dir"), "storage.data_dir")
    if data_dir.exists() and not data_dir.is_dir():
        raise ConfigError(f"config field storage.data_dir: {data_dir} exists and is not a directory")

    emb = _section(doc, "embedding")
    _unknown(emb, {"provider", "model", "ollama_host", "batch_size", "timeout", "models"}, "embedding.")
    models = _expect(emb.get("models", []), list, "embedding.models")
    for i, entry in enumerate(models):
        if not isinstance(entry, str) or entry.partition(":")[0] not in EMBEDDING_PROVIDERS:
            raise ConfigError(f"config field embedding.models[{i}] must be \"embedded\" or \"ollama[:MODEL]\", "
                              f"got {entry!r}")
    provider = env.get("GITLAB_KNOWLEDGE_EMBEDDING") or emb.get("provider", "embedded")
    if provider not in EMBEDDING_PROVIDERS:
        raise ConfigError(f"config field embedding.provider must be one of {', '.join(EMBEDDING_PROVIDERS)}, got {provider!r}")
    model = emb.get("model")
    if model is not None:
        _expect(model, str, "embedding.model")
    ollama_host = ollama_url(env.get("OLLAMA_HOST")
                             or _expect(emb.get("ollama_host", "127.0.0.1:11434"), str, "embedding.ollama_host"))
    embedding = EmbeddingSettings(
        models=tuple(dict.fromkeys(models)),
        provider=provider,
        model=model or None,
        ollama_host=_check_url(ollama_host, "embedding.ollama_host"),
        batch_size=int(_positive(emb.get("batch_size", 32), "embedding.batch_size", integer=True)),
        timeout=float(_positive(emb.get("timeout", 60.0), "embedding.timeout")),
    )

    srch = _section(doc, "search")
    _unknown(srch, {"rrf_k", "candidates"}, "search.")
    search = SearchSettings(
        rrf_k=int(_positive(srch.get("rrf_k", SearchSettings.rrf_k), "search.rrf_k", integer=True)),
        candidates=int(_positive(srch.get("candidates", 50), "search.candidates", integer=True)),
    )
    snc = _section(doc, "sync")
    _unknown(snc, {"stale_after_minutes", "lock_wait_seconds"}, "sync.")
    sync = SyncSettings(
        stale_after_minutes=float(_positive(snc.get("stale_after_minutes", 15.0), "sync.stale_after_minutes")),
        lock_wait_seconds=float(_positive(snc.get("lock_wait_seconds", 10.0), "sync.lock_wait_seconds", allow_zero=True)),
    )
    return Config(gitlab=gitlab, projects=tuple(projects), data_dir=data_dir, embedding=embedding,
                  search=search, sync=sync, mcp=_parse_mcp(_section(doc, "mcp")), source=source)


def _parse_mcp(section: dict[str, Any]) -> McpSettings:
    _unknown(section, {"include_confidential", "include_internal", "bearer_token_env"}, "mcp.")
    token_env = section.get("bearer_token_env")
    if token_env is not None and not _expect(token_env, str, "mcp.bearer_token_env").replace("_", "").isalnum():
        raise ConfigError(f"config field mcp.bearer_token_env must be an environment variable name, got {token_env!r}")
    return McpSettings(
        include_confidential=_expect(section.get("include_confidential", False), bool, "mcp.include_confidential"),
        include_internal=_expect(section.get("include_internal", False), bool, "mcp.include_internal"),
        bearer_token_env=token_env or None,
    )


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
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {exc.start})") from None
    except RecursionError:
        raise ConfigError(f"config file {path} nests tables or arrays too deeply to be a config") from None
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror}") from None
    return parse_config(doc, path.parent.resolve(), env, str(path))


def with_overrides(config: Config, **changes: Any) -> Config:
    """A copy with top-level fields replaced (tests and the demo use it)."""
    return replace(config, **changes)
