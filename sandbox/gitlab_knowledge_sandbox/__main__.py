"""CLI: `python -m gitlab_knowledge_sandbox serve|generate ...`."""

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import NoReturn

from .dataset import DatasetError, load_dataset
from .faults import FaultSpecError, parse_faults
from .generate import generate_dataset
from .server import DEFAULT_TOKEN, SAMPLE_DATASET, SandboxGitLab

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, no usage dump: scripts and people both read the first line only.
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _fail(message: str) -> int:
    print(f"sandbox: error: {message}", file=sys.stderr, flush=True)
    return EXIT_USAGE


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range: {value}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m gitlab_knowledge_sandbox", description="Sandbox GitLab (REST API v4 look-alike).")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = sub.add_parser("serve", help="serve a dataset on 127.0.0.1")
    serve.add_argument("--data", type=Path, default=SAMPLE_DATASET, help="dataset directory (default: bundled sample)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=_port, default=0, help="0 picks a free port")
    serve.add_argument("--latency-ms", type=_positive_float, default=0.0)
    serve.add_argument("--rate-limit", type=_positive_float, default=None, help="requests per second per token")
    serve.add_argument("--faults", default=None, help="fault spec, e.g. '500:p=0.1,seed=3;timeout:count=1,delay=2'")
    serve.add_argument("--token", default=DEFAULT_TOKEN)
    serve.add_argument("--legacy-diffs", action="store_true",
                       help="answer like GitLab < 15.7: no merge request /diffs (404), only /changes")

    gen = sub.add_parser("generate", help="write a synthetic dataset directory")
    gen.add_argument("--out", type=Path, required=True)
    gen.add_argument("--projects", type=_count, default=2)
    gen.add_argument("--issues", type=_count, default=600)
    gen.add_argument("--mrs", type=_count, default=300)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--threads-per-parent-mean", type=_positive_float, default=9.5,
                     help="threads with user notes per issue/MR, averaged over all (incl. the ~30%% with none)")
    gen.add_argument("--notes-per-thread-mean", type=_positive_float, default=2.0)
    gen.add_argument("--group-depth", type=_count, default=0,
                     help="put the projects in nested groups under acme, this many levels of subgroups deep")
    gen.add_argument("--group-fanout", type=_count, default=3, help="subgroups per group (with --group-depth)")
    return parser


def serve(args: argparse.Namespace) -> int:
    try:
        # The spec is cheap to check; do it before a possibly slow dataset load.
        parse_faults(args.faults)
        data = load_dataset(args.data)
        sandbox = SandboxGitLab(
            dataset=data, token=args.token, host=args.host, port=args.port, latency_ms=args.latency_ms,
            rate_limit=args.rate_limit or None, faults=args.faults, legacy_diffs=args.legacy_diffs,
        )
        sandbox.start()
    except DatasetError as exc:
        return _fail(f"cannot load dataset: {exc}")
    except FaultSpecError as exc:
        return _fail(f"bad --faults: {exc}")
    except OSError as exc:
        return _fail(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")

    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    counts = sandbox.state.counts()
    print(
        f"Sandbox GitLab at {sandbox.url} (dataset: {args.data}, {counts['projects']} projects, "
        f"{counts['issues']} issues, {counts['merge_requests']} merge requests)",
        flush=True,
    )
    try:
        # A timed wait keeps the main thread responsive to signals on every platform.
        while not stop.wait(0.5):
            pass
    finally:
        sandbox.stop()
    return 0


def generate(args: argparse.Namespace) -> int:
    try:
        summary = generate_dataset(
            args.out, projects=args.projects, issues=args.issues, mrs=args.mrs, seed=args.seed,
            threads_per_parent_mean=args.threads_per_parent_mean, notes_per_thread_mean=args.notes_per_thread_mean,
            group_depth=args.group_depth, group_fanout=args.group_fanout,
        )
    except (OSError, ValueError) as exc:
        return _fail(f"cannot generate into {args.out}: {exc}")
    print(summary.line(), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    return generate(args)


if __name__ == "__main__":
    sys.exit(main())
