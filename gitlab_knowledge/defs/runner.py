"""Running the sync job in this process, for the CLI: the same job, assets and code a Dagster
daemon or the UI launches, recorded in the same Dagster instance so the runs show in the UI."""

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from gitlab_knowledge import errors
from gitlab_knowledge.config import Config
from gitlab_knowledge.defs.jobs import EMBED_JOB, SYNC_JOB
from gitlab_knowledge.defs.partitions import ensure_partitions
from gitlab_knowledge.defs.reporting import installed
from gitlab_knowledge.sync.progress import SyncProgress
from gitlab_knowledge.sync.runs import HOSTNAME, process_alive, process_start

PROJECT_TAG = "gitlab_knowledge/project"
TRIGGER_TAG = "gitlab_knowledge/trigger"
PID_TAG = "gitlab_knowledge/pid"
HOST_TAG = "gitlab_knowledge/host"
PROCESS_START_TAG = "gitlab_knowledge/process_start"


@dataclass
class ProjectOutcome:
    project: str
    success: bool
    run_id: str
    metadata: dict[str, dict[str, Any]] = field(default_factory=dict)  # asset key -> metadata values
    error: str | None = None
    error_class: str | None = None
    duration_s: float = 0.0  # the whole run: every layer of this project


def instance_yaml(base: Path) -> str:
    """The repository's dagster.yaml settings with storage rooted at `base` (absolute paths), for
    running outside the repository root."""
    template = (Path(__file__).with_name("instance.yaml")).read_text()
    return template.replace("data/dagster", str(base))


def dagster_instance(config: Config) -> dg.DagsterInstance:
    """$DAGSTER_HOME if set; else ./dagster.yaml (the repository's, storage under ./data/dagster);
    else an instance with the same settings under the configured data directory."""
    if os.environ.get("DAGSTER_HOME"):
        return dg.DagsterInstance.get()
    if Path("dagster.yaml").is_file():
        return dg.DagsterInstance.from_config(str(Path.cwd()))
    home = config.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    yaml = home / "dagster.yaml"
    if not yaml.exists():
        yaml.write_text(instance_yaml(home))
    return dg.DagsterInstance.from_config(str(home))


def _metadata_values(event: dg.AssetMaterialization) -> dict[str, Any]:
    return {key: getattr(value, "value", value) for key, value in event.metadata.items()}


def _error_of(result: dg.ExecuteInProcessResult) -> tuple[str, str | None]:
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data and event.step_failure_data.error:
            err = event.step_failure_data.error
            while err.cause is not None:
                err = err.cause
            message = err.message.strip().splitlines()[0] if err.message else err.cls_name or "step failed"
            for prefix in (f"gitlab_knowledge.errors.{err.cls_name}: ", f"{err.cls_name}: "):
                if message.startswith(prefix):
                    message = message[len(prefix):]
            return message, err.cls_name
    return "the run failed (see the Dagster event log)", None


def exit_code_for(error_class: str | None) -> int:
    cls = getattr(errors, error_class or "", None)
    return getattr(cls, "exit_code", 1) if isinstance(cls, type) else 1


def reap_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Fail the in-process runs whose process died (kill -9, a crash) and give back their pool
    slots. Nothing else does it for a run the CLI started (Dagster's run monitoring watches the
    runs its own launcher started), and a slot held by a dead run would make every later run of
    the pool wait forever."""
    from dagster._core.storage.dagster_run import DagsterRunStatus, RunsFilter

    reaped = []
    live = [DagsterRunStatus.STARTED, DagsterRunStatus.STARTING]
    for run in instance.get_runs(RunsFilter(statuses=live, tags={TRIGGER_TAG: "cli"})):
        pid = run.tags.get(PID_TAG, "")
        if run.tags.get(HOST_TAG) != HOSTNAME or not pid.isdigit():
            continue
        if process_alive(int(pid), run.tags.get(PROCESS_START_TAG) or None) is False:
            instance.report_run_failed(run, f"the process running this sync (PID {pid}) ended without finishing: "
                                            "killed or crashed; the next sync resumed from the cursor")
            reaped.append(run.run_id)
    storage = instance.event_log_storage
    if storage.supports_global_concurrency_limits:
        terminal = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}
        for pool in storage.get_concurrency_keys():
            for slot in storage.get_concurrency_info(pool).claimed_slots:
                run = instance.get_run_by_id(slot.run_id)
                if run is None or run.status in terminal:
                    storage.free_concurrency_slots_for_run(slot.run_id)
    return reaped


def run_sync(config: Config, projects: list[str], *, full: bool = False, force: bool = False,
             progress: SyncProgress | None = None, instance: dg.DagsterInstance | None = None,
             config_path: str | None = None) -> list[ProjectOutcome]:
    """Run the sync job once per project, in this process."""
    return run_job(config, SYNC_JOB, projects, {"raw_gitlab_payloads": {"full": full, "force": force}},
                   progress=progress, instance=instance, config_path=config_path)


def run_embed(config: Config, projects: list[str], *, everything: bool = False, provider: str | None = None,
              model: str | None = None, progress: SyncProgress | None = None,
              instance: dg.DagsterInstance | None = None, config_path: str | None = None) -> list[ProjectOutcome]:
    """Run the embeddings asset alone once per project, in this process."""
    op_config = {"document_embeddings": {"everything": everything, "provider": provider or "", "model": model or ""}}
    return run_job(config, EMBED_JOB, projects, op_config, progress=progress, instance=instance,
                   config_path=config_path)


def run_job(config: Config, job_name: str, projects: list[str], op_config: dict[str, dict[str, Any]], *,
            progress: SyncProgress | None = None, instance: dg.DagsterInstance | None = None,
            config_path: str | None = None) -> list[ProjectOutcome]:
    """Run a partitioned job once per project, in this process and in the project's Dagster
    instance; stops early only on failures that are not specific to one project (auth, config)."""
    from gitlab_knowledge.defs import defs  # import late: loading Dagster definitions costs ~1 s

    instance = instance or dagster_instance(config)
    reap_dead_runs(instance)
    ensure_partitions(instance, projects)
    job = defs.resolve_job_def(job_name)
    outcomes = []
    for project in projects:
        run_config = {
            "ops": {name: {"config": values} for name, values in op_config.items()},
            "resources": {"settings": {"config": {"config_path": config_path}}},
            # The CLI prints its own one-line error; the event log keeps the traceback for the UI.
            "loggers": {"console": {"config": {"log_level": "CRITICAL"}}},
        }
        started = time.monotonic()
        with installed(progress) if progress else contextlib.nullcontext():
            result = job.execute_in_process(
                run_config=run_config, instance=instance, partition_key=project, raise_on_error=False,
                tags={PROJECT_TAG: project, TRIGGER_TAG: "cli", PID_TAG: str(os.getpid()), HOST_TAG: HOSTNAME,
                      PROCESS_START_TAG: process_start(os.getpid()) or ""},
            )
        outcome = ProjectOutcome(project=project, success=result.success, run_id=result.run_id,
                                 duration_s=round(time.monotonic() - started, 2))
        for event in result.get_asset_materialization_events():
            mat = event.event_specific_data.materialization
            outcome.metadata[mat.asset_key.to_user_string()] = _metadata_values(mat)
        if not result.success:
            outcome.error, outcome.error_class = _error_of(result)
        outcomes.append(outcome)
        if not result.success and outcome.error_class in ("AuthError", "ConfigError", "StoreError"):
            break
    return outcomes

