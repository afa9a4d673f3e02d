"""The issue list's `confidential` filter, and a confidentiality flip moving `updated_at`, as GitLab
does (what a shared server's confidential check relies on: docs/gitlab-api-confidential.md)."""

import httpx

from gitlab_knowledge_sandbox import SandboxGitLab


def iids(response: httpx.Response) -> set[int]:
    assert response.status_code == 200, response.text
    return {i["iid"] for i in response.json()}


def test_confidential_filters_the_issue_list(client: httpx.Client) -> None:
    every = iids(client.get("/projects/101/issues"))
    secret = iids(client.get("/projects/101/issues", params={"confidential": "true"}))
    public = iids(client.get("/projects/101/issues", params={"confidential": "false"}))
    assert secret and public and secret | public == every and not secret & public
    assert client.get("/projects/101/issues", params={"confidential": "maybe"}).status_code == 400


def test_a_flip_is_listed_as_updated_since(client: httpx.Client, sandbox: SandboxGitLab) -> None:
    [public] = sorted(iids(client.get("/projects/101/issues", params={"confidential": "false"})))[:1]
    before = client.get(f"/projects/101/issues/{public}").json()["updated_at"]
    sandbox.clock.advance(60)
    flipped = client.put(f"/projects/101/issues/{public}", json={"confidential": True}).json()
    assert flipped["confidential"] is True and flipped["updated_at"] > before
    since = {"confidential": "true", "updated_after": flipped["updated_at"]}
    assert iids(client.get("/projects/101/issues", params=since)) == {public}
