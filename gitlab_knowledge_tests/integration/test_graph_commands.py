"""`related`, `history`, `me` and `person` as a user runs them: the bundled sample served by a
sandbox GitLab on 127.0.0.1, synced through the raw, normalized and graph layers, then each command
as a subprocess. Before the sync the sandbox gets a few facts the answers must show: !847 closes
#234, a file renamed into services/auth/, and a teammate's @janedoe in an unresolved thread. `me`
is checked against SQL written here, independently of graph/people.py."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest
import tomli_w

from gitlab_knowledge.config import parse_config
from gitlab_knowledge_sandbox import DEFAULT_TOKEN, SAMPLE_DATASET, SandboxGitLab
from gitlab_knowledge_tests.conftest import TOKEN_ENV, subprocess_env
from gitlab_knowledge_tests.helpers import SYNC_LAYERS, run_layers
from gitlab_knowledge_tests.integration.test_cli_schemas import validate

PROJECTS = ["acme/platform", "acme/web-app"]
PLATFORM = "acme/platform"
MENTION = "@janedoe could you check the ping interval before this merges?"


def diff(old: str, new: str, *, renamed: bool = False, new_file: bool = False) -> dict[str, Any]:
    return {"old_path": old, "new_path": new, "a_mode": "100644", "b_mode": "100644", "diff": "@@ -1 +1 @@\n",
            "new_file": new_file, "renamed_file": renamed, "deleted_file": False}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("graph-home")
    os.environ.setdefault(TOKEN_ENV, DEFAULT_TOKEN)
    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        mr = sb.state.get(PLATFORM, "merge_requests", 847)
        if "Closes #234" not in (mr["description"] or ""):
            sb.state.update_merge_request(PLATFORM, 847, description=f"{mr['description']}\n\nCloses #234")
        # !812 (merged 2024-04-16) moved services/session_store.py into services/auth/; !803
        # (2024-02-14) had changed it before; !821 (2024-06-04) created an unrelated file of the
        # old name after the move.
        sb.state.set_diffs(PLATFORM, 812, [diff("services/session_store.py", "services/auth/session_store.py",
                                                 renamed=True)])
        sb.state.set_diffs(PLATFORM, 803, [diff("services/session_store.py", "services/session_store.py")])
        sb.state.set_diffs(PLATFORM, 821, [diff("services/session_store.py", "services/session_store.py",
                                                 new_file=True)])
        token_user = sb.state.user
        sb.state.user = {"id": 38, "username": "li.wei", "name": "Li Wei"}
        try:
            sb.state.create_discussion(PLATFORM, "merge_requests", 862, MENTION)
        finally:
            sb.state.user = token_user
        doc = {"gitlab": {"url": sb.url, "rate_limit": 0}, "projects": PROJECTS,
               "storage": {"data_dir": str(home / "data")}}
        config = parse_config(doc, home, {}, "test")
        run_layers(config, PROJECTS, [*SYNC_LAYERS, "knowledge_graph"])
        # The commands read the store only: the sandbox may be gone by then.
        (home / "gitlab_knowledge.toml").write_text(tomli_w.dumps(doc), encoding="utf-8")
    return home


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gitlab_knowledge", *args], cwd=home, capture_output=True, text=True,
                          env=subprocess_env(), timeout=120)


def answer(home: Path, *args: str) -> Any:
    result = cli(home, *args, "--json")
    assert result.returncode == 0, (args, result.stderr)
    payload = json.loads(result.stdout)
    validate(args[0], payload)
    return payload


def sql(home: Path, query: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(home / "data" / "gitlab_knowledge.duckdb"), read_only=True)
    try:
        return con.execute(query, params or []).fetchall()
    finally:
        con.close()


def references(links: list[dict[str, Any]]) -> set[str]:
    return {link["reference"] for link in links}


def test_related_shows_what_closes_what_from_both_sides(home):
    mr = answer(home, "related", "acme/platform!847")
    assert mr["item"]["title"] == "Refactor auth to use JWT tokens"
    assert "acme/platform#234" in references(mr["links"]["closes"])
    closes = next(link for link in mr["links"]["closes"] if link["reference"] == "acme/platform#234")
    assert closes["in_store"] and not closes["external"] and "description" in closes["via"]
    issue = answer(home, "related", "#234", "--project", PLATFORM)
    assert "acme/platform!847" in references(issue["links"]["closed_by"])
    by_url = answer(home, "related", mr["item"]["url"])
    assert by_url == mr


def test_history_follows_the_rename_and_the_review_threads(home):
    jwt = answer(home, "history", "services/auth/jwt.py", "--project", PLATFORM)
    found = {m["reference"]: m for m in jwt["merge_requests"]}
    assert "acme/platform!847" in found and found["acme/platform!847"]["threads"]
    assert {t["path"] for t in found["acme/platform!847"]["threads"]} == {"services/auth/jwt.py"}
    moved = answer(home, "history", "services/auth/session_store.py")
    order = [m["reference"] for m in moved["merge_requests"]]
    # Newest first, the move, then what came before it under the old name; not !821, after the move.
    assert order[-2:] == ["acme/platform!812", "acme/platform!803"] and "acme/platform!821" not in order, order
    rename, before = moved["merge_requests"][-2:]
    assert rename["files"] == [
        {"path": "services/auth/session_store.py", "old_path": "services/session_store.py", "change": "renamed"}]
    assert rename["followed_rename"] is None and before["followed_rename"]["by"] == "acme/platform!812"
    assert before["files"] == [{"path": "services/session_store.py", "old_path": None, "change": "modified"}]
    under = {m["reference"] for m in answer(home, "history", "services/auth/")["merge_requests"]}
    assert {"acme/platform!812", "acme/platform!847", "acme/platform!851", "acme/platform!853"} <= under
    assert "acme/platform!803" in under  # through the rename


def expected_me(home: Path, user: str, since: str) -> dict[str, Any]:
    """What `me` must say, straight from the tables."""
    ref = "p.path_with_namespace || '{sigil}' || t.iid"
    issues = "FROM issues t JOIN projects p ON p.id = t.project_id"
    mrs = "FROM merge_requests t JOIN projects p ON p.id = t.project_id"
    mine_issue = "(t.author_username = $u OR list_contains(t.assignees, $u))"
    mine_mr = "(t.author_username = $u OR list_contains(t.assignees, $u) OR list_contains(t.reviewers, $u))"
    def q(query: str) -> set[Any]:
        params = {"u": user, **({"since": since} if "$since" in query else {})}
        con = duckdb.connect(str(home / "data" / "gitlab_knowledge.duckdb"), read_only=True)
        try:
            return {r if len(r) > 1 else r[0] for r in con.execute(query, params).fetchall()}
        finally:
            con.close()

    return {
        "assigned": q(f"SELECT {ref.format(sigil='#')} {issues} WHERE t.state = 'opened' AND list_contains(t.assignees, $u)"),
        "review": q(f"SELECT {ref.format(sigil='!')} {mrs} WHERE t.state = 'opened' AND list_contains(t.reviewers, $u)"),
        "authored": q(f"""SELECT {ref.format(sigil='!')}, (SELECT count(*) FROM discussions d WHERE d.merge_request_id = t.id
                          AND d.resolvable AND d.resolved IS NOT TRUE) {mrs} WHERE t.state = 'opened'
                          AND t.author_username = $u"""),
        "mentions": q("""SELECT DISTINCT d.id FROM discussions d JOIN notes n ON n.discussion_id = d.id
                         WHERE d.resolvable AND d.resolved IS NOT TRUE AND n.author_username <> $u
                           AND regexp_matches(n.body, '(^|[^A-Za-z0-9_.@/-])@' || $u || '([^A-Za-z0-9_.-]|$|\\.([^A-Za-z0-9_-]|$))')"""),
        "notes": q(f"""SELECT n.id FROM notes n JOIN issues t ON n.noteable_type = 'Issue' AND n.noteable_id = t.id
                       WHERE {mine_issue} AND n.created_at >= $since::TIMESTAMP AND n.author_username <> $u
                       UNION ALL
                       SELECT n.id FROM notes n JOIN merge_requests t ON n.noteable_type = 'MergeRequest'
                         AND n.noteable_id = t.id
                       WHERE {mine_mr} AND n.created_at >= $since::TIMESTAMP AND n.author_username <> $u"""),
        "states": q(f"""SELECT {ref.format(sigil='#')}, 'closed' {issues} WHERE {mine_issue} AND t.closed_at >= $since::TIMESTAMP
                        UNION ALL
                        SELECT {ref.format(sigil='!')}, CASE WHEN t.merged_at >= $since::TIMESTAMP THEN 'merged' ELSE 'closed' END
                        {mrs} WHERE {mine_mr} AND (t.merged_at >= $since::TIMESTAMP OR t.closed_at >= $since::TIMESTAMP)"""),
    }


@pytest.mark.parametrize("user", ["janedoe", "li.wei"])
def test_me_says_what_the_tables_say(home, user):
    since = "2024-06-01"
    out = answer(home, "me", "--user", user, "--since", since)
    want = expected_me(home, user, since)
    assert references(out["assigned_issues"]) == want["assigned"]
    assert references(out["review_requested"]) == want["review"]
    assert {(m["reference"], m["unresolved_threads"]) for m in out["authored_open_mrs"]} == want["authored"]
    assert {m["discussion_id"] for m in out["mentions"]} == want["mentions"]
    assert {n["note_id"] for n in out["changes"]["notes"]} == want["notes"]
    assert {(s["item"]["reference"], s["change"]) for s in out["changes"]["state_changes"]} == want["states"]
    assert want["notes"]  # the comparison is about something
    if user == "janedoe":
        assert [m["item"]["reference"] for m in out["mentions"]] == ["acme/platform!862"]
        assert out["mentions"][0]["author"] == "li.wei" and out["mentions"][0]["excerpt"] == MENTION


def test_me_defaults_to_the_tokens_user(home):
    out = answer(home, "me")
    assert out["user"] == "janedoe" and out["user_from"] == "token"


def test_person(home):
    out = answer(home, "person", "janedoe", "--limit", "3")
    authored = sql(home, "SELECT count(*) FROM issues WHERE author_username = 'janedoe'")[0][0]
    assert out["counts"]["authored_issues"] == authored > 3 and len(out["authored_issues"]) == 3
    assert out["name"] == "Jane Doe" and out["top_labels"] and len(out["recent_activity"]) == 3
    reviewer = answer(home, "person", "li.wei", "--project", PLATFORM)
    assert {"acme/platform!847", "acme/platform!853"} <= references(reviewer["reviewed_mrs"])


@pytest.mark.parametrize("args,message", [
    (("related", "#99999"), "no #99999 in the store"),
    (("related", "not-a-ref"), "related expects"),
    (("related", "!847", "--project", "no/such"), "not in the store"),
    (("person", "nobody.at.all"), "no user @nobody.at.all in the store"),
    (("me", "--since", "last tuesday"), "expected a date"),
    (("history", "/"), "history expects"),
])
def test_bad_input_is_one_line_and_exit_2(home, args, message):
    result = cli(home, *args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_human_output(home):
    texts = {args[0]: cli(home, *args) for args in (("related", "!847", "--project", PLATFORM),
                                                     ("history", "services/auth/session_store.py"),
                                                     ("me", "--since", "2024-01-01"), ("person", "janedoe"))}
    assert all(r.returncode == 0 and not r.stderr for r in texts.values()), {k: r.stderr for k, r in texts.items()}
    assert "Closes (" in texts["related"].stdout and "acme/platform#234" in texts["related"].stdout
    assert "renamed from services/session_store.py" in texts["history"].stdout
    assert "followed: services/session_store.py → services/auth/session_store.py" in texts["history"].stdout
    assert "@janedoe (the token's user)" in texts["me"].stdout and "Unresolved threads mentioning you (1)" in texts["me"].stdout
    assert texts["person"].stdout.startswith("@janedoe (Jane Doe)")
    assert "authored merge requests" in texts["person"].stdout and "authored mrs" not in texts["person"].stdout
