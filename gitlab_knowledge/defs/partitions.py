"""One dynamic partition per GitLab project, keyed by `path_with_namespace`."""

from collections.abc import Iterable

import dagster as dg

PARTITIONS_NAME = "gitlab_projects"
project_partitions = dg.DynamicPartitionsDefinition(name=PARTITIONS_NAME)


def ensure_partitions(instance: dg.DagsterInstance, projects: Iterable[str]) -> list[str]:
    """Add the configured projects that are not partitions yet; returns the added keys."""
    existing = set(instance.get_dynamic_partitions(PARTITIONS_NAME))
    missing = [p for p in projects if p not in existing]
    if missing:
        instance.add_dynamic_partitions(PARTITIONS_NAME, missing)
    return missing
