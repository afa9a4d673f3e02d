"""Reference syntax, parsed and printed in one place (gitlab_knowledge.kinds)."""

from collections.abc import Callable

import pytest

from gitlab_knowledge import kinds
from gitlab_knowledge.kinds import ISSUE, MAX_IID, MERGE_REQUEST, Reference
from gitlab_knowledge_tests.support.linearity import assert_linear

BASE = "https://gitlab.example.com"


@pytest.mark.parametrize(("text", "want"), [
    ("#12", Reference(ISSUE, 12)),
    ("!34", Reference(MERGE_REQUEST, 34)),
    ("group/project#12", Reference(ISSUE, 12, "group/project")),
    ("group/sub/project!34", Reference(MERGE_REQUEST, 34, "group/sub/project")),
    ("  Grp.x/my-proj_1#7 \n", Reference(ISSUE, 7, "Grp.x/my-proj_1")),
    (f"#{MAX_IID}", Reference(ISSUE, MAX_IID)),
])
def test_parse_short_forms(text: str, want: Reference) -> None:
    assert kinds.parse_reference(text) == want


@pytest.mark.parametrize("text", [
    "", "#", "!", "##1", "#-1", "#0", "#+1", f"#{MAX_IID + 1}", "#" + "9" * 400, "#1 #2", "#1a", "# 1",
    "#١٢", "#１２", "project#1", "/g/p#1", "g/p/#1", ".g/p#1", "g/p.#1", "g//p#1", "g/p#1.", "issue:5", "12",
    "g/p&1", "ftp://gitlab.example.com/g/p/-/issues/1", "g/ü#1",
])
def test_parse_rejects(text: str) -> None:
    assert kinds.parse_reference(text) is None


@pytest.mark.parametrize(("url", "want"), [
    (f"{BASE}/g/p/-/issues/5", Reference(ISSUE, 5, "g/p")),
    (f"{BASE}/g/p/issues/5", Reference(ISSUE, 5, "g/p")),
    (f"{BASE}/g/sub/p/-/merge_requests/9/diffs", Reference(MERGE_REQUEST, 9, "g/sub/p")),
    (f"{BASE}/g/p/-/merge_requests/9?tab=x#note_42", Reference(MERGE_REQUEST, 9, "g/p", 42)),
    (f"{BASE}/g/p/-/issues/5#note_7", Reference(ISSUE, 5, "g/p", 7)),
    (f"{BASE}/g/p/-/issues/5#top", Reference(ISSUE, 5, "g/p")),
    (f"{BASE}/g/p/-/issues/5#note_" + "9" * 30, Reference(ISSUE, 5, "g/p")),  # no 64-bit note id
    ("HTTP://Other.Host:8080/g/p/-/issues/5", Reference(ISSUE, 5, "g/p")),
    ("https://host/gitlab/g/p/-/issues/5", Reference(ISSUE, 5, "gitlab/g/p")),  # the prefix is unknown
])
def test_parse_url_on_any_host(url: str, want: Reference) -> None:
    assert kinds.parse_url(url) == want
    assert kinds.parse_reference(url) == want


@pytest.mark.parametrize(("url", "base", "want"), [
    ("https://example.com/gitlab/g/p/-/issues/5", "https://example.com/gitlab", Reference(ISSUE, 5, "g/p")),
    ("http://EXAMPLE.com:443/gitlab/g/p/merge_requests/3", "example.com/gitlab/", Reference(MERGE_REQUEST, 3, "g/p")),
    ("http://127.0.0.1:8123/g/p/-/issues/1", "http://127.0.0.1:8123", Reference(ISSUE, 1, "g/p")),
    ("http://127.0.0.1:8124/g/p/-/issues/1", "http://127.0.0.1:8123", None),
    ("https://other.com/g/p/-/issues/5", BASE, None),
    ("https://example.com/g/p/-/issues/5", "https://example.com/gitlab", None),
    (f"{BASE}/g/p/-/issues/5", "", None),
    (f"{BASE}/g/p/-/issues/5", "   ", None),
    (f"{BASE}/p/-/issues/5", BASE, None),  # a project has a namespace
    (f"{BASE}/g/p/-/issues/0", BASE, None),
    (f"{BASE}/g/p/-/issues/{MAX_IID + 1}", BASE, None),
    (f"{BASE}/g/p/-/issues/", BASE, None),
    (f"{BASE}/g/p/-/epics/5", BASE, None),
])
def test_parse_url_on_the_configured_gitlab(url: str, base: str, want: Reference | None) -> None:
    assert kinds.parse_url(url, base) == want


def test_find_references_in_free_text() -> None:
    text = "See #1, g/p!2 and (other/proj#3); not a#4, &#5, \\#6, x@y#7, #8@mail, docs/a.md#9x or #0."
    found = [(str(ref), text[start:end]) for ref, start, end in kinds.find_references(text)]
    assert found == [("#1", "#1"), ("g/p!2", "g/p!2"), ("other/proj#3", "other/proj#3")]


def test_find_references_skips_out_of_range_iids() -> None:
    text = f"#{MAX_IID} #{MAX_IID + 1} #{'9' * 50} #٣ !-1"
    assert [ref.iid for ref, _, _ in kinds.find_references(text)] == [MAX_IID]


@pytest.mark.parametrize("build", [lambda n: "a/" * n + "#", lambda n: "#" * (2 * n), lambda n: "a." * n + "#1x",
                                   lambda n: "/a" * n + "!"], ids=["slashes", "hashes", "dots", "leading slashes"])
def test_find_references_is_linear_on_hostile_input(build: Callable[[int], str]) -> None:
    def parse_all(n: int) -> None:
        text = build(n)
        list(kinds.find_references(text))
        kinds.parse_reference(text)
        kinds.parse_url("https://h/" + text, BASE)

    assert_linear(parse_all, 6_250)


def test_reference_at_takes_a_single_segment_project() -> None:
    text = "mentioned in merge request proj!12, g/p#3"
    ref, end = kinds.reference_at(text, text.index("proj")) or (None, 0)
    assert ref == Reference(MERGE_REQUEST, 12, "proj") and text[end:] == ", g/p#3"
    assert kinds.reference_at(text, 0) is None
    assert kinds.reference_at("#0", 0) is None


@pytest.mark.parametrize("ref", [
    Reference(ISSUE, 1), Reference(MERGE_REQUEST, MAX_IID), Reference(ISSUE, 12, "g/sub/p"),
    Reference(MERGE_REQUEST, 34, "Group/Pro.ject-1"),
])
def test_short_form_round_trips(ref: Reference) -> None:
    assert kinds.parse_reference(str(ref)) == ref
    assert str(ref) == ref.kind.ref(ref.iid, ref.project)


@pytest.mark.parametrize("ref", [
    Reference(ISSUE, 12, "g/sub/p"), Reference(MERGE_REQUEST, 34, "g/p", 99),
])
@pytest.mark.parametrize("base", [BASE, BASE + "/", "https://example.com/gitlab", "http://127.0.0.1:8123"])
def test_url_round_trips(ref: Reference, base: str) -> None:
    url = ref.url(base)
    assert "/-/" in url and "//g" not in url.split("://", 1)[1]
    assert kinds.parse_url(url, base) == ref


def test_printing() -> None:
    assert ISSUE.url(BASE + "/", "g/p", 5) == f"{BASE}/g/p/-/issues/5"
    assert MERGE_REQUEST.url(BASE, "g/p", 5) == f"{BASE}/g/p/-/merge_requests/5"
    assert kinds.note_url(f"{BASE}/g/p/-/issues/5", 7) == f"{BASE}/g/p/-/issues/5#note_7"
    assert Reference(ISSUE, 5, "g/p", 7).url(BASE) == f"{BASE}/g/p/-/issues/5#note_7"
    with pytest.raises(ValueError, match="no project"):
        Reference(ISSUE, 5).url(BASE)
