"""Mutations over HTTP and GitLab's ThrottledTouch rule, driven by the controllable clock."""

from typing import Any

import httpx
import pytest

from gitlab_knowledge_sandbox import Dataset, SandboxGitLab

NOW_ISO = "2026-01-01T12:00:00.000Z"


# -- issues ----------------------------------------------------------------------------------


def test_create_issue_json(client: httpx.Client) -> None:
    response = client.post("/projects/101/issues", json={"title": "New one", "description": "d",
                                                         "labels": ["x", "y,z"], "confidential": True})
    assert response.status_code == 201
    issue = response.json()
    assert issue["iid"] == 6  # next iid in the project
    assert issue["id"] == 17  # next global issue id (max existing is 16, in project 102)
    assert issue["labels"] == ["x", "y", "z"]
    assert issue["confidential"] is True
    assert issue["created_at"] == issue["updated_at"] == NOW_ISO
    assert issue["state"] == "opened"
    assert issue["user_notes_count"] == 0
    assert client.get("/projects/101/issues/6").json() == issue
    assert iids_of(client.get("/projects/101/issues"))[0] == 6


def iids_of(response: httpx.Response) -> list[int]:
    return [i["iid"] for i in response.json()]


def test_iids_are_never_reused(client: httpx.Client) -> None:
    assert client.delete("/projects/101/issues/5").status_code == 204
    created = client.post("/projects/101/issues", json={"title": "after delete"}).json()
    assert (created["iid"], created["id"]) == (6, 17)


def test_create_issue_form_encoded(client: httpx.Client) -> None:
    response = client.post("/projects/group%2Fproject-two/issues", data={"title": "Form", "labels": "a, b"})
    assert response.status_code == 201
    assert (response.json()["iid"], response.json()["labels"], response.json()["project_id"]) == (2, ["a", "b"], 102)


def test_create_issue_needs_a_title(client: httpx.Client) -> None:
    response = client.post("/projects/101/issues", json={"description": "no title"})
    assert response.status_code == 400
    assert response.json() == {"message": '400 (Bad request) "title" not given'}


def test_update_issue_always_bumps_updated_at(client: httpx.Client, sandbox: SandboxGitLab) -> None:
    created = client.post("/projects/101/issues", json={"title": "t"}).json()
    sandbox.clock.advance(5)  # well inside the 60 s window: direct edits are not throttled
    response = client.put(f"/projects/101/issues/{created['iid']}", json={"title": "t2", "labels": "p,q"})
    assert response.status_code == 200
    updated = response.json()
    assert updated["title"] == "t2"
    assert updated["labels"] == ["p", "q"]
    assert updated["updated_at"] == "2026-01-01T12:00:05.000Z"
    # GitLab records a title change as a system note.
    threads = client.get(f"/projects/101/issues/{created['iid']}/discussions").json()
    assert threads[0]["notes"][0]["system"] is True
    assert threads[0]["notes"][0]["body"] == "changed title from **t** to **t2**"
    assert updated["user_notes_count"] == 0


def test_close_and_reopen_issue(client: httpx.Client, sandbox: SandboxGitLab) -> None:
    closed = client.put("/projects/101/issues/3", data={"state_event": "close"}).json()
    assert (closed["state"], closed["closed_at"]) == ("closed", NOW_ISO)
    sandbox.clock.advance(1)
    reopened = client.put("/projects/101/issues/3", json={"state_event": "reopen"}).json()
    assert (reopened["state"], reopened["closed_at"]) == ("opened", None)
    assert reopened["updated_at"] == "2026-01-01T12:00:01.000Z"
    assert client.put("/projects/101/issues/3", json={"state_event": "merge"}).status_code == 400


def test_delete_issue_removes_it_and_its_discussions(client: httpx.Client) -> None:
    response = client.delete("/projects/101/issues/1")
    assert response.status_code == 204
    assert response.content == b""
    assert client.get("/projects/101/issues/1").json() == {"message": "404 Issue Not Found"}
    assert client.get("/projects/101/issues/1/discussions").status_code == 404
    assert 1 not in iids_of(client.get("/projects/101/issues"))
    assert client.delete("/projects/101/issues/1").status_code == 404


# -- merge requests --------------------------------------------------------------------------


def test_create_merge_request(client: httpx.Client) -> None:
    response = client.post("/projects/101/merge_requests",
                           json={"title": "Add x", "source_branch": "feat", "target_branch": "main"})
    assert response.status_code == 201
    mr = response.json()
    assert (mr["iid"], mr["id"], mr["state"], mr["source_branch"]) == (3, 23, "opened", "feat")


@pytest.mark.parametrize("missing", ["title", "source_branch", "target_branch"])
def test_create_merge_request_requires_fields(client: httpx.Client, missing: str) -> None:
    body = {"title": "t", "source_branch": "s", "target_branch": "main"}
    del body[missing]
    response = client.post("/projects/101/merge_requests", json=body)
    assert (response.status_code, response.json()) == (400, {"message": f'400 (Bad request) "{missing}" not given'})


def test_merge_close_and_delete_merge_request(client: httpx.Client) -> None:
    merged = client.put("/projects/101/merge_requests/2", json={"state_event": "merge"}).json()
    assert (merged["state"], merged["merged_at"], merged["updated_at"]) == ("merged", NOW_ISO, NOW_ISO)
    assert client.get("/projects/101/merge_requests", params={"state": "merged"}).json()[0]["iid"] == 2
    created = client.post("/projects/101/merge_requests",
                          json={"title": "x", "source_branch": "s", "target_branch": "main"}).json()
    closed = client.put(f"/projects/101/merge_requests/{created['iid']}", json={"state_event": "close"}).json()
    assert (closed["state"], closed["closed_at"]) == ("closed", NOW_ISO)
    assert client.delete("/projects/101/merge_requests/2").status_code == 204
    assert client.get("/projects/101/merge_requests/2").json() == {"message": "404 Merge Request Not Found"}


# -- notes and discussions ---------------------------------------------------------------------


def test_post_note_creates_an_individual_thread(client: httpx.Client) -> None:
    response = client.post("/projects/101/issues/3/notes", json={"body": "hello", "internal": True})
    assert response.status_code == 201
    note = response.json()
    assert note["id"] == 302  # global: max existing note id is 301
    assert (note["type"], note["system"], note["internal"], note["confidential"]) == (None, False, True, True)
    assert (note["noteable_id"], note["noteable_type"], note["noteable_iid"], note["project_id"]) == (13, "Issue", 3, 101)
    assert note["author"]["username"] == "root"
    assert note["resolvable"] is False
    threads = client.get("/projects/101/issues/3/discussions").json()
    assert threads == [{"id": threads[0]["id"], "individual_note": True, "notes": [note]}]
    assert client.get("/projects/101/issues/3").json()["user_notes_count"] == 1


def test_note_needs_a_body(client: httpx.Client) -> None:
    response = client.post("/projects/101/issues/3/notes", json={"body": "  "})
    assert (response.status_code, response.json()) == (400, {"message": '400 (Bad request) "body" not given'})
    assert client.post("/projects/101/issues/99/notes", json={"body": "x"}).status_code == 404


def test_discussion_thread_and_reply(client: httpx.Client) -> None:
    response = client.post("/projects/101/issues/3/discussions", data={"body": "let's discuss"})
    assert response.status_code == 201
    thread = response.json()
    assert thread["individual_note"] is False
    assert thread["notes"][0]["type"] == "DiscussionNote"
    reply = client.post(f"/projects/101/issues/3/discussions/{thread['id']}/notes", json={"body": "sure"})
    assert reply.status_code == 201
    assert reply.json()["type"] == "DiscussionNote"
    threads = client.get("/projects/101/issues/3/discussions").json()
    assert [n["body"] for n in threads[-1]["notes"]] == ["let's discuss", "sure"]
    missing = client.post("/projects/101/issues/3/discussions/nope/notes", json={"body": "x"})
    assert (missing.status_code, missing.json()) == (404, {"message": "404 Discussion Not Found"})


def test_reply_turns_a_single_note_into_a_thread(client: httpx.Client) -> None:
    note = client.post("/projects/101/issues/3/notes", json={"body": "single"}).json()
    thread_id = client.get("/projects/101/issues/3/discussions").json()[0]["id"]
    client.post(f"/projects/101/issues/3/discussions/{thread_id}/notes", json={"body": "reply"})
    thread = client.get("/projects/101/issues/3/discussions").json()[0]
    assert thread["individual_note"] is False
    assert thread["notes"][0]["id"] == note["id"]
    assert thread["notes"][0]["type"] == "DiscussionNote"


def test_diff_note_on_merge_request(client: httpx.Client) -> None:
    position = {"base_sha": "a" * 40, "start_sha": "a" * 40, "head_sha": "c" * 40, "position_type": "text",
                "new_path": "src/app.py", "old_path": "src/app.py", "new_line": 12}
    response = client.post("/projects/101/merge_requests/2/discussions", json={"body": "nit", "position": position})
    assert response.status_code == 201
    note = response.json()["notes"][0]
    assert note["type"] == "DiffNote"
    assert note["position"]["new_line"] == 12
    assert note["commit_id"] == "c" * 40
    assert (note["resolvable"], note["resolved"], note["noteable_type"]) == (True, False, "MergeRequest")
    reply = client.post(f"/projects/101/merge_requests/2/discussions/{response.json()['id']}/notes",
                        json={"body": "fixed"}).json()
    assert reply["type"] == "DiffNote"


def test_diff_note_position_form_encoded(client: httpx.Client) -> None:
    form = {"body": "x", "position[new_path]": "a.py", "position[old_path]": "a.py", "position[new_line]": "3",
            "position[base_sha]": "a" * 40, "position[head_sha]": "b" * 40, "position[start_sha]": "a" * 40,
            "position[position_type]": "text"}
    note = client.post("/projects/101/merge_requests/2/discussions", data=form).json()["notes"][0]
    assert (note["type"], note["position"]["new_path"]) == ("DiffNote", "a.py")


def test_edit_and_delete_notes(client: httpx.Client, sandbox: SandboxGitLab) -> None:
    note = client.post("/projects/101/merge_requests/2/notes", json={"body": "v1"}).json()
    sandbox.clock.advance(10)
    edited = client.put(f"/projects/101/merge_requests/2/notes/{note['id']}", json={"body": "v2"})
    assert edited.status_code == 200
    assert (edited.json()["body"], edited.json()["updated_at"]) == ("v2", "2026-01-01T12:00:10.000Z")
    assert edited.json()["created_at"] == NOW_ISO
    assert client.delete(f"/projects/101/merge_requests/2/notes/{note['id']}").status_code == 204
    assert client.get("/projects/101/merge_requests/2/discussions").json() == []
    assert client.delete(f"/projects/101/merge_requests/2/notes/{note['id']}").json() == {"message": "404 Note Not Found"}


def test_deleting_one_note_of_a_thread_keeps_the_thread(client: httpx.Client) -> None:
    assert client.delete("/projects/101/issues/1/notes/102").status_code == 204
    thread = client.get("/projects/101/issues/1/discussions").json()[1]
    assert [n["id"] for n in thread["notes"]] == [104]


def test_system_notes_cannot_be_edited(client: httpx.Client) -> None:
    assert client.put("/projects/101/issues/1/notes/103", json={"body": "x"}).status_code == 403


def test_mutations_do_not_touch_the_callers_dataset(make_sandbox: Any, client_for: Any,
                                                    tiny_dataset: Dataset) -> None:
    client = client_for(make_sandbox(tiny_dataset))
    client.post("/projects/101/issues/1/notes", json={"body": "x"})
    client.put("/projects/101/issues/1", json={"title": "changed"})
    client.delete("/projects/101/issues/1/notes/102")
    assert tiny_dataset.issues[101][0]["title"] == "Issue 1"
    assert [len(t["notes"]) for t in tiny_dataset.discussions[101][0]["discussions"]] == [1, 2, 1]


# -- ThrottledTouch ----------------------------------------------------------------------------


def parent_updated(client: httpx.Client, iid: int, kind: str = "issues") -> str:
    return client.get(f"/projects/101/{kind}/{iid}").json()["updated_at"]


@pytest.mark.parametrize("kind", ["issues", "merge_requests"])
def test_throttled_touch_on_note_create(client: httpx.Client, sandbox: SandboxGitLab, kind: str) -> None:
    body = {"title": "t", "source_branch": "s", "target_branch": "main"}
    iid = client.post(f"/projects/101/{kind}", json=body).json()["iid"]
    sandbox.clock.advance(30)
    client.post(f"/projects/101/{kind}/{iid}/notes", json={"body": "within a minute"})
    assert parent_updated(client, iid, kind) == NOW_ISO
    sandbox.clock.advance(30)  # exactly 60 s after the last update: still not "> 1.minute"
    client.post(f"/projects/101/{kind}/{iid}/discussions", json={"body": "at 60 s"})
    assert parent_updated(client, iid, kind) == NOW_ISO
    sandbox.clock.advance(1)
    client.post(f"/projects/101/{kind}/{iid}/notes", json={"body": "after 61 s"})
    assert parent_updated(client, iid, kind) == "2026-01-01T12:01:01.000Z"
    assert client.get(f"/projects/101/{kind}/{iid}").json()["user_notes_count"] == 3


def test_throttled_touch_on_note_edit_and_reply(client: httpx.Client, sandbox: SandboxGitLab) -> None:
    thread = client.post("/projects/101/issues/3/discussions", json={"body": "a"}).json()
    assert parent_updated(client, 3) == NOW_ISO  # the issue was last updated in 2024
    sandbox.clock.advance(61)
    client.put(f"/projects/101/issues/3/notes/{thread['notes'][0]['id']}", json={"body": "edited"})
    assert parent_updated(client, 3) == "2026-01-01T12:01:01.000Z"
    sandbox.clock.advance(20)
    client.post(f"/projects/101/issues/3/discussions/{thread['id']}/notes", json={"body": "reply"})
    assert parent_updated(client, 3) == "2026-01-01T12:01:01.000Z"
    sandbox.clock.advance(61)
    client.post(f"/projects/101/issues/3/discussions/{thread['id']}/notes", json={"body": "reply 2"})
    assert parent_updated(client, 3) == "2026-01-01T12:02:22.000Z"


def test_note_delete_does_not_touch_but_lowers_count(client: httpx.Client, sandbox: SandboxGitLab) -> None:
    before = client.get("/projects/101/issues/1").json()
    assert (before["updated_at"], before["user_notes_count"]) == ("2024-01-10T00:00:00.000Z", 3)
    sandbox.clock.advance(3600)
    assert client.delete("/projects/101/issues/1/notes/101").status_code == 204
    after = client.get("/projects/101/issues/1").json()
    assert (after["updated_at"], after["user_notes_count"]) == ("2024-01-10T00:00:00.000Z", 2)
    # Not in an incremental window either: deletions are invisible to updated_after.
    listed = client.get("/projects/101/issues", params={"updated_after": "2025-01-01T00:00:00Z"}).json()
    assert listed == []


def test_touched_parent_shows_up_in_updated_after(client: httpx.Client) -> None:
    client.post("/projects/101/issues/3/notes", json={"body": "bump"})
    listed = client.get("/projects/101/issues", params={"updated_after": NOW_ISO}).json()
    assert [(i["iid"], i["user_notes_count"]) for i in listed] == [(3, 1)]


def test_state_methods_are_callable_directly(sandbox: SandboxGitLab, client: httpx.Client) -> None:
    issue = sandbox.state.create_issue(101, "direct", labels="a")
    sandbox.state.add_note(101, "issues", issue["iid"], "from python")
    listed = client.get(f"/projects/101/issues/{issue['iid']}").json()
    assert (listed["title"], listed["user_notes_count"]) == ("direct", 1)
    mr = sandbox.state.create_merge_request("group/project-one", "mr", "s", "main")
    sandbox.state.update_merge_request(101, mr["iid"], state_event="merge")
    assert client.get(f"/projects/101/merge_requests/{mr['iid']}").json()["state"] == "merged"
