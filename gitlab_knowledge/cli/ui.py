"""`ui`: the Dagster UI (webserver + daemon) for this project, stopped as a whole by Ctrl-C, after
canceling the runs it launched that are still in progress (defs/cancel.py)."""

import argparse
import os
import signal
from pathlib import Path

from gitlab_knowledge.cli import console
from gitlab_knowledge.cli.dagster_server import WORKSPACE, DagsterServer
from gitlab_knowledge.config import Config


def dagster_paths(config: Config) -> tuple[Path, Path]:
    """(DAGSTER_HOME, workspace file). The instance is the one `sync` records its runs in, chosen
    by the same rule (`runner.dagster_home`) and prepared the same way, so CLI runs show in the UI.
    The workspace file is the repository's when run from its root, else generated under the data
    directory (never written into a $DAGSTER_HOME that may hold the user's own)."""
    from gitlab_knowledge.defs.runner import dagster_home, dagster_instance

    # Opening the instance as `sync` does creates a new one with the repository's settings.
    with dagster_instance(config):
        pass
    home = dagster_home(config).resolve()
    cwd = Path.cwd()
    if (cwd / "dagster.yaml").is_file() and (cwd / "workspace.yaml").is_file():
        return home, cwd / "workspace.yaml"
    generated = config.dagster_home
    generated.mkdir(parents=True, exist_ok=True)
    workspace = generated / "workspace.yaml"
    workspace.write_text(WORKSPACE)
    return home, workspace


def server_for(config: Config, *, host: str, port: int, config_path: Path | str | None,
               extra_env: dict[str, str] | None = None) -> DagsterServer:
    """The `dagster dev` process `ui` runs, not started yet."""
    home, workspace = dagster_paths(config)
    env = {**os.environ, **(extra_env or {})}
    # The daemon's processes run elsewhere (Dagster's home), where ./gitlab_knowledge.toml is not:
    # hand them the file this command read, whichever way it was found.
    source = config_path or (config.source if Path(config.source).is_file() else None)
    if source:
        env["GITLAB_KNOWLEDGE_CONFIG"] = str(Path(source).resolve())
    # In this directory, as `sync` runs: relative paths in a dagster.yaml and the config file
    # lookup then resolve the same way for both.
    return DagsterServer(home, workspace, host=host, port=port, env=env, cwd=Path.cwd())


def launch(config: Config, *, host: str, port: int, config_path: Path | str | None,
           extra_env: dict[str, str] | None = None) -> int:
    server = server_for(config, host=host, port=port, config_path=config_path, extra_env=extra_env).start()

    def terminate(*_: object) -> None:
        # Unwind out of server.wait() and stop from the main flow: stopping inside the handler
        # would wait on the process while the interrupted wait holds Popen's lock (40 s, then SIGKILL).
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        return server.wait()
    except (KeyboardInterrupt, _Terminated):
        return 0
    finally:
        try:
            stop(server)
        finally:
            signal.signal(signal.SIGTERM, previous)


def stop(server: DagsterServer, *, wait_s: float = 30.0) -> list[str]:
    """Stop the UI: first cancel the runs it launched that are still in progress (the code server
    interrupts them, and they end CANCELED rather than killed and FAILED), then stop the whole
    process group; one line says which runs were canceled. The ids of those runs."""
    import dagster as dg

    from gitlab_knowledge.defs.cancel import cancel_runs, mark_canceled, server_runs

    instance, asked = None, []
    try:
        instance = dg.DagsterInstance.from_config(str(server.home))
        asked = server_runs(instance)
        cancel_runs(instance, asked, wait_s=wait_s)
    except (KeyboardInterrupt, _Terminated):  # asked again: stop now, the runs are marked below
        pass
    except Exception as exc:  # noqa: BLE001 - an instance that cannot be read must not keep the UI up
        console.warn(f"could not cancel the runs in progress: {exc}")
    finally:
        server.stop()
    if instance is None:
        return []
    with instance:
        mark_canceled(instance, asked)
        canceled = [run_id for run_id in asked
                    if getattr(instance.get_run_by_id(run_id), "status", None) == dg.DagsterRunStatus.CANCELED]
    if canceled:
        console.err.print(f"Canceled {len(canceled)} run(s) in progress, as the UI stopped: "
                          f"{', '.join(run_id[:8] for run_id in canceled)}", markup=False, highlight=False)
    return canceled


class _Terminated(Exception):
    """SIGTERM arrived: stop the UI as Ctrl-C does."""


def run(args: argparse.Namespace, config: Config) -> int:
    console.out.print(f"Dagster UI on http://{args.host}:{args.port} (Ctrl-C to stop)")
    return launch(config, host=args.host, port=args.port, config_path=args.config)
