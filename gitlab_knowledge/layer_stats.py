"""What a layer's run reports, typed, and its Dagster metadata both ways.

Each layer's `refresh(workspace, project, …)` returns a dataclass deriving from `LayerStats`. The
asset turns it into materialization metadata with `to_metadata()`; whoever reads a finished run
(the CLI summary, tests, benchmarks) turns that metadata back with `from_metadata()`. The keys are
the dataclass's own field names under the layer's prefix, so a renamed field is renamed on both
sides at once instead of silently reading a default.
"""

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self, TypeVar


@dataclasses.dataclass
class LayerStats:
    PREFIX: ClassVar[str] = ""
    ASSET: ClassVar[str] = ""  # the asset key whose materialization carries these stats
    HIDDEN: ClassVar[tuple[str, ...]] = ()  # fields not worth a metadata entry

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_metadata(self) -> dict[str, Any]:
        out = {}
        for f in dataclasses.fields(self):
            if f.name in self.HIDDEN:
                continue
            value = getattr(self, f.name)
            out[self.PREFIX + f.name] = round(value, 3) if isinstance(value, float) else value
        return out

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> Self:
        """The stats a run reported; a field the run did not report keeps its default (a run of
        an older version, or a layer that never ran)."""
        values = {}
        for f in dataclasses.fields(cls):
            key = cls.PREFIX + f.name
            if key in metadata:
                value = metadata[key]
                values[f.name] = getattr(value, "value", value)  # Dagster MetadataValue or plain
        return cls(**values)


S = TypeVar("S", bound=LayerStats)


def timed(run: Callable[[S], Any], stats: S) -> S:
    """`run(stats)`, then `stats.duration_s` set to how long it took (a layer returns from
    several places: timing it once, around the whole, keeps the field honest)."""
    started = time.monotonic()
    run(stats)
    stats.duration_s = round(time.monotonic() - started, 3)  # type: ignore[attr-defined]
    return stats


def together_stats(project_ids: dict[str, int], stats: dict[int, S], batches: dict[int, int],
                   started: float) -> dict[str, S]:
    """The stats of each project a pass over several carried (`refresh_together`), by path: its
    batches, and an equal share of the pass's time as its duration."""
    share = round((time.monotonic() - started) / max(len(batches), 1), 3)
    out = {}
    for path, pid in project_ids.items():
        if pid in batches:
            if hasattr(stats[pid], "batches"):
                stats[pid].batches = batches[pid]  # type: ignore[attr-defined]
            stats[pid].duration_s = share  # type: ignore[attr-defined]
            out[path] = stats[pid]
    return out
