"""`python -m gitlab_knowledge.scaleout pools`: give each of the pipeline's pools its limit (1)
explicitly in the Dagster instance $DAGSTER_HOME names, once per deployment.

Why not leave it to `concurrency.pools.default_limit`: on PostgreSQL, Dagster 1.13 creates a pool's
row the first time a step claims it, and two runs reaching a new pool at the same moment make one
fail (`InFailedSqlTransaction` on `UPDATE concurrency_limits`: dagster-io/dagster#33552, open).
Measured here: one of four runs launched together failed that way. Pools set explicitly are never
created by a run. Same as `dagster instance concurrency set <pool> 1` for each pool.
"""

import sys

from gitlab_knowledge.layers import DUCKDB_POOL, LANCEDB_POOL, TANTIVY_POOL

POOLS = (DUCKDB_POOL, TANTIVY_POOL, LANCEDB_POOL)


def set_pools(instance: object, limit: int = 1) -> None:
    for pool in POOLS:
        instance.event_log_storage.set_concurrency_slots(pool, limit)  # type: ignore[attr-defined]


def main(argv: list[str]) -> int:
    if argv != ["pools"]:
        print("usage: python -m gitlab_knowledge.scaleout pools", file=sys.stderr)
        return 2
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        set_pools(instance)
        for pool in POOLS:
            print(f"{pool}: limit {instance.event_log_storage.get_concurrency_info(pool).slot_count}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
