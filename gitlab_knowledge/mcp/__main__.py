"""`python -m gitlab_knowledge.mcp [--config PATH] [--http [--host H] [--port N]]`.

stdio by default (what desktop clients launch: stdout is the protocol, so everything else goes to
stderr); `--http` serves Streamable HTTP at http://HOST:PORT/mcp.
"""

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from gitlab_knowledge.argparsing import OneLineParser, bounded_int
from gitlab_knowledge.errors import KnowledgeError
from gitlab_knowledge.mcp.ending import INTERRUPTED, Ending
from gitlab_knowledge.redact import install_logging_redaction, redact
from gitlab_knowledge.terminal import clean_logs

DEFAULT_PORT = 8848


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m gitlab_knowledge.mcp",
                      description="The MCP server for agents: search, items, MR review comments, explain, index status.")
    p.add_argument("--config", metavar="PATH", help="config file (default: $GITLAB_KNOWLEDGE_CONFIG, ./gitlab_knowledge.toml)")
    p.add_argument("--http", action="store_true", help="serve Streamable HTTP instead of stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1; others need "
                                                       "[mcp] bearer_token_env or auth = \"gitlab\")")
    p.add_argument("--port", type=bounded_int(0, 65535), default=DEFAULT_PORT,
                   help=f"HTTP port (default {DEFAULT_PORT}; 0 picks a free one)")
    return p


def main(argv: Sequence[str] | None = None, ending: Ending | None = None) -> int:
    """Serve until the client goes; `ending` (when given) is how the process ends early: on
    SIGTERM/SIGINT, or in stdio when the client closes stdin, whatever is still loading."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    install_logging_redaction()
    clean_logs()
    if ending is not None:
        ending.on_signals()
    try:
        args = build_parser().parse_args(argv)
        if ending is not None and not args.http:
            ending.on_stdin_hangup()
        from gitlab_knowledge.config import load_config
        from gitlab_knowledge.mcp.resident import Resident

        config = load_config(args.config)
        if args.http:
            from gitlab_knowledge.mcp.http import bearer_token, listen

            token, sock = bearer_token(config, args.host), listen(args.host, args.port)
        # The model and the indexes load on a thread while the SDK is imported and the client connects.
        resident = Resident(config)
        if ending is not None:
            ending.on_exit(resident.remove_socket)  # the one thing the process leaves behind
        resident.start()
        import anyio

        try:
            if args.http:
                from gitlab_knowledge.mcp.http import serve_http

                anyio.run(serve_http, resident, sock, args.host, token)
            else:
                from gitlab_knowledge.mcp.server import serve_stdio

                anyio.run(serve_stdio, resident)
        finally:
            if ending is None:  # in-process; otherwise ending.now() removes the socket and exits at once
                resident.stop()
        return 0
    except KnowledgeError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        return INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback, unless asked for
        if os.environ.get("GITLAB_KNOWLEDGE_DEBUG"):
            raise
        sys.stderr.write(redact(f"error: internal error: {type(exc).__name__}: {exc}\n"))
        return 70


if __name__ == "__main__":
    # Out through Ending whatever main returns: native threads may still be loading (ending.py).
    ending = Ending()
    ending.now(main(ending=ending))
