"""The graph questions (`related`, `history`, `me`, `person`) on a small store written row by row:
every link direction, renames followed back (and a rename cycle), directory prefixes, mentions,
and what changed since a date. Each answer validates against its command's schema."""

import importlib.resources
import json
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.graph import path_rows, people_rows
from gitlab_knowledge.graph.history import history
from gitlab_knowledge.graph.mentions import around, mentioned_names, mentions_user
from gitlab_knowledge.graph.people import me, person
from gitlab_knowledge.graph.queries import related
from gitlab_knowledge.kinds import ITEM_KINDS
from gitlab_knowledge.timeutil import utcnow
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.conftest import store_config

NOW = utcnow().replace(microsecond=0)
RECENT = NOW - timedelta(days=1)
PLATFORM, WEB = 101, 102


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def validate(name: str, payload: Any) -> Any:
    text = importlib.resources.files("gitlab_knowledge.cli").joinpath("schemas", f"{name}.json").read_text()
    validator = jsonschema.Draft202012Validator(json.loads(text), format_checker=jsonschema.FormatChecker())
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in validator.iter_errors(payload)]
    assert not errors, errors
    # What the functions return is already JSON: the CLI prints it as it is.
    assert json.loads(json.dumps(payload)) == payload
    return payload


def issue(con: Any, id_: int, project: int, iid: int, title: str, state: str, author: str, assignees: list[str],
          labels: list[str], created: datetime, closed: datetime | None = None) -> None:
    con.execute("INSERT INTO issues (id, project_id, iid, title, state, author_username, author_name, assignees, "
                "labels, created_at, updated_at, closed_at, web_url, change_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
                [id_, project, iid, title, state, author, author.title(), assignees, labels, created,
                 closed or created, closed, f"https://gl/{'acme/platform' if project == PLATFORM else 'acme/web-app'}"
                                            f"/-/issues/{iid}"])


def mr(con: Any, id_: int, iid: int, title: str, state: str, author: str, reviewers: list[str],
       when: datetime, files: list[tuple[str | None, str | None, str]] = (), assignees: list[str] = (),
       labels: list[str] = ()) -> None:
    merged = when if state == "merged" else None
    con.execute("INSERT INTO merge_requests (id, project_id, iid, title, state, author_username, author_name, "
                "assignees, reviewers, labels, created_at, updated_at, merged_at, web_url, change_seq) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
                [id_, PLATFORM, iid, title, state, author, author.title(), list(assignees), reviewers, list(labels),
                 when - timedelta(days=3), when, merged, f"https://gl/acme/platform/-/merge_requests/{iid}"])
    for position, (old, new, change) in enumerate(files):
        con.execute("INSERT INTO mr_files VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL)",
                    [id_, PLATFORM, position, old, new, change == "new", change == "renamed", change == "deleted"])


def thread(con: Any, discussion: str, kind: str, item_id: int, notes: list[tuple[int, str, str, datetime]],
           resolvable: bool = False, resolved: bool = False, position: tuple[str, int] | None = None) -> None:
    noteable = "MergeRequest" if kind == "mr" else "Issue"
    con.execute("INSERT INTO discussions (id, project_id, noteable_type, issue_id, merge_request_id, individual_note, "
                "resolvable, resolved, note_count, first_note_at) VALUES (?, ?, ?, ?, ?, false, ?, ?, ?, ?)",
                [discussion, PLATFORM, noteable, item_id if kind == "issue" else None, item_id if kind == "mr" else None,
                 resolvable, resolved, len(notes), notes[0][3]])
    for i, (note_id, author, body, created) in enumerate(notes):
        con.execute("INSERT INTO notes (id, discussion_id, project_id, noteable_type, noteable_id, type, "
                    "author_username, body, created_at, position, resolvable, resolved) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [note_id, discussion, PLATFORM, noteable, item_id, "DiffNote" if position else "DiscussionNote",
                     author, body, created, i, resolvable, resolved])
        # Who the note mentions, as the graph layer records it (graph/refresh.py).
        for name in mentioned_names(body):
            con.execute("INSERT INTO mentions VALUES (?, ?, ?, ?, ?, 'note', ?, ?, ?, ?, ?, ?)",
                        [PLATFORM, "merge_request" if kind == "mr" else "issue", item_id, note_id, discussion, name,
                         author, created, resolvable, resolved, around(body, name)])
        if position and i == 0:
            con.execute("INSERT INTO note_positions (note_id, old_path, new_path, new_line) VALUES (?, ?, ?, ?)",
                        [note_id, position[0], position[0], position[1]])


def ref(con: Any, source: tuple[str, int], found_in: str, kind: str, target: tuple[str, str, int],
        target_project: int | None, external: bool = False, note: int | None = None) -> None:
    con.execute("INSERT INTO item_references VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [PLATFORM, source[0], source[1], note, found_in, kind, target[0], target[1], target[2],
                 target_project, external, "text"])


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    data = tmp_path_factory.mktemp("graph-store")
    workspace = Workspace(store_config(Path(data)))
    with workspace.write() as con:  # runs every migration: the graph tables exist
        for pid, path in ((PLATFORM, "acme/platform"), (WEB, "acme/web-app")):
            con.execute("INSERT INTO projects (id, path_with_namespace) VALUES (?, ?)", [pid, path])
            # A project path resolves through the project's raw payload, as after a sync.
            con.execute("INSERT INTO raw_payloads (id, project_id, resource_type, gitlab_key, payload_hash, json, "
                        "fetched_at, change_seq) VALUES (?, ?, 'project', ?, 'h', ?, ?, 1)",
                        [pid, pid, str(pid), json.dumps({"id": pid, "path_with_namespace": path}), NOW])
        issue(con, 1001, PLATFORM, 234, "Auth tokens expire too early", "opened", "alice", ["janedoe"],
              ["bug", "auth"], at("2025-01-01"))
        issue(con, 1002, PLATFORM, 235, "Old login page", "closed", "janedoe", ["bob"], ["frontend", "auth"],
              at("2024-12-01"), closed=RECENT)
        issue(con, 1003, WEB, 52, "Internationalization", "opened", "bob", [], ["i18n"], at("2024-05-20"))
        mr(con, 2001, 847, "Refactor auth to use JWT tokens", "opened", "janedoe", ["bob"], RECENT,
           [("services/auth/jwt.py", "services/auth/jwt.py", "modified")], assignees=["janedoe"], labels=["auth"])
        # services/auth/jwt.py was services/session.py, which was services/legacy_session.py, which
        # (a cycle) was once renamed from services/auth/jwt.py.
        mr(con, 2002, 800, "Move session code", "merged", "bob", ["janedoe"], at("2024-06-01"),
           [("services/session.py", "services/auth/jwt.py", "renamed")])
        mr(con, 2003, 700, "Session timeouts", "merged", "carol", [], at("2024-03-01"),
           [("services/session.py", "services/session.py", "modified")])
        mr(con, 2004, 650, "Rename legacy session", "merged", "carol", [], at("2024-01-01"),
           [("services/legacy_session.py", "services/session.py", "renamed")])
        mr(con, 2005, 600, "Legacy fix", "merged", "dave", [], at("2023-06-01"),
           [("services/legacy_session.py", "services/legacy_session.py", "modified")])
        mr(con, 2006, 500, "Old rename", "merged", "dave", [], at("2023-01-01"),
           [("services/auth/jwt.py", "services/legacy_session.py", "renamed")])
        # After the rename: a new services/session.py has nothing to do with jwt.py's history.
        mr(con, 2007, 900, "New session module", "merged", "carol", [], at("2024-09-01"),
           [(None, "services/session.py", "new")])
        mr(con, 2008, 810, "Authz rules", "merged", "carol", [], at("2024-10-01"),
           [("services/authz.py", "services/authz.py", "modified")])
        mr(con, 2009, 820, "Key rotation", "opened", "bob", ["JaneDoe"], at("2024-11-01"))  # no file list: DiffNotes only
        thread(con, "d-847", "mr", 2001, [(5001, "bob", "@janedoe should this expire after 15 minutes?", RECENT),
                                          (5002, "janedoe", "Yes, @bob.", RECENT)],
               resolvable=True, position=("services/auth/jwt.py", 42))
        thread(con, "d-847b", "mr", 2001, [(5003, "carol", "Mail ops@janedoe.io and @janedoe.smith", RECENT)],
               resolvable=True)
        thread(con, "d-820", "mr", 2009, [(5004, "janedoe", "Rotate these keys monthly", at("2024-11-01"))],
               resolvable=True, resolved=True, position=("services/auth/keys.py", 7))
        # A review thread whose first note is not on the diff, only its reply (history reads the
        # thread's first note apart: it is not among the notes positioned on the path).
        mr(con, 2010, 830, "Guide fixes", "merged", "erin", [], at("2024-12-01"),
           [("docs/guide.md", "docs/guide.md", "modified")])
        thread(con, "d-830", "mr", 2010, [(5010, "erin", "Before merging: the guide's\n\nexamples", at("2024-12-01")),
                                          (5011, "frank", "This line is wrong", at("2024-12-02"))], resolvable=True)
        con.execute("INSERT INTO note_positions (note_id, old_path, new_path, new_line) VALUES (5011, NULL, "
                    "'docs/guide.md', 3)")
        thread(con, "d-234", "issue", 1001, [(5005, "carol", "Seen on staging too", RECENT - timedelta(days=30))])
        ref(con, ("merge_request", 2001), "description", "closes", ("issue", "acme/platform", 234), PLATFORM)
        ref(con, ("issue", 1001), "system_note", "mentioned_in", ("merge_request", "acme/platform", 847), PLATFORM,
            note=9001)
        ref(con, ("issue", 1001), "note", "mentions", ("issue", "acme/web-app", 52), WEB, note=5005)
        ref(con, ("issue", 1001), "description", "mentions", ("issue", "other/lib", 7), None, external=True)
        ref(con, ("issue", 1001), "note", "mentions", ("issue", "acme/web-app", 52), WEB, note=5006)  # twice
        ref(con, ("issue", 1001), "title", "mentions", ("issue", "acme/platform", 234), PLATFORM)  # itself
        ref(con, ("issue", 1003), "description", "related", ("issue", "ACME/Platform", 234), None)
        ref(con, ("issue", 1002), "system_note", "closed_by", ("merge_request", "acme/platform", 800), PLATFORM)
        # An MR on a path jwt.py had before its renames (history reaches it only by following them).
        ref(con, ("merge_request", 2005), "description", "mentions", ("merge_request", "acme/platform", 820), PLATFORM)
        con.execute("INSERT INTO gitlab_identity VALUES ('http://127.0.0.1:9', 17, 'janedoe', 'Jane Doe', ?)", [NOW])
        # Each user's items and the notes on them, as the graph layer records them.
        for kind in ITEM_KINDS:
            people_rows.rebuild(con, kind, [r[0] for r in con.execute(f"SELECT id FROM {kind.table}").fetchall()])
        # And the paths each MR touched (graph/path_rows.py).
        path_rows.rebuild(con, [r[0] for r in con.execute("SELECT id FROM merge_requests").fetchall()])
    return workspace


def refs(links: list[dict[str, Any]]) -> list[str]:
    return [link["reference"] for link in links]


def test_related_groups_every_direction_once(ws):
    out = validate("related", related(ws, "#234", "acme/platform").as_dict())
    assert out["item"] == {"reference": "acme/platform#234", "type": "issue", "title": "Auth tokens expire too early",
                           "state": "opened", "url": "https://gl/acme/platform/-/issues/234"}
    links = out["links"]
    assert refs(links["closed_by"]) == ["acme/platform!847"] and links["closed_by"][0]["via"] == ["description"]
    assert refs(links["mentioned_in"]) == ["acme/platform!847"] and links["mentioned_in"][0]["via"] == ["system_note"]
    # The same item twice (two notes) is one link; an item naming itself is no link.
    assert refs(links["mentions"]) == ["acme/web-app#52", "other/lib#7"]
    web, lib = links["mentions"]
    assert web["title"] == "Internationalization" and web["in_store"] and not web["external"]
    assert lib == {"reference": "other/lib#7", "type": "issue", "title": None, "state": None,
                   "url": "http://127.0.0.1:9/other/lib/-/issues/7", "external": True, "in_store": False,
                   "via": ["description"]}
    # Incoming, with the target's path in another case and no project id.
    assert refs(links["related"]) == ["acme/web-app#52"] and links["closes"] == []


def test_related_from_the_other_side(ws):
    links = validate("related", related(ws, "acme/platform!847").as_dict())["links"]
    assert refs(links["closes"]) == ["acme/platform#234"] and refs(links["mentions"]) == ["acme/platform#234"]
    assert links["closed_by"] == links["mentioned_in"] == links["related"] == []
    assert refs(related(ws, "!800").as_dict()["links"]["closes"]) == ["acme/platform#235"]
    by_url = related(ws, "https://gl/acme/platform/-/issues/234#note_5005").as_dict()
    assert by_url["item"]["reference"] == "acme/platform#234"


@pytest.mark.parametrize("bad,message", [
    ("#999", "no #999 in the store"), ("nonsense", "related expects"), ("acme/nothing#1", "no #1 in the store"),
])
def test_related_unknown_references_are_usage_errors(ws, bad, message):
    with pytest.raises(UsageError, match=message):
        related(ws, bad)


def test_history_follows_renames_back_and_stops_at_a_cycle(ws):
    out = validate("history", history(ws, "services/auth/jwt.py").as_dict())
    by_ref = {m["reference"]: m for m in out["merge_requests"]}
    assert list(by_ref) == ["acme/platform!847", "acme/platform!800", "acme/platform!700", "acme/platform!650",
                            "acme/platform!600", "acme/platform!500"]  # newest first; !900 came after the rename
    assert out["total"] == 6
    assert by_ref["acme/platform!800"]["files"] == [
        {"path": "services/auth/jwt.py", "old_path": "services/session.py", "change": "renamed"}]
    assert by_ref["acme/platform!800"]["followed_rename"] is None
    assert by_ref["acme/platform!700"]["followed_rename"]["from"] == "services/session.py"
    assert by_ref["acme/platform!700"]["files"][0]["path"] == "services/session.py"
    assert by_ref["acme/platform!600"]["followed_rename"]["by"] == "acme/platform!650"
    assert [(r["from"], r["to"]) for r in out["renames"]] == [
        ("services/session.py", "services/auth/jwt.py"), ("services/legacy_session.py", "services/session.py")]
    jwt = by_ref["acme/platform!847"]
    assert [c["reference"] for c in jwt["closes"]] == ["acme/platform#234"]
    assert jwt["threads"] == [{"discussion_id": "d-847", "path": "services/auth/jwt.py", "line": 42, "author": "bob",
                               "created_at": jwt["threads"][0]["created_at"],
                               "excerpt": "@janedoe should this expire after 15 minutes?", "resolvable": True,
                               "resolved": False}]
    assert [m["reference"] for m in history(ws, "services/auth/jwt.py", limit=2).as_dict()["merge_requests"]] == [
        "acme/platform!847", "acme/platform!800"]


def test_history_gives_each_merge_request_the_links_related_gives_it_also_one_reached_through_a_rename(ws):
    # history reads the links of the newest MRs on the path itself while it follows the renames;
    # !700, !650 and !600 are reached only through them and read after.
    for limit in (1, 2, 3, 4, 50):
        out = validate("history", history(ws, "services/auth/jwt.py", limit=limit).as_dict())
        assert len(out["merge_requests"]) == min(limit, 6)
        for mr_ in out["merge_requests"]:
            links = related(ws, mr_["reference"]).as_dict()["links"]
            assert mr_["links"] == {g: [{k: link[k] for k in ("reference", "type", "title", "state", "url")}
                                        for link in group] for g, group in links.items()}, mr_["reference"]
    legacy = history(ws, "services/auth/jwt.py").as_dict()["merge_requests"][4]
    assert legacy["reference"] == "acme/platform!600" and refs(legacy["links"]["mentions"]) == ["acme/platform!820"]


def test_history_says_who_opened_a_thread_whose_first_note_is_not_on_the_diff(ws):
    out = validate("history", history(ws, "docs/guide.md").as_dict())
    assert [m["reference"] for m in out["merge_requests"]] == ["acme/platform!830"]
    assert out["merge_requests"][0]["threads"] == [
        {"discussion_id": "d-830", "path": "docs/guide.md", "line": 3, "author": "erin",
         "created_at": "2024-12-01T00:00:00Z", "excerpt": "Before merging: the guide's examples", "resolvable": True,
         "resolved": False}]


def test_history_of_a_directory_matches_files_under_it_only(ws):
    for path in ("services/auth", "services/auth/", "./services/auth"):
        out = validate("history", history(ws, path, project="acme/platform").as_dict())
        found = [m["reference"] for m in out["merge_requests"]]
        assert "acme/platform!810" not in found  # services/authz.py is not under services/auth
        assert found[:3] == ["acme/platform!847", "acme/platform!820", "acme/platform!800"], found
    keys = next(m for m in out["merge_requests"] if m["reference"] == "acme/platform!820")
    assert keys["files"] == [{"path": "services/auth/keys.py", "old_path": None, "change": None}]
    assert keys["threads"][0]["resolved"] is True
    assert validate("history", history(ws, "no/such/file.py").as_dict())["merge_requests"] == []
    with pytest.raises(UsageError, match="history expects"):
        history(ws, " / ")
    with pytest.raises(UsageError, match="not in the store"):
        history(ws, "services", project="no/such")


def test_me_lists_what_needs_attention_and_what_changed(ws):
    out = validate("me", me(ws).as_dict())
    assert out["user"] == "janedoe" and out["user_from"] == "token"
    assert refs(out["assigned_issues"]) == ["acme/platform#234"]
    assert refs(out["review_requested"]) == ["acme/platform!820"]  # the reviewer list says JaneDoe
    assert refs(out["authored_open_mrs"]) == ["acme/platform!847"]
    assert out["authored_open_mrs"][0]["unresolved_threads"] == 2
    # @janedoe.smith and ops@janedoe.io are not mentions of janedoe; her own note is not either.
    assert [(m["discussion_id"], m["author"]) for m in out["mentions"]] == [("d-847", "bob")]
    assert out["mentions"][0]["url"] == "https://gl/acme/platform/-/merge_requests/847#note_5001"
    changes = out["changes"]
    assert sorted(n["note_id"] for n in changes["notes"]) == [5001, 5003]  # not hers, not older than 7 days
    assert [(s["item"]["reference"], s["change"]) for s in changes["state_changes"]] == [("acme/platform#235", "closed")]
    older = me(ws, "janedoe", since=NOW - timedelta(days=60)).as_dict()
    assert sorted(n["note_id"] for n in older["changes"]["notes"]) == [5001, 5003, 5005]
    assert older["user_from"] == "argument"
    assert me(ws, "bob").as_dict()["review_requested"][0]["reference"] == "acme/platform!847"
    assert me(ws, "janedoe", project="acme/web-app").as_dict()["assigned_issues"] == []


def test_me_without_a_recorded_user_says_what_to_do(tmp_path):
    empty = Workspace(store_config(tmp_path))
    with empty.write():
        pass
    with pytest.raises(UsageError, match="run a sync .* or pass --user"):
        me(empty)
    assert validate("me", me(empty, "janedoe").as_dict())["assigned_issues"] == []


def test_person(ws):
    out = validate("person", person(ws, "@JaneDoe").as_dict())
    assert out["user"] == "JaneDoe" and out["name"] == "Janedoe"
    assert out["counts"] == {"authored_issues": 1, "authored_mrs": 1, "reviewed_mrs": 2, "commented_on": 2,
                             "assigned": 2, "mentioned_in": 1}
    assert out["mentioned_in"][0]["reason"] == "mentioned in a note"
    assert {r["reference"]: r["review_requested"] for r in out["reviewed_mrs"]} == {
        "acme/platform!800": True, "acme/platform!820": True}
    assert out["top_labels"][0] == {"label": "auth", "count": 3}
    assert {p["path"] for p in out["top_paths"]} == {"services/auth/jwt.py", "services/auth/keys.py"}
    assert out["recent_activity"][0]["at"] >= out["recent_activity"][-1]["at"]
    limited = validate("person", person(ws, "carol", limit=1, since=at("2024-02-01")).as_dict())
    assert limited["counts"]["authored_mrs"] == 3 and len(limited["authored_mrs"]) == 1
    assert len(limited["recent_activity"]) == 1
    with pytest.raises(UsageError, match="no user @nobody in the store"):
        person(ws, "nobody")
    with pytest.raises(UsageError, match="for acme/web-app"):
        person(ws, "carol", project="acme/web-app")


@pytest.mark.parametrize("body,expected", [
    ("@janedoe please look", True), ("cc @JaneDoe.", True), ("(@janedoe)", True), ("@janedoe.smith", False),
    ("ops@janedoe.io", False), ("@janedoe2", False), ("@janedoe-bot", False), ("", False), (None, False),
])
def test_a_mention_is_the_whole_username(body, expected):
    assert mentions_user(body, "janedoe") is expected
    assert ("janedoe" in mentioned_names(body)) is expected


@pytest.mark.parametrize("body", [
    "@janedoe please look", "cc @JaneDoe. and @li.wei, @bob-x!", "(@janedoe)", "@janedoe.smith @a.b.c.",
    "ops@janedoe.io a/@b c-@d e.@f @@g", "@x_y: @Z9 @-dash- @a..b @a.-b @ä.ö", "`@code` [@link](u) @end",
    "@janedoe2\n@janedoe-bot\t@JANEDOE", "", "no at sign", "@", "@.", "trailing @",
])
def test_the_names_a_text_mentions_are_those_mentions_user_finds(body):
    """The graph's `mentions` rows come from mentioned_names; `me` once scanned every body with
    mentions_user. For every name GitLab allows that starts after an @ of the text (each prefix
    of what follows it: `janedoe` in `@janedoe.smith`), both must agree."""
    shape = re.compile(r"[\w-]+(?:\.[\w-]+)*")
    candidates = {word[:end].lower() for word in body.split("@")[1:] for end in range(1, len(word) + 1)
                  if shape.fullmatch(word[:end])}
    assert {name for name in candidates if mentions_user(body, name)} == mentioned_names(body)


def test_a_gitlab_todo_reads_whatever_its_target_is() -> None:
    """GitLab's To-Dos name epics, commits and designs too, and old GitLabs leave fields out."""
    from gitlab_knowledge.graph.todos import todo

    mr = todo({"action_name": "review_requested", "target_type": "MergeRequest", "author": {"username": "li.wei"},
               "project": {"path_with_namespace": "acme/platform"}, "body": "Tune  the\nping",
               "target": {"iid": 862, "title": "Tune the ping", "state": "opened", "confidential": False},
               "target_url": "https://gitlab.example.com/acme/platform/-/merge_requests/862",
               "created_at": "2024-11-25T09:10:50.516+01:00"})
    assert mr["reason"] == "review requested" and mr["reference"] == "acme/platform!862"
    assert mr["excerpt"] == "Tune the ping" and mr["created_at"] == "2024-11-25T08:10:50.516000Z"
    epic = todo({"action_name": "epic_updated", "target_type": "Epic", "target": None, "project": None})
    assert epic["reference"] is None and epic["reason"] == "epic updated" and epic["target_type"] == "Epic"
    assert epic["author"] is None and epic["url"] is None and epic["excerpt"] == ""
