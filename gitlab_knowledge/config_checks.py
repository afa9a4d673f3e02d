"""The checks behind every config field: each failure is one line naming the field and showing the value."""

import math
import re
from pathlib import Path
from typing import Any, TypeVar, overload
from urllib.parse import urlparse

from gitlab_knowledge.errors import ConfigError
from gitlab_knowledge.redact import register_secret


def show(value: Any) -> str:
    """A value as an error message shows it: repr, one line, bounded."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _key(name: Any) -> str:
    # TOML keys may be quoted strings holding newlines; a message stays one line.
    return name if isinstance(name, str) and name.isprintable() else show(name)


T = TypeVar("T")


@overload
def expect(value: Any, kind: type[T], name: str) -> T: ...


@overload
def expect(value: Any, kind: tuple[type, ...], name: str) -> Any: ...


def expect(value: Any, kind: type | tuple[type, ...], name: str) -> Any:
    """`value`, checked to be of type `kind` (or one of the types)."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # TOML booleans are ints to Python; `rate_limit = true` is still a mistake.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        expected = " or ".join(t.__name__ for t in kinds)
        raise ConfigError(f"config field {name} must be {expected}, got {show(value)}")
    if isinstance(value, str) and ("\x00" in value or not _utf8(value)):
        raise ConfigError(f"config field {name} holds a NUL or an unencodable character: {show(value)}")
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
          "sync.lock_wait_seconds": 86_400, "mcp.auth_cache_seconds": 86_400, "sync.discovery_minutes": 525_600,
          "sync.projects_in_flight": 256}


def positive(value: Any, name: str, *, allow_zero: bool = False, integer: bool = False) -> float:
    number = expect(value, (int, float), name)
    if not math.isfinite(number):
        raise ConfigError(f"config field {name} must be a finite number, got {show(value)}")
    if integer and number != int(number):
        raise ConfigError(f"config field {name} must be a whole number, got {show(value)}")
    if number < 0 or (number == 0 and not allow_zero):
        raise ConfigError(f"config field {name} must be {'>= 0' if allow_zero else '> 0'}, got {show(value)}")
    if number > MAXIMA[name]:
        raise ConfigError(f"config field {name} must be <= {MAXIMA[name]:,}, got {show(value)}")
    return int(number) if integer else number


def check_url(url: str, name: str) -> str:
    example = "https://gitlab.example.com"
    try:
        parsed = urlparse(url)
        parsed.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError as exc:
        raise ConfigError(f"config field {name} is not a valid URL ({exc}), got {show(url)}") from None
    if parsed.scheme not in ("http", "https") or not parsed.hostname or not url.isprintable() or " " in url:
        raise ConfigError(f"config field {name} must be an http(s) URL like {example}, got {show(url)}")
    if parsed.password:
        register_secret(parsed.password)  # a password in the URL is as secret as the token
    return url.rstrip("/")


# GitLab's own rule for a namespace or project path segment (letters, digits, '_', '-', '.').
_SEGMENT = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.\-]*")


def check_project(value: Any, name: str) -> str:
    path = expect(value, str, name).strip().strip("/")
    parts = path.split("/")
    if len(parts) < 2 or any(not _SEGMENT.fullmatch(p) or p in (".", "..") for p in parts):
        raise ConfigError(f"config field {name} must be a project path like group/project (letters, digits, "
                          f"'_', '-' and '.' between slashes), got {show(path)}")
    return path


def check_group(value: Any, name: str) -> str:
    """A group as the config names it: its full path (`acme`, `acme/platform-team`) or its id."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ConfigError(f"config field {name} must be a group path like acme/team or a group id, got {show(value)}")
        return str(value)
    path = expect(value, str, name).strip().strip("/")
    if not path or any(not _SEGMENT.fullmatch(p) or p in (".", "..") for p in path.split("/")):
        raise ConfigError(f"config field {name} must be a group path like acme/team (letters, digits, '_', '-' "
                          f"and '.' between slashes) or a group id, got {show(path)}")
    return path


def check_pattern(value: Any, name: str) -> str:
    pattern = expect(value, str, name).strip().strip("/")
    if not pattern or not pattern.isprintable():
        raise ConfigError(f"config field {name} must be a project path pattern like acme/sandbox-*, got {show(value)}")
    return pattern


def section(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return expect(doc.get(name, {}), dict, f"[{name}]")


def unknown(table: dict[str, Any], allowed: set[str], prefix: str) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(f"config field {prefix}{_key(key)} is not a known setting "
                              f"(known: {', '.join(sorted(allowed))})")


def resolve_path(base_dir: Path, value: str, name: str) -> Path:
    try:
        return (base_dir / Path(value).expanduser()).resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"config field {name} is not a usable path ({type(exc).__name__}): {show(value)}") from None
