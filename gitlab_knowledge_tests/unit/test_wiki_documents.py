"""A wiki page's documents (documents/wiki.py): a short page whole, a long one by heading section
with its page title and heading path, headings read in each format GitLab stores, never inside a
code block."""

from gitlab_knowledge import kinds
from gitlab_knowledge.documents.wiki import SECTION_SPLIT_CHARS, anchor, sections, wiki_documents

URL = "https://gitlab.example.com/acme/platform/-/wikis/runbooks/deploy"


def page(content: str, fmt: str = "markdown", title: str = "Deploy runbook") -> dict:
    return {"id": 7, "project_id": 101, "slug": "runbooks/deploy", "title": title, "format": fmt,
            "content": content, "web_url": URL, "raw_payload_id": 7}


def test_a_short_page_is_one_document():
    (doc,) = wiki_documents(page("# Deploy\nRun `make deploy`."), "acme/platform")
    assert doc.id == "wiki_page:7" and doc.source_type == doc.parent_type == kinds.WIKI_PAGE.name
    assert doc.content_text.startswith("Wiki page: Deploy runbook\n\n# Deploy")
    assert doc.url == URL and doc.parent_iid == 0 and doc.labels == []
    assert kinds.document_ref(doc.parent_type, doc.parent_iid, doc.url) == "wiki:runbooks/deploy"


def test_a_long_page_is_one_document_per_section_with_its_heading_path():
    filler = "word " * (SECTION_SPLIT_CHARS // 5)
    text = (f"# Deploy runbook\nIntro {filler}\n## Before you start\nCheck things.\n```\n# not a heading\n```\n"
            f"### Freeze deploys\nSet the label.\n## Roll back\nSwitch the slot back.\n")
    docs = wiki_documents(page(text), "acme/platform")
    assert [d.id for d in docs] == [f"wiki_page:7#{n}" for n in range(4)]
    titles = [d.title for d in docs]
    # The page title is said once: an H1 repeating it is not part of the path.
    assert titles == ["Deploy runbook", "Deploy runbook › Before you start",
                      "Deploy runbook › Before you start › Freeze deploys", "Deploy runbook › Roll back"]
    assert docs[2].content_text.startswith("Wiki page: Deploy runbook\nSection: Before you start › Freeze deploys\n\n")
    assert "# not a heading" in docs[1].content_text  # inside a code block: text, not a new section
    assert docs[3].url == f"{URL}#roll-back"
    assert {d.parent_id for d in docs} == {7}


def test_headings_in_each_format():
    assert [s.path for s in sections("= Title\ntext\n== Part\nmore", "asciidoc")] == [("Title",), ("Title", "Part")]
    assert [s.path for s in sections("* Top\ntext\n** Sub\nmore", "org")] == [("Top",), ("Top", "Sub")]
    assert [s.path for s in sections("= Top\ntext\n==Sub\nmore", "rdoc")] == [("Top",), ("Top", "Sub")]
    assert [s.path for s in sections("intro\n## A ##\nx", "markdown")] == [(), ("A",)]


def test_gitlab_heading_anchors():
    assert anchor("Promote the replica") == "promote-the-replica"
    assert anchor("ADR-012: Stateless JWT") == "adr-012-stateless-jwt"
