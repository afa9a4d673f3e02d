"""Migration 9 (releases) on a real store written before it: the table appears, nothing else
moves, and the next sync fills it from GitLab."""

from pathlib import Path
from typing import Any

import pytest

from gitlab_knowledge.store import migrations
from gitlab_knowledge.store.db import forget_schema_cache, write_connection
from gitlab_knowledge_sandbox import SAMPLE_DATASET, SandboxGitLab
from gitlab_knowledge_tests.integration.test_migrations import import_fixture, query, version


def test_migration_9_upgrades_a_store_written_before_it(tmp_path: Path, make_config: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from gitlab_knowledge.normalized import refresh as normalize
    from gitlab_knowledge.sync.engine import ProjectSync
    from gitlab_knowledge.workspace import Workspace

    store = import_fixture(tmp_path / "data" / "gitlab_knowledge.duckdb")
    every = migrations.MIGRATIONS
    number = next(m.number for m in every if m.name == "releases")
    monkeypatch.setattr(migrations, "MIGRATIONS", [m for m in every if m.number < number])
    forget_schema_cache()
    with write_connection(store):
        pass
    assert version(store) == number - 1
    issues = query(store, "SELECT count(*) FROM issues")[0][0]
    assert not query(store, "SELECT 1 FROM information_schema.tables WHERE table_name = 'releases'")
    monkeypatch.setattr(migrations, "MIGRATIONS", every)
    forget_schema_cache()
    with write_connection(store):
        pass
    assert version(store) == migrations.latest_version() >= number
    assert query(store, "SELECT count(*) FROM releases") == [(0,)]
    assert query(store, "SELECT count(*) FROM issues")[0][0] == issues > 0
    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        workspace = Workspace(make_config(sb, data_dir=store.parent))
        for project in workspace.config.projects:
            ProjectSync(workspace, project).run()
            normalize.refresh(workspace, project)
        expected = {(p["path_with_namespace"], r["tag_name"]) for p in sb.state.list_projects()
                    for r in sb.state.releases(p["id"])}
    assert len(expected) >= 6
    assert set(query(store, "SELECT p.path_with_namespace, r.tag_name FROM releases r "
                            "JOIN projects p ON p.id = r.project_id")) == expected
