"""The sandbox's groups: `/groups/:id` (id or path, any case, old path 404), a group's projects with
`include_subgroups`, `archived`, order and pagination, subgroups and descendant groups, `namespace`
in project payloads, the control routes that add, move, archive and delete projects or rename a
group, and the generator's nested groups."""

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gitlab_knowledge_sandbox import DEFAULT_TOKEN, SandboxGitLab, generate_dataset, load_dataset


@pytest.fixture(scope="module")
def nested(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("nested")
    generate_dataset(out, projects=12, issues=12, mrs=0, seed=3, threads_per_parent_mean=0.5, group_depth=2,
                     group_fanout=2)
    return out


@pytest.fixture
def gl(nested: Path) -> Iterator[tuple[SandboxGitLab, httpx.Client]]:
    with SandboxGitLab(dataset=nested) as sb, \
            httpx.Client(base_url=sb.api_url, headers={"PRIVATE-TOKEN": DEFAULT_TOKEN}) as client:
        yield sb, client


def paths(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return sorted(p["path_with_namespace"] for p in response.json())


def test_the_generator_nests_groups_and_names_them_in_each_project(nested: Path) -> None:
    data = load_dataset(nested)
    full_paths = [g["full_path"] for g in data.groups]
    assert len(full_paths) == 1 + 2 + 4 and full_paths[0] == "acme"
    assert max(p.count("/") for p in full_paths) == 2
    by_id = {g["id"]: g for g in data.groups}
    for project in data.projects:
        ns = project["namespace"]
        assert ns["kind"] == "group" and by_id[ns["id"]]["full_path"] == ns["full_path"]
        assert project["path_with_namespace"] == f"{ns['full_path']}/{project['path']}"


def test_a_group_by_id_or_path_in_any_case(gl) -> None:
    sb, client = gl
    sub = client.get("/groups/acme/subgroups").json()[0]
    assert client.get(f"/groups/{sub['id']}").json()["full_path"] == sub["full_path"]
    encoded = sub["full_path"].upper().replace("/", "%2F")
    assert client.get(f"/groups/{encoded}").json()["id"] == sub["id"]
    assert client.get("/groups/nope").status_code == 404
    assert client.get("/groups/nope").json() == {"message": "404 Group Not Found"}


def test_a_groups_projects_with_and_without_subgroups(gl) -> None:
    sb, client = gl
    everything = paths(client.get("/groups/acme/projects", params={"include_subgroups": "true", "per_page": 100}))
    assert len(everything) == 12
    own = paths(client.get("/groups/acme/projects", params={"per_page": 100}))
    assert own and all(p.count("/") == 1 for p in own)
    descendants = client.get("/groups/acme/descendant_groups").json()
    assert len(descendants) == 6 and len(client.get("/groups/acme/subgroups").json()) == 2
    deepest = max(descendants, key=lambda g: g["full_path"].count("/"))
    assert all(p.startswith(deepest["full_path"] + "/")
               for p in paths(client.get(f"/groups/{deepest['id']}/projects", params={"include_subgroups": True})))


def test_a_groups_projects_page_like_every_list(gl) -> None:
    sb, client = gl
    seen, page = [], 1
    while True:
        response = client.get("/groups/acme/projects", params={"include_subgroups": "true", "per_page": 5,
                                                               "page": page, "order_by": "id", "sort": "asc"})
        seen += [p["id"] for p in response.json()]
        if not response.headers["x-next-page"]:
            break
        assert 'rel="next"' in response.headers["link"]
        page = int(response.headers["x-next-page"])
    assert seen == sorted(seen) and len(seen) == 12 and response.headers["x-total"] == "12"


def test_controls_add_move_archive_and_delete_projects(gl) -> None:
    sb, client = gl
    control = httpx.Client(base_url=sb.url + "/-/sandbox")
    added = control.post("/projects", json={"namespace": "acme/new-team", "path": "fresh"}).json()
    assert added["path_with_namespace"] == "acme/new-team/fresh" and added["namespace"]["full_path"] == "acme/new-team"
    assert client.get("/groups/acme%2Fnew-team").json()["parent_id"] == client.get("/groups/acme").json()["id"]
    assert "acme/new-team/fresh" in paths(client.get("/groups/acme/projects",
                                                     params={"include_subgroups": "true", "per_page": 100}))

    moved = control.post(f"/projects/{added['id']}/transfer", json={"namespace": "elsewhere"}).json()
    assert moved["path_with_namespace"] == "elsewhere/fresh" and moved["namespace"]["full_path"] == "elsewhere"
    assert client.get("/projects/acme%2Fnew-team%2Ffresh").json()["id"] == added["id"]  # the old path redirects
    assert "elsewhere/fresh" not in paths(client.get("/groups/acme/projects",
                                                     params={"include_subgroups": "true", "per_page": 100}))

    victim = client.get("/groups/acme/projects", params={"per_page": 1}).json()[0]
    assert control.post(f"/projects/{victim['id']}/archive", json={}).json()["archived"] is True
    active = paths(client.get("/groups/acme/projects",
                              params={"include_subgroups": "true", "archived": "false", "per_page": 100}))
    assert victim["path_with_namespace"] not in active
    assert paths(client.get("/groups/acme/projects", params={"include_subgroups": "true", "archived": "true"})) == \
        [victim["path_with_namespace"]]

    assert control.delete(f"/projects/{added['id']}").status_code == 200
    assert client.get(f"/projects/{added['id']}").status_code == 404
    assert client.get("/projects/elsewhere%2Ffresh").status_code == 404


def test_a_renamed_group_moves_its_projects_and_its_old_path_is_gone(gl) -> None:
    sb, client = gl
    control = httpx.Client(base_url=sb.url + "/-/sandbox")
    sub = client.get("/groups/acme/subgroups").json()[0]
    before = paths(client.get(f"/groups/{sub['id']}/projects", params={"include_subgroups": True}))
    renamed = control.post(f"/groups/{sub['id']}/rename", json={"path": "renamed-team"}).json()
    assert renamed["full_path"] == "acme/renamed-team" and renamed["id"] == sub["id"]
    assert client.get(f"/groups/{sub['full_path'].replace('/', '%2F')}").status_code == 404  # GitLab: no redirect
    after = paths(client.get("/groups/acme%2Frenamed-team/projects", params={"include_subgroups": True}))
    assert after == sorted(p.replace(sub["full_path"], "acme/renamed-team", 1) for p in before)
    old = before[0].replace("/", "%2F")
    assert client.get(f"/projects/{old}").json()["path_with_namespace"] == after[0]  # projects do redirect
    snapshot = sb.state.snapshot()
    assert "acme/renamed-team" in [g["full_path"] for g in snapshot.groups]


def test_a_dataset_without_groups_json_serves_its_projects_namespaces() -> None:
    from gitlab_knowledge_sandbox import SAMPLE_DATASET

    assert not (SAMPLE_DATASET / "groups.json").exists()
    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        assert sb.state.group("ACME")["id"] == 7  # the id the projects' namespace gives
        assert sorted(p["path_with_namespace"] for p in sb.state.group_projects("acme")) == \
            sorted(p.data["path_with_namespace"] for p in sb.state.projects)
