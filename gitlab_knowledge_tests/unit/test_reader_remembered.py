"""A long-lived reader remembers a small answer per version of the store and per lens
(store/reader.py `remembered`): the item tools' project path → id, which reads the lens's
`raw_payloads` on every call otherwise. Never a stale answer: the store written, the overlay
changed or another lens, and it is computed again; an error is never remembered."""

import json
from pathlib import Path

import pytest

from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.store.overlay import ConfidentialOverlay
from gitlab_knowledge.store.queries import project_id_of
from gitlab_knowledge.store.reader import StoreReader
from gitlab_knowledge.store.visibility import hidden_lens
from gitlab_knowledge.timeutil import utcnow
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.conftest import store_config


def add_project(workspace: Workspace, pid: int, path: str) -> None:
    with workspace.write() as con:
        con.execute("INSERT INTO projects (id, path_with_namespace) VALUES (?, ?)", [pid, path])
        con.execute("INSERT INTO raw_payloads (id, project_id, resource_type, gitlab_key, payload_hash, json, "
                    "fetched_at, change_seq) VALUES (?, ?, 'project', ?, 'h', ?, ?, 1)",
                    [pid, pid, str(pid), json.dumps({"id": pid, "path_with_namespace": path}), utcnow()])


def test_a_project_id_is_read_once_per_version_of_the_store_and_lens(tmp_path: Path) -> None:
    workspace = Workspace(store_config(tmp_path))
    add_project(workspace, 101, "acme/platform")
    overlay = ConfidentialOverlay()
    reader = StoreReader(workspace.config.duckdb_path, overlay)
    lens = hidden_lens(include_confidential=False, include_internal=False)
    served = workspace.with_(reader=reader, lens=lens)
    asked: list[str] = []

    def remembered(ws: Workspace, key: str) -> int:
        with ws.read():
            return reader.remembered(ws.lens, key, lambda: asked.append(key) or len(asked))

    assert [remembered(served, "a"), remembered(served, "a")] == [1, 1]
    assert remembered(workspace.with_(reader=reader, lens=None), "a") == 2  # another lens: its own answer
    overlay.update({101: frozenset({7})}, frozenset())  # the lenses are rebuilt: so are their answers
    assert remembered(served, "a") == 3
    add_project(workspace, 102, "acme/web-app")  # the store written
    assert [remembered(served, "a"), remembered(served, "a")] == [4, 4]

    # Through the item tools' lookup: a project added since resolves, an unknown one is refused every time.
    with served.read() as con:
        assert project_id_of(served, con, "acme/web-app") == 102
        assert project_id_of(served, con, "acme/platform") == 101
        for _ in range(2):
            with pytest.raises(UsageError, match="not in the store"):
                project_id_of(served, con, "acme/later")
    add_project(workspace, 103, "acme/later")
    with served.read() as con:
        assert project_id_of(served, con, "acme/later") == 103
    reader.close()
