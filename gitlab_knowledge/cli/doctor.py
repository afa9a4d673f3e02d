"""`auth-test` and `doctor`: is everything a sync needs in place?"""

import argparse
import asyncio
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from gitlab_knowledge.cli import console
from gitlab_knowledge.config import Config, GitLabSettings
from gitlab_knowledge.errors import KnowledgeError, StoreBusyError
from gitlab_knowledge.gitlab.client import GitLabClient
from gitlab_knowledge.workspace import private_dir


@dataclass
class Check:
    name: str
    status: str  # ok | warn | fail
    detail: str
    required: bool = True


def _user_line(user: dict[str, Any], url: str) -> str:
    return f"Authenticated as @{user.get('username')} ({user.get('name')}) on {url}"


def _interactive(config: Config) -> GitLabSettings:
    # A person is waiting: one retry, not the sync's minute of backoff, before saying GitLab is down.
    return replace(config.gitlab, max_retries=1, timeout=min(config.gitlab.timeout, 15.0))


async def _whoami(config: Config) -> dict[str, Any]:
    async with GitLabClient(_interactive(config), config.token()) as client:
        return await client.current_user()


def auth_test(args: argparse.Namespace, config: Config) -> int:
    user = asyncio.run(_whoami(config))
    console.out.print(_user_line(user, config.gitlab.display_url), markup=False)
    return 0


async def _gitlab_checks(config: Config) -> list[Check]:
    checks = []
    try:
        token = config.token()
    except KnowledgeError as exc:
        return [Check("token", "fail", str(exc)), Check("gitlab", "fail", "skipped: no token")]
    checks.append(Check("token", "ok", f"${config.gitlab.token_env} is set"))
    try:
        async with GitLabClient(_interactive(config), token) as client:
            user = await client.current_user()
            checks.append(Check("gitlab", "ok", _user_line(user, config.gitlab.display_url)))
            for project in config.projects:
                try:
                    info = await client.project(project)
                    checks.append(Check(f"project {project}", "ok", f"id {info['id']}, {info.get('web_url')}"))
                except KnowledgeError as exc:
                    checks.append(Check(f"project {project}", "fail", str(exc)))
            checks += await _group_checks(config, client)
    except KnowledgeError as exc:
        checks.append(Check("gitlab", "fail", str(exc)))
    return checks


async def _group_checks(config: Config, client: GitLabClient) -> list[Check]:
    """Each configured group listed now, as `sync` lists it (sync/groups.py): how many projects
    it resolves to. Nothing is recorded: doctor only looks."""
    from gitlab_knowledge.store import groups as record_store
    from gitlab_knowledge.sync.groups import list_group

    if not config.groups.paths:
        return []
    try:
        record = record_store.load_record(config.data_dir)
    except KnowledgeError:
        record = {"groups": {}}
    checks = []
    for group in config.groups.paths:
        listing = await list_group(client, config.groups, group, record["groups"].get(record_store.group_key(group)))
        if not listing.complete:
            checks.append(Check(f"group {group}", "fail", listing.error or "not listed"))
            continue
        excluded = sum(1 for p in listing.projects if config.groups.excluded(p["path"]))
        renamed = f", now {listing.full_path}: update the configuration" if listing.renamed else ""
        checks.append(Check(f"group {group}", "ok", (
            f"id {listing.group_id} ({listing.full_path}{renamed}): {len(listing.projects) - excluded} project(s)"
            + (f", {excluded} excluded" if excluded else "")
            + (" (subgroups included" if config.groups.include_subgroups else " (this group only")
            + (", archived included)" if config.groups.include_archived else ", archived left out)"))))
    return checks


def _store_check(config: Config) -> Check:
    from gitlab_knowledge.store.db import write_connection

    try:
        private_dir(config.data_dir)  # first contact with a clone's data/ (0755) makes it private
        with tempfile.NamedTemporaryFile(dir=config.data_dir, prefix=".doctor-"):
            pass
    except OSError as exc:
        return Check("store", "fail", f"data directory {config.data_dir} is not writable: {exc.strerror}")
    try:
        with write_connection(config.duckdb_path, wait=2.0) as con:
            con.execute("SELECT count(*) FROM raw_payloads").fetchone()
    except StoreBusyError as exc:
        return Check("store", "warn", str(exc), required=False)
    except KnowledgeError as exc:
        return Check("store", "fail", str(exc))
    size = config.duckdb_path.stat().st_size if config.duckdb_path.exists() else 0
    return Check("store", "ok", f"{config.duckdb_path} writable ({size / 1e6:.1f} MB)")


def _permissions_check(config: Config) -> Check:
    """The data directory holds confidential titles and internal notes: its owner's alone."""
    try:
        mode = config.data_dir.stat().st_mode & 0o777
    except OSError as exc:
        return Check("permissions", "warn", f"cannot read the mode of {config.data_dir}: {exc.strerror}", required=False)
    if mode & 0o077:
        return Check("permissions", "warn", f"{config.data_dir} is readable by other users (mode {mode:o}): "
                     f"`chmod 700 {config.data_dir}` keeps confidential issues and internal notes private",
                     required=False)
    return Check("permissions", "ok", f"{config.data_dir} is private to its owner (mode {mode:o})")


def _embedding_check(config: Config) -> Check:
    from gitlab_knowledge.embeddings.providers import get_provider

    try:
        return Check("embeddings", "ok", get_provider(config).check())
    except KnowledgeError as exc:
        if config.embedding.provider == "ollama":
            # Search still works by keyword and failed documents are embedded later: a warning.
            return Check("embeddings", "warn", f"{exc} (search falls back to keywords)", required=False)
        return Check("embeddings", "fail", str(exc))


def collect(config: Config, extra: list[Callable[[Config], Check]] | None = None) -> list[Check]:
    groups = f", {len(config.groups.paths)} group(s)" if config.groups.paths else ""
    checks = [Check("config", "ok", f"{config.source}: {config.gitlab.display_url}, {len(config.projects)} project(s)"
                                    f"{groups}, data in {config.data_dir}")]
    checks += asyncio.run(_gitlab_checks(config))
    checks.append(_store_check(config))
    checks.append(_permissions_check(config))
    checks.append(_embedding_check(config))
    for check in extra or []:
        checks.append(check(config))
    return checks


def doctor(args: argparse.Namespace, config: Config, extra: list[Callable[[Config], Check]] | None = None) -> int:
    checks = collect(config, extra)
    success = all(c.status != "fail" for c in checks if c.required)
    if args.json:
        console.print_json({"success": success, "checks": [asdict(c) | {"ok": c.status == "ok"} for c in checks]})
    else:
        marks = {"ok": "[green]✓[/]", "warn": "[yellow]![/]", "fail": "[red]✗[/]"}
        for c in checks:
            console.out.print(f"{marks[c.status]} {c.name:<28} ", end="")
            console.out.print(c.detail, markup=False, highlight=False)
        console.out.print("\nAll required checks passed." if success else "\nSome required checks failed.")
    return 0 if success else 1

