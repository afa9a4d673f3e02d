"""Sandbox control routes (`/-/sandbox/...`) and the request counters they expose."""

import json
import threading
from collections import Counter
from typing import TYPE_CHECKING, Any

from .clock import iso_ms, parse_iso
from .faults import FaultSpecError
from .users import handle_users_control

if TYPE_CHECKING:
    from .server import SandboxGitLab

CONTROL_PREFIX = "/-/sandbox/"


class Stats:
    """Request counters behind GET /-/sandbox/stats (API requests only, faulted ones included)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.requests = 0
            self.by_route: Counter[str] = Counter()
            self.status: Counter[str] = Counter()
            self.faults: Counter[str] = Counter()

    def request(self, route: str) -> None:
        with self._lock:
            self.requests += 1
            self.by_route[route] += 1

    def count(self, counter: str, key: str) -> None:
        with self._lock:
            getattr(self, counter)[key] += 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": self.requests,
                "by_route": dict(self.by_route),
                "status": dict(self.status),
                "faults": dict(self.faults),
            }


def handle_control(sandbox: "SandboxGitLab", method: str, path: str, raw_body: bytes) -> tuple[int, Any]:
    """The /-/sandbox/ routes: no auth, no faults, not counted in stats."""
    route = path[len(CONTROL_PREFIX) :].rstrip("/")
    try:
        body = json.loads(raw_body) if raw_body.strip() else {}
    except ValueError:
        return 400, {"message": "body is not valid JSON"}
    if not isinstance(body, dict):
        return 400, {"message": "body must be a JSON object"}
    if route == "stats" and method == "GET":
        return 200, sandbox.stats()
    if route == "stats/reset" and method == "POST":
        sandbox.reset_stats()
        return 200, sandbox.stats()
    if route == "clock" and method in ("GET", "POST"):
        try:
            if body.get("set") is not None:
                sandbox.clock.set(parse_iso(str(body["set"])))
            if body.get("advance") is not None:
                sandbox.clock.advance(float(body["advance"]))
        except (TypeError, ValueError) as exc:
            return 400, {"message": f"bad clock change: {exc}"}
        return 200, {"now": iso_ms(sandbox.clock.now())}
    if route == "faults" and method in ("GET", "POST"):
        if method == "POST":
            try:
                sandbox.set_faults(body.get("spec"))
            except FaultSpecError as exc:
                return 400, {"message": f"bad fault spec: {exc}"}
        return 200, {"spec": sandbox.injector.spec}
    if route == "users" and method == "POST":
        return handle_users_control(sandbox.state, body)
    if route == "legacy_diffs" and method in ("GET", "POST"):
        if method == "POST":
            enabled = body.get("enabled")
            if not isinstance(enabled, bool):
                return 400, {"message": "enabled must be true or false"}
            sandbox.state.legacy_diffs = enabled
        return 200, {"enabled": sandbox.state.legacy_diffs}
    if route.split("/", 1)[0] in ("groups", "projects"):
        from .groups import control

        return control(sandbox.state, method, route, body)
    return 404, {"error": "404 Not Found"}
