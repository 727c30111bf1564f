"""Child fetching: one request per changed parent (audit trail, filled-in fields, document
details), several at a time through the shared pacer, with the ids not yet done kept in state."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait

from .context import SyncContext
from .errors import NotFound, RunStopped
from .paging import Record


def fetch_for_each(
    context: SyncContext,
    ids: Iterable[str],
    fetch_one: Callable[[str], list[Record]],
    pending: dict[str, int],
    parents: str,
) -> Iterator[list[Record]]:
    """Run `fetch_one` for every id, `concurrency` at a time, yielding rows as they come.

    Ids stay in `pending` (saved in state) until their rows are yielded, so a stopped run
    leaves exactly the unfinished ones for the next run. A 404 that the parent's own GET
    confirms (a record of list `parents`) says that it is gone: the run's deletions learn it.
    A parent still served, or not answering, keeps its id pending for the next run."""
    queue = list(dict.fromkeys(ids))
    for item in queue:
        pending[item] = 1
    pool = context.pool()
    waiting = iter(queue)
    running: dict[Future[list[Record] | None], str] = {}
    unconfirmed = 0

    def fetched(item: str) -> list[Record] | None:
        """The rows of one parent; None when it is gone (asked in the pool's thread)."""
        try:
            return fetch_one(item)
        except NotFound:
            if context.still_served(parents, item) is False:
                return None
            raise

    try:
        while True:
            # At most `concurrency` of this call's requests queue at once, so the transformers
            # sharing the pool take turns, and a stop has little to cancel.
            for item in itertools.islice(waiting, context.concurrency - len(running)):
                running[pool.submit(fetched, item)] = item
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                item = running.pop(future)
                try:
                    rows = future.result()
                except NotFound:  # its parent answers (or did not): it stays pending
                    unconfirmed += 1
                    continue
                if rows is None:  # the parent vanished between the list and this call
                    context.deletions.not_found(parents, item)
                pending.pop(item, None)
                if rows:
                    yield rows
    except RunStopped:
        for future in running:
            future.cancel()  # queued requests are dropped, not drained; their ids stay pending
        raise
    if unconfirmed:
        context.client.stats.warn(
            f"{unconfirmed:,} {parents} answered 404 on a request for their details while "
            "their own GET did not: none was marked deleted, and they are asked again next run"
        )
