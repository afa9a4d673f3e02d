"""Which project paths a sync looks up (sync/redirects.py): what the store answered before the
sync began, the configured paths, and the projects of the same batch need no call."""

import duckdb

from gitlab_knowledge.sync.redirects import KnownPaths, known_paths


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
