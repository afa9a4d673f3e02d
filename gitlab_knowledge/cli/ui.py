"""`ui`: the Dagster UI (webserver + daemon) for this project, started the way it must be.

`dagster dev` started from a script ignores SIGINT/SIGTERM unless both are reset to their
defaults before exec, and killing only its parent orphans the webserver and the daemon
(DESIGN.md pitfalls). So it runs in its own process group with default signal handlers, and
Ctrl-C or SIGTERM here stops the whole group.
"""

import argparse
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from gitlab_knowledge.cli import console
from gitlab_knowledge.config import Config

WORKSPACE = """load_from:
  - python_module:
      module_name: gitlab_knowledge.defs
      attribute: defs
      location_name: gitlab_knowledge
"""


def _reset_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


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


def dagster_dev_command(workspace: Path, host: str, port: int) -> list[str]:
    return [sys.executable, "-m", "dagster", "dev", "-w", str(workspace), "-h", host, "-p", str(port)]


def launch(config: Config, *, host: str, port: int, config_path: Path | str | None,
           extra_env: dict[str, str] | None = None) -> int:
    home, workspace = dagster_paths(config)
    env = {**os.environ, "DAGSTER_HOME": str(home), **(extra_env or {})}
    if config_path:
        env["GITLAB_KNOWLEDGE_CONFIG"] = str(Path(config_path).resolve())
    child = subprocess.Popen(dagster_dev_command(workspace, host, port), env=env, cwd=home,
                             start_new_session=True, preexec_fn=_reset_signals)

    def stop(*_: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        return child.wait()
    except KeyboardInterrupt:
        stop()
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(30)
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        # Whatever is left of the group (a code server respawned while shutting down) goes too.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)


def run(args: argparse.Namespace, config: Config) -> int:
    console.out.print(f"Dagster UI on http://{args.host}:{args.port} (Ctrl-C to stop)")
    return launch(config, host=args.host, port=args.port, config_path=args.config)
