"""Waiting in tests for something another thread or process does: one polling loop with a
deadline, for every helper and test that waits."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], bool], deadline_s: float, what: str) -> None:
    """Poll `condition` until it holds, or fail naming `what` after `deadline_s`. A condition
    that can tell the wait is hopeless (the process it waits on ended) fails by asserting."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {deadline_s} s for {what}")
        time.sleep(0.02)
