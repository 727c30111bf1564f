"""Signals as a clean stop: SIGINT and SIGTERM end a run (or several side by side) the way its
own stops do, keeping what was fetched; `run` and `workspaces` hold it around their work."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any, Protocol

from sources.signing import Interrupted, RunStopped


class Stoppable(Protocol):
    """What a signal stops: one run's `RunControl`, or several runs at once."""

    def stop(self, reason: RunStopped) -> object: ...


@contextlib.contextmanager
def stop_on_signals(control: Stoppable) -> Iterator[None]:
    """SIGINT and SIGTERM stop the run cleanly (what was fetched is loaded); a second one of
    the same kind acts as usual and ends the process at once. Only in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}

    def handle(number: int, frame: object) -> None:
        signal.signal(number, previous[number] or signal.SIG_DFL)
        name = signal.Signals(number).name
        # Stopping takes locks a worker may hold; a thread of its own keeps this handler safe.
        reason = Interrupted(f"stopped by {name}; the next run continues", number)
        threading.Thread(target=control.stop, args=(reason,), daemon=True).start()

    for kind in (signal.SIGINT, signal.SIGTERM):
        previous[kind] = signal.signal(kind, handle)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
