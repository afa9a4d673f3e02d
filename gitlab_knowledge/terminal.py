"""The one sanitiser every human-readable line passes before it reaches a terminal.

GitLab text (titles, descriptions, notes, labels, usernames) is written by anyone who can open an
issue: printed raw, an escape sequence in it clears the screen, retitles the window, hides or
fakes lines, and bidi overrides reorder what the reader sees. Escape sequences go whole (their
visible text stays), then every other C0/C1 control except newline and tab, DEL, and the bidi
embeddings, overrides and isolates. JSON output does not come here: it escapes by itself.
Log lines come here too (`clean_logs`): a message may quote what a stranger sent, like the
`Origin` header of a request the MCP server refused, whose C1 bytes arrive as C1 characters.
"""

import logging
import re

_SEQUENCES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"  # CSI (colours, cursor moves, screen clears)
    r"|\x9b[0-?]*[ -/]*[@-~]?"  # CSI, 8-bit form
    r"|[\x1b][\]PX^_][^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"  # OSC/DCS/SOS/PM/APC: window title, links
    r"|[\x9d\x90\x98\x9e\x9f][^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"  # the same, 8-bit forms
    r"|\x1b[ -/]*[0-~]?"  # any other escape (charset switches, resets)
)
# C0 but newline and tab, DEL, C1, and the bidi embeddings/overrides (U+202A-202E) and
# isolates (U+2066-2069).
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def clean(text: str) -> str:
    """`text` without escape sequences, control characters (newline and tab kept) or bidi
    overrides: what a terminal shows of it, minus what it would obey."""
    if text.isprintable():
        return text
    return _CONTROLS.sub("", _SEQUENCES.sub("", text))


class _CleanRecords(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = clean(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def clean_logs() -> None:
    """Pass every record the root logger's handlers write (stderr) through `clean`."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _CleanRecords) for f in handler.filters):
            handler.addFilter(_CleanRecords())
