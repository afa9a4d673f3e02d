"""`python -m gitlab_knowledge.search "why did we choose redis" [filters] [--json]`."""

import argparse
import json
import os
import sys
from collections.abc import Sequence

from gitlab_knowledge.argparsing import OneLineParser, bounded_int
from gitlab_knowledge.errors import KnowledgeError, UsageError
from gitlab_knowledge.redact import redact
from gitlab_knowledge.search.filters import Filters, add_arguments

DEBUG_ENV = "GITLAB_KNOWLEDGE_DEBUG"


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m gitlab_knowledge.search",
                description="Search synced GitLab issues, merge requests and discussion threads by meaning and keyword.")
    p.add_argument("query", nargs="*", help="what to look for (quote it, or pass several words)")
    add_arguments(p)
    p.add_argument("--mode", choices=("hybrid", "lexical", "semantic"), default="hybrid")
    p.add_argument("--limit", type=bounded_int(1, 100), default=10, metavar="N", help="results to show (1-100, default 10)")
    p.add_argument("--model", metavar="PROVIDER[:MODEL]", help="vector table to search, e.g. ollama:nomic-embed-text")
    p.add_argument("--json", action="store_true", help="machine-readable output (schema: search/schema.json)")
    p.add_argument("--explain", action="store_true", help="show each retriever's rank and the RRF arithmetic")
    p.add_argument("--config", metavar="PATH")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    as_json = False
    try:
        args = build_parser().parse_args(argv)
        as_json = args.json
        from gitlab_knowledge.config import load_config
        from gitlab_knowledge.search.engine import Searcher
        from gitlab_knowledge.search.output import render_human, response_json

        config = load_config(args.config)
        filters = Filters.from_args(args)
        provider, model = None, None
        if args.model:
            provider, _, model = args.model.partition(":")
            if provider not in ("embedded", "ollama"):
                raise UsageError(f"--model expects embedded or ollama[:MODEL], got {args.model!r}")
        response = Searcher(config, provider, model or None).search(" ".join(args.query), filters, args.mode, args.limit)
        if args.json:
            sys.stdout.write(json.dumps(response_json(response), ensure_ascii=False, indent=2) + "\n")
        else:
            for warning in response.warnings:
                sys.stderr.write(f"warning: {warning}\n")
            sys.stdout.write(render_human(response, color=sys.stdout.isatty() and not os.environ.get("NO_COLOR"),
                                          explain=args.explain))
        return 0
    except KnowledgeError as exc:
        return _fail(str(exc), exc.exit_code, as_json)
    except KeyboardInterrupt:
        return _fail("interrupted", 130, as_json)
    except BrokenPipeError:
        sys.stderr.close()
        return 0
    except Exception as exc:  # noqa: BLE001 - no traceback reaches a user
        if os.environ.get(DEBUG_ENV):
            raise
        return _fail(redact(f"internal error: {type(exc).__name__}: {exc} (set {DEBUG_ENV}=1 for the traceback)"),
                     70, as_json)


def _fail(message: str, code: int, as_json: bool) -> int:
    if as_json:
        sys.stdout.write(json.dumps({"schema_version": 1, "error": message, "exit_code": code}) + "\n")
    sys.stderr.write(f"error: {message}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
