"""The graph's reads rewritten for speed (issue 26: links in three queries, mentions picked per
thread in Python, `me`'s and `person`'s items read once, history's rows in one query per path)
answer exactly what they answered before: the functions as they were (kept verbatim in
gitlab_knowledge_tests/support/graph_before) and as they are, on the synced sample, for every
item and path in it, read plainly and through both lenses the MCP server reads through (`me` and
`person`: test_graph_commands, whose store has mentions to pick)."""

from collections.abc import Iterator
from typing import Any

import duckdb
import pytest

from gitlab_knowledge.config import load_config
from gitlab_knowledge.graph import queries
from gitlab_knowledge.store.reader import StoreReader
from gitlab_knowledge.store.viewer_lens import viewer_lens
from gitlab_knowledge.store.visibility import hidden_lens
from gitlab_knowledge.viewer import GUEST, Viewer
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.support.graph_before import queries as queries_before


@pytest.fixture(scope="module", params=["plain", "config lens", "viewer lens"])
def workspace(request: pytest.FixtureRequest, sample: Any) -> Iterator[Workspace]:
    yield from lensed(Workspace(load_config(sample.config_path)), request.param)


def lensed(plain: Workspace, lens_name: str) -> Iterator[Workspace]:
    """`plain`, or read through the config's lens or a guest's (as the MCP server reads)."""
    if lens_name == "plain":
        yield plain
        return
    reader = StoreReader(plain.config.duckdb_path)
    if lens_name == "config lens":
        lens = hidden_lens(include_confidential=False, include_internal=False)
    else:
        with duckdb.connect(str(plain.config.duckdb_path), read_only=True) as con:
            access = {pid: GUEST for (pid,) in con.execute("SELECT id FROM projects").fetchall()}
        lens = viewer_lens(Viewer(7001, "a.guest", access=access), plain.config.gitlab.url,
                           include_confidential=True, include_internal=True)
    try:
        yield plain.with_(lens=lens, reader=reader)
    finally:
        reader.close()


def table(workspace: Workspace, sql: str) -> list[Any]:
    with duckdb.connect(str(workspace.config.duckdb_path), read_only=True) as con:
        return [r[0] for r in con.execute(sql).fetchall()]


def test_related_links_are_what_they_were(workspace: Workspace) -> None:
    # The items with the most links (both directions), and a few without.
    refs = table(workspace, """
        WITH items AS (SELECT 'issue' AS type, t.id, t.iid, p.path_with_namespace || '#' || t.iid AS ref FROM issues t
                       JOIN projects p ON p.id = t.project_id WHERE NOT coalesce(t.confidential, false)
                       UNION ALL SELECT 'merge_request', t.id, t.iid, p.path_with_namespace || '!' || t.iid
                       FROM merge_requests t JOIN projects p ON p.id = t.project_id)
        SELECT ref FROM items i ORDER BY (SELECT count(*) FROM item_references r WHERE (r.source_type = i.type
            AND r.source_id = i.id) OR (r.target_type = i.type AND r.target_iid = i.iid)) DESC, hash(ref) LIMIT 40""")
    linked = 0
    for ref in refs:
        now, before = queries.related(workspace, ref).as_dict(), queries_before.related(workspace, ref).as_dict()
        assert now == before, ref
        linked += any(now["links"].values())
    assert linked > 20  # the comparison is about links


def test_file_history_is_what_it_was(workspace: Workspace) -> None:
    # Paths renamed, paths with review threads, and a few others.
    paths = table(workspace, """
        SELECT path FROM (SELECT new_path AS path, 0 AS rank FROM mr_files WHERE renamed_file
                          UNION SELECT old_path, 0 FROM mr_files WHERE renamed_file
                          UNION SELECT new_path, 1 FROM note_positions UNION SELECT new_path, 2 FROM mr_files)
        WHERE path IS NOT NULL GROUP BY path ORDER BY min(rank), hash(path) LIMIT 25""")
    directories = sorted({p.split("/")[0] for p in paths if "/" in p})
    threads = 0
    for path, limit in [*((p, 50) for p in paths), *((d, 3) for d in directories)]:
        now = queries.history(workspace, path, None, limit).as_dict()
        assert now == queries_before.history(workspace, path, None, limit).as_dict(), path
        threads += sum(len(mr["threads"]) for mr in now["merge_requests"])
    assert threads and any(queries.history(workspace, p).renames for p in paths)
