"""The run lock: a file beside the warehouse held with `flock`, so that two runs never write one
warehouse (or one workspace of a shared database) at once, and the second is told who holds it."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from pipelines.errors import AlreadyRunning


@contextlib.contextmanager
def held_lock(
    lock_path: Path, held_on: object, leave_nothing: Callable[[], bool]
) -> Iterator[None]:
    """Hold `lock_path` for the block, or fail at once naming `held_on` and the holder's pid.
    When `leave_nothing()` says so at the end (the run wrote nothing), the lock file and the
    folders made for it are taken away again."""
    folder = lock_path.parent
    created = [p for p in (folder, *folder.parents) if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise AlreadyRunning(
                f"another load is running on {held_on} ({holder}); try again when it ends"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
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
