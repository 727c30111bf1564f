"""Child fetching: one request per changed parent (audit trail, filled-in fields, document
details), several at a time through the shared pacer, with the ids not yet done kept in state."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, wait
from functools import partial
from typing import Any

from .context import SyncContext
from .errors import NotFound, RunStopped
from .paging import Record

# What a pending id remembers of its parent: the listed `updated_at` (1 in states written
# before versions were kept, which never matches a listing, so such an id is fetched again).
Version = Any
_UNKNOWN: Version = 1


def listed_versions(records: Iterable[Record]) -> dict[str, Version]:
    """Each listed parent's id with the `updated_at` it was listed at."""
    return {record["id"]: record.get("updated_at") or _UNKNOWN for record in records}


def not_yet_fetched(
    listed: Mapping[str, Version], settled: Mapping[str, Version]
) -> dict[str, Version]:
    """The listed parents this run has not fetched yet at the version listed: a stopped run's
    backlog is fetched first, and its parents are often listed again (their page's cursor had
    not moved), unchanged; asking for them twice would spend the requests the stop saved."""
    return {
        item: version
        for item, version in listed.items()
        if version == _UNKNOWN or settled.get(item, _UNKNOWN) != version
    }


def _rows_of(
    context: SyncContext, fetch_one: Callable[[str], list[Record]], parents: str, item: str
) -> list[Record] | None:
    """The rows of one parent; None when it is gone (asked in the pool's thread): a 404 that
    the parent's own GET confirms."""
    try:
        return fetch_one(item)
    except NotFound:
        if context.still_served(parents, item) is False:
            return None
        raise


def fetch_for_each(
    context: SyncContext,
    ids: Iterable[str] | Mapping[str, Version],
    fetch_one: Callable[[str], list[Record]],
    pending: dict[str, Version],
    parents: str,
    settled: dict[str, Version] | None = None,
) -> Iterator[list[Record]]:
    """Run `fetch_one` for every id, `concurrency` at a time, yielding rows as they come.

    Ids stay in `pending` (saved in state, with their version when `ids` maps them to one)
    until their rows are yielded, so a stopped run leaves exactly the unfinished ones for the
    next run; `settled` receives each id done, with its version. A stop lets the requests
    already under way finish and yields their rows before it ends the call: what was fetched
    is kept. A 404 that the parent's own GET confirms (a record of list `parents`) says that
    it is gone: the run's deletions learn it. A parent still served, or not answering, keeps
    its id pending for the next run."""
    versions = ids if isinstance(ids, Mapping) else dict.fromkeys(ids, _UNKNOWN)
    queue = list(versions)
    for item in queue:
        pending[item] = versions[item]
    pool = context.pool()
    waiting = iter(queue)
    running: dict[Future[list[Record] | None], str] = {}
    unconfirmed = 0
    stopped: RunStopped | None = None
    fetched = partial(_rows_of, context, fetch_one, parents)
    try:
        while True:
            # At most `concurrency` of this call's requests queue at once, so the transformers
            # sharing the pool take turns, and a stop has little to cancel.
            if stopped is None:
                for item in itertools.islice(waiting, context.concurrency - len(running)):
                    running[pool.submit(fetched, item)] = item
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                item = running.pop(future)
                try:
                    rows = future.result()
                except (NotFound, CancelledError) as error:  # it stays pending
                    unconfirmed += isinstance(error, NotFound)  # its parent answers, or did not
                    continue
                except RunStopped as stop:
                    stopped = stopped or stop
                    for other in running:
                        other.cancel()  # not started yet: dropped; those under way finish
                    continue
                if rows is None:  # the parent vanished between the list and this call
                    context.deletions.not_found(parents, item)
                version = pending.pop(item, _UNKNOWN)
                if settled is not None:
                    settled[item] = version
                if rows:
                    yield rows
    finally:
        for future in running:  # left by an error: queued requests are dropped, ids pending
            future.cancel()
    if stopped is not None:
        raise stopped
    if unconfirmed:
        context.client.stats.warn(
            f"{unconfirmed:,} {parents} answered 404 on a request for their details while "
            "their own GET did not: none was marked deleted, and they are asked again next run"
        )
