"""argparse for both command lines: a usage error is one line and exit code 2, never a usage dump."""

import argparse
from collections.abc import Callable

from gitlab_knowledge.errors import UsageError


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def bounded_int(low: int = 1, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high]."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low or (high is not None and value > high):
            span = f"{low} to {high}" if high is not None else f"a number >= {low}"
            raise argparse.ArgumentTypeError(f"expected {span}, got {value}")
        return value

    return parse


def iid_or_key(text: str) -> int | str:
    """An argparse type for `show`'s second argument: an iid (a whole number >= 1), or the key of
    a kind keyed by a string (a wiki page's slug: `runbooks/deploy`), which `show` checks against
    the kind typed before it."""
    stripped = text.strip()
    if stripped.lstrip("+-").isdigit():
        return bounded_int(1)(stripped)
    if not stripped:
        raise argparse.ArgumentTypeError("expected an iid or a slug, got nothing")
    return stripped


def require_text(args: argparse.Namespace) -> None:
    """Refuse arguments that are not text: bytes that were not UTF-8 reach Python as lone
    surrogates, which no index, store or terminal can encode."""
    for name, value in vars(args).items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    shown = item.encode("utf-8", "backslashreplace").decode("utf-8")
                    flag = name if name in ("query", "ref", "what") else "--" + name.replace("_", "-")
                    raise UsageError(f"{flag} is not valid UTF-8 text: {shown[:80]!r}") from None
