"""Taking a run lock: at once, or after a brief hold ends.

A load finding the lock held fails at once (two loads never queue up behind each other). A hold
that says it is brief (a webhook drain: seconds, every minute or so) is waited for instead, so
that a scheduled load and the receiver's drains take turns rather than failing each other."""

from __future__ import annotations

import fcntl
import os
import time
from typing import IO

from pipelines.errors import AlreadyRunning

# How a brief hold names itself in the lock file, and how long another run waits for it.
BRIEF_HOLD = "brief hold: "
BRIEF_HOLD_WAIT_SECONDS = 120.0


def take(handle: IO[str], what: str, brief: str | None) -> None:
    """Lock `handle` (the lock file of `what`) and write who holds it, or raise
    `AlreadyRunning` naming the holder; a brief holder is waited for first."""
    deadline = time.monotonic() + BRIEF_HOLD_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            if not holder.startswith(BRIEF_HOLD) or time.monotonic() > deadline:
                raise AlreadyRunning(
                    f"another load is running on {what} ({holder}); try again when it ends"
                ) from None
            time.sleep(0.1)
    handle.seek(0)
    handle.truncate()
    handle.write(f"{BRIEF_HOLD}{brief}, pid {os.getpid()}" if brief else f"pid {os.getpid()}")
    handle.flush()
