"""Keeps secrets out of everything we print, log or store.

The token is registered once it is read from the environment; from then on every log record that
passes through `RedactingFilter` and every `KnowledgeError` message has it replaced. Values are
also registered URL-encoded, since httpx error messages quote URLs.
"""

import logging
import threading
import urllib.parse

_lock = threading.Lock()
_secrets: set[str] = set()
MASK = "[REDACTED]"


def register_secret(value: str | None) -> None:
    """Mask `value` (and its URL-encoded form) in all later output of this process."""
    if not value or len(value) < 4:
        return
    with _lock:
        _secrets.add(value)
        _secrets.add(urllib.parse.quote(value, safe=""))


def is_secret(value: str) -> bool:
    with _lock:
        return value in _secrets


def forget_secret(value: str) -> None:
    """Stop masking `value`: for a client's token GitLab refused, so a stream of made-up tokens
    cannot grow the list every output is checked against."""
    with _lock:
        _secrets.discard(value)
        _secrets.discard(urllib.parse.quote(value, safe=""))


def redact(text: str) -> str:
    if not _secrets or not text:
        return text
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


class RedactingFilter(logging.Filter):
    """Rewrites a record's message (args merged) with secrets masked."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _secrets:
            if record.exc_info and not record.exc_text:
                # Formatters fill exc_text only later, from exc_info; fill it now, masked, so the
                # traceback a handler prints is this one.
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            message = record.getMessage()
            cleaned = redact(message)
            if cleaned != message:
                record.msg = cleaned
                record.args = None
            if record.exc_text:
                record.exc_text = redact(record.exc_text)
        return True


def install_logging_redaction() -> None:
    """Attach the filter to the root logger's handlers and to every handler created later."""
    root = logging.getLogger()
    flt = RedactingFilter()
    for handler in root.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(flt)
    # Records created anywhere pass through the record factory, so handlers added later
    # (Dagster's, pytest's) still see masked text.
    old_factory = logging.getLogRecordFactory()
    if getattr(old_factory, "_gk_redacting", False):
        return

    def factory(*args, **kwargs):  # type: ignore[no-untyped-def]
        record = old_factory(*args, **kwargs)
        flt.filter(record)
        return record

    factory._gk_redacting = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)
