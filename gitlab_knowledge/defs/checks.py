"""Asset checks: the integrity rules of store/integrity.py, evaluated after every sync.

The per-project checks are partitioned like the assets: each evaluation is of one project, so a
later project's pass never turns a failing project's check green, and the UI shows and plots each
project on its own (another project's sync may be half-way through its layers, which is not an
inconsistency). Freshness is a warning over every project, and a schedule evaluates it even when
nothing syncs.
"""

import warnings
from collections.abc import Callable, Collection, Iterator, Mapping
from datetime import timedelta
from typing import Any

import dagster as dg

from gitlab_knowledge import layers
from gitlab_knowledge.defs.assets.documents import search_documents
from gitlab_knowledge.defs.assets.graph import knowledge_graph
from gitlab_knowledge.defs.assets.index import document_embeddings, lexical_index
from gitlab_knowledge.defs.assets.normalized import normalized_gitlab
from gitlab_knowledge.defs.assets.raw import raw_gitlab_payloads
from gitlab_knowledge.defs.partitions import project_partitions
from gitlab_knowledge.store import integrity
from gitlab_knowledge.store.projects import project_id_for, project_ids_for
from gitlab_knowledge.workspace import Workspace

FRESHNESS = timedelta(minutes=30)
TARGETS_PER_QUERY = 500  # storage ids in one `IN (...)` of the event log (SQLite's limit is in the thousands)
# Partitioned asset checks are a preview feature of Dagster 1.13 (pinned in pyproject.toml): the
# warning would print on every command that loads the definitions.
warnings.filterwarnings("ignore", message="Specifying a partitions_def on an AssetCheckSpec",
                        category=dg.PreviewWarning)
ASSETS = {a.key.to_user_string(): a for a in (raw_gitlab_payloads, normalized_gitlab, knowledge_graph, search_documents)}


def _project(context: dg.AssetCheckExecutionContext) -> str | None:
    op = context.op_execution_context
    return op.partition_key if op.has_partition_key else None


def _metadata(outcome: integrity.Outcome, project: str | None) -> dict[str, Any]:
    metadata = {"scope": project or "all projects", "violations": outcome.violations, "rule": outcome.description,
                **outcome.metadata}
    if outcome.samples:
        metadata["examples"] = dg.MetadataValue.md("\n".join(f"- `{s}`" for s in outcome.samples))
    return metadata


def _result(outcome: integrity.Outcome, project: str | None,
            severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR,
            key: dg.AssetCheckKey | None = None) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=outcome.passed, severity=severity, metadata=_metadata(outcome, project),
                               description=outcome.description, asset_key=key.asset_key if key else None,
                               check_name=key.name if key else None)


def _store_rules(asset: dg.AssetsDefinition, names: list[str]) -> dg.AssetChecksDefinition:
    """The store rules of one asset, each its own check in the UI, evaluated in one step over one
    read connection: a step costs Dagster ~0.1-0.3 s of events and bookkeeping, and a project's run
    paid it for each of 14 checks (docs/ARCHITECTURE.md, "One run per tick")."""
    specs = [dg.AssetCheckSpec(name, asset=asset, partitions_def=project_partitions,
                               description=integrity.RULES[name][0].__doc__ or name.replace("_", " "))
             for name in names]

    @dg.multi_asset_check(specs=specs, name=f"{asset.key.to_python_identifier()}_store_rules", can_subset=True,
                          description=f"The integrity rules of {asset.key.to_user_string()}: {', '.join(names)}")
    def check(context: dg.AssetCheckExecutionContext,
              workspace: dg.ResourceParam[Workspace]) -> Iterator[dg.AssetCheckResult]:
        project = _project(context)
        selected = [key for key in context.selected_asset_check_keys if key.name in names]
        with workspace.read(wait=120.0) as con:  # results yielded once it is closed
            project_id = project_id_for(con, project) if project else None
            results = [_result(integrity.RULES[key.name][0](con, project_id), project,
                               dg.AssetCheckSeverity.WARN if key.name in integrity.WARN_ONLY
                               else dg.AssetCheckSeverity.ERROR, key)
                       for key in selected]
        yield from results

    return check


def _by_asset() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, (_rule, layer) in integrity.RULES.items():
        out.setdefault(layers.layer(layer).asset, []).append(name)
    return out


STORE_CHECKS = [_store_rules(ASSETS[asset], names) for asset, names in _by_asset().items()]


def _index_status(workspace: Workspace, project: str | None) -> dict[str, Any]:
    from gitlab_knowledge.index_status import index_status

    return index_status(workspace, projects_only=[project] if project else None)


@dg.multi_asset_check(
    specs=[dg.AssetCheckSpec("vectors_match_documents", asset=document_embeddings, partitions_def=project_partitions,
                             description="documents == vectors, every vector current (a failed embedding is a "
                                         "document without a vector)"),
           dg.AssetCheckSpec("no_failed_embeddings", asset=document_embeddings, partitions_def=project_partitions,
                             description="no document waits for a failed embedding to be retried")],
    name="document_embeddings_index_checks", can_subset=True,
    description="The vector index against the documents, from one reading of the index status.")
def embeddings_checks(context: dg.AssetCheckExecutionContext,
                      workspace: dg.ResourceParam[Workspace]) -> Iterator[dg.AssetCheckResult]:
    project = _project(context)
    status = _index_status(workspace, project)
    for key in context.selected_asset_check_keys:
        if key.name == "vectors_match_documents":
            yield _result(integrity.index_agreement(status, project, "vectors"), project, key=key)
        elif key.name == "no_failed_embeddings":
            yield _result(integrity.no_failed_embeddings(status, project), project, dg.AssetCheckSeverity.WARN, key)


@dg.asset_check(asset=lexical_index, partitions_def=project_partitions,
                description="documents == lexical entries, each current")
def lexical_matches_documents(context: dg.AssetCheckExecutionContext,
                              workspace: dg.ResourceParam[Workspace]) -> dg.AssetCheckResult:
    project = _project(context)
    return _result(integrity.index_agreement(_index_status(workspace, project), project, "lexical"), project)


@dg.asset_check(asset=raw_gitlab_payloads, description="every configured project synced successfully in the "
                                                      "last 30 minutes")
def projects_synced_recently(context: dg.AssetCheckExecutionContext,
                             workspace: dg.ResourceParam[Workspace]) -> dg.AssetCheckResult:
    config = workspace.config
    if not config.duckdb_path.exists():
        return _result(integrity.Outcome(False, len(config.projects), "no project has been synced yet"), None,
                       dg.AssetCheckSeverity.WARN)
    from gitlab_knowledge.store.groups import project_paths

    with workspace.read(wait=120.0) as con:  # the groups' members too (store/groups.py)
        outcome = integrity.projects_synced_recently(con, project_paths(config), FRESHNESS)
    return _result(outcome, None, dg.AssetCheckSeverity.WARN)


@dg.asset_check(asset=raw_gitlab_payloads, partitions_def=project_partitions,
                additional_deps=[normalized_gitlab, knowledge_graph, search_documents, document_embeddings, lexical_index],
                description="every layer is caught up with the one upstream of it (a materialization of the raw "
                            "layer alone leaves the rest behind until the change sensor's next run)")
def layers_caught_up(context: dg.AssetCheckExecutionContext,
                     workspace: dg.ResourceParam[Workspace]) -> dg.AssetCheckResult:
    # additional_deps: inside a whole-chain run this waits for the downstream layers; in a run of
    # the raw layer alone it evaluates at once and says which layers are behind.
    from gitlab_knowledge.backlog import backlog

    project = _project(context)
    work = backlog(workspace, [project]).get(project) if project else None
    behind = list(work.behind) if work else []
    return _result(_caught_up(behind), project, dg.AssetCheckSeverity.WARN)


ALL_CHECKS = [*STORE_CHECKS, embeddings_checks, lexical_matches_documents, layers_caught_up, projects_synced_recently]


def _severity(name: str) -> dg.AssetCheckSeverity:
    return dg.AssetCheckSeverity.WARN if name in integrity.WARN_ONLY else dg.AssetCheckSeverity.ERROR


def evaluate_partitions(workspace: Workspace, done: Mapping[str, set[str]], *,
                        assets: Collection[str] | None = None, caught_up: bool = True) -> list[dg.AssetCheckEvaluation]:
    """The per-partition checks of each project in `done` (project -> the asset keys it
    materialized), as the check steps of its own run would evaluate them, for a run that carries
    many projects in one step (defs/batch.py): the same rules, one read connection, one index
    status and one backlog for all of them instead of a check step per project, and each store
    rule in one pass over the store for all of them (`integrity.evaluate_many`).

    `assets`: only the checks of these assets (all if None); `caught_up`: with `layers_caught_up`,
    which reads every layer's state and so comes after the last. A batch with bulk to embed
    evaluates the checks of the layers done before its embeddings layer starts, and the rest after it."""
    from gitlab_knowledge.backlog import backlog
    from gitlab_knowledge.index_status import index_status

    projects = [p for p, assets_done in done.items() if assets_done]
    out: list[dg.AssetCheckEvaluation] = []
    if not projects:
        return out
    wanted = set(assets) if assets is not None else {a for p in projects for a in done[p]}

    def add(asset: str, name: str, outcome: integrity.Outcome, project: str, severity: dg.AssetCheckSeverity) -> None:
        out.append(dg.AssetCheckEvaluation(asset_key=dg.AssetKey(asset), check_name=name, passed=outcome.passed,
                                           metadata=_metadata(outcome, project), severity=severity,
                                           description=outcome.description, partition=project))

    rules = {asset: names for asset, names in _by_asset().items()
             if asset in wanted and any(asset in done[p] for p in projects)}
    indexes = {layers.EMBEDDINGS.asset, layers.LEXICAL.asset} & wanted
    if rules:
        _store_outcomes(workspace, projects, done, rules, add)
    if not indexes and not caught_up:
        return out
    # The indexes read once for every project, for the index checks and the backlog alike.
    status = index_status(workspace, projects_only=projects)
    entries = {e["project"]: e for e in status["projects"]}
    for project in projects:
        # The status of the project alone: what each rule keeps of it, without a pass over every project's.
        own = {**status, "projects": [entries[project]] if project in entries else []}
        if layers.EMBEDDINGS.asset in done[project] and layers.EMBEDDINGS.asset in indexes:
            add(layers.EMBEDDINGS.asset, "vectors_match_documents",
                integrity.index_agreement(own, project, "vectors"), project, dg.AssetCheckSeverity.ERROR)
            add(layers.EMBEDDINGS.asset, "no_failed_embeddings", integrity.no_failed_embeddings(own, project),
                project, dg.AssetCheckSeverity.WARN)
        if layers.LEXICAL.asset in done[project] and layers.LEXICAL.asset in indexes:
            add(layers.LEXICAL.asset, "lexical_matches_documents",
                integrity.index_agreement(own, project, "lexical"), project, dg.AssetCheckSeverity.ERROR)
    if not caught_up:
        return out
    work = backlog(workspace, projects, status)
    for project in projects:
        behind = list(work[project].behind) if project in work else []
        add(layers.RAW.asset, "layers_caught_up", _caught_up(behind), project, dg.AssetCheckSeverity.WARN)
    return out


def _store_outcomes(workspace: Workspace, projects: list[str], done: Mapping[str, set[str]],
                    rules: dict[str, list[str]], add: Callable[..., None]) -> None:
    """The store rules of `rules` (asset -> rule names) for each project that materialized the asset."""
    with workspace.read(wait=120.0) as con:
        ids = project_ids_for(con, projects)
        # One pass of each rule for every project (grouped by project in SQL), not one per project.
        outcomes = {name: integrity.evaluate_many(con, name, sorted({i for p in projects if (i := ids[p]) is not None}))
                    for names in rules.values() for name in names}
        unscoped: dict[str, integrity.Outcome] = {}  # a project not stored yet: the rule over the store, as its step
        for project in projects:
            for asset, names in rules.items():
                if asset in done[project]:
                    for name in names:
                        project_id = ids[project]
                        if project_id is None and name not in unscoped:
                            unscoped[name] = integrity.RULES[name][0](con, None)
                        outcome = outcomes[name][project_id] if project_id is not None else unscoped[name]
                        add(asset, name, outcome, project, _severity(name))


def _caught_up(behind: list[str]) -> integrity.Outcome:
    return integrity.Outcome(not behind, len(behind), "every layer is caught up with its upstream" if not behind
                             else f"{len(behind)} layer(s) behind their upstream: the change sensor's next run "
                                  "(or a run of the whole sync_project job) brings them up to date", behind)


def aimed_at_latest(instance: dg.DagsterInstance,
                    evaluations: list[dg.AssetCheckEvaluation]) -> list[dg.AssetCheckEvaluation]:
    """`evaluations` (of partitions whose materializations are recorded on `instance`), each
    pointing at its partition's latest materialization, as a check step's result does (Dagster
    looks it up for the step's partition). A check's Partitions tab and the asset's "Latest check
    results" count a partition's result only while it targets the partition's latest
    materialization: without it a batch's results showed "Missing"."""
    partitions: dict[dg.AssetKey, set[str]] = {}
    for evaluation in evaluations:
        if evaluation.partition is not None:
            partitions.setdefault(evaluation.asset_key, set()).add(evaluation.partition)
    targets = latest_materializations(instance, partitions)
    return [dg.AssetCheckEvaluation(asset_key=e.asset_key, check_name=e.check_name, passed=e.passed,
                                    metadata=e.metadata, severity=e.severity, description=e.description,
                                    blocking=e.blocking, partition=e.partition,
                                    target_materialization_data=targets.get((e.asset_key, e.partition)))
            for e in evaluations]


def latest_materializations(instance: dg.DagsterInstance,
                            partitions: Mapping[dg.AssetKey, set[str]]) -> dict[tuple[dg.AssetKey, str | None], Any]:
    """(asset, partition) -> that partition's latest materialization, as a check result's target:
    at most two event-log queries per asset for all its partitions, not one per check and
    partition."""
    from dagster._core.definitions.asset_checks.asset_check_evaluation import (
        AssetCheckEvaluationTargetMaterializationData,
    )

    from gitlab_knowledge.event_log import BatchingSqliteEventLogStorage

    storage = instance.event_log_storage
    out: dict[tuple[dg.AssetKey, str | None], Any] = {}
    for key, keys in partitions.items():
        latest = instance.get_latest_storage_id_by_partition(key, dg.DagsterEventType.ASSET_MATERIALIZATION, set(keys))
        # Those this process just wrote (a batch's own) are known; the others are read back.
        known = (storage.written_materializations(key, latest)
                 if isinstance(storage, BatchingSqliteEventLogStorage) else {})
        for partition, (run_id, timestamp) in known.items():
            out[(key, partition)] = AssetCheckEvaluationTargetMaterializationData(
                storage_id=latest[partition], run_id=run_id, timestamp=timestamp)
        ids = sorted(i for partition, i in latest.items() if partition not in known)
        for start in range(0, len(ids), TARGETS_PER_QUERY):
            chunk = ids[start:start + TARGETS_PER_QUERY]
            records = instance.fetch_materializations(dg.AssetRecordsFilter(key, storage_ids=chunk),
                                                      limit=len(chunk)).records
            for record in records:
                if record.partition_key is not None:
                    out[(key, record.partition_key)] = AssetCheckEvaluationTargetMaterializationData(
                        storage_id=record.storage_id, run_id=record.run_id, timestamp=record.timestamp)
    return out
