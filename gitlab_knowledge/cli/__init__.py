"""`python -m gitlab_knowledge <command>`: operations on the store and the sync."""

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence

from gitlab_knowledge import kinds
from gitlab_knowledge.argparsing import OneLineParser, bounded_int, iid_or_key, require_text
from gitlab_knowledge.cli import console
from gitlab_knowledge.config import Config, load_config
from gitlab_knowledge.errors import KnowledgeError
from gitlab_knowledge.redact import install_logging_redaction, redact
from gitlab_knowledge.terminal import clean_logs

DEBUG_ENV = "GITLAB_KNOWLEDGE_DEBUG"
LIST_SORTS = ("updated_desc", "updated_asc", "created_desc", "created_asc")  # store.queries.SORTS


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="python -m gitlab_knowledge", description=__doc__)
    parser.add_argument("--config", metavar="PATH", help="config file (default: $GITLAB_KNOWLEDGE_CONFIG or ./gitlab_knowledge.toml)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details to stderr")
    sub = parser.add_subparsers(dest="command", metavar="command", parser_class=OneLineParser)
    sub.required = True

    def add(name: str, help_text: str, json_flag: bool = True) -> OneLineParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        if json_flag:
            # Each command's output has a JSON Schema in the package: cli/schemas/<command>.json.
            schema = "index_status" if name == "index" else name.replace("-", "_")
            p.add_argument("--json", action="store_true",
                           help=f"machine-readable output (schema: cli/schemas/{schema}.json)")
        return p

    add("auth-test", "check the token: prints the GitLab user it belongs to", json_flag=False)
    add("doctor", "check config, token, GitLab, the store and the embedding provider")

    p = add("sync", "fetch what changed in GitLab and update every layer (runs the Dagster job in-process)")
    p.add_argument("--full", action="store_true", help="refetch everything and remove what GitLab no longer lists")
    p.add_argument("--force", action="store_true", help="take over a stale running sync")
    p.add_argument("--project", action="append", metavar="PATH", help="only this project (repeatable)")
    p.add_argument("--yes", action="store_true",
                   help="remove projects no longer in the configuration without asking (needed off a terminal)")

    add("sync-status", "last sync runs, cursors and layer watermarks")

    p = add("embed", "embed documents whose text or model changed (runs the Dagster embeddings asset)")
    p.add_argument("--all", action="store_true", help="re-embed every document")
    p.add_argument("--model", metavar="PROVIDER[:MODEL]", help="build/refresh this model's table, e.g. ollama:nomic-embed-text")
    p.add_argument("--project", action="append", metavar="PATH")

    # argparse formats help strings with %: a literal one is %%.
    add("stats", "documents by type, embedded %%, failures, index sizes, last sync")

    p = add("index", "index health: which documents are indexed, stale or missing in each index")
    p.add_argument("what", choices=["status"])
    p.add_argument("--model", metavar="PROVIDER[:MODEL]")

    from gitlab_knowledge.cli.graph_cmd import since_date

    p = add("list", "list issues or merge requests, narrowed by any of the filters below (all must hold), "
                    "or wiki pages (by project)")
    p.add_argument("what", choices=[*(w for k in kinds.ITEM_KINDS for w in k.cli_names), *(w for k in kinds.KEYED_KINDS for w in k.cli_names)])
    p.add_argument("--project", metavar="PATH")
    p.add_argument("--state", metavar="STATE",
                   help=f"{', '.join(kinds.STATES)} or {kinds.ANY_STATE} (GitLab's states; default: all)")
    p.add_argument("--label", action="append", default=[], metavar="LABEL", help="carries this label (repeatable: all)")
    for who in ("author", "assignee", "reviewer", "participant"):
        p.add_argument(f"--{who}", metavar="USERNAME", help="a participant: author, assignee, reviewer or commenter"
                       if who == "participant" else f"the {who} (merge requests only)" if who == "reviewer" else None)
    p.add_argument("--milestone", metavar="TITLE")
    p.add_argument("--updated-since", type=since_date, metavar="YYYY-MM-DD")
    p.add_argument("--created-since", type=since_date, metavar="YYYY-MM-DD")
    p.add_argument("--path", metavar="PATH", help="merge requests that changed this file (or a file under this "
                                                   "directory) or have a review thread on it")
    p.add_argument("--sort", choices=LIST_SORTS, default="updated_desc", help="default: updated_desc (newest first)")
    p.add_argument("--limit", type=bounded_int(1), default=20)

    p = add("count", "count issues, mrs, discussions, notes or wiki pages")
    p.add_argument("what", choices=[*(w for k in kinds.ITEM_KINDS for w in k.cli_names), "discussions", "notes",
                                    *(w for k in kinds.KEYED_KINDS for w in k.cli_names)])
    p.add_argument("--project", metavar="PATH")

    p = add("explain", "the provenance chain of a document (raw payload → … → indexes) and whether it is fresh")
    p.add_argument("ref", help="#IID, !IID, group/project#IID, a GitLab URL (…#note_N for a thread) or a document id")
    p.add_argument("--project", metavar="PATH")
    p.add_argument("--live", action="store_true", help="also ask GitLab for the item's current version")

    p = add("demo", "sync the bundled sample from a sandbox GitLab, then search it", json_flag=False)
    p.add_argument("--ui", action="store_true", help="afterwards, keep the sandbox up and start the Dagster UI")
    p.add_argument("--port", type=int, default=0, help="sandbox port (default: a free one)")
    p.add_argument("--ui-port", type=int, default=3000)

    p = add("ui", "start the Dagster UI and daemon (webserver on 127.0.0.1)", json_flag=False)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=3000)

    p = add("show", "an issue or merge request with its discussion threads, or a wiki page (`show wiki SLUG`)")
    p.add_argument("what", choices=[*(w for k in kinds.ITEM_KINDS for w in k.cli_names), *(w for k in kinds.KEYED_KINDS for w in k.cli_names)])
    p.add_argument("iid", type=iid_or_key, metavar="IID|SLUG")
    p.add_argument("--project", metavar="PATH")
    p.add_argument("--full", action="store_true",
                   help="print every description and note whole (otherwise a long one is cut, saying how "
                        "much more there is; --json is always whole)")

    from gitlab_knowledge.cli import eval_cmd, graph_cmd, models_cmd, similar_cmd

    graph_cmd.add_parsers(add)
    eval_cmd.add_parser(sub)
    similar_cmd.add_parser(sub)
    models_cmd.add_parser(sub)
    # --config before the command or after it (the search command takes it anywhere); a command's
    # parser defaults it to nothing, so it does not undo a --config written before the command.
    for command in sub.choices.values():
        command.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS,
                             help="config file (also accepted before the command)")
    return parser


def _commands() -> dict[str, Callable[[argparse.Namespace, Config], int]]:
    from gitlab_knowledge.cli import (
        demo,
        doctor,
        eval_cmd,
        explain_cmd,
        graph_cmd,
        index_cmd,
        inspect_cmd,
        models_cmd,
        similar_cmd,
        sync_cmd,
        ui,
    )

    return {
        "auth-test": doctor.auth_test,
        "doctor": doctor.doctor,
        "sync": sync_cmd.run,
        "sync-status": inspect_cmd.sync_status_cmd,
        "list": inspect_cmd.list_cmd,
        "count": inspect_cmd.count_cmd,
        "show": inspect_cmd.show_cmd,
        "embed": index_cmd.embed_cmd,
        "stats": index_cmd.stats_cmd,
        "index": index_cmd.index_status_cmd,
        "explain": explain_cmd.explain_cmd,
        "related": graph_cmd.related_cmd,
        "history": graph_cmd.history_cmd,
        "me": graph_cmd.me_cmd,
        "person": graph_cmd.person_cmd,
        "demo": demo.run,
        "ui": ui.run,
        "eval": eval_cmd.eval_cmd,
        "similar": similar_cmd.similar_cmd,
        "models": models_cmd.models_cmd,
    }


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.INFO if verbose else logging.WARNING)
    install_logging_redaction()
    clean_logs()


def main(argv: Sequence[str] | None = None) -> int:
    # Whatever this process (and the Dagster processes `ui` starts) creates is its owner's alone:
    # the store, the indexes and Dagster's storage hold confidential titles and internal notes.
    os.umask(0o077)
    try:
        args = build_parser().parse_args(argv)
        require_text(args)
        _setup_logging(args.verbose)
        # The demo brings its own GitLab and config; everything else needs the user's.
        config = None if args.command == "demo" else load_config(args.config)
        return _commands()[args.command](args, config)  # type: ignore[arg-type]  # None: the demo only
    except KnowledgeError as exc:
        console.fail(str(exc))
        return exc.exit_code
    except BrokenPipeError:
        # The reader went away (`... | head`): not an error worth a message.
        sys.stderr.close()
        return 0
    except BaseException as exc:  # noqa: BLE001 - the last line of defence against a traceback
        if console.is_interrupt(exc):  # Ctrl-C, or SIGTERM/SIGINT as Dagster re-raises them
            console.fail("interrupted")
            return 130
        if not isinstance(exc, Exception) or os.environ.get(DEBUG_ENV):
            raise
        known = console.environment_failure(exc)
        if known is not None:
            console.fail(redact(known))
            return 1
        console.fail(redact(f"internal error: {type(exc).__name__}: {exc} (set {DEBUG_ENV}=1 for the traceback)"))
        return 70
