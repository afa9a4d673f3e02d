"""What the configured groups resolved to, as the last listing of each found it: the record
`<data_dir>/groups.json`, and the projects the configuration names through it.

`sync/groups.py` lists the groups and writes the record (the CLI's `sync` and the discovery sensor
both, through the same function); everything else reads it here: the change sensor, the weekly
reconciliation, `sync`'s project list, `sync-status`. A group's projects change only when a listing
of it was complete (GitLab marked its last page as the last and every row was understood), so a
failed or partial listing keeps the projects the last complete one found: nothing leaves on doubt.

A project a group listed before and that positive evidence showed to have left every configured
group (a complete listing without it, then its own `GET /projects/:id`: 404, archived, or in a
namespace outside the groups) is kept in `left` until it is purged: the automation purges those
(defs/discovery.py), and `sync` treats them as it treats a project taken out of `projects`.

The record is a small JSON file beside the store rather than DuckDB tables: the discovery sensor
writes it from the daemon while runs hold the DuckDB writer, and it needs no migration.
"""

import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitlab_knowledge.config import Config, GroupSettings
from gitlab_knowledge.errors import StoreError

if TYPE_CHECKING:
    from gitlab_knowledge.workspace import Workspace

RECORD_NAME = "groups.json"
FORMAT = 1


@dataclass(frozen=True)
class Member:
    path: str  # path_with_namespace as the group's listing gave it: the project's partition key
    project_id: int
    group: str  # the configured group (path or id) it came through


def record_path(data_dir: Path) -> Path:
    return data_dir / RECORD_NAME


def group_key(configured: str) -> str:
    return configured.casefold()


def options(groups: GroupSettings) -> str:
    """The listing options a recorded listing was made with: another setting lists again."""
    return f"subgroups={int(groups.include_subgroups)},archived={int(groups.include_archived)}"


def load_record(data_dir: Path) -> dict[str, Any]:
    """The record, or an empty one (no file yet, or one this version cannot read)."""
    try:
        record = json.loads(record_path(data_dir).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"format": FORMAT, "groups": {}, "left": {}}
    except (OSError, ValueError) as exc:
        raise StoreError(f"cannot read {record_path(data_dir)} ({exc}): remove it, the next sync lists the "
                         "groups again") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        return {"format": FORMAT, "groups": {}, "left": {}}
    record.setdefault("groups", {})
    record.setdefault("left", {})
    return record


def save_record(data_dir: Path, record: dict[str, Any]) -> None:
    """Write the record whole, atomically (a reader never sees half of it), private to its owner."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # it holds confidential data: its owner's alone
    fd, tmp = tempfile.mkstemp(dir=data_dir, prefix=".groups-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(record, fh, indent=1, sort_keys=True)
        os.chmod(tmp, 0o600)
        os.replace(tmp, record_path(data_dir))
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise StoreError(f"cannot write {record_path(data_dir)}: {exc.strerror or exc}") from None


def current_listing(record: dict[str, Any], config: Config, configured: str) -> dict[str, Any] | None:
    """The recorded complete listing of a configured group made with the configured options."""
    entry = record["groups"].get(group_key(configured))
    if not isinstance(entry, dict) or entry.get("options") != options(config.groups) or entry.get("listed_at") is None:
        return None
    return entry


def members(config: Config, record: dict[str, Any] | None = None) -> list[Member]:
    """The projects the configured groups resolve to (exclusions applied), each once, in the
    order of the groups; none for a group never listed completely."""
    if not config.groups.paths:
        return []
    record = load_record(config.data_dir) if record is None else record
    out: list[Member] = []
    seen: set[int] = set()
    for configured in config.groups.paths:
        entry = current_listing(record, config, configured)
        for project in (entry or {}).get("projects", ()):
            pid, path = project.get("id"), project.get("path")
            if not isinstance(pid, int) or not isinstance(path, str) or pid in seen:
                continue
            if config.groups.excluded(path) or (project.get("archived") and not config.groups.include_archived):
                continue
            seen.add(pid)
            out.append(Member(path, pid, configured))
    return out


def project_paths(config: Config, explicit_ids: Iterable[int | None] = (),
                  record: dict[str, Any] | None = None) -> list[str]:
    """Every project the configuration names: `projects` as written, then the groups' members that
    are not one of them (the same path in any case, or the id a listed path resolved to)."""
    explicit = {p.casefold() for p in config.projects}
    ids = {i for i in explicit_ids if i is not None}
    return [*config.projects, *(m.path for m in members(config, record)
                                if m.path.casefold() not in explicit and m.project_id not in ids)]


def unlisted(config: Config, record: dict[str, Any] | None = None) -> list[str]:
    """Configured groups without a complete listing made with the configured options: while any
    is, which projects the configuration names is in doubt, so nothing is removed."""
    record = load_record(config.data_dir) if record is None else record
    return [g for g in config.groups.paths if current_listing(record, config, g) is None]


def summary(config: Config, record: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Per configured group: what it resolved to at its last listing, for `sync-status`."""
    record = load_record(config.data_dir) if record is None else record
    found = members(config, record)
    out = []
    for configured in config.groups.paths:
        entry = record["groups"].get(group_key(configured)) or {}
        listed = current_listing(record, config, configured)
        listed_projects = (listed or {}).get("projects", [])
        out.append({
            "group": configured,
            "group_id": entry.get("group_id"),
            "full_path": entry.get("full_path"),
            "listed_at": (listed or {}).get("listed_at"),
            "listed": len(listed_projects),
            "excluded": sum(1 for p in listed_projects if config.groups.excluded(str(p.get("path")))),
            "projects": sum(1 for m in found if m.group == configured),
            "error": entry.get("error"),
        })
    return out


def left(config: Config, record: dict[str, Any] | None = None) -> dict[int, dict[str, Any]]:
    """Projects the groups listed before and that were shown to have left them: id → path, why."""
    record = load_record(config.data_dir) if record is None else record
    out = {}
    for key, value in record["left"].items():
        if str(key).isdigit() and isinstance(value, dict):
            out[int(key)] = value
    return out


def forget_left(data_dir: Path, project_ids: Iterable[int]) -> None:
    """Purged: the projects need no remembering any more."""
    record = load_record(data_dir)
    gone = {str(i) for i in project_ids}
    if gone & set(record["left"]):
        record["left"] = {k: v for k, v in record["left"].items() if k not in gone}
        save_record(data_dir, record)


def configured_projects(workspace: "Workspace") -> list[str]:
    """`project_paths` for a workspace: the ids its explicit paths resolved to are read from the
    store (a path and a group member naming one project are one project). Raises StoreBusyError
    while a writer holds the store longer than the read wait."""
    config = workspace.config
    if not config.groups.paths:
        return list(config.projects)
    ids: list[int | None] = []
    if config.duckdb_path.exists() and config.projects:
        from gitlab_knowledge.store.projects import project_id_for

        with workspace.read() as con:
            ids = [project_id_for(con, p) for p in config.projects]
    return project_paths(config, ids)
