"""Fault specs and a deterministic injector.

Grammar: `RULE[;RULE...]`, `RULE = KIND[:key=value[,key=value...]]`.
Kinds: 500 502 503 429 timeout drop truncate latency.
Selection keys (any kind): p, seed, after, count, every, burst, path, method.
Kind keys: 429 -> retry_after=<int>|none, reset=none; timeout -> delay=<seconds>; latency -> ms=<n>.
The first rule that fires on a request wins; a rule's counters only see requests it was asked
about, so with sequential requests every run fires on exactly the same requests.
"""

import random
import re
import threading
from dataclasses import dataclass, field

KINDS = ("500", "502", "503", "429", "timeout", "drop", "truncate", "latency")
SELECT_KEYS = ("p", "seed", "after", "count", "every", "burst", "path", "method")
KIND_KEYS = {"429": ("retry_after", "reset"), "timeout": ("delay",), "latency": ("ms",)}
STATUS_TEXT = {500: "500 Internal Server Error", 502: "502 Bad Gateway", 503: "503 Service Unavailable"}

# A comma starts a new key only when `name=` follows, so a path regex may contain commas.
_KEY_SPLIT = re.compile(r",(?=\s*[A-Za-z_]+\s*=)")


class FaultSpecError(ValueError):
    """The fault spec string does not follow the grammar."""


@dataclass(frozen=True)
class Fault:
    """What to do to one request."""

    kind: str
    retry_after: int | None = 1
    reset: bool = True
    delay: float = 30.0
    ms: float = 0.0

    @property
    def status(self) -> int | None:
        return int(self.kind) if self.kind.isdigit() else None


@dataclass
class FaultRule:
    kind: str
    p: float | None = None
    seed: int = 0
    after: int = 0
    count: int | None = None
    every: int | None = None
    burst: int = 1
    path: re.Pattern[str] | None = None
    method: str | None = None
    fault: Fault = field(default_factory=lambda: Fault("500"))
    matched: int = 0
    fired: int = 0
    rng: random.Random = field(default_factory=random.Random)

    def applies(self, method: str, path: str) -> bool:
        if self.method is not None and method.upper() != self.method:
            return False
        return self.path is None or self.path.search(path) is not None

    def decide(self) -> bool:
        """Called once per matching request; advances this rule's counters."""
        index = self.matched
        self.matched += 1
        if index < self.after:
            return False
        if self.count is not None and self.fired >= self.count:
            return False
        position = index - self.after
        if self.every is not None and position % self.every >= self.burst:
            return False
        # One draw per eligible request keeps the sequence independent of other rules.
        if self.p is not None and self.rng.random() >= self.p:
            return False
        self.fired += 1
        return True


def _int(key: str, value: str, minimum: int = 0) -> int:
    try:
        number = int(value)
    except ValueError:
        raise FaultSpecError(f"{key}={value!r}: expected an integer") from None
    if number < minimum:
        raise FaultSpecError(f"{key}={value!r}: must be >= {minimum}")
    return number


def _float(key: str, value: str, minimum: float = 0.0, maximum: float | None = None) -> float:
    try:
        number = float(value)
    except ValueError:
        raise FaultSpecError(f"{key}={value!r}: expected a number") from None
    if number < minimum or (maximum is not None and number > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise FaultSpecError(f"{key}={value!r}: must be {bound}")
    return number


def parse_rule(text: str) -> FaultRule:
    kind, _, rest = text.partition(":")
    kind = kind.strip().lower()
    if kind not in KINDS:
        raise FaultSpecError(f"unknown fault kind {kind!r} (expected one of {', '.join(KINDS)})")
    rule = FaultRule(kind=kind)
    extra: dict[str, str] = {}
    for part in _KEY_SPLIT.split(rest) if rest.strip() else ():
        key, eq, value = part.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not eq or not key:
            raise FaultSpecError(f"{text!r}: expected key=value, got {part!r}")
        if key not in SELECT_KEYS and key not in KIND_KEYS.get(kind, ()):
            allowed = ", ".join((*SELECT_KEYS, *KIND_KEYS.get(kind, ())))
            raise FaultSpecError(f"{kind}: unknown key {key!r} (allowed: {allowed})")
        if key in extra:
            raise FaultSpecError(f"{kind}: key {key!r} given twice")
        extra[key] = value
    if "p" in extra:
        rule.p = _float("p", extra["p"], 0.0, 1.0)
    rule.seed = _int("seed", extra.get("seed", "0"))
    rule.after = _int("after", extra.get("after", "0"))
    if "count" in extra:
        rule.count = _int("count", extra["count"])
    if "every" in extra:
        rule.every = _int("every", extra["every"], 1)
        rule.burst = _int("burst", extra.get("burst", "1"), 1)
        if rule.burst > rule.every:
            raise FaultSpecError(f"burst={rule.burst} is larger than every={rule.every}")
    elif "burst" in extra:
        raise FaultSpecError("burst needs every")
    if "path" in extra:
        try:
            rule.path = re.compile(extra["path"])
        except re.error as exc:
            raise FaultSpecError(f"path={extra['path']!r}: {exc}") from None
    if "method" in extra:
        rule.method = extra["method"].upper()
    rule.rng = random.Random(rule.seed)
    rule.fault = _fault(kind, extra)
    return rule


def _fault(kind: str, extra: dict[str, str]) -> Fault:
    if kind == "429":
        raw = extra.get("retry_after", "1").lower()
        retry_after = None if raw == "none" else _int("retry_after", raw)
        reset = extra.get("reset", "").lower()
        if reset not in ("", "none"):
            raise FaultSpecError(f"reset={reset!r}: only reset=none is supported")
        return Fault(kind, retry_after=retry_after, reset=reset != "none")
    if kind == "timeout":
        return Fault(kind, delay=_float("delay", extra.get("delay", "30")))
    if kind == "latency":
        return Fault(kind, ms=_float("ms", extra.get("ms", "1000")))
    return Fault(kind)


def parse_faults(spec: str | None) -> list[FaultRule]:
    """Parse a spec; None or blank means no faults. Raises FaultSpecError."""
    if spec is None:
        return []
    return [parse_rule(part.strip()) for part in spec.split(";") if part.strip()]


class FaultInjector:
    """Chooses, per request, which fault (if any) to inject."""

    def __init__(self, spec: str | None = None) -> None:
        self.spec = spec if spec and spec.strip() else None
        self.rules = parse_faults(self.spec)
        self._lock = threading.Lock()

    def pick(self, method: str, path: str) -> Fault | None:
        if not self.rules:
            return None
        with self._lock:
            for rule in self.rules:
                if rule.applies(method, path) and rule.decide():
                    return rule.fault
        return None
