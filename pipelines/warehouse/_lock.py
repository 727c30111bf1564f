"""The run lock: a file beside the warehouse held with `flock`, so that two runs never write one
warehouse (or one workspace of a shared database) at once, and the second is told who holds it.

A run finding the lock held fails at once (two loads never queue up behind each other). A hold
that says it is brief (a webhook drain: seconds, every minute or so) is waited for instead, so
that a scheduled load and the receiver's drains take turns rather than failing each other."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from pipelines.errors import AlreadyRunning

# How a brief hold names itself in the lock file, and how long another run waits for it.
BRIEF_HOLD = "brief hold: "
BRIEF_HOLD_WAIT_SECONDS = 120.0


@contextlib.contextmanager
def held_lock(
    lock_path: Path, held_on: object, leave_nothing: Callable[[], bool], brief: str | None = None
) -> Iterator[None]:
    """Hold `lock_path` for the block, or fail at once naming `held_on` and the holder's pid
    (a holder whose hold is brief is waited for first). `brief` says this hold is one (what
    holds it). When `leave_nothing()` says so at the end (the run wrote nothing), the lock file
    and the folders made for it are taken away again."""
    folder = lock_path.parent
    created = [p for p in (folder, *folder.parents) if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as handle:
        _take(handle, held_on)
        handle.seek(0)
        handle.truncate()
        handle.write(f"{BRIEF_HOLD}{brief}, pid {os.getpid()}" if brief else f"pid {os.getpid()}")
        handle.flush()
        try:
            yield
        finally:
            if leave_nothing():
                lock_path.unlink(missing_ok=True)
                for made in created:  # innermost first
                    with contextlib.suppress(OSError):
                        made.rmdir()
            fcntl.flock(handle, fcntl.LOCK_UN)


def _take(handle: IO[str], held_on: object) -> None:
    """Lock `handle`, waiting up to `BRIEF_HOLD_WAIT_SECONDS` for a brief holder, or raise
    `AlreadyRunning` naming the holder."""
    deadline = time.monotonic() + BRIEF_HOLD_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            if not holder.startswith(BRIEF_HOLD) or time.monotonic() > deadline:
                raise AlreadyRunning(
                    f"another load is running on {held_on} ({holder}); try again when it ends"
                ) from None
            time.sleep(0.1)
