"""The run lock of a DuckDB file: a file beside the warehouse held with `flock`, so that two runs
never write one warehouse at once, and the second is told who holds it (a shared database locks
in the database itself: `_advisory`, which waits the same way, `wait_for`).

A busy lock is a wait, not a failure: a run finding it held waits for it, up to
`SIGNING_ETL_LOCK_WAIT_SECONDS` (a hold that says it is brief, a webhook drain's, up to
`BRIEF_HOLD_WAIT_SECONDS`), and then stops with exit 75 naming the holder (its pid and since
when), so that the scheduler tries again. A drain does not wait for a load: the receiver tries
it again a minute later anyway."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from pipelines.errors import AlreadyRunning

# How a brief hold names itself in the lock file, and how long another run waits for it.
BRIEF_HOLD = "brief hold: "
BRIEF_HOLD_WAIT_SECONDS = 120.0
# How long a run waits for another run's hold that is not brief (a load) before it stops.
WAIT_VARIABLE = "SIGNING_ETL_LOCK_WAIT_SECONDS"
DEFAULT_WAIT_SECONDS = 600.0


@contextlib.contextmanager
def held_lock(
    lock_path: Path, held_on: object, leave_nothing: Callable[[], bool], brief: str | None = None
) -> Iterator[None]:
    """Hold `lock_path` for the block, waiting for a holder for a while (`_take`), or stop
    naming `held_on` and the holder's pid and since when. `brief` says this hold is one (what
    holds it). When `leave_nothing()` says so at the end (the run wrote nothing), the lock file
    and the folders made for it are taken away again."""
    folder = lock_path.parent
    created = [p for p in (folder, *folder.parents) if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as handle:
        _take(handle, held_on, waits_for_loads=brief is None)
        handle.seek(0)
        handle.truncate()
        held = this_holder()
        handle.write(f"{BRIEF_HOLD}{brief}, {held}" if brief else held)
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


def this_holder() -> str:
    """How this process names itself as a lock's holder: `pid N since T on HOST`."""
    since = datetime.now(UTC).isoformat(timespec="seconds")
    return f"pid {os.getpid()} since {since} on {socket.gethostname()}"


def wait_seconds() -> float:
    """How long a run waits for another run's hold (`WAIT_VARIABLE`, else the default)."""
    try:
        return max(0.0, float(os.environ.get(WAIT_VARIABLE) or DEFAULT_WAIT_SECONDS))
    except ValueError:
        return DEFAULT_WAIT_SECONDS


def holder(lock_path: Path) -> str | None:
    """Who holds the lock (`pid N since T`, a brief hold named), or None when nobody does;
    for readers such as `status`, which never wait for it."""
    try:
        with open(lock_path) as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return handle.read().strip() or "another process"
            fcntl.flock(handle, fcntl.LOCK_UN)
            return None
    except OSError:  # no lock file: no run
        return None


def _take(handle: IO[str], held_on: object, *, waits_for_loads: bool) -> None:
    """Lock `handle`, waiting for its holder as `wait_for` does."""

    def take() -> bool:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def named() -> str:
        handle.seek(0)
        return handle.read().strip() or "another process"

    wait_for(take, named, held_on, waits_for_loads=waits_for_loads)


def wait_for(
    take: Callable[[], bool],
    named: Callable[[], str],
    held_on: object,
    *,
    waits_for_loads: bool,
    take_waits: bool = False,
) -> None:
    """Call `take` until it takes the lock, waiting for a brief holder up to
    `BRIEF_HOLD_WAIT_SECONDS` and (when `waits_for_loads`) for any other up to `wait_seconds()`,
    or raise `AlreadyRunning` naming the holder (`named()`: what the holder says of itself).
    `take_waits`: `take` itself waits a while in the lock's queue before it gives up, so it is
    asked again at once (a pause would let later requests ahead of it)."""
    started = time.monotonic()
    patience = wait_seconds() if waits_for_loads else 1.0  # a drain: a moment, not a load
    pause = 0.1
    while not take():
        holder_named = named()
        bound = BRIEF_HOLD_WAIT_SECONDS if holder_named.startswith(BRIEF_HOLD) else patience
        if time.monotonic() - started > bound:
            raise AlreadyRunning(
                f"another load is running on {held_on} ({holder_named}); waited "
                f"{time.monotonic() - started:.0f} s, the next run continues"
            ) from None
        if not take_waits:
            time.sleep(pause)
            pause = min(0.5, pause * 1.5)  # a database is asked less often the longer it waits
