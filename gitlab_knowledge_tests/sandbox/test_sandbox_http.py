"""Read endpoints of the sandbox GitLab over real sockets: auth, lookups, lists, pagination."""

import re
from typing import Any

import httpx
import pytest

from gitlab_knowledge_sandbox import DEFAULT_TOKEN, Dataset, SandboxGitLab


def iids(response: httpx.Response) -> list[int]:
    return [item["iid"] for item in response.json()]


def links(response: httpx.Response) -> dict[str, str]:
    return {rel: url for url, rel in re.findall(r'<([^>]+)>; rel="(\w+)"', response.headers.get("link", ""))}


# -- auth ------------------------------------------------------------------------------------


def test_private_token_header_authenticates(client: httpx.Client) -> None:
    response = client.get("/user")
    assert response.status_code == 200
    assert response.json()["username"] == "root"


def test_bearer_token_authenticates(sandbox: SandboxGitLab) -> None:
    response = httpx.get(sandbox.url + "/api/v4/user", headers={"Authorization": f"Bearer {DEFAULT_TOKEN}"})
    assert response.status_code == 200


@pytest.mark.parametrize("headers", [{}, {"PRIVATE-TOKEN": "wrong"}, {"Authorization": "Bearer wrong"},
                                     {"Authorization": f"Basic {DEFAULT_TOKEN}"}])
def test_missing_or_wrong_token_is_401(sandbox: SandboxGitLab, headers: dict[str, str]) -> None:
    response = httpx.get(sandbox.url + "/api/v4/projects", headers=headers)
    assert response.status_code == 401
    assert response.json() == {"message": "401 Unauthorized"}
    assert response.headers["content-type"] == "application/json"


def test_custom_token(make_sandbox: Any, client_for: Any) -> None:
    sb = make_sandbox(token="glpat-other")
    assert client_for(sb, "glpat-other").get("/user").status_code == 200
    assert client_for(sb).get("/user").status_code == 401


# -- projects --------------------------------------------------------------------------------


def test_projects_list_is_paginated(client: httpx.Client) -> None:
    response = client.get("/projects", params={"per_page": 1})
    assert response.status_code == 200
    assert len(response.json()) == 1
    assert response.headers["x-total"] == "2"
    assert response.headers["x-next-page"] == "2"


@pytest.mark.parametrize("ref", ["101", "group%2Fproject-one", "group%2fproject-one", "GROUP%2FProject-One"])
def test_project_by_id_or_encoded_path(sandbox: SandboxGitLab, ref: str) -> None:
    # Raw URL so httpx does not re-encode the %2F.
    response = httpx.get(f"{sandbox.url}/api/v4/projects/{ref}", headers={"PRIVATE-TOKEN": DEFAULT_TOKEN})
    assert response.status_code == 200
    assert response.json()["id"] == 101


def test_unknown_project_is_404(client: httpx.Client) -> None:
    for path in ("/projects/999", "/projects/nope%2Fnothing", "/projects/999/issues"):
        response = client.get(path)
        assert response.status_code == 404
        assert response.json() == {"message": "404 Project Not Found"}


def test_lists_work_through_encoded_path(sandbox: SandboxGitLab) -> None:
    response = httpx.get(f"{sandbox.url}/api/v4/projects/group%2Fproject-one/issues",
                         headers={"PRIVATE-TOKEN": DEFAULT_TOKEN})
    assert len(response.json()) == 5


# -- issue / MR lists ------------------------------------------------------------------------


def test_default_order_is_created_at_desc(client: httpx.Client) -> None:
    assert iids(client.get("/projects/101/issues")) == [5, 4, 3, 2, 1]


def test_updated_at_asc_breaks_ties_by_id_descending(client: httpx.Client) -> None:
    response = client.get("/projects/101/issues", params={"order_by": "updated_at", "sort": "asc"})
    # iids 1, 2 and 4 share updated_at; ties come id-descending even in ascending order.
    assert iids(response) == [3, 4, 2, 1, 5]


def test_updated_at_desc_breaks_ties_by_id_descending(client: httpx.Client) -> None:
    response = client.get("/projects/101/issues", params={"order_by": "updated_at"})
    assert iids(response) == [5, 4, 2, 1, 3]


def test_updated_after_is_inclusive(client: httpx.Client) -> None:
    response = client.get("/projects/101/issues", params={"updated_after": "2024-01-10T00:00:00Z"})
    assert sorted(iids(response)) == [1, 2, 4, 5]
    # Offsets and other ISO spellings compare by instant, not by string.
    response = client.get("/projects/101/issues", params={"updated_after": "2024-01-20T09:00:00+01:00"})
    assert iids(response) == [5]


def test_updated_before_and_created_after(client: httpx.Client) -> None:
    assert sorted(iids(client.get("/projects/101/issues", params={"updated_before": "2024-01-05T00:00:00Z"}))) == [3]
    assert sorted(iids(client.get("/projects/101/issues", params={"created_after": "2024-01-04T00:00:00.000Z"}))) == [4, 5]


def test_state_filter(client: httpx.Client) -> None:
    assert iids(client.get("/projects/101/issues", params={"state": "closed"})) == [4]
    assert iids(client.get("/projects/101/issues", params={"state": "opened"})) == [5, 3, 2, 1]
    assert iids(client.get("/projects/101/merge_requests", params={"state": "merged"})) == [1]
    assert iids(client.get("/projects/101/merge_requests", params={"state": "opened"})) == [2]
    assert client.get("/projects/101/issues", params={"state": "bogus"}).status_code == 400


def test_bad_timestamp_is_400(client: httpx.Client) -> None:
    response = client.get("/projects/101/issues", params={"updated_after": "yesterday"})
    assert response.status_code == 400
    assert response.json() == {"error": "updated_after is invalid"}


def test_user_notes_count_is_recomputed(client: httpx.Client) -> None:
    counts = {i["iid"]: i["user_notes_count"] for i in client.get("/projects/101/issues").json()}
    assert counts == {1: 3, 2: 25, 3: 0, 4: 0, 5: 0}
    assert client.get("/projects/101/merge_requests/1").json()["user_notes_count"] == 1


def test_single_issue_and_mr(client: httpx.Client) -> None:
    assert client.get("/projects/101/issues/3").json()["id"] == 13
    assert client.get("/projects/101/merge_requests/2").json()["id"] == 22


def test_missing_issue_and_mr_bodies(client: httpx.Client) -> None:
    response = client.get("/projects/101/issues/77")
    assert (response.status_code, response.json()) == (404, {"message": "404 Issue Not Found"})
    response = client.get("/projects/101/merge_requests/77")
    assert (response.status_code, response.json()) == (404, {"message": "404 Merge Request Not Found"})


def test_unknown_route_and_wrong_method(client: httpx.Client, sandbox: SandboxGitLab) -> None:
    response = client.get("/nothing/here")
    assert (response.status_code, response.json()) == (404, {"error": "404 Not Found"})
    response = httpx.get(sandbox.url + "/not-api", headers={"PRIVATE-TOKEN": DEFAULT_TOKEN})
    assert (response.status_code, response.json()) == (404, {"error": "404 Not Found"})
    assert client.delete("/projects/101/issues").status_code == 405
    assert client.post("/user").status_code == 405
    # Like GitLab's catch-all route, an unknown path is 404 even without a token.
    response = httpx.get(sandbox.url + "/api/v4/nothing")
    assert (response.status_code, response.json()) == (404, {"error": "404 Not Found"})


# -- pagination ------------------------------------------------------------------------------


def test_pagination_headers_and_links(client: httpx.Client, sandbox: SandboxGitLab) -> None:
    response = client.get("/projects/101/issues", params={"per_page": 2, "page": 2, "order_by": "updated_at"})
    h = response.headers
    assert (h["x-page"], h["x-per-page"], h["x-next-page"], h["x-prev-page"]) == ("2", "2", "3", "1")
    assert (h["x-total"], h["x-total-pages"]) == ("5", "3")
    assert iids(response) == [2, 1]
    base = f"{sandbox.url}/api/v4/projects/101/issues?order_by=updated_at"
    assert links(response) == {
        "prev": f"{base}&page=1&per_page=2",
        "next": f"{base}&page=3&per_page=2",
        "first": f"{base}&page=1&per_page=2",
        "last": f"{base}&page=3&per_page=2",
    }
    assert h["content-type"] == "application/json"


def test_following_next_links_walks_everything_once(client: httpx.Client) -> None:
    seen: list[int] = []
    url: str | None = "/projects/101/issues?per_page=2&order_by=updated_at&sort=asc"
    while url:
        response = client.get(url)
        seen += iids(response)
        url = links(response).get("next")
    assert seen == [3, 4, 2, 1, 5]


def test_first_and_last_page_edges(client: httpx.Client) -> None:
    first = client.get("/projects/101/issues", params={"per_page": 2})
    assert first.headers["x-prev-page"] == ""
    assert "prev" not in links(first)
    last = client.get("/projects/101/issues", params={"per_page": 2, "page": 3})
    assert last.headers["x-next-page"] == ""
    assert "next" not in links(last)
    assert len(last.json()) == 1


def test_page_past_the_end_is_empty(client: httpx.Client) -> None:
    response = client.get("/projects/101/issues", params={"page": 9})
    assert response.status_code == 200
    assert response.json() == []
    assert response.headers["x-next-page"] == ""


def test_per_page_is_clamped_to_100(client: httpx.Client) -> None:
    response = client.get("/projects/101/issues", params={"per_page": 500})
    assert response.headers["x-per-page"] == "100"
    assert client.get("/projects/101/issues").headers["x-per-page"] == "20"


def test_link_uses_the_host_header(client: httpx.Client) -> None:
    response = client.get("/projects/101/issues", params={"per_page": 2}, headers={"Host": "gitlab.test:8443"})
    assert links(response)["next"].startswith("http://gitlab.test:8443/api/v4/projects/101/issues?")


def _big_dataset(count: int) -> Dataset:
    items = [
        {"id": 100_000 + n, "iid": n, "project_id": 1, "title": f"i{n}", "state": "opened",
         "created_at": "2025-01-01T00:00:00.000Z", "updated_at": f"2025-01-01T00:{n % 60:02d}:00.000Z"}
        for n in range(1, count + 1)
    ]
    return Dataset(user={"id": 1, "username": "root"}, projects=[{"id": 1, "path_with_namespace": "g/p"}],
                   issues={1: items})


def test_totals_are_omitted_past_10000(make_sandbox: Any, client_for: Any) -> None:
    client = client_for(make_sandbox(_big_dataset(10_001)))
    response = client.get("/projects/1/issues", params={"per_page": 100})
    assert "x-total" not in response.headers
    assert "x-total-pages" not in response.headers
    assert "last" not in links(response)
    assert response.headers["x-next-page"] == "2"
    last = client.get("/projects/1/issues", params={"per_page": 100, "page": 101})
    assert len(last.json()) == 1
    assert last.headers["x-next-page"] == ""
    # Exactly 10,000 (here: after a filter) still gets the totals.
    capped = client.get("/projects/1/issues", params={"per_page": 100, "iids[]": list(range(1, 10_001))[:50]})
    assert capped.headers["x-total"] == "50"


def test_exactly_10000_keeps_totals(make_sandbox: Any, client_for: Any) -> None:
    client = client_for(make_sandbox(_big_dataset(10_000)))
    response = client.get("/projects/1/issues", params={"per_page": 100})
    assert response.headers["x-total"] == "10000"
    assert response.headers["x-total-pages"] == "100"
    assert "last" in links(response)


# -- discussions -----------------------------------------------------------------------------


def test_issue_discussions_in_creation_order_with_system_notes(client: httpx.Client) -> None:
    threads = client.get("/projects/101/issues/1/discussions").json()
    assert [t["id"][0] for t in threads] == ["a", "b", "c"]
    assert [len(t["notes"]) for t in threads] == [1, 2, 1]
    system = threads[2]
    assert system["individual_note"] is True
    assert system["notes"][0]["system"] is True


def test_discussions_are_paginated(client: httpx.Client) -> None:
    first = client.get("/projects/101/issues/2/discussions")
    assert len(first.json()) == 20
    assert (first.headers["x-total"], first.headers["x-next-page"]) == ("25", "2")
    second = client.get(links(first)["next"])
    assert len(second.json()) == 5
    ids = [t["notes"][0]["id"] for t in first.json() + second.json()]
    assert ids == list(range(200, 225))


def test_mr_discussions_keep_diff_positions(client: httpx.Client) -> None:
    threads = client.get("/projects/101/merge_requests/1/discussions").json()
    assert threads[0]["notes"][0]["type"] == "DiffNote"
    assert threads[0]["notes"][0]["position"]["new_line"] == 3


def test_discussions_of_missing_parent_are_404(client: httpx.Client) -> None:
    response = client.get("/projects/101/issues/42/discussions")
    assert (response.status_code, response.json()) == (404, {"message": "404 Issue Not Found"})
    response = client.get("/projects/101/merge_requests/42/discussions")
    assert (response.status_code, response.json()) == (404, {"message": "404 Merge Request Not Found"})


def test_notes_list_includes_system_notes(client: httpx.Client) -> None:
    notes = client.get("/projects/101/issues/1/notes", params={"sort": "asc"}).json()
    assert [n["id"] for n in notes] == [101, 102, 103, 104]


# -- headers -----------------------------------------------------------------------------------


def test_date_header_follows_the_sandbox_clock(client: httpx.Client, sandbox: SandboxGitLab) -> None:
    assert client.get("/user").headers["date"] == "Thu, 01 Jan 2026 12:00:00 GMT"
    sandbox.clock.advance(3600)
    assert client.get("/user").headers["date"] == "Thu, 01 Jan 2026 13:00:00 GMT"


def test_no_ratelimit_headers_without_a_limit(client: httpx.Client) -> None:
    assert not [h for h in client.get("/user").headers if h.lower().startswith("ratelimit")]
