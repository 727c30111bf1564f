"""How a run reads each list and keeps its state: the list resources' one way in, where a repair
(`load --resources X --full-refresh`, `load --reload FROM..TO`) changes what is read and kept."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dlt

from . import settings
from .context import SyncContext
from .deletions import FullCheck
from .incremental import incremental_pass
from .paging import Record
from .reconcile import reconcile


def list_state(context: SyncContext, name: str, restarts: bool = True) -> dict[str, Any]:
    """The dlt state of list `name`'s resource (or of a transformer fed by it), the one place a
    repair changes how it is read: a reload (`context.window`) reads through a throwaway state
    that starts at the window, so the cursors, fingerprints and backlogs stay as they were; a
    list refreshed (`context.restart`) starts again from nothing, its last full check for
    deleted records forgotten, so the run's complete pass settles what the service deleted
    (`restarts`: False for the later calls of a transformer, which continue its state)."""
    if context.window is not None:
        return {}
    state: dict[str, Any] = dlt.current.resource_state()
    if restarts and name in context.restart:
        state.clear()
        if name in settings.DELETABLE_TABLES:
            whole = context.initial_since is None
            state[settings.STATE_DELETIONS] = FullCheck(name, whole_history=whole).to_state()
    return state


def list_pages(context: SyncContext, name: str, state: dict[str, Any]) -> Iterator[list[Record]]:
    """The pages of a list's changes since its cursor, then the records that a check for
    deleted ones found listed again while the warehouse holds them as deleted. A reload reads
    its window only, and checks nothing for deleted records (its pass is not the whole list)."""
    window = context.window
    if window is None:
        yield from incremental_pass(context, name, state)
        yield from reconcile(context, name, state)
        return
    for page in incremental_pass(context, name, state):
        held = [record for record in page if window.holds(record)]
        if held:
            yield held
