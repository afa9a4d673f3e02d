"""Every layer of one sync, in order, with the functions the Dagster assets call, in a process of
its own: what the kill drill kills twenty times (a CLI sync pays ~3 s of Dagster start-up per run;
this pays ~1 s). The CLI itself is killed by integration/test_kill.py.

    python -m gitlab_knowledge_tests.support.pipeline_runner CONFIG
"""

import sys

from gitlab_knowledge.config import load_config
from gitlab_knowledge.documents.refresh import refresh_documents
from gitlab_knowledge.embeddings.refresh import refresh_embeddings
from gitlab_knowledge.lexical.refresh import refresh_lexical
from gitlab_knowledge.store.normalize import normalize_project
from gitlab_knowledge.sync.engine import ProjectSync


def main(config_path: str) -> int:
    config = load_config(config_path)
    for project in config.projects:
        ProjectSync(config, project).run()
        normalize_project(config.duckdb_path, project)
        refresh_documents(config.duckdb_path, project)
        refresh_embeddings(config, project)
        refresh_lexical(config, project)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
