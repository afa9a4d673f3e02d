"""`sync`: run the Dagster sync job in-process for each project, with a progress bar."""

import argparse
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gitlab_knowledge.cli import console
from gitlab_knowledge.config import Config
from gitlab_knowledge.errors import EmbeddingUnavailable, Interrupted, UsageError


class BarProgress:
    """SyncProgress as a rich progress bar on stderr (plain lines when not a TTY)."""

    def __init__(self) -> None:
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console.err, transient=False, disable=not console.err.is_terminal)
        self._tasks: dict[tuple[str, str], Any] = {}

    def __enter__(self) -> "BarProgress":
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.__exit__(*exc)

    def resource_started(self, project: str, resource: str, total: int | None) -> None:
        label = f"{project} {resource.replace('_', ' ')}"
        self._tasks[(project, resource)] = self._progress.add_task(label, total=total)
        if not console.err.is_terminal:
            console.err.print(f"{label}: " + (f"{total} to examine" if total is not None else "listing"))

    def advance(self, project: str, resource: str, items: int) -> None:
        task = self._tasks.get((project, resource))
        if task is not None:
            self._progress.advance(task, items)
            t = self._progress.tasks[task]
            if t.total is not None and t.completed > t.total:
                self._progress.update(task, total=t.completed)

    def message(self, text: str) -> None:
        self._progress.console.print(text, markup=False, highlight=False)

    def warning(self, text: str) -> None:
        self.message(text)


def raise_if_interrupted(outcomes: list[Any]) -> None:
    """Ctrl-C (or SIGTERM) inside a run reaches the runner as a step failure: it is an interrupt
    (`interrupted`, exit 130), not a failed project."""
    if any(console.is_interrupt(o.error) for o in outcomes):
        raise KeyboardInterrupt


@contextlib.contextmanager
def before_dagster(config: Config, what: str) -> Iterator[None]:
    """Around a command that runs the pipeline (`sync`, `embed`), entered before Dagster loads.

    The refusals that need no Dagster come first (seconds on a busy machine): another pipeline
    process holds the data directory's lock (exit 5); the runner takes the same lock again,
    re-entrantly, and keeps the checks only Dagster can make. SIGTERM stops the command as Ctrl-C
    does (Dagster maps it so inside a run); one before the first run started (loading Dagster,
    opening its instance) ends with one line, exit 130: the runner says the same for one that lands
    after the run was created, and cancels that run."""
    from gitlab_knowledge.sync.runs import pipeline_lock

    if threading.current_thread() is threading.main_thread():  # (only there can a handler be set)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with pipeline_lock(config.data_dir, what):
            yield
    except KeyboardInterrupt:
        raise Interrupted("stopped before the run started; nothing changed") from None


def selected_projects(config: Config, selected: list[str] | None, configured: list[str] | None = None) -> list[str]:
    """The projects to sync: `--project` ones, each one the configuration names (`configured`:
    the `projects` and the configured groups' members), or all of them."""
    configured = list(config.projects) if configured is None else configured
    if not selected:
        return configured
    unknown = [p for p in selected if p not in configured]
    if unknown:
        shown = ", ".join(configured[:10]) + (f" and {len(configured) - 10} more" if len(configured) > 10 else "")
        raise UsageError(f"project {unknown[0]!r} is not in the configuration (configured: {shown})")
    return selected


def discover_groups(workspace: Any) -> Any:
    """List the configured groups (sync/groups.py, the discovery sensor's own code path) before
    Dagster loads; each group that could not be listed is said in one line, its projects as the
    last complete listing found them."""
    from gitlab_knowledge.sync.groups import discover

    if not workspace.config.groups.paths:
        return None
    discovery = discover(workspace)
    for line in discovery.errors:
        console.warn(f"{line}; its projects are those of its last complete listing, and nothing is removed")
    for gone in discovery.left:
        console.err.print(f"Project {gone['path']} left the configured groups ({gone['why']}).", markup=False,
                          highlight=False)
    return discovery


def summary_rows(outcome: Any) -> dict[str, Any]:
    """One project's summary line, from the typed stats each layer reported."""
    from gitlab_knowledge.documents.refresh import DocumentStats
    from gitlab_knowledge.embeddings.refresh import EmbedStats
    from gitlab_knowledge.lexical.refresh import LexicalStats
    from gitlab_knowledge.sync.stats import RawStats

    raw, docs = outcome.stats(RawStats), outcome.stats(DocumentStats)
    emb, lex = outcome.stats(EmbedStats), outcome.stats(LexicalStats)
    if RawStats.ASSET not in outcome.metadata and getattr(outcome.error, "raw_stats", None) is not None:
        raw = outcome.error.raw_stats  # the raw step failed: what it did before it failed
    if EmbedStats.ASSET not in outcome.metadata and getattr(outcome.error, "embed_stats", None):
        emb = outcome.error.embed_stats[0]  # the provider was unreachable: what the step did before failing
    return {
        "fetched": raw.items_fetched, "new": raw.items_new, "updated": raw.items_updated,
        "deleted": raw.items_deleted, "rejected": raw.items_rejected, "threads": raw.threads_fetched,
        "api_calls": raw.api_calls,
        "rate_limited": raw.rate_limited_429, "sync_s": raw.duration_s,
        "documents_changed": docs.new + docs.content_changed + docs.metadata_changed + docs.deleted,
        "embedded": emb.embedded, "embedding_failures": emb.failed, "embedding_error": emb.last_error,
        "documents": lex.documents, "indexed": lex.index_documents,
    }


COLUMNS = (("fetched", "fetched"), ("new", "new"), ("updated", "updated"), ("deleted", "deleted"),
           ("threads", "threads fetched"), ("api_calls", "API calls"), ("documents_changed", "docs changed"),
           ("embedded", "embedded"), ("documents", "documents"))


def print_summary(outcomes: list[Any], elapsed: float, *, full: bool) -> None:
    table = Table(title=f"{'Full sync' if full else 'Sync'} of {len(outcomes)} project(s) in {elapsed:.1f}s",
                  title_justify="left")
    table.add_column("project", no_wrap=True)
    for _key, header in COLUMNS:
        table.add_column(header, justify="right")
    table.add_column("time", justify="right")
    table.add_column("status")
    for o in outcomes:
        row = summary_rows(o)
        table.add_row(o.project, *(str(row[k]) for k, _ in COLUMNS), f"{o.duration_s:.1f}s",
                      "ok" if o.success else "[red]failed[/]")
    console.out.print(table)
    for o in outcomes:
        row = summary_rows(o)
        if row["rejected"]:
            console.warn(f"{o.project}: {row['rejected']} item(s) or thread(s) GitLab sent could not be stored "
                         "(each named above); the rest was synced")
        if row["rate_limited"]:
            console.warn(f"{o.project}: GitLab rate-limited {row['rate_limited']} request(s); they were retried")
        if row["embedding_failures"] and o.success:  # else the run's error line says it
            console.warn(f"{o.project}: {row['embedding_failures']} document(s) could not be embedded "
                         f"({row['embedding_error']}); they are searchable by keyword and will be embedded "
                         "on the next sync")


def run(args: argparse.Namespace, config: Config) -> int:
    from gitlab_knowledge.workspace import Workspace, tighten_if_ours

    if not config.groups.paths:
        selected_projects(config, args.project)  # a --project typo is said before anything else
    config.token()  # a missing token is a config problem: say so before Dagster starts
    tighten_if_ours(config.data_dir)  # a clone's data/ is 0755 (git cannot track 0700)
    with before_dagster(config, "sync"):
        from gitlab_knowledge.store.groups import configured_projects

        started = time.monotonic()
        discovery = discover_groups(Workspace(config, config_path=args.config))
        projects = selected_projects(config, args.project, configured_projects(Workspace(config)))

        from gitlab_knowledge.defs.runner import run_batch, run_sync  # Dagster loads only now (~1 s)
        with BarProgress() as bar:
            workspace = Workspace(config, progress=bar, config_path=args.config)
            # Several projects: one run carries them all (defs/batch.py), not a run per project.
            sync = run_batch if len(projects) > 1 else run_sync
            outcomes = sync(workspace, projects, full=args.full, force=args.force)
    raise_if_interrupted(outcomes)
    elapsed = time.monotonic() - started
    failed = [o for o in outcomes if not o.success]
    # An embedding outage fails the run, but every configured project was synced and resolved.
    synced_all = all(o.success or isinstance(o.error, EmbeddingUnavailable) for o in outcomes)
    # Which projects the groups name is in doubt unless every listing was complete this time.
    complete = discovery is None or discovery.complete
    removed = removed_projects(workspace, args, interactive=not args.json) if synced_all and complete else []
    group_errors = discovery.errors if discovery is not None else []
    if args.json:
        console.print_json({
            "success": not failed and not group_errors, "duration_s": round(elapsed, 3), "removed_projects": removed,
            "groups": [g.as_dict() for g in discovery.listings] if discovery is not None else [],
            "projects": [{"project": o.project, "success": o.success, "dagster_run_id": o.run_id,
                          "error": o.message, "duration_s": o.duration_s, **summary_rows(o),
                          "assets": o.metadata} for o in outcomes],
        })
    else:
        print_summary(outcomes, elapsed, full=args.full)
    for o in failed:
        console.fail(f"{o.project}: {o.message} (Dagster run {o.run_id})")
    for line in group_errors:
        console.fail(line)
    return failed[0].exit_code if failed else (1 if group_errors else 0)


def removed_projects(workspace: Any, args: argparse.Namespace, *, interactive: bool) -> list[dict[str, Any]]:
    """Projects in the store that the configuration no longer names: purged with `--yes` or a yes
    on a terminal, else left (still searchable) with a warning saying how to remove them. Only
    after every configured project synced, so each configured path has resolved to its id."""
    from gitlab_knowledge import purge
    from gitlab_knowledge.store import groups

    config = workspace.config
    if not config.duckdb_path.exists():
        return []
    unlisted = groups.unlisted(config)
    if unlisted:
        console.warn(f"not checking for projects removed from the configuration: group {unlisted[0]} has not been "
                     "listed completely yet")
        return []
    members = groups.members(config)
    try:
        with workspace.read() as con:
            found = purge.removed_projects(con, list(config.projects), keep_ids=[m.project_id for m in members])
    except purge.Unresolved as exc:
        console.warn(f"not checking for projects removed from the configuration: {exc} has not been synced yet")
        return []
    left = groups.left(config)
    keep = {*config.projects, *(m.path for m in members)}
    out = []
    for project in found:
        entry = {**project.as_dict(), "purged": False}
        what = f"project {project.path} (id {project.project_id}, {project.documents} documents)"
        why = f" ({left[project.project_id]['why']})" if project.project_id in left else ""
        if args.yes or (interactive and _ask(f"{what} is no longer in the configuration{why}. Remove it from the "
                                              "store and the indexes?")):
            purge.purge(workspace, project)
            _drop_partition(workspace, project.path, keep)
            groups.forget_left(config.data_dir, [project.project_id])
            entry["purged"] = True
            console.err.print(f"Removed {what}: no longer in the configuration{why}.", markup=False, highlight=False)
        else:
            console.warn(f"{what} is no longer in the configuration{why} but stays searchable; "
                         "`sync --yes` removes it")
        out.append(entry)
    return out


def _drop_partition(workspace: Any, path: str, keep: set[str]) -> None:
    """The purged project's Dagster partition goes too, so the UI stops listing a project that is
    gone (its runs stay in the history). Partitions are keyed by the path as configured, which may
    differ in case from GitLab's."""
    from gitlab_knowledge.defs.partitions import PARTITIONS_NAME
    from gitlab_knowledge.defs.runner import dagster_instance

    instance = dagster_instance(workspace.config)
    for key in instance.get_dynamic_partitions(PARTITIONS_NAME):
        if key.lower() == path.lower() and key not in keep:
            instance.delete_dynamic_partition(PARTITIONS_NAME, key)


def _ask(question: str) -> bool:
    if not (sys.stdin.isatty() and console.err.is_terminal):
        return False
    console.err.print(f"{question} [y/N] ", end="", markup=False, highlight=False)
    try:
        return input().strip().lower() in ("y", "yes")
    except EOFError:
        return False
