"""Releases, pure parts: the payload checks, the normalized row, and the document naming tag and date."""

from datetime import datetime

from gitlab_knowledge.documents.build import MAX_CHARS
from gitlab_knowledge.documents.release import release_documents
from gitlab_knowledge.normalized.keyed import release_row
from gitlab_knowledge.store.payloads import release_name, release_problem

PAYLOAD = {
    "tag_name": "v2.4.0", "name": "Faster search", "description": "- Order search uses an index (!803, #183)",
    "created_at": "2024-02-15T10:00:00.000Z", "released_at": "2024-02-16T09:30:00.000Z", "upcoming_release": False,
    "author": {"username": "johndoe", "name": "John Doe"}, "commit": {"id": "a" * 40},
    "milestones": [{"title": "2024.1"}, {"title": "2024.2"}, "not a milestone"],
    "_links": {"self": "https://gitlab.example.com/acme/platform/-/releases/v2.4.0"},
}


def test_a_release_without_a_usable_tag_is_named_and_refused() -> None:
    assert release_problem(PAYLOAD) is None
    assert release_problem({**PAYLOAD, "tag_name": None}) == (
        "tag_name is missing (GitLab sends none to users without code access)")
    assert release_problem({**PAYLOAD, "description": ["x"]}) == "description is a list, not text"
    assert release_problem({**PAYLOAD, "released_at": "soon"}) == "released_at 'soon' is not an ISO 8601 timestamp"
    assert release_problem({**PAYLOAD, "name": "\ud800"}) == "name holds a lone UTF-16 surrogate (not valid Unicode)"
    assert release_name(PAYLOAD) == "release v2.4.0" and release_name({}, 2) == "release #3 of its page"


def test_the_row_reads_every_field_defensively() -> None:
    row = release_row(PAYLOAD, 77, 101)
    assert (row["id"], row["raw_payload_id"], row["project_id"], row["tag_name"]) == (77, 77, 101, "v2.4.0")
    assert row["milestones"] == ["2024.1", "2024.2"] and row["commit_sha"] == "a" * 40
    assert row["released_at"] == datetime(2024, 2, 16, 9, 30) and row["author_username"] == "johndoe"
    assert row["web_url"] == PAYLOAD["_links"]["self"] and row["upcoming_release"] is False
    assert (row["title"], row["format"]) == ("Faster search", "markdown")
    bare = release_row({"tag_name": "v1"}, 5, 101)  # an old GitLab's minimal release
    assert (bare["title"], bare["milestones"], bare["commit_sha"], bare["web_url"]) == ("v1", [], None, None)
    assert release_row({"tag_name": None}, 6, 101) is None  # refused by the checks, with a line


def test_the_document_names_the_tag_the_date_and_the_milestones() -> None:
    row = release_row(PAYLOAD, 77, 101)
    [doc] = release_documents(row, "acme/platform", 3)
    assert doc.content_text == (
        "Release v2.4.0: Faster search\n"
        "Shipped 2024-02-16 as acme/platform v2.4.0\n"
        "Milestones: 2024.1, 2024.2\n\n"
        "- Order search uses an index (!803, #183)")
    assert (doc.id, doc.source_type, doc.parent_type, doc.parent_id, doc.parent_iid) == (
        "release:77", "release", "release", 77, 0)
    assert doc.url == PAYLOAD["_links"]["self"] and doc.created_at == datetime(2024, 2, 16, 9, 30)
    assert doc.title == "v2.4.0: Faster search" and doc.author_username == "johndoe" and doc.raw_payload_ids == [77]


def test_an_upcoming_release_says_so_and_long_notes_are_cut() -> None:
    row = release_row({**PAYLOAD, "name": "v2.4.0", "upcoming_release": True, "description": "x" * (MAX_CHARS + 10)},
                      77, 101)
    [doc] = release_documents(row, "acme/platform")
    assert doc.content_text.startswith("Release v2.4.0\nUpcoming: planned to ship 2024-02-16 as acme/platform v2.4.0")
    assert doc.truncated and len(doc.content_text) <= MAX_CHARS
