"""Waiting for a running receiver's drains without a `webhooks status` run per poll."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .waiting import wait_until
from .webhooks import DEADLINE_S, ServedReceiver, inbox_status

# What every drain's outcome line holds ("workspace W: drain completed ...", "... failed").
DRAIN_LINE = ": drain "


def another_drain(receiver: ServedReceiver, drains: int) -> Callable[[], bool]:
    """Whether `receiver` has logged more than `drains` drains."""
    return lambda: receiver.log().count(DRAIN_LINE) > drains


def drained_by(
    receiver: ServedReceiver, folder: Path, warehouse: Path, env: dict[str, str], accepted: int
) -> dict[str, Any]:
    """The inbox status (`webhooks status`, as `webhooks.drained` asks it) once `accepted`
    deliveries were accepted and none waits. It asks again only after the receiver logged
    another drain (only a drain empties the inbox), so a wait costs one or two CLI runs
    rather than one per poll."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        drains = receiver.log().count(DRAIN_LINE)  # counted before asking: no drain missed
        found: dict[str, Any] = inbox_status(folder, warehouse, env).get("default", {})
        if found.get("accepted") == accepted and found.get("waiting") == 0:
            return found
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"waited {DEADLINE_S} s for {accepted} deliveries drained")
        wait_until(
            another_drain(receiver, drains),
            left,
            f"{accepted} deliveries accepted and drained (last status: {found})",
        )
