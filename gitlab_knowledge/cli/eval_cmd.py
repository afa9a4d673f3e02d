"""`eval FILE [--mode M]... [--model PROVIDER[:MODEL]]... [--json]`: search quality on your own data."""

import argparse

from gitlab_knowledge.cli import console
from gitlab_knowledge.config import Config
from gitlab_knowledge.errors import BadValue


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="measure search quality (nDCG@10, recall@10/@50, MRR) on queries with known answers",
                       description="measure search quality (nDCG@10, recall@10/@50, MRR) on queries with known answers")
    p.add_argument("file", help="JSON list of {query, expected_urls and/or expected references, exclude?}")
    p.add_argument("--mode", action="append", choices=("lexical", "semantic", "hybrid"),
                   help="repeatable (default: all three)")
    p.add_argument("--model", action="append", metavar="PROVIDER[:MODEL]",
                   help="vector table to compare, repeatable (default: the configured model)")
    p.add_argument("--per-query", action="store_true", help="each query's scores and first result (with --json: its top 5)")
    p.add_argument("--json", action="store_true", help="machine-readable output (schema: search/eval_schema.json)")


def eval_cmd(args: argparse.Namespace, config: Config) -> int:
    from gitlab_knowledge.search.evaluate import evaluate, load_cases, render_table

    for model in args.model or []:
        if model.partition(":")[0] not in ("embedded", "ollama"):
            raise BadValue("model", model, ("embedded", "ollama"), "embedded or ollama[:MODEL]")
    cases = load_cases(args.file)
    report = evaluate(config, cases, modes=args.mode or ("lexical", "semantic", "hybrid"),
                      models=args.model or (None,), per_query=args.per_query)
    if args.json:
        console.print_json(report)
    else:
        console.out.print(render_table(report), end="", markup=False)
    return 0
