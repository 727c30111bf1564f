"""Waiting in tests for something another thread or process does: one polling loop with a
deadline, for every helper and test that waits."""

from __future__ import annotations

import time
from collections.abc import Callable

FIRST_POLL_S = 0.02
# A long wait polls less often: some conditions cost CPU (an HTTP request for a record of
# thousands of deliveries, a forked command), and CPU is what the suite runs short of.
POLL_GROWTH = 1.5


def wait_until(
    condition: Callable[[], bool], deadline_s: float, what: str, *, poll_at_most_s: float = 0.2
) -> None:
    """Poll `condition` until it holds, or fail naming `what` after `deadline_s`: at once, then
    after 20 ms, each pause half as long again as the last, up to `poll_at_most_s`. A
    condition that can tell the wait is hopeless (the process it waits on ended) fails by
    asserting."""
    deadline = time.monotonic() + deadline_s
    pause = FIRST_POLL_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {deadline_s} s for {what}")
        time.sleep(pause)
        pause = min(pause * POLL_GROWTH, max(poll_at_most_s, FIRST_POLL_S))
