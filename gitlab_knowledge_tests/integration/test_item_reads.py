"""What `get_merge_request` and `file_history` read per call through the MCP server's reader
(mcp/items.py, graph/history.py): each reference to a lens's view costs ~1 ms at 100K documents
and each join ~1 ms, so an item's links read `item_references` in one scan (both directions), and
the projects' paths come from the reader's remembered map (store/queries.py `project_paths`)
rather than from a join in every call. The answers are the same (the graph and item tests)."""

import contextlib
import re
from collections.abc import Iterator
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.graph.history import history
from gitlab_knowledge.mcp.items import get_item
from gitlab_knowledge.store.db import read_connection
from gitlab_knowledge.store.reader import StoreReader
from gitlab_knowledge.store.visibility import hidden_lens
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.conftest import SampleStore


class _Counting:
    def __init__(self, con: Any, executed: list[str]) -> None:
        self.con, self.executed = con, executed

    def execute(self, query: str, params: Any = None) -> Any:
        self.executed.append(query)
        return self.con.execute(query, params or [])

    def cursor(self) -> "_Counting":
        # (a read beside this one, store/alongside.py: its statements count too)
        return _Counting(self.con.cursor(), self.executed)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.con, name)


def _served(sample: SampleStore, executed: list[str]) -> tuple[Workspace, StoreReader]:
    reader = StoreReader(sample.config.duckdb_path)
    served = Workspace(sample.config).with_(reader=reader, lens=hidden_lens(include_confidential=False,
                                                                             include_internal=False))

    class Served(Workspace):
        def read(self, wait: float | None = None) -> Any:
            @contextlib.contextmanager
            def counted() -> Iterator[Any]:
                with Workspace.read(self, wait) as con:
                    yield _Counting(con, executed)
            return counted()
    return Served(**{f: getattr(served, f) for f in ("config", "lens", "reader")}), reader


def _tables(executed: list[str], table: str) -> int:
    """How often `table` is named, in the reads of issues and MRs (a wiki page or release linking
    here is read on its own, with its project)."""
    keyed = [k.table for k in kinds.KEYED_KINDS]
    return sum(len(re.findall(rf"\b{table}\b", sql)) for sql in executed
               if not any(re.search(rf"\b{t}\b", sql) for t in keyed))


def test_an_mrs_links_and_project_are_read_without_a_second_scan_or_a_join(sample: SampleStore) -> None:
    with read_connection(sample.config.duckdb_path) as con:
        path, iid = con.execute("""
            SELECT p.path_with_namespace, m.iid FROM merge_requests m JOIN projects p ON p.id = m.project_id
            WHERE EXISTS (SELECT 1 FROM item_references r WHERE r.source_type = 'merge_request' AND r.source_id = m.id)
            ORDER BY m.id LIMIT 1""").fetchone()
        [(file,)] = con.execute("SELECT new_path FROM path_touches WHERE note_id IS NOT NULL ORDER BY 1 LIMIT 1").fetchall()
    executed: list[str] = []
    served, reader = _served(sample, executed)
    try:
        first = get_item(served, kinds.MERGE_REQUEST, iid, path)
        executed.clear()
        again = get_item(served, kinds.MERGE_REQUEST, iid, path)
        assert again == first and sum(len(group) for group in first["links"].values())
        # One scan of the links (it was a scan per direction), and no join with `projects`: their
        # paths were read once, for the store's version, by the first call.
        assert _tables(executed, "item_references") == 1, executed
        assert _tables(executed, "projects") == 0, executed
        executed.clear()
        answer = history(served, file).as_dict()
        assert answer["merge_requests"]
        assert _tables(executed, "item_references") == 1, executed
        assert _tables(executed, "projects") == 0, executed
    finally:
        reader.close()
