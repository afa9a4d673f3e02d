"""The search command's arguments: the query, the filter flags (search/filters.py) and its options.

Apart from search/__main__.py so that the warm-path client (search/resident_client.py), which
compares a command's arguments with their defaults, needs nothing of the command itself.
"""

import argparse

from gitlab_knowledge.argparsing import OneLineParser, bounded_int
from gitlab_knowledge.search.filters import add_arguments


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
    p.add_argument("--group", action="store_true", help="each issue/MR once: its best-ranked document (item or thread)")
    p.add_argument("--config", metavar="PATH")
    return p
