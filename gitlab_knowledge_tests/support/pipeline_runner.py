"""The sync job (every layer of every project) run in-process in a process of its own: what the
kill drill kills twenty times. It is the Dagster job the CLI and the daemon run, on an in-memory
Dagster instance: the drill is about the store surviving kill -9 at any point, and the CLI's own
Dagster bookkeeping after a kill (dead runs, pool slots) is killed and checked by
drills/test_concurrent_syncs.py.

    python -m gitlab_knowledge_tests.support.pipeline_runner CONFIG [ASSET...]

ASSETs limit the run to those layers (a reference store that is compared only up to its documents
need not embed and index them).
"""

import sys

import dagster as dg

from gitlab_knowledge.defs.runner import run_sync
from gitlab_knowledge.workspace import Workspace


def main(config_path: str, *assets: str) -> int:
    workspace = Workspace.load(config_path)
    outcomes = run_sync(workspace, workspace.config.projects, instance=dg.DagsterInstance.ephemeral(),
                        selection=list(assets) or None)
    failed = [o for o in outcomes if not o.success]
    for outcome in failed:
        print(f"{outcome.project}: {outcome.message}", file=sys.stderr, flush=True)
    if failed:
        return failed[0].exit_code
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
