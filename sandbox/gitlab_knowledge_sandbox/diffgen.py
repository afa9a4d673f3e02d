"""Synthetic merge request diffs for the generator: every file a DiffNote points at is in its MR's
file list with a hunk showing the noted line, plus a few other files of the topic, some of them
renamed, added or deleted. Kept to cheap string work: the generator makes ~30K MRs per benchmark run.
"""

import random
from collections.abc import Iterable

from . import vocab
from .dataset import Json

MODE = "100644"
# How many files besides the noted ones an MR touches (mean ~1.9).
EXTRA_FILES = (0, 1, 1, 2, 2, 2, 3, 4)


def _range(start: int, count: int) -> str:
    return str(start) if count == 1 else f"{start},{count}"


def _hunk(old_start: int, new_start: int, lines: list[str]) -> str:
    old_count = sum(1 for line in lines if line[0] != "+")
    new_count = sum(1 for line in lines if line[0] != "-")
    # A side without lines reads `0,0` (`@@ -0,0 +1,3 @@` for a new file), as diff writes it.
    old = _range(old_start, old_count) if old_count else "0,0"
    new = _range(new_start, new_count) if new_count else "0,0"
    return f"@@ -{old} +{new} @@\n" + "\n".join(lines) + "\n"


def _element(old_path: str, new_path: str, diff: str, *, new: bool = False, deleted: bool = False) -> Json:
    return {
        "old_path": old_path, "new_path": new_path,
        "a_mode": "0" if new else MODE, "b_mode": "0" if deleted else MODE,
        "diff": diff, "new_file": new, "renamed_file": old_path != new_path, "deleted_file": deleted,
    }


def _code(rng: random.Random, topic: vocab.Topic) -> str:
    return f"    {rng.choice(topic.idents)}({rng.choice(topic.things)!r})"


def _noted_hunks(rng: random.Random, topic: vocab.Topic, targets: list[tuple[int | None, int | None]]) -> str:
    """One hunk per distinct noted line, in file order, putting the line where the note says:
    an added line for new_line only, a removed one for old_line only, context for both."""
    hunks = []
    for old_line, new_line in sorted(set(targets), key=lambda t: t[1] if t[1] is not None else t[0] or 0):
        if old_line is None and new_line is not None:
            start = max(1, new_line - 1)
            lines = [f" {_code(rng, topic)}"] * (new_line - start) + [f"+{_code(rng, topic)}", " "]
            hunks.append(_hunk(start, start, lines))
        elif new_line is None and old_line is not None:
            start = max(1, old_line - 1)
            lines = [f" {_code(rng, topic)}"] * (old_line - start) + [f"-{_code(rng, topic)}", " "]
            hunks.append(_hunk(start, start, lines))
        elif old_line is not None and new_line is not None:
            lines = [f" {_code(rng, topic)}", f"+{_code(rng, topic)}"]
            hunks.append(_hunk(old_line, new_line, lines))
    return "".join(hunks)


def _extra(rng: random.Random, topic: vocab.Topic, path: str) -> Json:
    roll = rng.random()
    if roll < 0.12:
        directory, _, name = path.rpartition("/")
        old = f"{directory}/legacy_{name}" if directory else f"legacy_{name}"
        # Most renames in practice move a file unchanged; GitLab sends an empty diff then.
        diff = "" if rng.random() < 0.5 else _hunk(1, 1, [f"-{_code(rng, topic)}", f"+{_code(rng, topic)}"])
        return _element(old, path, diff)
    if roll < 0.22:
        added = [f"+{_code(rng, topic)}" for _ in range(rng.randint(1, 6))]
        return _element(path, path, _hunk(0, 1, added), new=True)
    if roll < 0.30:
        removed = [f"-{_code(rng, topic)}" for _ in range(rng.randint(1, 6))]
        return _element(path, path, _hunk(1, 0, removed), deleted=True)
    line = rng.randint(2, 300)
    return _element(path, path, _hunk(line, line, [f" {_code(rng, topic)}", f"-{_code(rng, topic)}",
                                                   f"+{_code(rng, topic)}"]))


def merge_request_diffs(rng: random.Random, topic: vocab.Topic, positions: Iterable[Json]) -> list[Json]:
    """The MR's changed files: those its DiffNotes point at first, then a few more of the topic."""
    targets: dict[str, list[tuple[int | None, int | None]]] = {}
    for position in positions:
        targets.setdefault(position["new_path"], []).append((position.get("old_line"), position.get("new_line")))
    files = [_element(path, path, _noted_hunks(rng, topic, lines)) for path, lines in targets.items()]
    candidates = [path for path in topic.files if path not in targets]
    # An MR always changes something; without DiffNotes at least one other file.
    extra = rng.choice(EXTRA_FILES) or (0 if targets else 1)
    for path in rng.sample(candidates, min(len(candidates), extra)):
        files.append(_extra(rng, topic, path))
    return files
