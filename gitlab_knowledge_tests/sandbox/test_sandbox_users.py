"""Users of the sandbox GitLab, each with a token of their own, answered as GitLab answers them:
project visibility, memberships with access levels, external users, admins, confidential issues
and internal notes; and the changes tests make (revoke, membership, visibility, confidential)."""

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gitlab_knowledge_sandbox import DEFAULT_TOKEN, SAMPLE_DATASET, SandboxGitLab, load_dataset, write_dataset
from gitlab_knowledge_sandbox.users import DEVELOPER, GUEST, MAINTAINER, PLANNER, REPORTER, set_visibility

PLATFORM, WEB = 101, 102
CONFIDENTIAL = {215, 226, 243}  # all by sam.okafor (44); 226 is assigned to johndoe (12)


@pytest.fixture
def sb() -> Iterator[SandboxGitLab]:
    with SandboxGitLab(dataset=SAMPLE_DATASET) as sandbox:
        users = sandbox.state.users
        users.add_user("rita", "tok-rita", user_id=901)
        users.set_member(PLATFORM, 901, REPORTER)
        users.add_user("sam.okafor", "tok-sam", user_id=44)  # the confidential issues' author, a guest
        users.set_member(PLATFORM, 44, GUEST)
        users.add_user("paula", "tok-paula", user_id=902)
        users.set_member(PLATFORM, 902, PLANNER)
        users.set_member(WEB, 902, MAINTAINER)
        users.add_user("gus", "tok-gus", user_id=903)
        users.set_member(PLATFORM, 903, GUEST)
        users.add_user("xena", "tok-xena", user_id=904, external=True)
        users.add_user("ada", "tok-ada", user_id=905, admin=True)
        yield sandbox


def get(sb: SandboxGitLab, token: str, path: str, **params: object) -> httpx.Response:
    return httpx.get(f"{sb.api_url}{path}", params=params, headers={"Authorization": f"Bearer {token}"}, timeout=10)


def issue_iids(sb: SandboxGitLab, token: str, project: int = PLATFORM) -> set[int]:
    response = get(sb, token, f"/projects/{project}/issues", per_page=100)
    assert response.status_code == 200, response.text
    return {i["iid"] for i in response.json()}


def internal_notes(sb: SandboxGitLab, token: str) -> int:
    seen = 0
    for iid in issue_iids(sb, token):
        threads = get(sb, token, f"/projects/{PLATFORM}/issues/{iid}/discussions", per_page=100).json()
        seen += sum(1 for t in threads for n in t["notes"] if n.get("internal") or n.get("confidential"))
    listed = get(sb, token, f"/projects/{PLATFORM}/merge_requests", per_page=100)
    for mr in listed.json() if listed.status_code == 200 else ():  # a private project's Guest: 403
        threads = get(sb, token, f"/projects/{PLATFORM}/merge_requests/{mr['iid']}/discussions", per_page=100).json()
        seen += sum(1 for t in threads for n in t["notes"] if n.get("internal") or n.get("confidential"))
    return seen


def test_each_token_is_its_user(sb: SandboxGitLab) -> None:
    assert get(sb, "tok-rita", "/user").json()["username"] == "rita"
    assert get(sb, "tok-ada", "/user").json()["is_admin"] is True
    assert get(sb, "tok-xena", "/user").json()["external"] is True
    assert get(sb, DEFAULT_TOKEN, "/user").json()["username"] == "janedoe"  # the sync's token, unchanged
    assert get(sb, "tok-nobody", "/user").status_code == 401


def test_private_projects_are_404_to_non_members(sb: SandboxGitLab) -> None:
    assert get(sb, "tok-rita", f"/projects/{PLATFORM}").status_code == 200
    for path in (f"/projects/{WEB}", f"/projects/{WEB}/issues", f"/projects/{WEB}/merge_requests/1",
                 "/projects/acme%2Fweb-app", f"/projects/{WEB}/members/all"):
        response = get(sb, "tok-rita", path)
        assert response.status_code == 404 and response.json() == {"message": "404 Project Not Found"}, path
    assert [p["id"] for p in get(sb, "tok-rita", "/projects").json()] == [PLATFORM]
    assert {p["id"] for p in get(sb, "tok-ada", "/projects").json()} == {PLATFORM, WEB}
    assert get(sb, "tok-ada", f"/projects/{WEB}").status_code == 200


def test_internal_projects_are_read_by_every_non_external_user(sb: SandboxGitLab) -> None:
    set_visibility(sb.state, WEB, "internal")
    web = get(sb, "tok-rita", f"/projects/{WEB}")
    assert web.status_code == 200 and web.json()["permissions"]["project_access"] is None
    assert issue_iids(sb, "tok-rita", WEB)
    assert get(sb, "tok-xena", f"/projects/{WEB}").status_code == 404
    assert get(sb, "tok-xena", "/projects").json() == []
    set_visibility(sb.state, WEB, "public")
    assert get(sb, "tok-xena", f"/projects/{WEB}").status_code == 200


def test_membership_lists_by_minimum_access_level(sb: SandboxGitLab) -> None:
    set_visibility(sb.state, WEB, "public")

    def member_of(token: str, level: int | None = None) -> list[int]:
        params: dict[str, object] = {"membership": "true", "per_page": 1}
        if level is not None:
            params["min_access_level"] = level
        out, page = [], 1
        while page:
            response = get(sb, token, "/projects", page=page, **params)
            out += [p["id"] for p in response.json()]
            page = int(response.headers.get("x-next-page") or 0)
        return sorted(out)

    assert member_of("tok-paula") == [PLATFORM, WEB]  # two pages of one
    assert member_of("tok-paula", PLANNER) == [PLATFORM, WEB]
    assert member_of("tok-paula", REPORTER) == [WEB]
    assert member_of("tok-rita") == [PLATFORM]  # the public web-app is readable, not a membership
    assert member_of("tok-rita", MAINTAINER) == []
    assert get(sb, "tok-rita", "/projects", min_access_level=7).status_code == 400
    # the sandbox's own token: the dataset user's saved permissions (Developer through the group)
    assert member_of(DEFAULT_TOKEN, DEVELOPER) == [PLATFORM, WEB] and member_of(DEFAULT_TOKEN, MAINTAINER) == []
    permissions = get(sb, "tok-paula", f"/projects/{WEB}").json()["permissions"]
    assert permissions["project_access"]["access_level"] == MAINTAINER


def test_members_endpoints(sb: SandboxGitLab) -> None:
    member = get(sb, "tok-gus", f"/projects/{PLATFORM}/members/all/901")
    assert member.status_code == 200 and member.json()["access_level"] == REPORTER
    assert member.json()["username"] == "rita"
    assert get(sb, "tok-gus", f"/projects/{PLATFORM}/members/all/904").status_code == 404
    listed = get(sb, "tok-gus", f"/projects/{PLATFORM}/members/all", per_page=100).json()
    assert {m["id"]: m["access_level"] for m in listed} == {44: GUEST, 901: REPORTER, 902: PLANNER, 903: GUEST}


def test_confidential_issues_to_author_assignees_planners_and_admins(sb: SandboxGitLab) -> None:
    every = issue_iids(sb, DEFAULT_TOKEN)
    assert every >= CONFIDENTIAL
    assert issue_iids(sb, "tok-gus") == every - CONFIDENTIAL
    assert issue_iids(sb, "tok-sam") == every  # the author of all three
    assert issue_iids(sb, "tok-paula") == every  # Planner
    assert issue_iids(sb, "tok-rita") == every
    assert issue_iids(sb, "tok-ada") == every
    refused = get(sb, "tok-gus", f"/projects/{PLATFORM}/issues/226/discussions")
    assert refused.status_code == 404 and refused.json() == {"message": "404 Issue Not Found"}
    sb.state.users.add_user("johndoe", "tok-john", user_id=12)
    sb.state.users.set_member(PLATFORM, 12, GUEST)
    assert issue_iids(sb, "tok-john") == every - {215, 243}  # an assignee of 226


def test_internal_notes_from_planner_up(sb: SandboxGitLab) -> None:
    everything = internal_notes(sb, DEFAULT_TOKEN)
    assert everything > 0
    assert internal_notes(sb, "tok-paula") == everything
    assert internal_notes(sb, "tok-sam") == 0  # the author, a guest: the issues, not their internal notes
    for row in get(sb, "tok-sam", f"/projects/{PLATFORM}/issues/215/notes", per_page=100).json():
        assert not row.get("internal")


def system_notes(sb: SandboxGitLab, token: str, iid: int, what: str = "notes") -> list[str]:
    rows = get(sb, token, f"/projects/{PLATFORM}/issues/{iid}/{what}", per_page=100).json()
    notes = [n for t in rows for n in t["notes"]] if what == "discussions" else rows
    return [n["body"] for n in notes if n.get("system")]


def test_a_private_projects_merge_requests_from_planner_up(sb: SandboxGitLab) -> None:
    """A Guest of a private project gets 403 for its MR list and each MR's endpoints, 404 for an
    MR's notes and threads, and no system note naming one of its MRs; Planner and up, an admin,
    and a Guest once the project is internal or public read them all."""
    iids = [m["iid"] for m in get(sb, DEFAULT_TOKEN, f"/projects/{PLATFORM}/merge_requests", per_page=100).json()]
    assert iids
    mr = f"/projects/{PLATFORM}/merge_requests/{iids[0]}"
    refused = {"": 403, "/diffs": 403, "/changes": 403, "/notes": 404, "/discussions": 404}
    for suffix, status in refused.items():
        assert get(sb, "tok-gus", mr + suffix).status_code == status, suffix
        assert get(sb, "tok-paula", mr + suffix).status_code == 200, suffix
    assert get(sb, "tok-gus", f"/projects/{PLATFORM}/merge_requests").status_code == 403
    for token in ("tok-paula", "tok-rita", "tok-ada"):
        assert [m["iid"] for m in get(sb, token, f"/projects/{PLATFORM}/merge_requests", per_page=100).json()] == iids
    # An issue's "mentioned in merge request !N" / "closed via merge request !N" system notes.
    issue = next(i for i in sorted(issue_iids(sb, DEFAULT_TOKEN) - CONFIDENTIAL)
                 if any("merge request !" in b for b in system_notes(sb, DEFAULT_TOKEN, i)))
    for what in ("notes", "discussions"):
        everything = system_notes(sb, DEFAULT_TOKEN, issue, what)
        assert system_notes(sb, "tok-rita", issue, what) == everything
        assert system_notes(sb, "tok-gus", issue, what) == [b for b in everything if "merge request !" not in b]
    set_visibility(sb.state, PLATFORM, "internal")
    assert get(sb, "tok-gus", mr).status_code == 200
    assert system_notes(sb, "tok-gus", issue) == system_notes(sb, DEFAULT_TOKEN, issue)


def test_changes_take_effect_on_the_next_request(sb: SandboxGitLab) -> None:
    every = issue_iids(sb, DEFAULT_TOKEN)
    open_one = min(every - CONFIDENTIAL)
    sb.state.update_issue(PLATFORM, open_one, confidential=True)
    assert open_one not in issue_iids(sb, "tok-gus")
    assert get(sb, "tok-gus", f"/projects/{PLATFORM}/issues/{open_one}").status_code == 404
    sb.state.users.set_member(PLATFORM, 903, None)
    assert get(sb, "tok-gus", f"/projects/{PLATFORM}").status_code == 404
    sb.state.users.revoke("tok-gus")
    assert get(sb, "tok-gus", "/user").status_code == 401


def test_users_and_memberships_round_trip_through_a_dataset(sb: SandboxGitLab, tmp_path: Path) -> None:
    written = load_dataset(write_dataset(sb.state.snapshot(), tmp_path / "ds"))
    assert {u["username"]: u["tokens"] for u in written.users}["rita"] == ["tok-rita"]
    assert {"project_id": PLATFORM, "user_id": 901, "access_level": REPORTER} in written.memberships
    with SandboxGitLab(dataset=written) as again:
        assert get(again, "tok-rita", "/user").json()["username"] == "rita"
        assert get(again, "tok-rita", f"/projects/{WEB}").status_code == 404
    assert load_dataset(SAMPLE_DATASET).users == []  # a dataset without users loads as before


def test_the_control_route_changes_users_from_another_process(sb: SandboxGitLab) -> None:
    def control(body: dict[str, object]) -> httpx.Response:
        return httpx.post(f"{sb.url}/-/sandbox/users", json=body, timeout=10)

    assert control({"add": {"username": "olga", "token": "tok-olga", "id": 950}}).status_code == 200
    assert control({"member": {"project_id": WEB, "user_id": 950, "access_level": REPORTER}}).status_code == 200
    assert get(sb, "tok-olga", f"/projects/{WEB}").status_code == 200
    assert control({"member": {"project_id": WEB, "user_id": 950, "access_level": None}}).status_code == 200
    assert get(sb, "tok-olga", f"/projects/{WEB}").status_code == 404
    assert control({"visibility": {"project_id": WEB, "visibility": "internal"}}).status_code == 200
    assert get(sb, "tok-olga", f"/projects/{WEB}").status_code == 200
    assert control({"revoke": "tok-olga"}).status_code == 200
    assert get(sb, "tok-olga", "/user").status_code == 401
    for bad in ({}, {"member": {"project_id": WEB, "user_id": 950, "access_level": 12}},
                {"visibility": {"project_id": WEB, "visibility": "secret"}}, {"add": {}}):
        assert control(bad).status_code == 400, bad
