"""Project wikis of the sandbox GitLab over real sockets (wikis.py): the listing with and without
content in one unpaginated array, a page by URL-encoded nested slug, a turned-off wiki's 404, the
mutations tests make (add, edit, rename by a new title, delete), and a dataset round trip."""

from typing import Any

from gitlab_knowledge_sandbox import load_dataset
from gitlab_knowledge_sandbox.dataset import write_dataset
from gitlab_knowledge_tests.sandbox.conftest import build_tiny_dataset

PAGES = [{"slug": "home", "title": "home", "format": "markdown", "content": "# Home\nStart here."},
         {"slug": "runbooks/deploy", "title": "deploy", "format": "asciidoc", "content": "= Deploy\nSteps."}]


def dataset_with_wiki() -> Any:
    data = build_tiny_dataset()
    data.wiki_pages = {101: [dict(p) for p in PAGES]}
    data.projects[1] = {**data.projects[1], "wiki_enabled": False}
    return data


def test_the_listing_and_a_nested_page(make_sandbox, client_for) -> None:
    client = client_for(make_sandbox(dataset_with_wiki()))
    listed = client.get("/projects/101/wikis")
    assert listed.status_code == 200 and "x-next-page" not in listed.headers and "link" not in listed.headers
    assert [p["slug"] for p in listed.json()] == ["home", "runbooks/deploy"]
    assert all("content" not in p for p in listed.json())
    full = client.get("/projects/101/wikis", params={"with_content": "1"}).json()
    assert full[1] == {**PAGES[1], "encoding": "UTF-8"}
    page = client.get("/projects/101/wikis/runbooks%2Fdeploy")
    assert page.status_code == 200 and page.json()["format"] == "asciidoc"
    assert client.get("/projects/101/wikis/nope").status_code == 404
    assert client.get("/projects/102/wikis").status_code == 404  # turned off


def test_mutations_add_edit_rename_delete(make_sandbox, client_for) -> None:
    sb = make_sandbox(dataset_with_wiki())
    client = client_for(sb)
    sb.state.add_wiki_page(101, "runbooks/Redis eviction", "We use allkeys-lru.")
    assert sb.state.wiki_page(101, "runbooks/Redis-eviction")["title"] == "Redis eviction"
    edited = client.put("/projects/101/wikis/runbooks%2FRedis-eviction", json={"content": "volatile-lru"})
    assert edited.status_code == 200 and edited.json()["content"] == "volatile-lru"
    renamed = client.put("/projects/101/wikis/runbooks%2FRedis-eviction", json={"title": "runbooks/redis-memory"})
    assert renamed.json()["slug"] == "runbooks/redis-memory"
    assert client.get("/projects/101/wikis/runbooks%2FRedis-eviction").status_code == 404
    assert client.delete("/projects/101/wikis/runbooks%2Fredis-memory").status_code == 204
    assert [p["slug"] for p in client.get("/projects/101/wikis").json()] == ["home", "runbooks/deploy"]
    sb.state.set_wiki_enabled(101, False)
    assert client.get("/projects/101/wikis").status_code == 404


def test_a_wiki_survives_a_round_trip(tmp_path) -> None:
    written = write_dataset(dataset_with_wiki(), tmp_path / "ds")
    assert (written / "projects" / "101" / "wiki_pages.jsonl").exists()
    assert load_dataset(written).wiki_pages[101] == PAGES
