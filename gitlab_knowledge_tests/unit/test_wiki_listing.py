"""The wiki listing (sync/wikis.py list_wiki) against an in-process MockTransport: GitLab's one
unpaginated array is complete; a paging GitLab is followed and complete only when its last page
says so; 403 and 404 are a turned-off wiki, not an error; a row without a slug is counted and
makes the listing no evidence of a deletion."""

from typing import Any

from gitlab_knowledge.sync.stats import ResourceStats
from gitlab_knowledge.sync.wikis import list_wiki, sync_wiki
from gitlab_knowledge_tests.unit.test_gitlab_client import Harness, Script, reply

PAGE = {"slug": "home", "title": "home", "format": "markdown", "content": "hi", "encoding": "UTF-8"}


def listing(*replies: Any) -> tuple[Any, Harness]:
    harness = Harness(Script(*replies))
    return harness.run(lambda gl: list_wiki(gl, 7)), harness


def test_one_unpaginated_array_is_the_whole_wiki():
    found, harness = listing(reply(200, [PAGE, {**PAGE, "slug": "dir/page"}]))
    assert found.complete and [p["slug"] for p in found.pages] == ["home", "dir/page"] and found.calls == 1
    assert harness.urls == ["https://gitlab.example.com/api/v4/projects/7/wikis?with_content=1"]


def test_a_paging_gitlab_is_followed_to_its_marked_last_page():
    found, harness = listing(reply(200, [PAGE], {"x-next-page": "2", "x-page": "1"}),
                             reply(200, [{**PAGE, "slug": "b"}], {"x-next-page": "", "x-page": "2"}))
    assert found.complete and len(found.pages) == 2 and found.calls == 2
    unmarked, _ = listing(reply(200, [PAGE], {"x-page": "1", "x-total": "5", "x-per-page": "1"}))
    assert not unmarked.complete  # a page GitLab does not mark as the last: no evidence of deletion


def test_403_and_404_are_a_wiki_turned_off():
    for status in (403, 404):
        found, _ = listing(reply(status, {"message": "403 Forbidden" if status == 403 else "404 Not Found"}))
        assert found.disabled == str(status) and not found.pages and not found.complete


def test_a_disabled_wiki_is_one_line_and_writes_nothing():
    said: list[str] = []
    committed: list[Any] = []
    stats = ResourceStats()
    Harness(Script(reply(403, {"message": "403 Forbidden"}))).run(
        lambda gl: sync_wiki(gl, 7, "g/p", stats, committed.append, said.append))
    assert committed == [] and len(said) == 1 and said[0].startswith("g/p: no wiki (GitLab answered 403")


def test_a_row_without_a_slug_is_counted_and_removes_nothing():
    found, _ = listing(reply(200, [PAGE, {"title": "no slug"}, "junk"]))
    assert found.rejected == 2 and len(found.pages) == 1
    said: list[str] = []
    stats = ResourceStats()
    Harness(Script(reply(200, [PAGE, {"title": "no slug"}]))).run(
        lambda gl: sync_wiki(gl, 7, "g/p", stats, lambda work: None, said.append))
    assert stats.rejected == 1 and any("nothing removed" in line for line in said)

