"""Document text: the documented formats, middle-out truncation, stable hashes."""

from datetime import datetime

from gitlab_knowledge.documents.build import MAX_CHARS, content_hash, parent_document, sha256, thread_document
from gitlab_knowledge.documents.refresh import document_row

ISSUE = {"id": 76, "iid": 234, "project_id": 1, "title": "Authentication redesign", "description": "We need JWT.",
         "labels": ["auth", "security"], "state": "opened", "author_username": "janedoe", "confidential": False,
         "created_at": datetime(2024, 2, 28), "updated_at": datetime(2024, 3, 16),
         "web_url": "https://gitlab.example.com/group/project-one/-/issues/234"}
MR = {**ISSUE, "id": 900, "iid": 847, "title": "Refactor auth to use JWT tokens", "state": "merged",
      "labels": ["auth"], "source_branch": "feature/jwt", "target_branch": "main",
      "web_url": "https://gitlab.example.com/group/project-one/-/merge_requests/847"}


PINNED_ISSUE_HASH = "176282a98a19f009f7be62cc25cc9555c8dc35858cbdadb86410d5e37d5795ba"


def note(i: int, author: str, body: str, day: int, **extra) -> dict:
    return {"id": 12340 + i, "author_username": author, "body": body, "created_at": datetime(2024, 3, day, 9),
            "updated_at": datetime(2024, 3, day, 9), "internal": False, **extra}


def test_issue_document_is_title_labels_state_and_description():
    doc = parent_document("issue", ISSUE, "group/project-one", 7, 3)
    assert doc.content_text == ("Issue #234: Authentication redesign\nLabels: auth, security\nState: opened\n\n"
                                "We need JWT.")
    assert (doc.id, doc.source_type, doc.url, doc.raw_payload_ids, doc.sync_run_id) == (
        "issue:76", "issue", ISSUE["web_url"], [7], 3)
    assert not doc.truncated


def test_mr_document_names_its_branches():
    doc = parent_document("merge_request", MR, "group/project-one", None, None)
    assert doc.content_text.splitlines()[:4] == [
        "MR !847: Refactor auth to use JWT tokens", "Labels: auth", "State: merged", "Branch: feature/jwt → main"]


def test_thread_document_has_parent_header_and_dated_authored_notes():
    notes = [note(1, "johndoe", "I think we should move to JWT-based auth.", 15),
             note(2, "janedoe", "Agreed. What about refresh token strategy?", 15),
             note(3, "johndoe", "Short-lived access tokens (15min), longer refresh (7 days).", 16)]
    thread = {"id": "6a9c1750b37d", "raw_payload_id": 9}
    doc = thread_document("issue", ISSUE, thread, notes, "group/project-one", 7, 3)
    assert doc.content_text == (
        "[Issue #234: Authentication redesign] Discussion\n\n"
        "@johndoe (2024-03-15):\nI think we should move to JWT-based auth.\n\n"
        "@janedoe (2024-03-15):\nAgreed. What about refresh token strategy?\n\n"
        "@johndoe (2024-03-16):\nShort-lived access tokens (15min), longer refresh (7 days).")
    assert doc.url == ISSUE["web_url"] + "#note_12341"
    assert doc.title == doc.parent_title == "Authentication redesign"
    assert doc.labels == ["auth", "security"] and doc.state == "opened"
    assert doc.author_username == "johndoe" and doc.created_at == datetime(2024, 3, 15, 9)
    assert doc.raw_payload_ids == [7, 9]


def test_diffnote_thread_names_the_file_and_internal_notes_flag_the_document():
    notes = [note(1, "li.wei", "Off by one here.", 3, new_path="src/auth/login.ts", new_line=42, internal=True)]
    doc = thread_document("merge_request", MR, {"id": "d1"}, notes, "group/project-one", None, None)
    assert doc.content_text.startswith("[MR !847: Refactor auth to use JWT tokens] Discussion\n"
                                       "File: src/auth/login.ts (line 42)\n\n@li.wei (2024-03-03):")
    assert doc.internal


def test_long_thread_keeps_first_and_last_notes_and_cuts_the_middle():
    notes = [note(0, "first", "FIRST " + "alpha " * 200, 1)]
    notes += [note(i, f"user{i}", f"middle {i} " + "beta " * 400, 2) for i in range(1, 40)]
    notes += [note(99, "last", "LAST " + "omega " * 200, 28)]
    doc = thread_document("issue", ISSUE, {"id": "t"}, notes, "p/q", None, None)
    assert doc.truncated
    assert len(doc.content_text) <= MAX_CHARS
    assert "FIRST" in doc.content_text and "LAST" in doc.content_text
    assert "notes omitted ...]" in doc.content_text
    assert doc.content_text.index("FIRST") < doc.content_text.index("omitted") < doc.content_text.index("LAST")


def test_two_huge_notes_are_each_cut_in_the_middle():
    notes = [note(0, "a", "START-A " + "x " * 30000 + " END-A", 1), note(1, "b", "START-B " + "y " * 30000 + " END-B", 2)]
    doc = thread_document("issue", ISSUE, {"id": "t"}, notes, "p/q", None, None)
    assert doc.truncated and len(doc.content_text) <= MAX_CHARS
    for marker in ("START-A", "END-A", "START-B", "END-B"):
        assert marker in doc.content_text


def test_long_description_keeps_start_and_end():
    issue = {**ISSUE, "description": "BEGIN " + "lorem ipsum " * 5000 + "FINISH"}
    doc = parent_document("issue", issue, "p/q", None, None)
    assert doc.truncated and len(doc.content_text) <= MAX_CHARS
    assert "BEGIN" in doc.content_text and "FINISH" in doc.content_text and "characters omitted" in doc.content_text


def test_hashes_are_stable_and_sensitive():
    a = parent_document("issue", ISSUE, "group/project-one", 1, 1)
    b = parent_document("issue", dict(ISSUE), "group/project-one", 2, 2)  # provenance is not content
    assert a.content_hash == b.content_hash == content_hash(a.content_text)  # the text and the builder version
    assert a.meta_hash == b.meta_hash
    # Pinned: a change to the document format shows up here (and means a full re-embed).
    assert sha256(a.content_text) == PINNED_ISSUE_HASH
    relabeled = parent_document("issue", {**ISSUE, "labels": ["auth"]}, "group/project-one", 1, 1)
    assert relabeled.content_hash != a.content_hash  # labels are part of an issue's text
    thread = thread_document("issue", ISSUE, {"id": "t"}, [note(1, "x", "hi", 1)], "group/project-one", 1, 1)
    relabeled_thread = thread_document("issue", {**ISSUE, "labels": ["auth"]}, {"id": "t"}, [note(1, "x", "hi", 1)],
                                       "group/project-one", 1, 1)
    assert thread.content_hash == relabeled_thread.content_hash  # a thread's text does not hold labels...
    assert thread.meta_hash != relabeled_thread.meta_hash  # ...but its filterable metadata does


# Pinned: the metadata hash the stored documents and both indexes compare. A change here rebuilds
# every document and rewrites both indexes of every store (COLUMNS or `metadata()` changed).
PINNED_META_HASHES = {
    "issue": "76ec9adf42cda48c6935edd5b0dfcab855c0108b251c584add76121f919e0311",
    "merge_request": "61d91afe3cbc065e0deb4242bcb606b603f554bdf5a0a4888babfab1b2ea991e",
    "thread": "41e5269fce0b7ae56c548499faebb47ee85d5abe7c7e0a2ff6d6619d2960d441",
}


def test_metadata_hashes_are_pinned():
    issue = parent_document("issue", ISSUE, "group/project-one", 1, 1)
    mr = parent_document("merge_request", MR, "group/project-one", 1, 1)
    thread = thread_document("issue", ISSUE, {"id": "t"}, [note(1, "x", "hi", 1, internal=True), note(2, "y", "ho", 2)],
                             "group/project-one", 1, 1)
    assert {"issue": issue.meta_hash, "merge_request": mr.meta_hash, "thread": thread.meta_hash} == PINNED_META_HASHES
    assert issue.metadata() == {
        "source_type": "issue", "project_path": "group/project-one", "parent_type": "issue", "parent_iid": 234,
        "title": "Authentication redesign", "author_username": "janedoe", "labels": ["auth", "security"],
        "state": "opened", "created_at": datetime(2024, 2, 28), "updated_at": datetime(2024, 3, 16),
        "url": ISSUE["web_url"], "confidential": False, "internal": False}


def test_the_documents_row_is_the_document():
    # The row documents/refresh.py inserts, column for column as it was written out by hand.
    d = thread_document("issue", {**ISSUE, "labels": ["security", "auth"]}, {"id": "t", "raw_payload_id": 9},
                        [note(1, "x", "hi", 1, internal=True)], "group/project-one", 7, 3)
    now = datetime(2024, 4, 1)
    assert document_row(d, "run-1", now, "1.1") == {
        "id": d.id, "source_type": d.source_type, "source_id": d.source_id, "project_id": d.project_id,
        "project_path": d.project_path, "parent_type": d.parent_type, "parent_id": d.parent_id,
        "parent_iid": d.parent_iid, "parent_title": d.parent_title, "title": d.title,
        "author_username": d.author_username, "labels": ["security", "auth"], "state": d.state,
        "created_at": d.created_at, "updated_at": d.updated_at, "url": d.url, "confidential": d.confidential,
        "internal": True, "content_text": d.content_text, "content_hash": d.content_hash, "meta_hash": d.meta_hash,
        "token_count": d.token_count, "truncated": d.truncated, "raw_payload_ids": [7, 9],
        "sync_run_id": 3, "dagster_run_id": "run-1", "built_at": now, "builder_version": "1.1",
    }
