"""Child fetching: one request per changed parent (audit trail, filled-in fields, document
details), several at a time through the shared pacer, with the ids not yet done kept in state."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed

from .context import SyncContext
from .errors import NotFound, RunStopped
from .paging import Record


def fetch_for_each(
    context: SyncContext,
    ids: Iterable[str],
    fetch_one: Callable[[str], list[Record]],
    pending: dict[str, int],
) -> Iterator[list[Record]]:
    """Run `fetch_one` for every id, `concurrency` at a time, yielding rows as they come.

    Ids stay in `pending` (saved in state) until their rows are yielded, so a stopped run
    leaves exactly the unfinished ones for the next run."""
    queue = list(dict.fromkeys(ids))
    for item in queue:
        pending[item] = 1
    stopped: RunStopped | None = None
    with ThreadPoolExecutor(max_workers=context.concurrency, thread_name_prefix="child") as pool:
        futures: dict[Future[list[Record]], str] = {pool.submit(fetch_one, i): i for i in queue}
        for future in as_completed(futures):
            item = futures[future]
            try:
                rows = future.result()
            except NotFound:
                rows = []  # the parent vanished between the list and this call
            except RunStopped as error:
                stopped = error
                continue
            pending.pop(item, None)
            if rows:
                yield rows
    if stopped is not None:
        raise stopped
