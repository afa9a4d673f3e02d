"""The zygote's bookkeeping of its children (gitlab_knowledge_tests/support/zygote.py)."""

import threading
from typing import Any

from gitlab_knowledge_tests.support.zygote import Zygote


def test_a_child_with_the_pid_of_one_that_ended_is_not_taken_for_ended() -> None:
    # The kernel reuses pids once they wrap around (pid_max is 32,768 here): the exit recorded for
    # the first child must not make the second look ended before it began (its output file did not
    # exist yet when the suite read it).
    messages: list[dict[str, Any]] = [{"pid": 4242}, {"exit": 4242, "code": 0, "cpu": 0.1}, {"pid": 4242}]
    zygote = Zygote.__new__(Zygote)
    zygote._exits, zygote.cpu, zygote._pids, zygote._gone = {}, {}, [], False
    zygote._changed = threading.Condition()
    zygote._read = lambda: messages.pop(0) if messages else None  # type: ignore[method-assign]
    zygote._listen()
    assert zygote._pids == [4242, 4242]
    assert 4242 not in zygote._exits and 4242 not in zygote.cpu
