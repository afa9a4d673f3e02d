"""`python -m gitlab_knowledge.search "why did we choose redis" [filters] [--json]`."""

import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gitlab_knowledge.argparsing import require_text
from gitlab_knowledge.errors import BadValue, KnowledgeError, error_document
from gitlab_knowledge.redact import redact
from gitlab_knowledge.search.arguments import build_parser
from gitlab_knowledge.search.filters import Filters
from gitlab_knowledge.terminal import clean

if TYPE_CHECKING:
    from gitlab_knowledge.search.engine import Response

DEBUG_ENV = "GITLAB_KNOWLEDGE_DEBUG"


def main(argv: Sequence[str] | None = None) -> int:
    as_json = False
    try:
        args = build_parser().parse_args(argv)
        as_json = args.json
        require_text(args)
        from gitlab_knowledge.config import load_config

        config = load_config(args.config)
        filters = Filters.from_args(args)
        provider, model = None, None
        if args.model:
            provider, _, model = args.model.partition(":")
            if provider not in ("embedded", "ollama"):
                raise BadValue("model", args.model, ("embedded", "ollama"), "embedded or ollama[:MODEL]")
        color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        # A running MCP server answers from its warm searcher, rendered by `render` (search/resident_client.py).
        from gitlab_knowledge.search.resident_client import ask_resident, request_of

        # --group is not part of the resident protocol yet: such a search runs here.
        output = None if args.group else ask_resident(config, request_of(args, color))
        if output is None:
            from gitlab_knowledge.workspace import Workspace

            searcher = Workspace(config, config_path=args.config).searcher(provider=provider, model=model or None)
            response = searcher.search(" ".join(args.query), filters, args.mode, args.limit, group=args.group)
            output = render(response, as_json=args.json, color=color, explain=args.explain)
        sys.stderr.write(output[1])
        sys.stdout.write(output[0])
        return 0
    except KnowledgeError as exc:
        return _fail(str(exc), exc.exit_code, as_json, exc)
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


def render(response: "Response", *, as_json: bool, color: bool, explain: bool) -> tuple[str, str]:
    """(stdout, stderr) of one search: what this command prints, wherever the search ran."""
    from gitlab_knowledge.search.output import render_human, response_json

    if as_json:
        return json.dumps(response_json(response), ensure_ascii=False, indent=2) + "\n", ""
    warnings = "".join(f"warning: {clean(warning)}\n" for warning in response.warnings)
    return render_human(response, color=color, explain=explain), warnings


def _fail(message: str, code: int, as_json: bool, error: BaseException | None = None) -> int:
    if as_json:
        sys.stdout.write(json.dumps(error_document(message, code, error)) + "\n")
    sys.stderr.write(f"error: {clean(message)}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
