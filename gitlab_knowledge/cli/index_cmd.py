"""`embed`, `stats` and `index status`."""

import argparse
import time

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from gitlab_knowledge import kinds
from gitlab_knowledge.cli import console
from gitlab_knowledge.cli.sync_cmd import BarProgress, before_dagster, raise_if_interrupted, selected_projects
from gitlab_knowledge.config import Config
from gitlab_knowledge.errors import BadValue, EmbeddingUnavailable


def _model(value: str | None) -> tuple[str | None, str | None]:
    if not value:
        return None, None
    provider, _, model = value.partition(":")
    if provider not in ("embedded", "ollama"):
        raise BadValue("model", value, ("embedded", "ollama"), "embedded or ollama[:MODEL]")
    return provider, model or None


class EtaProgress(BarProgress):
    def __init__(self) -> None:
        super().__init__()
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("ETA"), TimeRemainingColumn(), console=console.err, disable=not console.err.is_terminal)


def embed_cmd(args: argparse.Namespace, config: Config) -> int:
    from gitlab_knowledge.workspace import Workspace

    provider, model = _model(args.model)
    projects = selected_projects(config, args.project)
    with before_dagster(config, "embed"):
        from gitlab_knowledge.defs.runner import run_embed
        from gitlab_knowledge.embeddings.refresh import EmbedStats

        started = time.monotonic()
        with EtaProgress() as bar:
            workspace = Workspace(config, progress=bar, config_path=args.config)
            outcomes = run_embed(workspace, projects, everything=args.all, provider=provider, model=model)
    raise_if_interrupted(outcomes)
    rows = []
    for o in outcomes:
        emb = o.stats(EmbedStats) if EmbedStats.ASSET in o.metadata else None
        failed_stats = getattr(o.error, "embed_stats", None)  # the provider was unreachable: what the step did
        if emb is None and failed_stats:
            emb = failed_stats[0]
        rows.append({"project": o.project, "success": o.success, "error": o.message,
                     **(emb.as_dict() if emb is not None else {}), "last_error": emb.last_error if emb else None})
    if args.json:
        console.print_json({"duration_s": round(time.monotonic() - started, 3), "projects": rows})
    else:
        # Only a run that reached every project may say everything is current.
        if rows and all(r["success"] and r.get("to_embed", 0) == 0 for r in rows):
            console.out.print("0 documents to embed: every document's vector is current.")
        table = Table(title=f"Embeddings ({rows[0].get('provider', '?')}/{rows[0].get('model', '?')})"
                      if rows else "Embeddings", title_justify="left")
        for column in ("project", "documents", "embedded", "chunks", "metadata updated", "deleted", "failed",
                       "docs/s"):
            table.add_column(column, justify="left" if column == "project" else "right")
        for r in rows:
            table.add_row(r["project"], *(str(r.get(k, "-")) for k in ("documents", "embedded", "chunks",
                                                                       "metadata_updated", "deleted", "failed")),
                          f"{r.get('docs_per_second', 0):.1f}")
        console.out.print(table)
        for r in rows:
            if r.get("failed"):
                console.warn(f"{r['project']}: {r['failed']} document(s) failed to embed ({r.get('last_error')}); "
                             "they are retried on the next run")
    # An unreachable provider fails each project's run; the line below says it once for all.
    failed = [o for o in outcomes if not o.success and not isinstance(o.error, EmbeddingUnavailable)]
    for o in failed:
        console.fail(f"{o.project}: {o.message}")
    if failed:
        return failed[0].exit_code
    not_embedded = sum(r.get("failed", 0) for r in rows)
    if not_embedded:
        # The command did not do what it was asked to (the provider unreachable, which failed the
        # runs, or answering nonsense): say so in the exit code (README: 6, provider unavailable).
        console.fail(f"{not_embedded} document(s) could not be embedded: "
                     f"{next(r.get('last_error') for r in rows if r.get('failed'))}")
        return EmbeddingUnavailable.exit_code
    return 0


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def stats_cmd(args: argparse.Namespace, config: Config) -> int:
    from gitlab_knowledge.index_status import stats
    from gitlab_knowledge.workspace import Workspace

    data = stats(Workspace(config))
    if args.json:
        console.print_json(data)
        return 0
    o = console.out
    totals = data["totals"]
    line = " · ".join([*(f"{k.plural_display.lower()} {totals[k.table]:,}" for k in kinds.ITEM_KINDS),
                       f"discussions {totals['discussions']:,}", f"notes {totals['notes']:,}",
                       f"model {data['model']}"])
    o.print(line[:1].upper() + line[1:])
    table = Table(box=None)
    for column in ("project", "documents", *(k.column for k in kinds.ITEM_KINDS), "threads", "embedded", "failed",
                   "lexical", "truncated", "last sync"):
        table.add_column(column, justify="left" if column in ("project", "last sync") else "right")
    for p in data["projects"]:
        t = p["documents_by_type"]
        table.add_row(p["project"], str(p["documents"]), *(str(t.get(k.name, 0)) for k in kinds.ITEM_KINDS),
                      str(t.get("discussion", 0)), f"{p['embedded_pct']}%", str(p["embedding_failed"]),
                      str(p["lexical_documents"]), str(p["truncated"]),
                      f"{console.when(p['last_sync'])} ({console.ago(p['last_sync'])})")
    o.print(table)
    disk = data["disk_bytes"]
    o.print(f"On disk: DuckDB {_mb(disk['duckdb'])}, LanceDB {_mb(disk['lancedb'])}, Tantivy {_mb(disk['tantivy'])}")
    return 0


def index_status_cmd(args: argparse.Namespace, config: Config) -> int:
    from gitlab_knowledge.index_status import index_status
    from gitlab_knowledge.workspace import Workspace

    provider, model = _model(args.model)
    data = index_status(Workspace(config), provider, model)
    if args.json:
        console.print_json(data)
        return 0
    table = Table(title=f"Index status (vectors: {data['model']})", title_justify="left")
    table.add_column("project")
    table.add_column("index")
    for column in ("documents", "indexed", "stale", "unindexed", "failed", "orphaned"):
        table.add_column(column, justify="right")
    for p in data["projects"]:
        for name in ("vectors", "lexical"):
            s = p[name]
            style = "" if s["stale"] + s["unindexed"] + s["failed"] + s["orphaned"] == 0 else "[yellow]"
            table.add_row(p["project"], name, str(p["documents"]),
                          *(f"{style}{s[k]}" for k in ("indexed", "stale", "unindexed", "failed", "orphaned")))
    console.out.print(table)
    behind = sum(p[n]["stale"] + p[n]["unindexed"] + p[n]["orphaned"] for p in data["projects"]
                 for n in ("vectors", "lexical"))
    if behind:
        console.out.print(f"{behind} entr{'y is' if behind == 1 else 'ies are'} behind the documents: the next "
                          "`sync` (or `embed`) brings them up to date.")
    return 0
