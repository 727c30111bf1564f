"""The receiver's drain trigger: a drain that left deliveries waiting (its hold spent, its batch
full) is followed by another without a new delivery; one that took them all is not."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from pipelines.webhooks.drain import DrainResult
from pipelines.webhooks.trigger import DrainTrigger
from sources.signing import RunControl
from tests.support.waiting import wait_until
from tests.support.webhooks import DEADLINE_S


def test_a_drain_that_left_deliveries_waiting_is_followed_by_another_without_a_new_one() -> None:
    answers = [
        DrainResult("default", "completed", deliveries=3, left=5, more_waiting=True),
        DrainResult("default", "completed", deliveries=5),
    ]
    drained: list[DrainResult] = []
    lock = threading.Lock()

    def drain(controls: Callable[[], RunControl]) -> list[DrainResult]:
        controls()
        with lock:
            result = answers[min(len(drained), len(answers) - 1)]
            drained.append(result)
        return [result]

    def count() -> int:
        with lock:
            return len(drained)

    trigger = DrainTrigger(drain, quiet_seconds=0.05, within_seconds=0.05, say=lambda _: None)
    trigger.start(waiting=True)  # a restart with deliveries waiting: one notice only
    try:
        wait_until(lambda: count() == 2, DEADLINE_S, "a second drain for the deliveries left")
        time.sleep(0.5)  # ten quiet times: a third drain would have come by now
        assert count() == 2  # all taken: no drain without a new delivery
    finally:
        trigger.stop()
