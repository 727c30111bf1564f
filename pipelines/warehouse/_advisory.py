"""The run lock of a shared PostgreSQL database: one advisory lock per workspace, held by a
session of its own for the whole run. Runs on any number of hosts then load one workspace at a
time, and a run that dies (its process, its host, its connection) lets go of the lock with its
session: the session asks the server to drop it when its peer stops answering.

A run finding the lock held waits as it waits for a lock file (`_lock.wait_for`) and stops
naming the holder, which the holder's session tells: its `application_name` says what holds
it, its pid and host, and `pg_stat_activity.query_start` when it took the lock (the session runs
nothing after that).

A lock goes with its session, so a run whose session ended (a server restart, an operator's
`pg_terminate_backend`, a network cut longer than the probes) while the run goes on no longer
holds it, and another run may take it. Every write of a run asks first (`confirm_run_locks`,
from a connection of its own, so the lock's session stays idle): before and after dlt's load
step, and each transaction of ours (`_conflicts.transaction`, before it commits), stop with
`RunLockLost` instead of writing beside that other run."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import os
import re
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg

from pipelines.errors import RunLockLost, SigningEtlError, WarehouseError, first_line

from ._lock import BRIEF_HOLD, wait_for
from ._postgres import connection_url

APPLICATION = "signing-etl"
NAME_BYTES = 63  # PostgreSQL keeps this much of an application_name
# The server drops a session whose peer stopped answering (idle 60 s, then 6 probes 10 s
# apart), and the lock with it; the session must not be ended for being idle.
SESSION_SETTINGS = {
    "tcp_keepalives_idle": "60",
    "tcp_keepalives_interval": "10",
    "tcp_keepalives_count": "6",
    "idle_session_timeout": "0",
    "idle_in_transaction_session_timeout": "0",
}
_NAME = re.compile(rf"^{APPLICATION} (?:(?P<brief>.+): )?pid (?P<pid>\d+) on (?P<host>.*)$")
# How many of these advisory locks (`classid:objid`) the lock's session (its pid and start)
# still holds in this database. Asked from a session of its own: the lock's session runs
# nothing after taking them, so its `query_start` keeps saying since when it holds them.
_STILL_HELD = (
    "select count(*) from pg_locks l join pg_stat_activity a on a.pid = l.pid "
    "where l.locktype = 'advisory' and l.granted and l.objsubid = 1 "
    "and l.database = (select oid from pg_database where datname = current_database()) "
    "and l.pid = %s and a.backend_start = %s "
    "and l.classid::text || ':' || l.objid::text = any(%s)"
)
# A check's connection gives up on a silent server within a minute (keepalives do not cover a
# query waiting for its answer): seconds to connect, milliseconds unanswered.
CHECK_CONNECT_SECONDS = 10
# How long one request for a run's lock waits in the server's queue before the holder is named
# and the run's patience checked (then it queues again at once).
QUEUED_MS = 500
CHECK_UNANSWERED_MS = 60_000


@dataclass
class _Hold:
    """Locks one session took for the block that holds them (as `pg_locks` names them,
    `classid:objid`), and the connection that asks whether that session still holds them
    (opened at the first check)."""

    pid: int
    started: datetime
    lock_ids: frozenset[str]
    held_on: str
    checker: psycopg.Connection[Any] | None = None

    def confirm(self) -> None:
        """Raise `RunLockLost` unless the lock's session is alive and holds every key."""
        try:
            if self.checker is None:
                self.checker = psycopg.connect(
                    connection_url(),
                    autocommit=True,
                    application_name=f"{APPLICATION} lock check, pid {os.getpid()}",
                    connect_timeout=CHECK_CONNECT_SECONDS,
                    tcp_user_timeout=CHECK_UNANSWERED_MS,
                )
            asked = (self.pid, self.started, list(self.lock_ids))
            row = self.checker.execute(_STILL_HELD, asked).fetchone()
        except psycopg.Error as error:
            raise RunLockLost(
                f"the run lock of {self.held_on} cannot be confirmed ({first_line(error)}): "
                "stopped before the next write, and the next run goes on"
            ) from None
        if not row or row[0] != len(self.lock_ids):
            raise RunLockLost(
                f"the run lock of {self.held_on} was lost (its session ended): "
                "stopped before the next write, and the next run goes on"
            )

    def close(self) -> None:
        if self.checker is not None:
            with contextlib.suppress(psycopg.Error):
                self.checker.close()


def _halves(key: int) -> tuple[int, int]:
    """How `pg_locks` names a bigint advisory lock: its two 32-bit halves (classid, objid)."""
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    return unsigned >> 32, unsigned & 0xFFFF_FFFF


# The database locks held around the code running now (a run's thread, say): what
# `confirm_run_locks` asks about. Threads started inside a run hold none of their own.
_held: contextvars.ContextVar[tuple[_Hold, ...]] = contextvars.ContextVar(
    "signing_etl_advisory_locks", default=()
)


def confirm_run_locks() -> None:
    """Before a write: raise `RunLockLost` when a database lock held around this code was
    lost; nothing when none is held (a DuckDB file's lock, a lock file, no lock at all)."""
    for hold in _held.get():
        hold.confirm()


def workspace_key(dataset: str, workspace_id: str) -> int:
    """The advisory lock of one workspace's runs into `dataset` (64 bits of a hash)."""
    digest = hashlib.sha256(f"{APPLICATION} run {dataset}/{workspace_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


# The privacy policy's lock of a shared database ("sgnetl02"): a rewrite of the rows under a new
# policy holds it alone for its transaction (`pipelines.privacy.change`), and each of dlt's load
# steps shares it (`load_step`). A run that passed the privacy gate before a rewrite then either
# loads before it begins, or sees it done when it asks the gate again inside its load step.
PRIVACY_KEY = int.from_bytes(b"sgnetl02", "big", signed=True)


def models_key(dataset: str) -> int:
    """The advisory lock between the models and the loads into `dataset`: a model build holds
    it alone, each of dlt's load steps shares it (`shared_in_database`)."""
    digest = hashlib.sha256(f"{APPLICATION} models {dataset}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@contextlib.contextmanager
def shared_in_database(keys: Sequence[int], what: str) -> Iterator[None]:
    """Share the advisory locks `keys`, in their order, on a session of its own while the block
    runs, waiting (in the server's queue, behind a holder that has one alone) as long as that
    holder keeps it: a load step waits for a model build or a policy's rewrite to end, however
    long it takes.

    Raises:
        WarehouseError: the database cannot be reached (one line).
    """
    try:
        session = psycopg.connect(
            connection_url(), autocommit=True, application_name=_application_name(what)
        )
    except psycopg.Error as error:
        raise WarehouseError(
            f"cannot take the {what}'s locks in the postgres destination: {first_line(error)}"
        ) from None
    with session:
        for key in keys:
            session.execute("select pg_advisory_lock_shared(%s)", (key,))
        yield


@contextlib.contextmanager
def held_in_database(keys: Sequence[int], held_on: str, brief: str | None = None) -> Iterator[None]:
    """Hold the advisory locks `keys` on a session of their own while the block runs, waiting
    for a holder as a lock file's is waited for, or stop (`AlreadyRunning`) naming it; `brief`
    says this hold is one (what holds it). Closing the session releases them all.

    Raises:
        AlreadyRunning: another run held one for longer than this one waits (exit 75).
        WarehouseError: the database cannot be reached (one line).
    """
    name = _application_name(brief)
    try:
        session = psycopg.connect(
            connection_url(),
            autocommit=True,
            application_name=name,
            keepalives=1,
            keepalives_idle=60,
            keepalives_interval=10,
            keepalives_count=6,
        )
    except psycopg.Error as error:
        raise WarehouseError(
            f"cannot take the run lock in the postgres destination: {first_line(error)}"
        ) from None
    with session:
        for setting, value in SESSION_SETTINGS.items():
            with contextlib.suppress(psycopg.errors.UndefinedObject):  # an older server
                session.execute("select set_config(%s, %s, false)", (setting, value))
        found = session.execute(  # before the locks: what the session runs last is taking them
            "select pid, backend_start from pg_stat_activity where pid = pg_backend_pid()"
        ).fetchone()
        assert found is not None  # a session always sees itself
        session.execute(f"set lock_timeout = '{QUEUED_MS}ms'")
        for key in sorted(set(keys)):
            wait_for(
                functools.partial(_take_queued, session, key),
                functools.partial(holder_of, session, key),
                held_on,
                waits_for_loads=brief is None,
                take_waits=True,
            )
        lock_ids = frozenset("{}:{}".format(*_halves(key)) for key in keys)
        hold = _Hold(found[0], found[1], lock_ids, held_on)
        token = _held.set((*_held.get(), hold))
        try:
            yield
        finally:
            _held.reset(token)
            hold.close()


def _application_name(brief: str | None) -> str:
    """How the lock's session names its holder (cut to what PostgreSQL keeps)."""
    what = f"{brief}: " if brief else ""
    named = f"{APPLICATION} {what}pid {os.getpid()} on {socket.gethostname()}"
    return named.encode()[:NAME_BYTES].decode(errors="ignore")


def _take_queued(session: psycopg.Connection[Any], key: int) -> bool:
    """Take `key` alone, waiting in the server's queue up to `QUEUED_MS`. A request waiting
    there holds back the shared requests that come after it (load steps), so load steps that
    overlap one another cannot keep a model build out for ever, as they could a
    `pg_try_advisory_lock`, which never queues. The lock's session runs nothing after, so the
    statement's start says (to within `QUEUED_MS`) since when it holds the lock."""
    try:
        session.execute("select pg_advisory_lock(%s)", (key,))
    except psycopg.errors.LockNotAvailable:  # lock_timeout: the holder is asked for, and again
        return False
    return True


def oldest_holder() -> str | None:
    """The run of ours that has held a lock of this database longest, as `holder_of` says it;
    None when none does, or the database cannot be asked (`status` reads on without it)."""
    try:
        with psycopg.connect(connection_url(), autocommit=True) as session:
            row = session.execute(
                "select a.application_name, a.query_start from pg_locks l "
                "join pg_stat_activity a on a.pid = l.pid "
                "where l.locktype = 'advisory' and l.granted and l.objsubid = 1 "
                "and l.database = (select oid from pg_database where datname = current_database()) "
                "and a.application_name like %s order by a.query_start limit 1",
                (f"{APPLICATION} %",),
            ).fetchone()
    except (psycopg.Error, SigningEtlError):  # no server, or no credentials
        return None
    return _described(row) if row else None


def holder_of(session: psycopg.Connection[Any], key: int) -> str:
    """Who holds `key` in this database as a lock file would say it (`pid N since T on HOST`,
    a brief hold named); `another session` when none of ours (or it just ended)."""
    row = session.execute(
        "select a.application_name, a.query_start from pg_locks l "
        "left join pg_stat_activity a on a.pid = l.pid "
        "where l.locktype = 'advisory' and l.granted and l.objsubid = 1 "
        "and l.database = (select oid from pg_database where datname = current_database()) "
        "and l.classid = %s::bigint::oid and l.objid = %s::bigint::oid "
        "and l.pid <> pg_backend_pid() limit 1",
        _halves(key),
    ).fetchone()
    return _described(row) if row else "another session"


def _described(row: tuple[Any, ...]) -> str:
    """A holder's (application_name, query_start) as a lock file says it."""
    named = _NAME.match(str(row[0] or ""))
    if named is None:
        return "another session"
    since = (
        row[1].astimezone(UTC).isoformat(timespec="seconds") if row[1] is not None else "unknown"
    )
    held = f"pid {named['pid']} since {since} on {named['host']}"
    return f"{BRIEF_HOLD}{named['brief']}, {held}" if named["brief"] else held
