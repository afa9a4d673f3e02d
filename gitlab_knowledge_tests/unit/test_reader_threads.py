"""The server's reader runs each query on the calling thread (store/reader.py): a tool's reads
are a few ms each, and DuckDB's worker threads cost more than they save on them. Calls on
several threads still read side by side."""

import threading
from pathlib import Path

from gitlab_knowledge.store.reader import StoreReader
from gitlab_knowledge.store.visibility import hidden_lens
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.conftest import store_config


def test_the_reader_queries_on_one_thread_and_reads_overlap(tmp_path: Path) -> None:
    workspace = Workspace(store_config(tmp_path))
    with workspace.write() as con:
        con.execute("INSERT INTO projects (id, path_with_namespace) VALUES (1, 'acme/platform')")
    reader = StoreReader(workspace.config.duckdb_path)
    served = workspace.with_(reader=reader, lens=hidden_lens(include_confidential=False, include_internal=False))
    with served.read() as con:
        assert con.execute("SELECT current_setting('threads')").fetchone() == (1,)
    both_in = threading.Barrier(2, timeout=30)
    seen: list[object] = []

    def read() -> None:
        with served.read() as con:
            both_in.wait()  # each read holds its cursor until the other has one too
            seen.append(con.execute("SELECT path_with_namespace FROM projects").fetchone())

    threads = [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [("acme/platform",), ("acme/platform",)]
    reader.close()
