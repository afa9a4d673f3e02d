"""`ui`: the Dagster UI (webserver + daemon) for this project, stopped as a whole by Ctrl-C."""

import argparse
import os
import signal
from pathlib import Path

from gitlab_knowledge.cli import console
from gitlab_knowledge.cli.dagster_server import WORKSPACE, DagsterServer
from gitlab_knowledge.config import Config


def dagster_paths(config: Config) -> tuple[Path, Path]:
    """(DAGSTER_HOME, workspace file): the repository's when run from its root, else generated
    under the data directory with the same settings."""
    cwd = Path.cwd()
    if (cwd / "dagster.yaml").is_file() and (cwd / "workspace.yaml").is_file():
        return cwd, cwd / "workspace.yaml"
    from gitlab_knowledge.defs.runner import instance_yaml

    home = config.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        (home / "dagster.yaml").write_text(instance_yaml(home))
    workspace = home / "workspace.yaml"
    workspace.write_text(WORKSPACE)
    return home, workspace


def launch(config: Config, *, host: str, port: int, config_path: Path | str | None,
           extra_env: dict[str, str] | None = None) -> int:
    home, workspace = dagster_paths(config)
    env = {**os.environ, **(extra_env or {})}
    if config_path:
        env["GITLAB_KNOWLEDGE_CONFIG"] = str(Path(config_path).resolve())
    server = DagsterServer(home, workspace, host=host, port=port, env=env).start()
    previous = signal.signal(signal.SIGTERM, lambda *_: server.stop())
    try:
        return server.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)


def run(args: argparse.Namespace, config: Config) -> int:
    console.out.print(f"Dagster UI on http://{args.host}:{args.port} (Ctrl-C to stop)")
    return launch(config, host=args.host, port=args.port, config_path=args.config)
