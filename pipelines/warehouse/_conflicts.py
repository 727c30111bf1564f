"""Our own statements against transaction conflicts: a transaction of ours (a privacy plan,
deletion marks, a run record, an erasure, a catalog change, dlt's load step) that the database
ends with a serialization failure, a deadlock, a lock not available or a catalog race (a table
another run made at the same moment) is run again from its start, a few
times with a growing pause, and each retry is logged; several workers writing one database
meet these now and then (a merge of another workspace widening a table ours reads, say).

Every such transaction goes through `transaction` (or `retried` for work that opens its own);
one nested in another is part of the outer one, which alone retries."""

from __future__ import annotations

import contextvars
import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ._advisory import confirm_run_locks

Result = TypeVar("Result")

# SQLSTATEs that end a transaction only because another one was in its way.
CONFLICTS = {
    "40001": "a serialization failure",
    "40P01": "a deadlock",
    "55P03": "a lock not available",
}
# Two sessions making the same catalog object at once: PostgreSQL checks its catalog's unique
# indexes, not `if not exists`, so the second `create table` (dlt's, in a load step of another
# host) fails; run again, it finds the table made.
CATALOG_RACES = {
    "42P07": "a table made at once by another run",
    "42P06": "a schema made at once by another run",
}
CATALOG_INDEXES = ("pg_type_typname_nsp_index", "pg_namespace_nspname_index")
ATTEMPTS = 5
FIRST_PAUSE_SECONDS = 0.2
LOGGER = logging.getLogger("signing_etl")
_inside = contextvars.ContextVar("signing_etl_in_transaction", default=False)
_open: contextvars.ContextVar[tuple[int, ...]] = contextvars.ContextVar(
    "signing_etl_open_transactions", default=()
)


def conflict_of(error: BaseException) -> str | None:
    """What conflict ended the transaction that raised `error` (dlt wraps the driver's error),
    or None when it was not one."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        found = pending.pop()
        if found is None or id(found) in seen:
            continue
        seen.add(id(found))
        code = getattr(found, "pgcode", None) or getattr(found, "sqlstate", None)
        if isinstance(code, str) and code in CONFLICTS:
            return CONFLICTS[code]
        if isinstance(code, str) and code in CATALOG_RACES:
            return CATALOG_RACES[code]
        if code == "23505" and any(index in str(found) for index in CATALOG_INDEXES):
            return "a catalog entry made at once by another run"
        if type(found).__name__ == "TransactionException":  # DuckDB's write-write conflict
            return "a write-write conflict"
        wrapped = getattr(found, "dbapi_exception", None)
        pending.extend([found.__cause__, found.__context__])
        if isinstance(wrapped, BaseException):
            pending.append(wrapped)
    return None


def retried(what: str, work: Callable[[], Result]) -> Result:
    """`work()`, run again from its start when a transaction conflict ended it, up to
    `ATTEMPTS` times in all (each retry logged with `what`); inside another retried
    transaction, once (the outer one retries)."""
    if _inside.get():
        return work()
    token = _inside.set(True)
    try:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return work()
            except Exception as error:
                conflict = conflict_of(error)
                if conflict is None or attempt == ATTEMPTS:
                    raise
                pause = FIRST_PAUSE_SECONDS * 2 ** (attempt - 1) * random.uniform(0.5, 1.5)
                LOGGER.warning(
                    "%s ended with %s with another writer; trying again in %.1f s (%d of %d)",
                    what,
                    conflict,
                    pause,
                    attempt + 1,
                    ATTEMPTS,
                )
                time.sleep(pause)
        raise AssertionError("unreachable")  # pragma: no cover
    finally:
        _inside.reset(token)


def transaction(
    client: Any, what: str, work: Callable[[], Result], *, fenced: bool = True
) -> Result:
    """`work()` in one transaction of dlt's SQL client `client`, committed at its end, rolled
    back and run again on a conflict (`retried`). A `fenced` one (all but a run's own record)
    is rolled back instead when the run lock held around it was lost (`RunLockLost`): the
    lock is asked right before the commit, so no other run writes the workspace meanwhile."""

    def once() -> Result:
        if id(client) in _open.get() or _in_drivers_transaction(client):
            return work()  # a caller's transaction, which commits it
        token = _open.set((*_open.get(), id(client)))
        try:
            with client.begin_transaction():
                done = work()
                if fenced:
                    confirm_run_locks()
                return done
        finally:
            _open.reset(token)

    return retried(what, once)


def _in_drivers_transaction(client: Any) -> bool:
    """Whether a PostgreSQL client is inside a transaction someone else began."""
    native = getattr(client, "native_connection", None)
    return getattr(native, "autocommit", True) is False
