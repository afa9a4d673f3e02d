"""`related`, `history`, `me` and `person` as a user runs them: the bundled sample served by a
sandbox GitLab on 127.0.0.1, synced through the raw, normalized and graph layers, then each command
as a subprocess. Before the sync the sandbox gets a few facts the answers must show: !847 closes
#234, a file renamed into services/auth/, and a teammate's @janedoe in an unresolved thread. `me`
is checked against SQL written here, independently of graph/people.py."""

import json
import os
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest
import tomli_w

from gitlab_knowledge.config import parse_config
from gitlab_knowledge_sandbox import DEFAULT_TOKEN, SAMPLE_DATASET, SandboxGitLab
from gitlab_knowledge_tests.conftest import TOKEN_ENV, forked, subprocess_env
from gitlab_knowledge_tests.helpers import SYNC_LAYERS, run_layers
from gitlab_knowledge_tests.integration.test_cli_schemas import validate

PROJECTS = ["acme/platform", "acme/web-app"]
PLATFORM = "acme/platform"
MENTION = "@janedoe could you check the ping interval before this merges?"
# Where `me` used to look away: a comment on an issue (not a resolvable thread), a thread since
# resolved, someone else's description; and an MR assigned to janedoe that li.wei wrote.
ISSUE_MENTION = "@janedoe the repro steps from the support ticket are above"
RESOLVED_MENTION = "@janedoe is the retry budget per user or per token?"
INTERNAL_MENTION = "@janedoe internal: the customer behind this ticket is named in the CRM"
DESCRIPTION_MENTION = "Login fails on every second try.\n\n@janedoe you wrote the retry logic: any idea?"
JANE = {"id": 17, "username": "janedoe", "name": "Jane Doe", "state": "active"}


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
            sb.state.add_note(PLATFORM, "issues", 196, ISSUE_MENTION)
            sb.state.add_note(PLATFORM, "issues", 196, INTERNAL_MENTION, internal=True)
            resolved = sb.state.create_discussion(PLATFORM, "merge_requests", 847, RESOLVED_MENTION)
            resolved["notes"][0].update(resolvable=True, resolved=True, resolved_by=JANE)
            sb.state.create_issue(PLATFORM, "Login flakes on the second try", description=DESCRIPTION_MENTION)
            mr = sb.state.create_merge_request(PLATFORM, "Tune the websocket ping", "ping-interval", "main")
            sb.state.project(PLATFORM).merge_requests.put({**mr, "assignees": [JANE], "assignee": JANE})
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
    return forked(["gitlab_knowledge", *args], cwd=home, env=subprocess_env(), timeout=120)


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


def test_history_lists_every_typed_link_of_its_merge_requests(home):
    """Each MR of a history carries its links grouped as `related` groups them (it showed `closes`
    only): here the MRs under services/, whose links include mentions beside closes."""
    from gitlab_knowledge.config import load_config
    from gitlab_knowledge.graph.queries import related
    from gitlab_knowledge.workspace import Workspace

    out = answer(home, "history", "services", "--project", PLATFORM)
    workspace = Workspace(load_config(home / "gitlab_knowledge.toml"))
    keys = ("reference", "type", "title", "state", "url")
    for mr in out["merge_requests"]:
        want = related(workspace, mr["reference"]).as_dict()["links"]
        assert mr["links"] == {g: [{k: link[k] for k in keys} for link in links] for g, links in want.items()}
        assert mr["closes"] == [{k: link[k] for k in keys if k != "type"} for link in want["closes"]]
    groups = {g for mr in out["merge_requests"] for g, links in mr["links"].items() if links}
    assert {"closes", "mentioned_in"} <= groups, groups
    text = cli(home, "history", "services", "--project", PLATFORM).stdout
    assert "mentioned in acme/platform" in text


AT_USER = "'(^|[^A-Za-z0-9_.@/-])@' || $u || '([^A-Za-z0-9_.-]|$|\\.([^A-Za-z0-9_-]|$))'"


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
        # Someone else's @u, in a note of any thread or an item's title or description: written
        # since $since, or older on an open item or in a thread still unresolved.
        "mentions": q(f"""SELECT DISTINCT d.id FROM discussions d JOIN notes n ON n.discussion_id = d.id
                         LEFT JOIN issues i ON n.noteable_type = 'Issue' AND i.id = n.noteable_id
                         LEFT JOIN merge_requests m ON n.noteable_type = 'MergeRequest' AND m.id = n.noteable_id
                         WHERE n.author_username <> $u AND regexp_matches(n.body, {AT_USER})
                           AND (n.created_at >= $since::TIMESTAMP OR COALESCE(i.state, m.state) = 'opened'
                                OR (d.resolvable AND d.resolved IS NOT TRUE))
                         UNION ALL
                         SELECT 'issue:' || t.id FROM issues t WHERE t.author_username <> $u
                           AND (regexp_matches(t.description, {AT_USER}) OR regexp_matches(t.title, {AT_USER}))
                           AND (t.created_at >= $since::TIMESTAMP OR t.state = 'opened')
                         UNION ALL
                         SELECT 'merge_request:' || t.id FROM merge_requests t WHERE t.author_username <> $u
                           AND (regexp_matches(t.description, {AT_USER}) OR regexp_matches(t.title, {AT_USER}))
                           AND (t.created_at >= $since::TIMESTAMP OR t.state = 'opened')"""),
        "assigned_mrs": q(f"SELECT {ref.format(sigil='!')} {mrs} WHERE t.state = 'opened' "
                          "AND list_contains(t.assignees, $u) AND t.author_username <> $u"),
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
    out = answer(home, "me", "--user", user, "--since", since, "--limit", "1000")
    want = expected_me(home, user, since)
    assert references(out["assigned_issues"]) == want["assigned"]
    assert references(out["review_requested"]) == want["review"]
    assert {(m["reference"], m["unresolved_threads"]) for m in out["authored_open_mrs"]} == want["authored"]
    assert references(out["assigned_mrs"]) == want["assigned_mrs"]
    assert {m["discussion_id"] or m["item"]["type"] + ":" + str(mention_item_id(home, m)) for m in out["mentions"]} \
        == want["mentions"]
    assert {n["note_id"] for n in out["changes"]["notes"]} == want["notes"]
    assert {(s["item"]["reference"], s["change"]) for s in out["changes"]["state_changes"]} == want["states"]
    assert want["notes"]  # the comparison is about something
    assert out["todos"] is None  # asked only with --live
    groups = ("assigned_issues", "assigned_mrs", "review_requested", "authored_open_mrs")
    assert {e["reason"] for g in groups for e in out[g]} <= {"assigned", "review requested", "authored"}
    if user == "janedoe":
        assert want["assigned_mrs"] and want["mentions"]


def test_me_shows_the_newest_limit_of_each_list_and_counts_them_all(home):
    """`--limit N` (default 20) cuts each list to its newest N; `counts` and the text keep the totals."""
    everything = answer(home, "me", "--user", "janedoe", "--since", "2000-01-01", "--limit", "1000")
    default = answer(home, "me", "--user", "janedoe", "--since", "2000-01-01")
    one = answer(home, "me", "--user", "janedoe", "--since", "2000-01-01", "--limit", "1")
    assert everything["counts"]["notes"] == len(everything["changes"]["notes"]) > 20
    for cut, n in ((default, 20), (one, 1)):
        assert cut["counts"] == everything["counts"]
        for key in ("assigned_issues", "assigned_mrs", "review_requested", "authored_open_mrs", "mentions"):
            assert cut[key] == everything[key][:n], key
        for key in ("notes", "state_changes"):
            assert cut["changes"][key] == everything["changes"][key][:n], key
    text = cli(home, "me", "--user", "janedoe", "--since", "2000-01-01", "--limit", "1").stdout
    total = everything["counts"]["notes"]
    assert f"New comments on your items since 2000-01-01 00:00 ({total}, the newest 1 shown (--limit for more))" in text
    assert "--limit" in cli(home, "me", "--help").stdout


def mention_item_id(home: Path, mention: dict[str, Any]) -> int:
    kind = mention["item"]["type"]
    table = "issues" if kind == "issue" else "merge_requests"
    return sql(home, f"SELECT t.id FROM {table} t JOIN projects p ON p.id = t.project_id "
                     "WHERE p.path_with_namespace || ? || t.iid = ?",
               ["#" if kind == "issue" else "!", mention["item"]["reference"]])[0][0]


def test_me_finds_every_mention_and_the_mrs_assigned(home):
    """Each was missed before: a comment on an issue, a resolved thread, a description, an MR
    assigned (not authored)."""
    out = answer(home, "me", "--user", "janedoe", "--since", "2024-06-01")
    found = {m["excerpt"]: m for m in out["mentions"]}
    comment, resolved, described = found[ISSUE_MENTION], found[RESOLVED_MENTION], found[DESCRIPTION_MENTION.replace("\n\n", " ")]
    assert comment["item"]["reference"] == "acme/platform#196" and comment["reason"] == "mentioned in a note"
    assert comment["author"] == "li.wei" and comment["resolved"] is None and comment["url"].endswith(
        f"#note_{comment['note_id']}")
    assert resolved["item"]["reference"] == "acme/platform!847" and resolved["resolved"] is True
    assert described["reason"] == "mentioned in the description" and described["note_id"] is None
    assert found[MENTION]["resolved"] is False and found[MENTION]["item"]["reference"] == "acme/platform!862"
    [assigned] = [e for e in out["assigned_mrs"] if e["title"] == "Tune the websocket ping"]
    assert assigned["reason"] == "assigned" and assigned["state"] == "opened"
    mentioned = answer(home, "person", "janedoe")["mentioned_in"]
    assert {ISSUE_MENTION, RESOLVED_MENTION, MENTION} <= {m["excerpt"] for m in mentioned}


def test_the_mentions_table_holds_what_a_scan_of_every_text_finds(home):
    """`me` and `person` look mentions up in the graph's `mentions` rows; before those they scanned
    every note, title and description with mentions_user. Over the whole store, for every user it
    names, the rows say what that scan says."""
    from gitlab_knowledge.graph.mentions import mentions_user

    texts = [(kind, item, None, found_in, text) for table, kind in (("issues", "issue"), ("merge_requests", "merge_request"))
             for found_in in ("title", "description")
             for item, text in sql(home, f"SELECT id, {found_in} FROM {table}")]
    texts += [("issue" if t == "Issue" else "merge_request", item, note, "note", body)
              for t, item, note, body in sql(home, "SELECT noteable_type, noteable_id, id, body FROM notes")]
    users = {u.lower() for (u,) in sql(home, """
        SELECT author_username FROM notes UNION SELECT author_username FROM issues
        UNION SELECT author_username FROM merge_requests UNION SELECT unnest(assignees) FROM issues
        UNION SELECT unnest(assignees) FROM merge_requests UNION SELECT unnest(reviewers) FROM merge_requests""") if u}
    scanned = {(kind, item, note, found_in, u) for kind, item, note, found_in, text in texts for u in users
               if mentions_user(text, u)}
    stored = set(sql(home, "SELECT item_type, item_id, note_id, found_in, username FROM mentions"))
    assert len(scanned) > 3 and {r for r in stored if r[4] in users} == scanned


@pytest.mark.parametrize("lens", ["config", "viewer"])
def test_a_mention_in_an_internal_note_stays_behind_the_lens(home, lens):
    """The MCP server's lenses hide internal notes (the config's opt-out; a viewer below Planner):
    the `mentions` rows written in them too."""
    from gitlab_knowledge.config import load_config
    from gitlab_knowledge.graph import people
    from gitlab_knowledge.store.reader import StoreReader
    from gitlab_knowledge.store.viewer_lens import viewer_lens
    from gitlab_knowledge.store.visibility import hidden_lens
    from gitlab_knowledge.viewer import GUEST, Viewer
    from gitlab_knowledge.workspace import Workspace

    plain = Workspace(load_config(home / "gitlab_knowledge.toml"))
    reader = StoreReader(plain.config.duckdb_path)
    try:
        if lens == "config":
            chosen = hidden_lens(include_confidential=False, include_internal=False)
        else:
            pids = [pid for (pid,) in sql(home, "SELECT id FROM projects")]  # internal: the guest reads their MRs
            guest = Viewer(7001, "a.guest", access=dict.fromkeys(pids, GUEST), visibility=dict.fromkeys(pids, "internal"))
            chosen = viewer_lens(guest, plain.config.gitlab.url, include_confidential=True, include_internal=True)
        lensed = plain.with_(lens=chosen, reader=reader)
        since = datetime(2000, 1, 1)
        answers = {name: (people.me(w, "janedoe", since).as_dict(), people.person(w, "janedoe").as_dict())
                   for name, w in (("plain", plain), ("lensed", lensed))}
        for i, (group, count) in enumerate((("mentions", "mentions"), ("mentioned_in", "mentioned_in"))):
            shown, hidden = (answers[name][i] for name in ("plain", "lensed"))
            [internal] = [m for m in shown[group] if m["excerpt"] == INTERNAL_MENTION]
            assert hidden[group] == [m for m in shown[group] if m is not internal]
            assert hidden["counts"][count] == shown["counts"][count] - 1
    finally:
        reader.close()


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
    (("me", "--limit", "0"), "expected a number >= 1"),
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
    assert "@janedoe (the token's user)" in texts["me"].stdout and "Mentions of you (" in texts["me"].stdout
    assert "mentioned in the description" in texts["me"].stdout and "Merge requests assigned to you (1)" in texts["me"].stdout
    assert texts["person"].stdout.startswith("@janedoe (Jane Doe)")
    assert "authored merge requests" in texts["person"].stdout and "authored mrs" not in texts["person"].stdout


def test_me_live_lists_the_tokens_gitlab_todos(home, tmp_path):
    """`me --live` asks GitLab for the token's user's pending To-Dos, each with its reason; the store
    has none, and another user's are not GitLab's to show."""
    from gitlab_knowledge_sandbox.todos import add_todo

    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        li = {"id": 38, "username": "li.wei", "name": "Li Wei"}
        add_todo(sb.state, PLATFORM, "merge_requests", 862, "review_requested", author=li)
        add_todo(sb.state, PLATFORM, "issues", 196, "mentioned", author=li, body=ISSUE_MENTION)
        add_todo(sb.state, PLATFORM, "issues", 234, "assigned", done=True)
        config = tmp_path / "live.toml"  # the store of `home`, GitLab live
        config.write_text(tomli_w.dumps({"gitlab": {"url": sb.url, "rate_limit": 0}, "projects": PROJECTS,
                                         "storage": {"data_dir": str(home / "data")}}), encoding="utf-8")
        out = answer(home, "me", "--user", "janedoe", "--live", "--config", str(config))
        other = cli(home, "me", "--user", "li.wei", "--live", "--config", str(config))
        calls = sb.stats()
    todos = out["todos"]
    assert [(t["reference"], t["reason"], t["author"]) for t in todos] == [
        ("acme/platform#196", "mentioned", "li.wei"), ("acme/platform!862", "review requested", "li.wei")]
    assert todos[0]["excerpt"] == ISSUE_MENTION and todos[1]["title"] and todos[1]["url"].endswith("/862")
    assert other.returncode == 2 and "only the token's own To-Dos" in other.stderr and other.stdout == ""
    assert other.stderr.count("\n") == 1 and DEFAULT_TOKEN not in other.stderr
    assert calls["by_route"].get("todos") == 1, calls


def test_list_narrows_by_structured_filters(home):
    """"Merged MRs labelled security by a reviewer": without a query, every filter holding."""
    out = answer(home, "list", "mrs", "--state", "merged", "--label", "security", "--reviewer", "li.wei",
                 "--updated-since", "2024-01-01", "--sort", "updated_asc", "--limit", "100")
    want = [r[0] for r in sql(home, """
        SELECT iid FROM merge_requests WHERE state = 'merged' AND list_contains(labels, 'security')
          AND list_contains(reviewers, 'li.wei') AND updated_at >= TIMESTAMP '2024-01-01'
        ORDER BY updated_at, id""")]
    assert [r["iid"] for r in out] == want and want
    assert all("li.wei" in r["reviewers"] and "security" in r["labels"] for r in out)
    mine = answer(home, "list", "issues", "--participant", "janedoe", "--created-since", "2024-01-01")
    assert mine and all(r["created_at"] >= "2024-01-01" for r in mine)
    for args, message in ((("list", "issues", "--reviewer", "li.wei"), "reviewer narrows merge requests"),
                          (("list", "issues", "--path", "src"), "path narrows merge requests"),
                          (("list", "mrs", "--updated-since", "monday"), "expected a date")):
        result = cli(home, *args)
        assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1, result.stderr
