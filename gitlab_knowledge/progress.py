"""How a sync reports progress: a progress bar in a terminal, log lines in Dagster."""

import logging
from typing import Any, Protocol


class SyncProgress(Protocol):
    def resource_started(self, project: str, resource: str, total: int | None) -> None: ...

    def advance(self, project: str, resource: str, items: int) -> None: ...

    def message(self, text: str) -> None: ...

    # What the user must read once (a rejected row, a removal held back): a terminal shows it as a
    # line, Dagster's run log at WARNING. Not also logged beside it: the CLI's stderr got it twice.
    def warning(self, text: str) -> None: ...


class LogProgress:
    """Progress as log lines (Dagster's context.log, or any logger)."""

    def __init__(self, log: "logging.Logger | logging.LoggerAdapter[Any]") -> None:
        self._log = log
        self._done: dict[tuple[str, str], int] = {}
        self._total: dict[tuple[str, str], int | None] = {}

    def resource_started(self, project: str, resource: str, total: int | None) -> None:
        self._done[(project, resource)] = 0
        self._total[(project, resource)] = total
        self._log.info(f"{project}: syncing {resource}" + (f" ({total} to examine)" if total is not None else ""))

    def advance(self, project: str, resource: str, items: int) -> None:
        key = (project, resource)
        self._done[key] = self._done.get(key, 0) + items
        total = self._total.get(key)
        self._log.info(f"{project}: {resource} {self._done[key]}" + (f"/{total}" if total else "") + " examined")

    def message(self, text: str) -> None:
        self._log.info(text)

    def warning(self, text: str) -> None:
        self._log.warning(text)


class NullProgress:
    """No progress shown; warnings still go to the log (nobody else would say them)."""

    def resource_started(self, project: str, resource: str, total: int | None) -> None:
        pass

    def advance(self, project: str, resource: str, items: int) -> None:
        pass

    def message(self, text: str) -> None:
        pass

    def warning(self, text: str) -> None:
        logging.getLogger("gitlab_knowledge.sync").warning("%s", text)
