"""`models list [--json]` and `models drop PROVIDER[:MODEL]`: the vector table of each model."""

import argparse

from rich.table import Table

from gitlab_knowledge.cli import console
from gitlab_knowledge.config import Config
from gitlab_knowledge.errors import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    text = "each embedding model's vector table: coverage and disk (list), or remove one (drop)"
    p = sub.add_parser("models", help=text, description=text)
    p.add_argument("action", choices=["list", "drop"])
    p.add_argument("model", nargs="?", metavar="PROVIDER[:MODEL]", help="the model to drop, e.g. ollama:nomic-embed-text")
    p.add_argument("--json", action="store_true", help="machine-readable output (schema: embeddings/models_schema.json)")


def models_list(config: Config) -> dict:
    """What `models list` reports: every vector table against the documents in the store."""
    from gitlab_knowledge.embeddings.providers import get_provider
    from gitlab_knowledge.embeddings.tables import as_dict, list_tables
    from gitlab_knowledge.store.db import one_row
    from gitlab_knowledge.workspace import Workspace

    with Workspace(config).read() as con:
        documents = one_row(con.execute("SELECT count(*) FROM documents"))[0]
    configured = get_provider(config)
    wanted = (configured.provider, configured.model)
    tables = [as_dict(t, documents, wanted, config.embedding.models) for t in list_tables(config.lancedb_dir)]
    return {"schema_version": 1, "documents": documents, "configured": f"{wanted[0]}:{wanted[1]}",
            "kept_current": list(config.embedding.models), "tables": tables}


def models_cmd(args: argparse.Namespace, config: Config) -> int:
    if args.action == "list":
        if args.model:
            raise UsageError("models list takes no model")
        report = models_list(config)
        if args.json:
            console.print_json(report)
            return 0
        table = Table(title=f"Vector tables ({report['documents']:,} documents; search uses {report['configured']})")
        for column in ("model", "dims", "documents", "coverage", "disk", ""):
            table.add_column(column, justify="right" if column in ("dims", "documents", "coverage", "disk") else "left")
        for t in report["tables"]:
            notes = ", ".join(n for n, on in (("configured", t["configured"]), ("kept current", t["kept_current"]),
                                              ("old format", not t["current_format"])) if on)
            table.add_row(f"{t['provider']}:{t['model']}", str(t["dims"]), f"{t['documents']:,}",
                          f"{t['coverage_pct']:.1f} %", f"{t['disk_bytes'] / 1e6:.1f} MB", notes)
        console.out.print(table if report["tables"] else "No vector tables yet: run `python -m gitlab_knowledge sync`.")
        return 0
    return _drop(args, config)


def _drop(args: argparse.Namespace, config: Config) -> int:
    from gitlab_knowledge.embeddings.providers import get_provider
    from gitlab_knowledge.embeddings.tables import drop_table

    if not args.model:
        raise UsageError("models drop needs the model: PROVIDER[:MODEL], e.g. ollama:nomic-embed-text")
    provider, _, model = args.model.partition(":")
    if provider not in ("embedded", "ollama"):
        raise UsageError(f"models drop expects embedded or ollama[:MODEL], got {args.model!r}")
    chosen = get_provider(config, provider, model or None)
    configured = get_provider(config)
    if (chosen.provider, chosen.model) == (configured.provider, configured.model):
        raise UsageError(f"{chosen.provider}:{chosen.model} is the configured model that search uses: "
                         "configure another one first")
    dropped = drop_table(config.lancedb_dir, chosen.provider, chosen.model)
    report = {"schema_version": 1, "dropped": f"{dropped.provider}:{dropped.model}", "documents": dropped.documents,
              "disk_bytes": dropped.disk_bytes}
    if args.json:
        console.print_json(report)
    else:
        console.out.print(f"Dropped the vector table of {report['dropped']} ({dropped.documents:,} documents, "
                          f"{dropped.disk_bytes / 1e6:.1f} MB).")
        if args.model in config.embedding.models or provider in config.embedding.models:
            console.err.print("warning: embedding.models lists it: the next sync builds it again")
    return 0
