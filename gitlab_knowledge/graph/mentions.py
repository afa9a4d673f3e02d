"""Who a text mentions: the `@username`s written in a title, description or note.

The graph layer (graph/refresh.py) stores each mention found this way in the `mentions` table, so
`me` and `person` (graph/people.py) look a user's mentions up instead of scanning every note body
for `@username` on each call. Both sides read the words alike: `mentioned_names(text)` holds a
name exactly when `mentions_user(text, name)` is true, for every name GitLab allows (letters,
digits, `_`, `-` and `.`; not starting or ending with a dot).
"""

import re

# What may precede the @ (a word, a dot, another @, a slash or a dash make it an email address, a
# path or a longer word), and the name after it: words joined by single dots. Greedy, so it stops
# where mentions_user's lookahead requires (no word character, dash, or dot before one, follows).
_NAME = re.compile(r"(?<![\w.@/-])@([\w-]+(?:\.[\w-]+)*)")


def mentions_user(body: str | None, user: str) -> bool:
    """Whether the text mentions @user: not @user.other or @username, nor an email address."""
    pattern = rf"(?<![\w.@/-])@{re.escape(user)}(?![\w-]|\.[\w-])"
    return body is not None and re.search(pattern, body, re.IGNORECASE) is not None


def mentioned_names(text: str | None) -> set[str]:
    """Every username the text mentions, lower case (GitLab's usernames compare without case)."""
    if not text or "@" not in text:
        return set()
    return {name.lower() for name in _NAME.findall(text)}
