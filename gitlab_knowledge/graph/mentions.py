"""Who a text mentions: the `@username`s written in a title, description or note.

The graph layer (graph/refresh.py) stores each mention found this way in the `mentions` table, so
`me` and `person` (graph/people.py) look a user's mentions up instead of scanning every note body
for `@username` on each call. Both sides read the words alike: `mentioned_names(text)` holds a
name exactly when `mentions_user(text, name)` is true, for every name GitLab allows (letters,
digits, `_`, `-` and `.`; not starting or ending with a dot). Each row keeps the words around its
mention (`around`), so `me` and `person` show an excerpt without reading the note.
"""

import re

# What may precede the @ (a word, a dot, another @, a slash or a dash make it an email address, a
# path or a longer word), and the name after it: words joined by single dots. Greedy, so it stops
# where mentions_user's lookahead requires (no word character, dash, or dot before one, follows).
_NAME = re.compile(r"(?<![\w.@/-])@([\w-]+(?:\.[\w-]+)*)")
EXCERPT_LEAD = 60  # characters of context an excerpt keeps before the @mention it shows
# The characters `around` keeps: graph/queries.py `excerpt` shows at most 200 of the text on one
# line; two more make its cut of these what its cut of the whole text is (a last space stripped).
KEPT = 202
_SCAN = 4000  # characters flattened first (a long description is mostly not needed)


def mentions_user(body: str | None, user: str) -> bool:
    """Whether the text mentions @user: not @user.other or @username, nor an email address."""
    pattern = rf"(?<![\w.@/-])@{re.escape(user)}(?![\w-]|\.[\w-])"
    return body is not None and re.search(pattern, body, re.IGNORECASE) is not None


def mentioned_names(text: str | None) -> set[str]:
    """Every username the text mentions, lower case (GitLab's usernames compare without case)."""
    if not text or "@" not in text:
        return set()
    return {name.lower() for name in _NAME.findall(text)}


def around(text: str | None, user: str) -> str:
    """The words of `text` from a little before where it names @user (its first `@user`, in any
    case), on one line (whitespace runs as one space): the first KEPT characters, what an
    excerpt of the mention is cut from."""
    text = text or ""
    found = re.search(rf"@{re.escape(user)}", text, re.IGNORECASE)
    start = found.start() if found else 0
    if start > EXCERPT_LEAD:
        text = "…" + text[start - EXCERPT_LEAD:].lstrip()
    flat = _flat(text[:_SCAN])
    # Past KEPT characters the rest cannot change them; short of it, the rest may add words.
    return (flat if len(flat) > KEPT else _flat(text))[:KEPT]


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()
