"""Document text: the documented formats, middle-out truncation, stable hashes."""

from datetime import datetime

from gitlab_knowledge.documents.build import MAX_CHARS, parent_document, sha256, thread_document

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
    assert a.content_hash == b.content_hash == sha256(a.content_text)
    assert a.meta_hash == b.meta_hash
    # Pinned: a change to the document format shows up here (and means a full re-embed).
    assert a.content_hash == PINNED_ISSUE_HASH
    relabeled = parent_document("issue", {**ISSUE, "labels": ["auth"]}, "group/project-one", 1, 1)
    assert relabeled.content_hash != a.content_hash  # labels are part of an issue's text
    thread = thread_document("issue", ISSUE, {"id": "t"}, [note(1, "x", "hi", 1)], "group/project-one", 1, 1)
    relabeled_thread = thread_document("issue", {**ISSUE, "labels": ["auth"]}, {"id": "t"}, [note(1, "x", "hi", 1)],
                                       "group/project-one", 1, 1)
    assert thread.content_hash == relabeled_thread.content_hash  # a thread's text does not hold labels...
    assert thread.meta_hash != relabeled_thread.meta_hash  # ...but its filterable metadata does
