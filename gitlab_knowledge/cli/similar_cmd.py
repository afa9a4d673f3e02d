"""`similar REF [--limit N] [filters] [--json]`: issues and MRs most like a given one."""

import argparse
import json
import os
import sys

from gitlab_knowledge.argparsing import bounded_int
from gitlab_knowledge.config import Config
from gitlab_knowledge.search.filters import add_arguments
from gitlab_knowledge.terminal import clean


def add_parser(sub: argparse._SubParsersAction) -> None:
    text = "the issues and merge requests most like a given one (duplicates, prior art)"
    p = sub.add_parser("similar", help=text, description=text)
    p.add_argument("ref", help="#IID, !IID, group/project#IID, an issue/MR URL or a document id")
    add_arguments(p)
    p.add_argument("--mode", choices=("hybrid", "lexical", "semantic"), default="hybrid")
    p.add_argument("--limit", type=bounded_int(1, 100), default=10, metavar="N", help="results (1-100, default 10)")
    p.add_argument("--json", action="store_true", help="machine-readable output (schema: search/schema.json)")


def similar_cmd(args: argparse.Namespace, config: Config) -> int:
    from gitlab_knowledge.search.filters import Filters
    from gitlab_knowledge.search.output import render_human, response_json
    from gitlab_knowledge.search.similar import similar
    from gitlab_knowledge.workspace import Workspace

    response = similar(Workspace(config).searcher(), args.ref, Filters.from_args(args), args.mode, args.limit)
    if args.json:
        sys.stdout.write(json.dumps(response_json(response), ensure_ascii=False, indent=2) + "\n")
    else:
        for warning in response.warnings:
            sys.stderr.write(f"warning: {clean(warning)}\n")
        sys.stdout.write(render_human(response, color=sys.stdout.isatty() and not os.environ.get("NO_COLOR")))
    return 0
