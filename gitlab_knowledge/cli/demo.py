"""`demo`: the bundled sample through the whole pipeline, then example searches.

A sandbox GitLab serves the sample dataset on 127.0.0.1; a config under data/demo/ points at it;
the sync runs the same Dagster job as `sync`; then a few searches show what the index can do.
With `--ui` the sandbox stays up and the Dagster UI starts against the demo config, so syncs can
be launched and watched from the browser.
"""

import argparse
import importlib.util
import os
import shlex
import sys
import time
from pathlib import Path

import tomli_w

from gitlab_knowledge.cli import console
from gitlab_knowledge.config import Config, load_config
from gitlab_knowledge.errors import UsageError

DEMO_TOKEN_ENV = "GITLAB_KNOWLEDGE_DEMO_TOKEN"
SANDBOX_PACKAGE = "gitlab_knowledge_sandbox"
EXAMPLES: tuple[tuple[str, dict[str, list[str]]], ...] = (
    ("why did we choose redis", {}),
    ("AUTH_TOKEN_TTL", {}),
    ("how do we roll back a bad deploy", {"types": ["discussion"]}),
)


def demo_dir(base: Path) -> Path:
    return base / "data" / "demo"


def write_demo_config(directory: Path, url: str, projects: list[str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "gitlab_knowledge.toml"
    doc = {
        "projects": projects,
        "gitlab": {"url": url, "token_env": DEMO_TOKEN_ENV, "rate_limit": 0},
        "storage": {"data_dir": "."},
    }
    path.write_text("# Written by `python -m gitlab_knowledge demo`: the sandbox GitLab serving the bundled sample.\n"
                    + tomli_w.dumps(doc), encoding="utf-8")
    return path


def activate_hint() -> str | None:
    """`source .venv/bin/activate` for the virtual environment this demo runs in (what `scripts/demo.sh`
    made), so the `python -m ...` hints run in a new shell; None outside one."""
    prefix = Path(sys.prefix)
    if prefix == Path(sys.base_prefix):
        return None
    script = prefix / "bin" / "activate"
    shown = script.relative_to(Path.cwd()) if script.is_relative_to(Path.cwd()) else script
    return f"source {shlex.quote(str(shown))}"


def require_sandbox() -> None:
    """The sandbox GitLab is its own package (`sandbox/` in the repository), kept out of the product
    wheel: `scripts/demo.sh` and `.ci/run` install both, the product installed alone has none."""
    if importlib.util.find_spec(SANDBOX_PACKAGE) is None:
        raise UsageError(f"the demo needs the sandbox GitLab ({SANDBOX_PACKAGE}), which is not installed: "
                         "run `pip install -e ./sandbox` from the repository root")


def run(args: argparse.Namespace, _config: Config | None) -> int:
    require_sandbox()
    from gitlab_knowledge.defs.runner import run_sync
    from gitlab_knowledge.search.filters import Filters
    from gitlab_knowledge.search.output import render_human
    from gitlab_knowledge.workspace import Workspace
    from gitlab_knowledge_sandbox import DEFAULT_TOKEN, SAMPLE_DATASET, SandboxGitLab

    os.environ[DEMO_TOKEN_ENV] = DEFAULT_TOKEN
    directory = demo_dir(Path.cwd())
    with SandboxGitLab(dataset=SAMPLE_DATASET, port=args.port) as sandbox:
        projects = [p["path_with_namespace"] for p in sandbox.state.list_projects(order_by="id", sort="asc")]
        config_path = write_demo_config(directory, sandbox.url, projects)
        config = load_config(config_path)
        console.out.print(f"[bold]Sandbox GitLab[/] serving the bundled sample at {sandbox.url} "
                          f"({', '.join(projects)})")
        from gitlab_knowledge.cli.sync_cmd import BarProgress, print_summary

        started = time.monotonic()
        with BarProgress() as bar:
            outcomes = run_sync(Workspace(config, progress=bar, config_path=str(config_path)), projects)
        print_summary(outcomes, time.monotonic() - started, full=False)
        if not all(o.success for o in outcomes):
            for o in outcomes:
                if not o.success:
                    console.fail(f"{o.project}: {o.message}")
            return 1
        searcher = Workspace(config, config_path=str(config_path)).searcher()
        for query, filters in EXAMPLES:
            console.out.print(f"\n[bold]$ python -m gitlab_knowledge.search \"{query}\"" +
                              "".join(f" --type {t}" for t in filters.get("types", [])) + "[/]")
            response = searcher.search(query, Filters.build(**filters), "hybrid", 3)
            console.out.print(render_human(response, color=console.out.is_terminal), markup=False, highlight=False)
        console.out.print(
            "[bold]Next[/]\n"
            + (f"  in a new shell:    {activate}   (first: the commands below use its python)\n"
               if (activate := activate_hint()) else "") +
            f"  search the demo:   python -m gitlab_knowledge.search \"authentication redesign\" --config {config_path}\n"
            f"  inspect it:        python -m gitlab_knowledge --config {config_path} show issue 234\n"
            f"  its provenance:    python -m gitlab_knowledge --config {config_path} explain '#234'\n"
            f"  index health:      python -m gitlab_knowledge --config {config_path} stats\n"
            "  the Dagster UI:    python -m gitlab_knowledge demo --ui   (then open http://127.0.0.1:3000)\n"
            "  a real GitLab:     see README, \"Point it at your GitLab\"")
        if args.ui:
            from gitlab_knowledge.cli.ui import launch

            console.out.print(f"\nDagster UI on http://127.0.0.1:{args.ui_port} (Ctrl-C stops it and the sandbox)")
            return launch(config, host="127.0.0.1", port=args.ui_port, config_path=config_path,
                          extra_env={DEMO_TOKEN_ENV: DEFAULT_TOKEN})
    return 0
