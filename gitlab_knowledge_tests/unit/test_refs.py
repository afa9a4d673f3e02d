"""Issue and merge request references found in text (gitlab_knowledge.graph.refs)."""

from collections.abc import Callable

import pytest

from gitlab_knowledge.graph.refs import Ref, extract
from gitlab_knowledge.kinds import MAX_IID
from gitlab_knowledge_tests.support.linearity import assert_linear

PROJECT = "grp/proj"
URL = "https://gitlab.example.com"

ISS, MR = "issue", "merge_request"


def links(
    text: str | None,
    *,
    source_type: str = MR,
    found_in: str = "description",
    gitlab_url: str = URL,
    project_path: str = PROJECT,
) -> list[tuple[str, str, str, int]]:
    """(kind, target_type, target_path, target_iid) of every link, in the order returned."""
    refs = extract(
        text, project_path=project_path, gitlab_url=gitlab_url, source_type=source_type, found_in=found_in
    )
    return [(r.kind, r.target_type, r.target_path, r.target_iid) for r in refs]


def mentions(*targets: tuple[str, str, int]) -> list[tuple[str, str, str, int]]:
    return [("mentions", kind, path, iid) for kind, path, iid in targets]


# -- plain references ------------------------------------------------------------------------------

FOUND_IN_PLAIN = ["title", "description", "note"]


@pytest.mark.parametrize("found_in", FOUND_IN_PLAIN)
@pytest.mark.parametrize("source_type", [ISS, MR])
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("#12", (ISS, PROJECT, 12)),
        ("!847", (MR, PROJECT, 847)),
        ("see group/project#5", (ISS, "group/project", 5)),
        ("see group/project!6", (MR, "group/project", 6)),
        ("see group/sub/project!7", (MR, "group/sub/project", 7)),
        ("a/b/c/d/e#8", (ISS, "a/b/c/d/e", 8)),
        ("my-group/my_project.v2#9", (ISS, "my-group/my_project.v2", 9)),
        ("Group.Name/Proj-1#10", (ISS, "Group.Name/Proj-1", 10)),
        ("2024/q1#3", (ISS, "2024/q1", 3)),
        (f"{URL}/g/p/-/issues/11", (ISS, "g/p", 11)),
        (f"{URL}/g/p/-/merge_requests/12", (MR, "g/p", 12)),
        (f"{URL}/g/sub/p/-/issues/13", (ISS, "g/sub/p", 13)),
        (f"{URL}/g/p/issues/14", (ISS, "g/p", 14)),
        (f"{URL}/g/p/merge_requests/15", (MR, "g/p", 15)),
        (f"{URL}/g/p/-/issues/16#note_123", (ISS, "g/p", 16)),
        (f"{URL}/g/p/-/merge_requests/17/diffs", (MR, "g/p", 17)),
        (f"{URL}/g/p/-/merge_requests/18/diffs#note_9", (MR, "g/p", 18)),
        (f"{URL}/g/p/-/issues/19?tab=notes", (ISS, "g/p", 19)),
        (f"{URL}/g/p/-/merge_requests/20/", (MR, "g/p", 20)),
        (f"[the bug]({URL}/g/p/-/issues/21)", (ISS, "g/p", 21)),
        (f"<{URL}/g/p/-/issues/22>", (ISS, "g/p", 22)),
        ("http://gitlab.example.com/g/p/-/issues/23", (ISS, "g/p", 23)),
        ("HTTPS://GitLab.Example.com/g/p/-/issues/24", (ISS, "g/p", 24)),
        ("https://gitlab.example.com:443/g/p/-/issues/25", (ISS, "g/p", 25)),
        (f"#{MAX_IID}", (ISS, PROJECT, MAX_IID)),
        ("#007", (ISS, PROJECT, 7)),
    ],
)
def test_plain_reference(
    text: str, expected: tuple[str, str, int] | None, source_type: str, found_in: str
) -> None:
    assert links(text, source_type=source_type, found_in=found_in) == (mentions(expected) if expected else [])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("see #12.", 12),
        ("(#12)", 12),
        ("#12,", 12),
        ("#12;", 12),
        ("#12:", 12),
        ("#12!", 12),
        ("#12?", 12),
        ("[#12]", 12),
        ("**#12**", 12),
        ('"#12"', 12),
        ("#12-13", 12),
        ("#12+", 12),
        ("#12\n", 12),
        ("line one\n#12 starts a line", 12),
        ("> quoted #12", 12),
        ("- item #12", 12),
        ("1. #12", 12),
        ("text/#12", 12),
    ],
)
def test_punctuation_around_a_reference(text: str, expected: int) -> None:
    assert links(text) == mentions((ISS, PROJECT, expected))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("(group/project#5)", "group/project#5"),
        ("[group/project#5]", "group/project#5"),
        ("see group/project#5.", "group/project#5"),
        ("**group/project#5**", "group/project#5"),
        ('"group/project#5"', "group/project#5"),
        ("#1,group/project#5", "group/project#5"),
    ],
)
def test_cross_project_reference_after_an_opening(text: str, expected: str) -> None:
    refs = extract(text, project_path=PROJECT, gitlab_url=URL, source_type=ISS, found_in="note")
    assert [r.text for r in refs if r.target_path == "group/project"] == [expected]


def test_ref_text_is_the_words_as_written() -> None:
    text = f"See !847, Group/Proj#3 and {URL}/g/p/-/issues/9#note_1."
    refs = extract(text, project_path=PROJECT, gitlab_url=URL, source_type=ISS, found_in="note")
    assert refs == [
        Ref("mentions", MR, PROJECT, 847, "!847"),
        Ref("mentions", ISS, "Group/Proj", 3, "Group/Proj#3"),
        Ref("mentions", ISS, "g/p", 9, f"{URL}/g/p/-/issues/9#note_1"),
    ]


@pytest.mark.parametrize(
    ("gitlab_url", "text", "expected"),
    [
        ("https://example.com/gitlab", "https://example.com/gitlab/g/p/-/issues/3", (ISS, "g/p", 3)),
        ("https://example.com/gitlab/", "https://example.com/gitlab/g/p/merge_requests/4", (MR, "g/p", 4)),
        ("https://example.com/gitlab", "https://example.com/g/p/-/issues/3", None),
        ("https://example.com/gitlab", "https://example.com/gitlabx/g/p/-/issues/3", None),
        ("http://127.0.0.1:8123", "http://127.0.0.1:8123/g/p/-/issues/5", (ISS, "g/p", 5)),
        ("http://127.0.0.1:8123", "http://127.0.0.1:9999/g/p/-/issues/5", None),
        ("http://127.0.0.1:8123", "http://127.0.0.1/g/p/-/issues/5", None),
        ("gitlab.example.com", "https://gitlab.example.com/g/p/-/issues/6", (ISS, "g/p", 6)),
        ("https://gitlab.example.com:443", "https://gitlab.example.com/g/p/-/issues/7", (ISS, "g/p", 7)),
        ("", "https://gitlab.example.com/g/p/-/issues/8", None),
    ],
)
def test_url_on_the_configured_gitlab(
    gitlab_url: str, text: str, expected: tuple[str, str, int] | None
) -> None:
    assert links(text, gitlab_url=gitlab_url) == (mentions(expected) if expected else [])


@pytest.mark.parametrize(
    "text",
    [
        f"{URL}/g/p/-/issues/5abc",
        f"{URL}/g/p/-/issues/",
        f"{URL}/g/p/-/issues/0",
        f"{URL}/g/p/-/issues/{MAX_IID + 1}",
        f"{URL}/p/-/issues/5",  # a project always has a namespace
        f"{URL}/g/p/-/tree/main/issues/5",  # a file in the repository
        f"{URL}/g/p/-/blob/main/doc.md#5",
        f"{URL}/g/p/-/milestones/5",
        f"{URL}/g/p/-/issues/5.json",
    ],
)
def test_other_urls_on_the_configured_gitlab_are_no_links(text: str) -> None:
    assert links(text) == []


# -- closing pattern -------------------------------------------------------------------------------

CLOSING_KEYWORDS = [
    "Close", "Closes", "Closed", "Closing", "close", "closes", "closed", "closing",
    "Fix", "Fixes", "Fixed", "Fixing", "fix", "fixes", "fixed", "fixing",
    "Resolve", "Resolves", "Resolved", "Resolving", "resolve", "resolves", "resolved", "resolving",
    "Implement", "Implements", "Implemented", "Implementing", "implement", "implements", "implemented",
    "implementing",
]  # fmt: skip


def closes(*targets: tuple[str, int]) -> list[tuple[str, str, str, int]]:
    return [("closes", ISS, path, iid) for path, iid in targets]


@pytest.mark.parametrize("keyword", CLOSING_KEYWORDS)
@pytest.mark.parametrize("found_in", ["title", "description"])
def test_every_closing_keyword(keyword: str, found_in: str) -> None:
    text = f"{keyword} #12"
    refs = extract(text, project_path=PROJECT, gitlab_url=URL, source_type=MR, found_in=found_in)
    assert refs == [Ref("closes", ISS, PROJECT, 12, text)]


@pytest.mark.parametrize(
    "text", ["CLOSES #12", "Closeses #12", "Fixe #12", "Resolv #12", "Implementation #12", "Closes:#12"]
)
def test_words_that_are_no_closing_keyword(text: str) -> None:
    assert links(text) == mentions((ISS, PROJECT, 12))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Closes #1, #2 and group/p#3", closes((PROJECT, 1), (PROJECT, 2), ("group/p", 3))),
        ("Fixes: #4", closes((PROJECT, 4))),
        ("closes issue #5", closes((PROJECT, 5))),
        ("Closes issues #5 and #6", closes((PROJECT, 5), (PROJECT, 6))),
        (f"Resolves {URL}/g/p/-/issues/6", closes(("g/p", 6))),
        (f"Resolves {URL}/g/p/issues/6.", closes(("g/p", 6))),
        ("Closes #1, and #2", closes((PROJECT, 1), (PROJECT, 2))),
        ("Closes #1 #2", closes((PROJECT, 1), (PROJECT, 2))),
        ("Closes #1,#2", closes((PROJECT, 1), (PROJECT, 2))),
        ("Closes  #1", closes((PROJECT, 1))),
        ("This MR fixes #7.", closes((PROJECT, 7))),
        ("Some text.\n\nCloses #8\n", closes((PROJECT, 8))),
        ("Closes a/b/c#9 and issue #10", closes(("a/b/c", 9), (PROJECT, 10))),
        ("(closes #11)", closes((PROJECT, 11))),
    ],
)
def test_closing_phrases(text: str, expected: list[tuple[str, str, str, int]]) -> None:
    assert links(text) == expected


def test_closing_ref_text_is_the_whole_phrase() -> None:
    text = "Great work. Closes #1, #2 and group/p#3. See also #4."
    refs = extract(text, project_path=PROJECT, gitlab_url=URL, source_type=MR, found_in="description")
    phrase = "Closes #1, #2 and group/p#3"
    assert refs == [
        Ref("closes", ISS, PROJECT, 1, phrase),
        Ref("closes", ISS, PROJECT, 2, phrase),
        Ref("closes", ISS, "group/p", 3, phrase),
        Ref("mentions", ISS, PROJECT, 4, "#4"),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Implements the token model (#234)", mentions((ISS, PROJECT, 234))),
        ("Fixes the bug in #5", mentions((ISS, PROJECT, 5))),
        ("Closes !5", mentions((MR, PROJECT, 5))),
        (f"Closes {URL}/g/p/-/merge_requests/5", mentions((MR, "g/p", 5))),
        ("Closes #1, !2, #3", closes((PROJECT, 1)) + mentions((MR, PROJECT, 2), (ISS, PROJECT, 3))),
        ("Closes\n#5", mentions((ISS, PROJECT, 5))),
        ("Closes\t#5", mentions((ISS, PROJECT, 5))),
        ("Closes `#5`", []),
        ("Closes `x` #5", mentions((ISS, PROJECT, 5))),
        ("Closes https://github.com/a/b/issues/5", []),
        ("Closes #1 or #2", closes((PROJECT, 1)) + mentions((ISS, PROJECT, 2))),
        ("Closes Issue #5", mentions((ISS, PROJECT, 5))),
        ("preCloses #5", mentions((ISS, PROJECT, 5))),
    ],
)
def test_no_closing_without_an_issue_right_after_the_keyword(
    text: str, expected: list[tuple[str, str, str, int]]
) -> None:
    assert links(text) == expected


@pytest.mark.parametrize(
    ("source_type", "found_in"),
    [(MR, "note"), (ISS, "title"), (ISS, "description"), (ISS, "note")],
)
def test_closing_only_in_a_merge_request_title_or_description(source_type: str, found_in: str) -> None:
    text = "Closes #1, #2 and group/p#3"
    assert links(text, source_type=source_type, found_in=found_in) == mentions(
        (ISS, PROJECT, 1), (ISS, PROJECT, 2), (ISS, "group/p", 3)
    )


def test_a_closed_issue_is_not_also_mentioned() -> None:
    text = "Relates to #1 and grp/PROJ#2.\n\nCloses #1, grp/proj#2\n\nAgain #1, !1"
    assert links(text) == closes((PROJECT, 1), (PROJECT, 2)) + mentions((MR, PROJECT, 1))


# -- system notes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("source_type", [ISS, MR])
@pytest.mark.parametrize(
    ("note", "expected"),
    [
        ("mentioned in merge request !847", [("mentioned_in", MR, PROJECT, 847)]),
        ("mentioned in merge request group/project!847", [("mentioned_in", MR, "group/project", 847)]),
        ("mentioned in merge request a/b/c!1", [("mentioned_in", MR, "a/b/c", 1)]),
        ("mentioned in merge request other!2", [("mentioned_in", MR, "grp/other", 2)]),
        ("mentioned in issue #3", [("mentioned_in", ISS, PROJECT, 3)]),
        ("mentioned in issue group/project#4", [("mentioned_in", ISS, "group/project", 4)]),
        ("Mentioned in issue #5", [("mentioned_in", ISS, PROJECT, 5)]),
        ("closed via merge request !6", [("closed_by", MR, PROJECT, 6)]),
        ("closed via merge request group/project!7", [("closed_by", MR, "group/project", 7)]),
        ("marked this issue as related to #8", [("related", ISS, PROJECT, 8)]),
        ("marked this issue as related to group/project#9", [("related", ISS, "group/project", 9)]),
        (
            "marked this issue as related to #1, g/p#2, and #3",
            [("related", ISS, PROJECT, 1), ("related", ISS, "g/p", 2), ("related", ISS, PROJECT, 3)],
        ),
        (
            "marked this issue as related to #1 and #2",
            [("related", ISS, PROJECT, 1), ("related", ISS, PROJECT, 2)],
        ),
        ("marked this issue as a duplicate of #10", [("duplicate_of", ISS, PROJECT, 10)]),
        ("marked this issue as a duplicate of g/p#11", [("duplicate_of", ISS, "g/p", 11)]),
        ("marked #12 as a duplicate of this issue", [("duplicated_by", ISS, PROJECT, 12)]),
        ("marked g/p#13 as a duplicate of this issue", [("duplicated_by", ISS, "g/p", 13)]),
        # GitLab's blocking issue links, as its system notes say them (EE SystemNotes::IssuablesService).
        ("marked this issue as blocking #2", [("blocks", ISS, PROJECT, 2)]),
        ("marked this item as blocking g/p#9001 and g/p#9002", [("blocks", ISS, "g/p", 9001), ("blocks", ISS, "g/p", 9002)]),
        ("marked this issue as blocked by #1", [("blocked_by", ISS, PROJECT, 1)]),
        ("marked this issue as blocked by #1, #2, and other#3",
         [("blocked_by", ISS, PROJECT, 1), ("blocked_by", ISS, PROJECT, 2), ("blocked_by", ISS, "grp/other", 3)]),
        # A moved issue: "moved to fdroidserver#268" names a project of the same namespace.
        ("moved to fdroidserver#268", [("moved_to", ISS, "grp/fdroidserver", 268)]),
        ("moved to fdroid/fdroidserver#268", [("moved_to", ISS, "fdroid/fdroidserver", 268)]),
        ("moved from #7", [("moved_from", ISS, PROJECT, 7)]),
        ("removed the relation with #8", [("unrelated", ISS, PROJECT, 8)]),
        ("mentioned in merge request GRP/Proj!14", [("mentioned_in", MR, PROJECT, 14)]),
    ],
)
def test_system_note(note: str, expected: list[tuple[str, str, str, int]], source_type: str) -> None:
    assert links(note, source_type=source_type, found_in="system_note") == expected


def test_system_note_ref_text_is_the_phrase() -> None:
    refs = extract(
        "mentioned in merge request !847",
        project_path=PROJECT,
        gitlab_url=URL,
        source_type=ISS,
        found_in="system_note",
    )
    assert refs == [Ref("mentioned_in", MR, PROJECT, 847, "mentioned in merge request !847")]


@pytest.mark.parametrize(
    "note",
    [
        "mentioned in commit abc123",
        "mentioned in commit group/project@abc123",
        "mentioned in epic &5",
        "changed the description",
        "closed",
        "closed via commit abc123",
        "assigned to @alice and unassigned @bob",
        "changed title from **Fix #1** to **Fix #2**",
        "added ~bug label",
        "marked #12 as a blocker",
        "moved to epic &5",
        "moved to #",
        "mentioned in merge request #5",  # an MR is always "!"
        "mentioned in issue !5",
        "closed via merge request !0",
        "see #12 and !13",
        "Closes #12",
        f"{URL}/g/p/-/issues/5",
        "",
    ],
)
def test_other_system_notes_give_nothing(note: str) -> None:
    assert links(note, source_type=ISS, found_in="system_note") == []
    assert links(note, source_type=MR, found_in="system_note") == []


# -- what must not match ---------------------------------------------------------------------------

MUST_NOT_MATCH = [
    "```\n#1 and !2\n```",
    "```python\nx = 1  # see #1\n```",
    "~~~\n#1\n~~~",
    "~~~ruby\n#1\n~~~",
    "````\n```\n#1\n````",
    "  ```\n  #1\n  ```",
    "> ```\n> #1\n> ```",
    "```\nunclosed fence #1",
    "`#12`",
    "`group/project#12`",
    "``code with ` and #12``",
    "text `!5` text",
    "C#",
    "F#",
    "C#12",
    "abc#12",
    "abc!12",
    "issue#12",
    "_#12",
    "é#12",
    "#12abc",
    "#12_",
    "!important",
    "#hashtag",
    "https://github.com/a/b/issues/5",
    "https://github.com/a/b/pull/5",
    "https://other.example.com/g/p/-/issues/5",
    "https://other.example.com/g/p/-/merge_requests/5",
    "https://gitlab.example.com.evil.test/g/p/-/issues/5",
    "https://example.com/page#5",
    "https://example.com/a/b#5",
    "[link](https://example.com/page#5)",
    "www.example.com/page#5",
    "ftp://example.com/a/b#5",
    "&#123;",
    "&#35;12",
    "\\#12",
    "# Title",
    "## 2",
    "# 2",
    "#0",
    "!0",
    f"#{MAX_IID + 1}",
    "#99999999999999999999",
    "a#1@b",
    "x #1@b.example",
    "src/foo.py#L12",
    "./docs/notes.md#12",
    "see:a/b#12",
    "x/-a/b#12",
    "#١٢",  # non-ASCII digits
    "!!",
    "",
]


@pytest.mark.parametrize("found_in", FOUND_IN_PLAIN)
@pytest.mark.parametrize("text", MUST_NOT_MATCH)
def test_must_not_match(text: str, found_in: str) -> None:
    assert links(text, source_type=MR, found_in=found_in) == []


def test_none_gives_nothing() -> None:
    assert links(None) == []
    assert links(None, found_in="system_note") == []


def test_file_path_with_a_number_is_accepted_as_a_cross_project_ref() -> None:
    # Ambiguous by design: a valid-looking path at the start of a word is a project ref; the caller
    # drops projects it does not know.
    assert links("see docs/notes.md#12") == mentions((ISS, "docs/notes.md", 12))


def test_code_is_skipped_but_the_text_around_it_is_not() -> None:
    text = "Before #1\n\n```\n#2\n```\n\nafter `#3` and #4; `` #5 `` #6\n~~~\n#7\n~~~\n#8"
    assert links(text, source_type=ISS) == mentions(*((ISS, PROJECT, n) for n in (1, 4, 6, 8)))


def test_unmatched_backtick_is_literal() -> None:
    assert links("a ` b #1\n\nc ` #2", source_type=ISS) == mentions((ISS, PROJECT, 1), (ISS, PROJECT, 2))


def test_inline_backtick_run_is_not_a_fence() -> None:
    assert links("```a``` #1", source_type=ISS) == mentions((ISS, PROJECT, 1))


def test_reference_right_after_code_or_a_foreign_url() -> None:
    assert links("`x`#1 https://example.com/x #2", source_type=ISS) == mentions(
        (ISS, PROJECT, 1), (ISS, PROJECT, 2)
    )


# -- normalization, dedupe and order ---------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["grp/proj#12", "GRP/Proj#12", "Grp/PROJ#12", f"{URL}/GRP/proj/-/issues/12", "#12"]
)
def test_own_project_written_in_full_takes_its_spelling(text: str) -> None:
    assert links(text, source_type=ISS) == mentions((ISS, PROJECT, 12))


def test_other_paths_keep_their_case() -> None:
    assert links("Other/Proj#1") == mentions((ISS, "Other/Proj", 1))


def test_dedupe_keeps_the_first_in_order_of_appearance() -> None:
    text = "!3 then #1, grp/proj#1, Other/P#2, other/p#2, !3 and #1 again, then g/x!9"
    refs = extract(text, project_path=PROJECT, gitlab_url=URL, source_type=ISS, found_in="note")
    assert refs == [
        Ref("mentions", MR, PROJECT, 3, "!3"),
        Ref("mentions", ISS, PROJECT, 1, "#1"),
        Ref("mentions", ISS, "Other/P", 2, "Other/P#2"),
        Ref("mentions", MR, "g/x", 9, "g/x!9"),
    ]


def test_issue_and_merge_request_with_the_same_iid_are_distinct() -> None:
    assert links("#5 !5", source_type=ISS) == mentions((ISS, PROJECT, 5), (MR, PROJECT, 5))


def test_url_and_reference_to_the_same_item_are_one_link() -> None:
    text = f"{URL}/grp/proj/-/issues/5 and #5"
    refs = extract(text, project_path=PROJECT, gitlab_url=URL, source_type=ISS, found_in="note")
    assert refs == [Ref("mentions", ISS, PROJECT, 5, f"{URL}/grp/proj/-/issues/5")]


def test_order_mixes_closings_mentions_and_urls_by_position() -> None:
    text = f"!9 first, then {URL}/g/p/-/issues/3. Fixes #1 and also g/q#2"
    assert links(text) == [
        ("mentions", MR, PROJECT, 9),
        ("mentions", ISS, "g/p", 3),
        ("closes", ISS, PROJECT, 1),
        ("mentions", ISS, "g/q", 2),
    ]


# -- arguments and robustness ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source_type", "found_in"), [("epic", "note"), (ISS, "body"), ("", "note"), (MR, "")]
)
def test_unknown_source_type_or_found_in_is_an_error(source_type: str, found_in: str) -> None:
    with pytest.raises(ValueError):
        extract("#1", project_path=PROJECT, gitlab_url=URL, source_type=source_type, found_in=found_in)


# Each hostile text at a size n (a unit repeated about n times); 8n must cost about 8 times n.
HOSTILE_TEXTS: dict[str, Callable[[int], str]] = {
    "dotted path": lambda n: " " + "a." * n + "/b",
    "dashed path": lambda n: " " + "a-" * n + "#",
    "scheme-like": lambda n: "a+" * n + "://",
    "open parens": lambda n: "(a." * n + "#1",
    "long URL": lambda n: f"{URL}/" + "a.-/" * (n // 2) + "issues/x",
    "fences": lambda n: "```\n" * (n // 2),
    "backticks": lambda n: "`a``b```c" * (n // 5),
    "closes list": lambda n: "Closes " + "#1, " * (n // 2),
}


@pytest.mark.parametrize("build", HOSTILE_TEXTS.values(), ids=HOSTILE_TEXTS.keys())
def test_long_hostile_text_is_linear(build: Callable[[int], str]) -> None:
    def extract_both(n: int) -> None:
        text = build(n)
        extract(text, project_path=PROJECT, gitlab_url=URL, source_type=MR, found_in="description")
        extract(text, project_path=PROJECT, gitlab_url=URL, source_type=ISS, found_in="system_note")

    assert_linear(extract_both, 12_500)
