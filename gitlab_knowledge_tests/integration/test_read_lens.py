"""The read seam: what a workspace's lens hides, the store queries never see (store/visibility.py)."""

from typing import Any

import pytest

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.store import alongside as alongside_module
from gitlab_knowledge.store import queries
from gitlab_knowledge.store.alongside import alongside
from gitlab_knowledge.store.reader import StoreReader
from gitlab_knowledge.store.visibility import hidden_lens
from gitlab_knowledge.workspace import Workspace

HIDDEN_NOTES = """SELECT count(*) FROM notes WHERE coalesce(internal, false) OR (noteable_type = 'Issue'
                  AND noteable_id IN (SELECT id FROM issues WHERE coalesce(confidential, false)))"""


def notes_of(workspace: Workspace, iid: int) -> list[dict[str, Any]]:
    return [n for t in queries.show_item(workspace, kinds.ISSUE, iid, "acme/platform")["threads"] for n in t["notes"]]


def test_the_lens_applies_under_count_list_and_show(sample: Any) -> None:
    plain = Workspace(sample.config)
    with plain.read() as con:
        confidential = con.execute("SELECT count(*) FROM issues WHERE coalesce(confidential, false)").fetchone()[0]
        hidden_notes = con.execute(HIDDEN_NOTES).fetchone()[0]
    assert confidential > 0 and hidden_notes > 0  # the sample has both to hide
    reader = StoreReader(sample.config.duckdb_path)
    try:
        lensed = plain.with_(lens=hidden_lens(include_confidential=False, include_internal=False), reader=reader)
        assert queries.count(lensed, "issues", None) == queries.count(plain, "issues", None) - confidential
        assert queries.count(lensed, "notes", None) == queries.count(plain, "notes", None) - hidden_notes
        assert queries.project_counts(lensed)["issues"] == queries.project_counts(plain)["issues"] - confidential

        listed = {r["iid"] for r in queries.list_items(plain, kinds.ISSUE, "acme/platform", 10_000)}
        visible = {r["iid"] for r in queries.list_items(lensed, kinds.ISSUE, "acme/platform", 10_000)}
        assert 215 in listed and visible < listed and 215 not in visible

        assert queries.show_item(plain, kinds.ISSUE, 215, "acme/platform")["confidential"]
        with pytest.raises(UsageError, match="no issue #215"):
            queries.show_item(lensed, kinds.ISSUE, 215, "acme/platform")
        assert any(n["internal"] for n in notes_of(plain, 234))
        assert notes_of(lensed, 234) and not any(n["internal"] for n in notes_of(lensed, 234))

        # Confidential issues opted in: only the internal notes go.
        internal_only = plain.with_(lens=hidden_lens(include_confidential=True, include_internal=False), reader=reader)
        assert queries.count(internal_only, "issues", None) == queries.count(plain, "issues", None)
        assert not any(n["internal"] for n in notes_of(internal_only, 215))
        # A lens without a shared reader reads through one of its own, and hides the same.
        assert queries.count(plain.with_(lens=lensed.lens), "issues", None) == queries.count(lensed, "issues", None)
    finally:
        reader.close()
    assert hidden_lens(include_confidential=True, include_internal=True) is None


def test_a_readers_connection_says_its_catalog_and_search_path_as_duckdb_does(sample: Any) -> None:
    """`alongside` takes a reader's connection's catalog and search path as the reader says them
    (store/alongside.py `settings_known`) instead of asking DuckDB: what it says is what DuckDB
    would answer, with a lens and without, and it is forgotten as the read ends."""
    reader = StoreReader(sample.config.duckdb_path)
    asked = "SELECT current_database(), current_setting('search_path')"
    try:
        plain = Workspace(sample.config).with_(reader=reader)
        for workspace in (plain, plain.with_(lens=hidden_lens(include_confidential=False, include_internal=False))):
            with workspace.read() as con:
                said = alongside_module._settings[id(con)]
                assert said == tuple(con.execute(asked).fetchone())
            assert id(con) not in alongside_module._settings
    finally:
        reader.close()


def test_a_connection_alongside_sees_through_the_same_lens(sample: Any) -> None:
    """`alongside` (store/db.py): a second connection for another thread within a read sees what
    the read sees: through its lens (a reader's), or every row (a plain read)."""
    plain = Workspace(sample.config)
    reader = StoreReader(sample.config.duckdb_path)
    count = "SELECT count(*) FROM issues"
    try:
        lensed = plain.with_(lens=hidden_lens(include_confidential=False, include_internal=False), reader=reader)
        for workspace in (plain, plain.with_(reader=reader), lensed):
            with workspace.read() as con, alongside(con) as other:
                assert other.execute(count).fetchone() == con.execute(count).fetchone()
                assert other.execute(HIDDEN_NOTES).fetchone() == con.execute(HIDDEN_NOTES).fetchone()
        with plain.read() as con:
            confidential = con.execute("SELECT count(*) FROM issues WHERE coalesce(confidential, false)").fetchone()[0]
        with lensed.read() as con, alongside(con) as other:
            assert other.execute(HIDDEN_NOTES).fetchone() == (0,)  # the lens hides every note it should
            assert other.execute(count).fetchone()[0] == queries.count(plain, "issues", None) - confidential > 0
    finally:
        reader.close()
