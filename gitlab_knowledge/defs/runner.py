"""Running the pipeline's Dagster jobs in this process: the same jobs, assets and code a Dagster
daemon or the UI launches, recorded in the same Dagster instance so the runs show in the UI.

This is the one way anything outside Dagster runs the layers: the CLI, the tests, the benchmarks
and the drills all call `run_job` (or `run_sync` / `run_embed`) with a `Workspace`, which the run
receives as its `workspace` resource. The order of the layers exists only in the asset graph.
"""

import functools
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import dagster as dg

from gitlab_knowledge.config import Config
from gitlab_knowledge.defs.failures import original
from gitlab_knowledge.defs.jobs import EMBED_JOB, SYNC_JOB
from gitlab_knowledge.defs.partitions import ensure_partitions
from gitlab_knowledge.defs.run_slots import (
    HOST_TAG,
    PID_TAG,
    PROCESS_START_TAG,
    PROJECT_TAG,
    TRIGGER_TAG,
    cancel_unstarted,
    reap_dead_runs,
    refuse_if_busy,
    refuse_if_project_busy,
)
from gitlab_knowledge.errors import (
    AuthError,
    ConfigError,
    Interrupted,
    KnowledgeError,
    StoreError,
    SyncInProgressError,
    disk_failure,
    is_interrupt,
)
from gitlab_knowledge.layer_stats import LayerStats
from gitlab_knowledge.layers import EMBEDDINGS, RAW
from gitlab_knowledge.redact import redact
from gitlab_knowledge.sync.runs import HOSTNAME, pipeline_lock, process_start
from gitlab_knowledge.workspace import Workspace

# Failures that are not about one project: the next project would fail the same way.
STOP_ALL = (AuthError, ConfigError, StoreError)
S = TypeVar("S", bound=LayerStats)


@dataclass
class ProjectOutcome:
    project: str
    run_id: str
    metadata: dict[str, dict[str, Any]] = field(default_factory=dict)  # asset key -> metadata values
    error: BaseException | None = None  # what the failing step raised, as raised
    duration_s: float = 0.0  # the whole run: every layer of this project

    @property
    def success(self) -> bool:
        return self.error is None

    @property
    def message(self) -> str | None:
        if self.error is None:
            return None
        if isinstance(self.error, KnowledgeError):
            return str(self.error)
        return redact(f"{type(self.error).__name__}: {self.error}")

    @property
    def exit_code(self) -> int:
        return getattr(self.error, "exit_code", 1) if self.error is not None else 0

    def stats(self, kind: type[S]) -> S:
        """A layer's typed stats as this run reported them (defaults where the layer did not run)."""
        return kind.from_metadata(self.metadata.get(kind.ASSET, {}))


def instance_yaml(base: Path) -> str:
    """The repository's dagster.yaml settings with storage rooted at `base` (absolute paths), for
    running outside the repository root."""
    template = (Path(__file__).with_name("instance.yaml")).read_text()
    return template.replace("data/dagster", str(base))


def dagster_home(config: Config) -> Path:
    """Where the instance lives: $DAGSTER_HOME if set; else the current directory when it holds
    a dagster.yaml (the repository's: storage under ./data/dagster); else `<data_dir>/dagster`.
    `sync` and `ui` both ask this, so runs the CLI starts show up in the UI."""
    if os.environ.get("DAGSTER_HOME"):
        return Path(os.environ["DAGSTER_HOME"]).expanduser().resolve()
    if Path("dagster.yaml").is_file():
        return Path.cwd()
    return config.dagster_home


def dagster_instance(config: Config) -> dg.DagsterInstance:
    """The instance `dagster_home` names, created with the repository's settings when new."""
    home = dagster_home(config)
    if os.environ.get("DAGSTER_HOME"):  # the user's instance: theirs to configure, never written here
        return dg.DagsterInstance.from_config(str(home))
    yaml = home / "dagster.yaml"
    if not yaml.exists():
        home.mkdir(parents=True, exist_ok=True)
        yaml.write_text(instance_yaml(home))
    else:
        _upgrade_event_log(yaml)
    return dg.DagsterInstance.from_config(str(home))


# The event log an earlier version wrote into the instances it created: the same database, which
# the batching storage (gitlab_knowledge/event_log.py) reads and writes as it is.
_PLAIN_EVENT_LOG = "  module: dagster._core.storage.event_log\n  class: ConsolidatedSqliteEventLogStorage\n"
_BATCHING_EVENT_LOG = "  module: gitlab_knowledge.event_log\n  class: BatchingSqliteEventLogStorage\n"


def _upgrade_event_log(yaml: Path) -> None:
    """An instance this product created with an earlier version (its template's first line) gets
    the batching event log; one a user wrote is theirs and left alone."""
    text = yaml.read_text()
    template = Path(__file__).with_name("instance.yaml").read_text()
    if text.startswith(template.splitlines()[0]) and f"event_log_storage:\n{_PLAIN_EVENT_LOG}" in text:
        staged = yaml.with_name(yaml.name + ".new")  # replaced whole: never a half-written file
        staged.write_text(text.replace(f"event_log_storage:\n{_PLAIN_EVENT_LOG}",
                                       f"event_log_storage:\n{_BATCHING_EVENT_LOG}"))
        staged.replace(yaml)


def _materializations(instance: dg.DagsterInstance, run_id: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for record in instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records:
        mat = record.event_log_entry.asset_materialization
        if mat is not None:
            out[mat.asset_key.to_user_string()] = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
    return out


def _storage_failure(error: BaseException, where: object) -> BaseException:
    """Dagster's own storage failing (its SQLite on a full disk: SQLAlchemy's error, SQL included)
    as one StoreError naming where it lives, which stops the other projects too; other errors as
    they are."""
    if isinstance(error, KnowledgeError) or not type(error).__module__.startswith("sqlalchemy"):
        return error
    found = disk_failure(error)
    cause = found[0] if found else str(getattr(error, "orig", None) or error).strip().splitlines()[0]
    return StoreError(f"Dagster's run storage cannot write {where}: {cause}")


def run_sync(workspace: Workspace, projects: Sequence[str], *, full: bool = False, force: bool = False,
             instance: dg.DagsterInstance | None = None, selection: Sequence[str] | None = None,
             tags: Mapping[str, str] | None = None, project_tags: Mapping[str, Mapping[str, str]] | None = None,
             wait_s: float = 0.0) -> list[ProjectOutcome]:
    """Run the sync job (every layer, or the `selection` of asset keys) once per project."""
    op_config = {RAW.asset: {"full": full, "force": force}}
    if selection is not None and RAW.asset not in selection:
        op_config = {}
    return run_job(workspace, SYNC_JOB, projects, op_config, instance=instance, selection=selection, tags=tags,
                   project_tags=project_tags, wait_s=wait_s)


def run_embed(workspace: Workspace, projects: Sequence[str], *, everything: bool = False, provider: str | None = None,
              model: str | None = None, instance: dg.DagsterInstance | None = None) -> list[ProjectOutcome]:
    """Run the embeddings asset alone once per project."""
    op_config = {EMBEDDINGS.asset: {"everything": everything, "provider": provider or "", "model": model or ""}}
    return run_job(workspace, EMBED_JOB, projects, op_config, instance=instance)


def _one_pipeline_process(run: Callable[..., list[ProjectOutcome]]) -> Callable[..., list[ProjectOutcome]]:
    """Hold the data directory's pipeline lock around a whole `run_job`: a second process is
    refused at once (exit 5) instead of checking the pools at the same moment and queueing.
    Dagster's storage failing before or between runs is one StoreError too (`_storage_failure`)."""
    @functools.wraps(run)
    def locked(workspace: Workspace, job_name: str, *args: Any, **kwargs: Any) -> list[ProjectOutcome]:
        what = "embed" if job_name == EMBED_JOB else "sync"
        with pipeline_lock(workspace.config.data_dir, what):
            try:
                return run(workspace, job_name, *args, **kwargs)
            except Exception as exc:
                instance = kwargs.get("instance")
                error = _storage_failure(exc, instance.root_directory if instance is not None
                                         else dagster_home(workspace.config))
                if error is exc:
                    raise
                raise error from None

    return locked


@_one_pipeline_process
def run_job(workspace: Workspace, job_name: str, projects: Sequence[str], op_config: Mapping[str, Any], *,
            instance: dg.DagsterInstance | None = None, selection: Sequence[str] | None = None,
            tags: Mapping[str, str] | None = None, project_tags: Mapping[str, Mapping[str, str]] | None = None,
            wait_s: float = 0.0) -> list[ProjectOutcome]:
    """Run a partitioned job once per project, in this process and in the project's Dagster
    instance; stops early only on an interrupt and on failures that are not specific to one
    project (auth, config, store).

    `tags` go on every run (a batch run names itself and its trigger, replacing "cli"),
    `project_tags` on one project's; `wait_s` waits that long for another live run to leave the
    pools (the batch run of `defs/batch.py`, which the daemon started) instead of refusing at once."""
    from gitlab_knowledge.defs import build_defs  # import late: loading Dagster definitions costs ~1 s

    instance = instance or dagster_instance(workspace.config)
    reap_dead_runs(instance)
    wait_until_free(instance, projects, wait_s)
    ensure_partitions(instance, projects)
    job = build_defs(workspace).resolve_job_def(job_name)
    asset_selection = [dg.AssetKey(key) for key in selection] if selection is not None else None
    run_config = {
        "ops": {name: {"config": values} for name, values in op_config.items()},
        # The CLI prints its own one-line error; the event log keeps the traceback for the UI.
        "loggers": {"console": {"config": {"log_level": "CRITICAL"}}},
    }
    outcomes: list[ProjectOutcome] = []
    for index, project in enumerate(projects):
        started = time.monotonic()
        outcome = ProjectOutcome(project=project, run_id=str(uuid.uuid4()))
        try:
            if index:  # the first was checked above; a run launched since (from the UI) is not doubled
                refuse_if_project_busy(instance, project)
            result = job.execute_in_process(
                run_config=run_config, instance=instance, partition_key=project, raise_on_error=True,
                run_id=outcome.run_id, asset_selection=asset_selection,
                tags={PROJECT_TAG: project, TRIGGER_TAG: "cli", PID_TAG: str(os.getpid()), HOST_TAG: HOSTNAME,
                      PROCESS_START_TAG: process_start(os.getpid()) or "", **(tags or {}),
                      **(project_tags or {}).get(project, {})},
            )
            if not result.success:  # raise_on_error covers step failures; anything else is said here
                outcome.error = KnowledgeError("the run failed (see the Dagster event log)")
        except Exception as exc:  # noqa: BLE001 - typed below: the outcome carries what the step raised
            outcome.error = _storage_failure(original(exc), instance.root_directory)
        except KeyboardInterrupt:
            # Ctrl-C or SIGTERM before Dagster's own handling took over (inside a run it becomes the
            # step's failure, which the outcome carries). The run it created would stay NOT_STARTED
            # for ever: it is canceled, saying why.
            if cancel_unstarted(instance, outcome.run_id) and not outcomes:
                raise Interrupted("stopped before the run started; nothing changed") from None
            raise Interrupted("interrupted between two runs; the runs before it finished") from None
        outcome.duration_s = round(time.monotonic() - started, 2)
        outcome.metadata = _materializations(instance, outcome.run_id)
        outcomes.append(outcome)
        if isinstance(outcome.error, STOP_ALL) or is_interrupt(outcome.error):
            break
    return outcomes


def wait_until_free(instance: dg.DagsterInstance, projects: Sequence[str], wait_s: float,
                    sleep: Callable[[float], None] = time.sleep, exclude: str | None = None) -> None:
    """`refuse_if_busy`, retried for up to `wait_s` seconds (an interruptible sleep, unlike a step
    waiting for a pool slot); `exclude`: the asking run, which may hold slots itself."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            refuse_if_busy(instance, projects, exclude=exclude)
            return
        except SyncInProgressError:
            if time.monotonic() >= deadline:
                raise
        sleep(1.0)
        reap_dead_runs(instance)


def run_batch(workspace: Workspace, projects: Sequence[str], *, full: bool = False, force: bool = False,
              instance: dg.DagsterInstance | None = None, tags: Mapping[str, str] | None = None) -> list[ProjectOutcome]:
    """Sync `projects` in one run of the batch job (defs/batch.py), in this process: what the CLI
    runs for several projects. One outcome per project it attempted (a failure that stops the
    rest leaves the others out, as `run_sync` does), each naming the batch run, with its layers'
    metadata and the error its layer raised."""
    from gitlab_knowledge.defs.batch import BATCH_JOB

    return _run_batch(workspace, BATCH_JOB, projects, full=full, force=force, instance=instance, tags=tags)


@_one_pipeline_process
def _run_batch(workspace: Workspace, job_name: str, projects: Sequence[str], *, full: bool, force: bool,
               instance: dg.DagsterInstance | None, tags: Mapping[str, str] | None) -> list[ProjectOutcome]:
    from gitlab_knowledge.defs import build_defs
    from gitlab_knowledge.defs.batch import BATCH_OP, batch_run_config
    from gitlab_knowledge.defs.many_projects import FINISHED

    instance = instance or dagster_instance(workspace.config)
    reap_dead_runs(instance)
    refuse_if_busy(instance, projects)  # the CLI refuses at once, where a daemon's batch waits
    ensure_partitions(instance, projects)
    job = build_defs(workspace).resolve_job_def(job_name)
    run_config = batch_run_config(list(projects), full=full)
    run_config["ops"][BATCH_OP]["config"]["force"] = force
    run_config["loggers"] = {"console": {"config": {"log_level": "CRITICAL"}}}
    run_id = str(uuid.uuid4())
    started = time.monotonic()
    try:
        result = job.execute_in_process(
            run_config=run_config, instance=instance, raise_on_error=False, run_id=run_id,
            tags={TRIGGER_TAG: "cli", PID_TAG: str(os.getpid()), HOST_TAG: HOSTNAME,
                  PROCESS_START_TAG: process_start(os.getpid()) or "", PROJECT_TAG: f"{len(projects)} projects",
                  **(tags or {})})
    except KeyboardInterrupt:
        if cancel_unstarted(instance, run_id):
            raise Interrupted("stopped before the run started; nothing changed") from None
        raise Interrupted("interrupted; the layers committed before it are kept") from None
    batch = FINISHED.pop(run_id, None)
    if batch is None:  # the step failed before it carried anything (Dagster's storage, the lock)
        error: BaseException = KnowledgeError("the run failed (see the Dagster event log)")
        for event in result.all_events:
            if event.is_step_failure and event.step_failure_data is not None:
                error = KnowledgeError(event.step_failure_data.error.message.strip().splitlines()[0]
                                       if event.step_failure_data.error else "the run failed")
        return [ProjectOutcome(project=p, run_id=run_id, error=error,
                               duration_s=round(time.monotonic() - started, 2)) for p in projects]
    return [ProjectOutcome(project=c.project, run_id=run_id, error=c.error, duration_s=round(c.duration_s, 2),
                           metadata={k: {n: getattr(v, "value", v) for n, v in m.items()} for k, m in c.metadata.items()})
            for c in batch.carried.values() if c.attempted]
