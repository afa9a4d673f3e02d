"""The sandbox's project releases: listing (order, pagination), one by tag, mutations, a 403
project, and the dataset file round trip."""

import re
from pathlib import Path

import httpx
import pytest

from gitlab_knowledge_sandbox import SandboxGitLab, load_dataset
from gitlab_knowledge_sandbox.dataset import DatasetError, write_dataset


def _tags(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [r["tag_name"] for r in response.json()]


def test_releases_are_listed_newest_released_first_and_paginated(sandbox: SandboxGitLab, client: httpx.Client) -> None:
    state = sandbox.state
    state.create_release(101, "v1.0", description="first", released_at="2024-01-01T00:00:00Z")
    state.create_release(101, "v2.0", description="second", released_at="2024-06-01T00:00:00Z")
    state.create_release(101, "group/v1.5", description="tag with a slash", released_at="2024-03-01T00:00:00Z")
    assert _tags(client.get("/projects/101/releases")) == ["v2.0", "group/v1.5", "v1.0"]
    assert _tags(client.get("/projects/101/releases", params={"sort": "asc"})) == ["v1.0", "group/v1.5", "v2.0"]
    first = client.get("/projects/101/releases", params={"per_page": 2, "order_by": "released_at", "sort": "asc"})
    assert _tags(first) == ["v1.0", "group/v1.5"]
    assert first.headers["x-total"] == "3" and first.headers["x-next-page"] == "2"
    assert _tags(client.get(first.links["next"]["url"])) == ["v2.0"]
    assert client.get("/projects/101/releases", params={"order_by": "title"}).status_code == 400
    one = client.get("/projects/101/releases/group%2Fv1.5")
    assert one.status_code == 200 and one.json()["description"] == "tag with a slash"
    assert one.json()["_links"]["self"] == "https://gitlab.example.com/group/project-one/-/releases/group%2Fv1.5"
    assert client.get("/projects/101/releases/v9").status_code == 404
    assert _tags(client.get("/projects/102/releases")) == []


def test_release_mutations_over_http_and_in_state(sandbox: SandboxGitLab, client: httpx.Client) -> None:
    created = client.post("/projects/101/releases", json={"tag_name": "v1.0", "name": "One", "description": "notes",
                                                          "milestones": ["M1"]})
    assert created.status_code == 201 and created.json()["milestones"][0]["title"] == "M1"
    assert client.post("/projects/101/releases", json={"tag_name": "v1.0"}).status_code == 400
    assert client.post("/projects/101/releases", json={"name": "no tag"}).status_code == 400
    edited = client.put("/projects/101/releases/v1.0", json={"description": "better notes"})
    assert edited.json()["description"] == "better notes" and edited.json()["name"] == "One"
    assert "updated_at" not in edited.json()  # GitLab keeps none on a release
    future = sandbox.state.update_release(101, "v1.0", released_at="2030-01-01T00:00:00Z")
    assert future["upcoming_release"] is True
    assert client.delete("/projects/101/releases/v1.0").status_code == 200
    assert _tags(client.get("/projects/101/releases")) == []
    stats = sandbox.stats()["by_route"]
    assert stats["releases"] == 1 and stats["mutation"] == 5


def test_a_forbidden_project_answers_403(sandbox: SandboxGitLab, client: httpx.Client) -> None:
    sandbox.state.releases_forbidden.add(102)
    assert client.get("/projects/102/releases").status_code == 403
    assert client.get("/projects/101/releases").status_code == 200


def test_releases_round_trip_through_the_dataset_files(tmp_path: Path, make_sandbox, tiny_dataset) -> None:
    without = load_dataset(write_dataset(tiny_dataset, tmp_path / "none")).counts()["documents"]
    sb = make_sandbox()
    sb.state.create_release(101, "v1.0", description="kept", released_at="2024-01-01T00:00:00Z")
    root = write_dataset(sb.state.snapshot(), tmp_path / "ds")
    assert (root / "projects" / "101" / "releases.jsonl").is_file()
    assert not (root / "projects" / "102" / "releases.jsonl").exists()  # none: no file
    again = load_dataset(root)
    assert [r["description"] for r in again.releases[101]] == ["kept"] and 102 not in again.releases
    assert again.counts()["documents"] == without + 1  # a release is a document


def test_a_release_without_a_tag_is_refused_at_load(tiny_dataset) -> None:
    data = tiny_dataset
    data.releases = {101: [{"name": "no tag", "created_at": "2024-01-01T00:00:00Z"}]}
    with pytest.raises(DatasetError, match="releases.jsonl line 1: a release needs a tag_name"):
        SandboxGitLab(dataset=data)


def test_the_bundled_sample_has_releases_naming_its_items() -> None:
    from gitlab_knowledge_sandbox import SAMPLE_DATASET

    data = load_dataset(SAMPLE_DATASET)
    assert sum(len(v) for v in data.releases.values()) >= 6
    mrs = {(pid, m["iid"]) for pid, items in data.merge_requests.items() for m in items}
    for pid, releases in data.releases.items():
        for release in releases:
            assert release["released_at"] and release["description"]
            named = [int(iid) for iid in re.findall(r"\(!([0-9]+)", release["description"])]
            assert named and all((pid, iid) in mrs for iid in named), release["tag_name"]
