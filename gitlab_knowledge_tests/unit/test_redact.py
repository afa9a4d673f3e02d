"""Secret redaction in strings, log records and KnowledgeError messages."""

import io
import logging
from collections.abc import Callable, Iterator
from urllib.parse import quote

import pytest

import gitlab_knowledge.redact as redact_module
from gitlab_knowledge.errors import AuthError, GitLabError, KnowledgeError
from gitlab_knowledge.redact import MASK, RedactingFilter, install_logging_redaction, redact, register_secret

TOKEN = "glpat-REDACT/me+now 42"
ENCODED = quote(TOKEN, safe="")


@pytest.fixture(autouse=True)
def isolated_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    # Registration is process-wide; a fresh set keeps these secrets out of every other test.
    monkeypatch.setattr(redact_module, "_secrets", set())


@pytest.fixture
def restore_logging() -> Iterator[None]:
    # install_logging_redaction() changes the global record factory and the root handlers.
    factory = logging.getLogRecordFactory()
    root = logging.getLogger()
    filters = {handler: list(handler.filters) for handler in root.handlers}
    yield
    logging.setLogRecordFactory(factory)
    for handler, saved in filters.items():
        handler.filters[:] = saved


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def captured(restore_logging: None) -> Iterator[tuple[logging.Logger, ListHandler, io.StringIO]]:
    """A logger whose handlers are attached only after the redaction is installed."""
    register_secret(TOKEN)
    install_logging_redaction()
    logger = logging.getLogger("gitlab_knowledge_tests.redact")
    records = ListHandler()
    stream = io.StringIO()
    text = logging.StreamHandler(stream)
    text.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.addHandler(records)
    logger.addHandler(text)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    yield logger, records, stream
    logger.removeHandler(records)
    logger.removeHandler(text)
    logger.propagate = True
    logger.setLevel(logging.NOTSET)


def test_redact_masks_a_registered_secret_and_its_url_encoded_form() -> None:
    text = f"token={TOKEN} url=https://gitlab.example.com/api/v4/user?private_token={ENCODED}"
    assert redact(text) == text

    register_secret(TOKEN)

    cleaned = redact(text)
    assert TOKEN not in cleaned
    assert ENCODED not in cleaned
    assert cleaned == f"token={MASK} url=https://gitlab.example.com/api/v4/user?private_token={MASK}"


def test_redact_masks_every_occurrence_of_every_secret() -> None:
    register_secret(TOKEN)
    register_secret("hunter2-password")

    assert redact(f"{TOKEN}|hunter2-password|{TOKEN}") == f"{MASK}|{MASK}|{MASK}"


def test_a_secret_containing_another_is_masked_whole() -> None:
    register_secret("glpat-abcd")
    register_secret("glpat-abcd-efgh")

    assert redact("x glpat-abcd-efgh y") == f"x {MASK} y"


@pytest.mark.parametrize("value", [None, "", "abc"])
def test_empty_or_very_short_values_are_not_registered(value: str | None) -> None:
    register_secret(value)

    assert redact("abc and the abcde") == "abc and the abcde"
    assert redact_module._secrets == set()


def test_log_message_containing_the_token_is_masked(
        captured: tuple[logging.Logger, ListHandler, io.StringIO]) -> None:
    logger, records, stream = captured

    logger.warning(f"cannot use {TOKEN} against GitLab")

    assert records.records[0].getMessage() == f"cannot use {MASK} against GitLab"
    assert TOKEN not in stream.getvalue()
    assert MASK in stream.getvalue()


def test_log_args_containing_the_token_are_masked(
        captured: tuple[logging.Logger, ListHandler, io.StringIO]) -> None:
    logger, records, stream = captured

    logger.error("GET %s failed with %s", f"/user?private_token={ENCODED}", TOKEN)
    logger.info("%(who)s used %(tok)s", {"who": "sync", "tok": TOKEN})

    messages = [r.getMessage() for r in records.records]
    assert messages == [f"GET /user?private_token={MASK} failed with {MASK}", f"sync used {MASK}"]
    assert TOKEN not in stream.getvalue()
    assert ENCODED not in stream.getvalue()


def test_log_records_without_secrets_are_left_alone(
        captured: tuple[logging.Logger, ListHandler, io.StringIO]) -> None:
    logger, records, _ = captured

    logger.info("fetched %d issues from %s", 3, "group/proj")

    record = records.records[0]
    assert record.msg == "fetched %d issues from %s"
    assert record.args == (3, "group/proj")


def test_existing_root_handlers_get_the_filter(restore_logging: None) -> None:
    root = logging.getLogger()
    handler = ListHandler()
    root.addHandler(handler)
    try:
        install_logging_redaction()
        assert any(isinstance(f, RedactingFilter) for f in handler.filters)
    finally:
        root.removeHandler(handler)


def test_installing_twice_does_not_wrap_the_record_factory_twice(restore_logging: None) -> None:
    install_logging_redaction()
    factory = logging.getLogRecordFactory()

    install_logging_redaction()

    assert logging.getLogRecordFactory() is factory


def test_a_logged_traceback_containing_the_token_is_masked(
        captured: tuple[logging.Logger, ListHandler, io.StringIO]) -> None:
    logger, _, stream = captured

    try:
        raise RuntimeError(f"upstream said: bad token {TOKEN}")
    except RuntimeError:
        logger.exception("sync failed")

    assert "RuntimeError" in stream.getvalue()
    assert TOKEN not in stream.getvalue()


@pytest.mark.parametrize("make", [KnowledgeError, AuthError, lambda m: GitLabError(m, status=500)],
                         ids=["KnowledgeError", "AuthError", "GitLabError"])
def test_knowledge_error_messages_are_redacted(make: Callable[[str], KnowledgeError]) -> None:
    register_secret(TOKEN)

    exc = make(f"GitLab rejected {TOKEN} at /user?private_token={ENCODED}")

    assert str(exc) == f"GitLab rejected {MASK} at /user?private_token={MASK}"


def test_error_created_before_the_secret_is_registered_is_still_redacted() -> None:
    exc = KnowledgeError(f"token {TOKEN}")

    register_secret(TOKEN)

    assert str(exc) == f"token {MASK}"
