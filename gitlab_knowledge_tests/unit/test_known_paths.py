"""Which project paths a sync looks up (sync/redirects.py): what the store answered before the
sync began, the configured paths, and the projects of the same batch need no call."""

import asyncio

import duckdb

from gitlab_knowledge.errors import GitLabError, NotFoundError
from gitlab_knowledge.sync.redirects import KnownPaths, known_paths, look_up


def test_a_batchs_own_projects_and_what_the_store_answers_are_not_looked_up():
    con = duckdb.connect()
    con.execute("CREATE TABLE item_references (target_path TEXT, external BOOLEAN)")
    con.execute("INSERT INTO item_references VALUES ('Old/Place', true), ('acme/api', false)")
    con.execute("CREATE TABLE projects (path_with_namespace TEXT)")
    con.execute("INSERT INTO projects VALUES ('acme/Web')")
    con.execute("CREATE TABLE project_aliases (path TEXT)")
    con.execute("INSERT INTO project_aliases VALUES ('gone/away')")
    con.execute("CREATE TABLE sync_runs (project_path TEXT, project_id BIGINT)")
    con.execute("INSERT INTO sync_runs VALUES ('acme/Synced', 7), ('acme/never', NULL)")
    known = known_paths(con, ["Conf/Igured"])
    candidates = ["acme/web", "gone/away", "conf/igured", "acme/synced", "acme/never", "acme/Sibling", "x/y"]
    # A stored external link's path is asked too; a sibling of the batch is a project being synced.
    assert known.unknown(candidates, siblings=["ACME/sibling"]) == ["acme/never", "old/place", "x/y"]
    assert known.unknown(candidates) == ["acme/never", "acme/sibling", "old/place", "x/y"]
    assert KnownPaths().unknown(["", "a/b"]) == ["a/b"]


def test_a_path_a_project_of_a_batch_looked_up_is_known_to_the_projects_that_begin_after_it():
    """The projects of a batch share what the store said when it started (sync/known.py
    `BatchKnown`): what one of them looks up is added there, so a later one does not ask again,
    while a path GitLab failed to answer stays unknown (the next sync asks)."""
    asked: list[str] = []

    class GitLab:
        async def project(self, path: str) -> dict:
            asked.append(path)
            if path == "gone/away":
                raise NotFoundError("404 Not Found", status=404)
            if path == "flaky/one":
                raise GitLabError("502 Bad Gateway", status=502)
            return {"id": 5, "path_with_namespace": "new/place"}

    shared, recorded = KnownPaths(), []
    wanted = ["Old/Place", "gone/away", "flaky/one"]
    calls = asyncio.run(look_up(GitLab(), shared.unknown(wanted), recorded.append, shared))  # type: ignore[arg-type]
    assert (calls, len(recorded)) == (3, 2)
    assert shared.unknown([*wanted, "x/y"]) == ["flaky/one", "x/y"]
    # Without the shared paths (a sync of its own), nothing is remembered beyond the store's rows.
    alone = KnownPaths()
    asyncio.run(look_up(GitLab(), alone.unknown(wanted), recorded.append))  # type: ignore[arg-type]
    assert alone.unknown(wanted) == ["flaky/one", "gone/away", "old/place"]
