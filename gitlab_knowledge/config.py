"""Configuration: a TOML file plus a few environment overrides.

Where the file comes from, first match wins: `--config PATH`, `$GITLAB_KNOWLEDGE_CONFIG`,
`./gitlab_knowledge.toml`. The token itself is never in the file, only the NAME of the environment
variable that holds it. Every problem is reported as one line naming the field.

The checks (config_checks.py) are hand-written rather than a pydantic model: pydantic reports
locations such as `projects.1.str` and `projects.1.P.path` for one bad entry, several errors per
field and its own wording, so keeping these messages would need a translation layer on top of the
models, plus validators for the environment overrides and paths relative to the file: more code,
not less.
"""

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from gitlab_knowledge.config_checks import (
    check_group,
    check_pattern,
    check_project,
    check_url,
    expect,
    positive,
    resolve_path,
    section,
    unknown,
)
from gitlab_knowledge.errors import ConfigError
from gitlab_knowledge.redact import register_secret

DEFAULT_CONFIG_NAME = "gitlab_knowledge.toml"
CONFIG_ENV = "GITLAB_KNOWLEDGE_CONFIG"
EMBEDDING_PROVIDERS = ("embedded", "ollama")
# How HTTP clients of the MCP server authenticate: the shared bearer token (or none, on loopback),
# or each client's own GitLab token, asked of GitLab (mcp/gitlab_auth.py).
MCP_AUTH_MODES = ("bearer", "gitlab")


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
    discovery_minutes: float = 60.0  # the automation lists the configured groups at most this often
    projects_in_flight: int = 8  # a run of many projects fetches this many at once (one client, one rate limit)


@dataclass(frozen=True)
class GroupSettings:
    """`groups`: every project GitLab lists in them for the token, beside the `projects` listed by hand."""

    paths: tuple[str, ...] = ()  # full paths or ids, as configured
    include_subgroups: bool = True  # also the projects of every subgroup, at any depth
    include_archived: bool = False  # archived projects are left out unless true
    exclude: tuple[str, ...] = ()  # project path globs (`acme/sandbox-*`, case-insensitive) left out

    def excluded(self, path: str) -> bool:
        from fnmatch import fnmatchcase

        folded = path.casefold()
        return any(fnmatchcase(folded, pattern.casefold()) for pattern in self.exclude)


@dataclass(frozen=True)
class McpSettings:
    """The MCP server (`python -m gitlab_knowledge.mcp`): what agents may see and how HTTP is guarded."""

    include_confidential: bool = False  # confidential issues and their threads are left out unless true
    include_internal: bool = False  # internal notes are left out unless true
    bearer_token_env: str | None = None  # the NAME of a variable holding the token HTTP clients must send
    auth: str = "bearer"  # "gitlab": each HTTP client sends its own GitLab token and sees what GitLab shows it
    auth_cache_seconds: float = 300.0  # how long GitLab's answer about a token is trusted (revocation bound)


@dataclass(frozen=True)
class Config:
    gitlab: GitLabSettings
    projects: tuple[str, ...]
    data_dir: Path
    embedding: EmbeddingSettings = field(default_factory=EmbeddingSettings)
    search: SearchSettings = field(default_factory=SearchSettings)
    sync: SyncSettings = field(default_factory=SyncSettings)
    mcp: McpSettings = field(default_factory=McpSettings)
    groups: GroupSettings = field(default_factory=GroupSettings)
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


def parse_config(doc: dict[str, Any], base_dir: Path, env: dict[str, str], source: str) -> Config:
    """Build a Config from a parsed TOML document and the environment (overrides win)."""
    # The sections are checked in this order, so a file with several mistakes reports the same first one.
    unknown(doc, {"gitlab", "projects", "groups", "exclude", "include_subgroups", "include_archived", "storage",
                  "embedding", "search", "sync", "mcp"}, "")
    gitlab = _parse_gitlab(section(doc, "gitlab"), base_dir, env)
    groups = _parse_groups(doc, env)
    projects = _parse_projects(doc.get("projects"), env, groups=bool(groups.paths))
    data_dir = _parse_storage(section(doc, "storage"), base_dir, env)
    embedding = _parse_embedding(section(doc, "embedding"), env)
    search = _parse_search(section(doc, "search"))
    sync = _parse_sync(section(doc, "sync"))
    return Config(gitlab=gitlab, projects=projects, data_dir=data_dir, embedding=embedding,
                  search=search, sync=sync, mcp=_parse_mcp(section(doc, "mcp"), env), groups=groups, source=source)


def _parse_gitlab(gl: dict[str, Any], base_dir: Path, env: dict[str, str]) -> GitLabSettings:
    unknown(gl, {"url", "token_env", "ca_bundle", "rate_limit", "concurrency", "timeout", "per_page", "max_retries"}, "gitlab.")
    url = env.get("GITLAB_URL") or gl.get("url")
    if not url:
        raise ConfigError("config field gitlab.url is missing (or set GITLAB_URL)")
    url = check_url(expect(url, str, "gitlab.url"), "gitlab.url")
    token_env = expect(gl.get("token_env", "GITLAB_TOKEN"), str, "gitlab.token_env")
    if not token_env.replace("_", "").isalnum():
        raise ConfigError(f"config field gitlab.token_env must be an environment variable name, got {token_env!r}")
    ca_bundle = gl.get("ca_bundle")
    if ca_bundle is not None:
        ca_path = resolve_path(base_dir, expect(ca_bundle, str, "gitlab.ca_bundle"), "gitlab.ca_bundle")
        if not ca_path.is_file():
            raise ConfigError(f"config field gitlab.ca_bundle: no such file {ca_path}")
        ca_bundle = ca_path
    per_page = int(positive(gl.get("per_page", 100), "gitlab.per_page", integer=True))
    return GitLabSettings(
        url=url,
        token_env=token_env,
        ca_bundle=ca_bundle,
        rate_limit=float(positive(gl.get("rate_limit", 10.0), "gitlab.rate_limit", allow_zero=True)),
        concurrency=int(positive(gl.get("concurrency", 4), "gitlab.concurrency", integer=True)),
        timeout=float(positive(gl.get("timeout", 30.0), "gitlab.timeout")),
        per_page=per_page,
        max_retries=int(positive(gl.get("max_retries", 6), "gitlab.max_retries", allow_zero=True, integer=True)),
    )


def _parse_groups(doc: dict[str, Any], env: dict[str, str]) -> GroupSettings:
    if env.get("GITLAB_GROUPS"):
        paths = [check_group(p, "GITLAB_GROUPS") for p in env["GITLAB_GROUPS"].split(",") if p.strip()]
    else:
        paths = [check_group(g, f"groups[{i}]") for i, g in enumerate(expect(doc.get("groups", []), list, "groups"))]
    if len({p.casefold() for p in paths}) != len(paths):
        raise ConfigError("config field groups lists the same group twice")
    exclude = [check_pattern(p, f"exclude[{i}]") for i, p in enumerate(expect(doc.get("exclude", []), list, "exclude"))]
    return GroupSettings(
        paths=tuple(paths), exclude=tuple(dict.fromkeys(exclude)),
        include_subgroups=expect(doc.get("include_subgroups", True), bool, "include_subgroups"),
        include_archived=expect(doc.get("include_archived", False), bool, "include_archived"),
    )


def _parse_projects(raw: Any, env: dict[str, str], *, groups: bool = False) -> tuple[str, ...]:
    if env.get("GITLAB_PROJECTS"):
        projects = [check_project(p, "GITLAB_PROJECTS") for p in env["GITLAB_PROJECTS"].split(",") if p.strip()]
    else:
        projects = _listed_projects(raw)
    if not projects and not groups:
        raise ConfigError("config field projects is empty: list project paths like [\"group/project\"] or groups "
                          "like groups = [\"acme\"] (or set GITLAB_PROJECTS or GITLAB_GROUPS)")
    if len(set(projects)) != len(projects):
        raise ConfigError("config field projects lists the same project twice")
    return tuple(projects)


def _listed_projects(raw: Any) -> list[str]:
    if raw is None:
        return []
    expect(raw, list, "projects")
    out = []
    for i, item in enumerate(raw):
        if isinstance(item, dict):
            if "path" not in item:
                raise ConfigError(f"config field projects[{i}].path is missing")
            out.append(check_project(item["path"], f"projects[{i}].path"))
        else:
            out.append(check_project(item, f"projects[{i}]"))
    return out


def _parse_storage(storage: dict[str, Any], base_dir: Path, env: dict[str, str]) -> Path:
    unknown(storage, {"data_dir"}, "storage.")
    if env.get("GITLAB_KNOWLEDGE_DATA"):
        data_dir = resolve_path(Path.cwd(), env["GITLAB_KNOWLEDGE_DATA"], "storage.data_dir (GITLAB_KNOWLEDGE_DATA)")
    else:
        data_dir = resolve_path(base_dir, expect(storage.get("data_dir", "data"), str, "storage.data_dir"), "storage.data_dir")
    if data_dir.exists() and not data_dir.is_dir():
        raise ConfigError(f"config field storage.data_dir: {data_dir} exists and is not a directory")
    return data_dir


def _parse_embedding(emb: dict[str, Any], env: dict[str, str]) -> EmbeddingSettings:
    unknown(emb, {"provider", "model", "ollama_host", "batch_size", "timeout", "models"}, "embedding.")
    models = expect(emb.get("models", []), list, "embedding.models")
    for i, entry in enumerate(models):
        if not isinstance(entry, str) or entry.partition(":")[0] not in EMBEDDING_PROVIDERS:
            raise ConfigError(f"config field embedding.models[{i}] must be \"embedded\" or \"ollama[:MODEL]\", "
                              f"got {entry!r}")
    provider = env.get("GITLAB_KNOWLEDGE_EMBEDDING") or emb.get("provider", "embedded")
    if provider not in EMBEDDING_PROVIDERS:
        raise ConfigError(f"config field embedding.provider must be one of {', '.join(EMBEDDING_PROVIDERS)}, got {provider!r}")
    model = emb.get("model")
    if model is not None:
        expect(model, str, "embedding.model")
    ollama_host = ollama_url(env.get("OLLAMA_HOST")
                             or expect(emb.get("ollama_host", "127.0.0.1:11434"), str, "embedding.ollama_host"))
    return EmbeddingSettings(
        models=tuple(dict.fromkeys(models)),
        provider=provider,
        model=model or None,
        ollama_host=check_url(ollama_host, "embedding.ollama_host"),
        batch_size=int(positive(emb.get("batch_size", 32), "embedding.batch_size", integer=True)),
        timeout=float(positive(emb.get("timeout", 60.0), "embedding.timeout")),
    )


def _parse_search(srch: dict[str, Any]) -> SearchSettings:
    unknown(srch, {"rrf_k", "candidates"}, "search.")
    return SearchSettings(
        rrf_k=int(positive(srch.get("rrf_k", SearchSettings.rrf_k), "search.rrf_k", integer=True)),
        candidates=int(positive(srch.get("candidates", 50), "search.candidates", integer=True)),
    )


def _parse_sync(snc: dict[str, Any]) -> SyncSettings:
    unknown(snc, {"stale_after_minutes", "lock_wait_seconds", "discovery_minutes", "projects_in_flight"}, "sync.")
    return SyncSettings(
        projects_in_flight=int(positive(snc.get("projects_in_flight", 8), "sync.projects_in_flight", integer=True)),
        discovery_minutes=float(positive(snc.get("discovery_minutes", 60.0), "sync.discovery_minutes")),
        stale_after_minutes=float(positive(snc.get("stale_after_minutes", 15.0), "sync.stale_after_minutes")),
        lock_wait_seconds=float(positive(snc.get("lock_wait_seconds", 10.0), "sync.lock_wait_seconds", allow_zero=True)),
    )


def _parse_mcp(mcp: dict[str, Any], env: dict[str, str]) -> McpSettings:
    unknown(mcp, {"include_confidential", "include_internal", "bearer_token_env", "auth", "auth_cache_seconds"}, "mcp.")
    token_env = mcp.get("bearer_token_env")
    if token_env is not None and not expect(token_env, str, "mcp.bearer_token_env").replace("_", "").isalnum():
        raise ConfigError(f"config field mcp.bearer_token_env must be an environment variable name, got {token_env!r}")
    auth = env.get("GITLAB_KNOWLEDGE_MCP_AUTH") or expect(mcp.get("auth", "bearer"), str, "mcp.auth")
    if auth not in MCP_AUTH_MODES:
        raise ConfigError(f"config field mcp.auth must be one of {', '.join(MCP_AUTH_MODES)}, got {auth!r}")
    if auth == "gitlab" and token_env:
        raise ConfigError("config fields mcp.auth = \"gitlab\" and mcp.bearer_token_env exclude each other: with "
                          "gitlab, each client sends its own GitLab token; drop bearer_token_env")
    return McpSettings(
        auth=auth,
        auth_cache_seconds=float(positive(mcp.get("auth_cache_seconds", 300.0), "mcp.auth_cache_seconds",
                                          allow_zero=True)),
        include_confidential=expect(mcp.get("include_confidential", False), bool, "mcp.include_confidential"),
        include_internal=expect(mcp.get("include_internal", False), bool, "mcp.include_internal"),
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
        if not env.get("GITLAB_URL") and not env.get("GITLAB_PROJECTS") and not env.get("GITLAB_GROUPS"):
            raise ConfigError(
                f"no configuration: create ./{DEFAULT_CONFIG_NAME}, pass --config PATH or set {CONFIG_ENV} "
                "(or set GITLAB_URL and GITLAB_PROJECTS or GITLAB_GROUPS)"
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

