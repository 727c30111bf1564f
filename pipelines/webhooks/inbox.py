"""The receiver's durable inbox: SQLite in WAL mode beside the warehouse
(`<folder>/.<warehouse>.webhooks/inbox.sqlite`), never the DuckDB file, which takes one writer
and is a load's while it runs.

It holds, per configured workspace (the receiver's path):

- `deliveries`: each accepted delivery once (its id is the key, and a digest of what the
  service signed is unique too), with what it names (the shipment or contact), never its body,
  signature or secret; `done_at` once a drain's load of it committed (kept `KEPT_DAYS` more);
- `counts`: deliveries accepted, duplicated and rejected (by reason), and loaded;
- `drained`: a digest of each record a drain loaded (per workspace id), so the next poll can
  tell the changes the webhooks brought from those they missed;
- `drains`: what each drain did.

A delivery is committed (`synchronous=FULL`: on disk) before the receiver answers 2xx. One
connection per process, shared by its threads under a lock; other processes (a load, `webhooks
status`) open their own, and SQLite's WAL lets them read while the receiver writes.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timedelta
from pathlib import Path

from pipelines.errors import WebhooksError
from pipelines.webhooks.inbox_rows import (
    DELIVERY_FIELDS,
    SCHEMA,
    Delivery,
    DrainRecord,
    InboxStatus,
    upgrade,
)
from pipelines.webhooks.secrets_file import now_utc, private_folder, stamp

__all__ = ["Delivery", "DrainRecord", "Inbox", "InboxStatus"]

FILE_NAME = "inbox.sqlite"
REFUSALS_WRITTEN_EVERY = 2.0  # seconds a refusal may wait in memory before its count is written
ACCEPTED, DUPLICATED, REJECTED, LOADED = "accepted", "duplicated", "rejected", "loaded"
KEPT_DAYS = 7  # how long the drains' records, and the deliveries they loaded, are kept


class Inbox:
    """The inbox of one warehouse's receiver; thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._db = sqlite3.connect(
                path, timeout=30, isolation_level=None, check_same_thread=False
            )
            self._db.row_factory = sqlite3.Row
            self._db.execute("pragma journal_mode = wal")
            self._db.execute("pragma synchronous = full")
            self._db.executescript(SCHEMA)
            upgrade(self._db)
        except sqlite3.Error as error:
            raise WebhooksError(f"cannot open the webhook inbox {path}: {error}") from None
        self._lock = threading.Lock()
        # Refusals counted in memory and written together (a flood of bad deliveries must not
        # cost a disk sync each); written at least every REFUSALS_WRITTEN_EVERY seconds.
        self._refusals: Counter[tuple[str, str]] = Counter()
        self._refusals_timer: threading.Timer | None = None

    @classmethod
    def open(cls, folder: Path) -> Inbox:
        """The inbox in `folder`, created (0600, in a folder 0700) when missing."""
        try:
            path = private_folder(folder) / FILE_NAME
            if not path.exists():
                path.touch(mode=0o600)
        except OSError as error:
            raise WebhooksError(
                f"cannot make the webhook inbox in {folder}: {error.strerror}"
            ) from None
        return cls(path)

    @classmethod
    def existing(cls, folder: Path) -> Inbox | None:
        """The inbox in `folder` if the receiver ever made one."""
        return cls(folder / FILE_NAME) if (folder / FILE_NAME).exists() else None

    def close(self) -> None:
        if self._refusals:
            self.write_refusals()
        with self._lock:
            self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("begin immediate")
            try:
                yield self._db
            except BaseException:
                self._db.execute("rollback")
                raise
            self._db.execute("commit")

    # ------------------------------------------------------------------ the receiver

    def accept(self, delivery: Delivery) -> bool:
        """Keep a verified delivery, on disk before this returns; False when its id, or what
        the service signed (a replay under a new id), was accepted before (counted as a
        duplicate, kept once)."""
        columns = sorted(DELIVERY_FIELDS)
        values = [getattr(delivery, name) for name in columns]
        with self._transaction() as db:
            inserted = db.execute(
                f"insert or ignore into deliveries ({', '.join(columns)}) "
                f"values ({', '.join('?' for _ in columns)})",
                values,
            ).rowcount
            outcome = ACCEPTED if inserted else DUPLICATED
            _count(db, delivery.workspace, outcome, "")
            self._write_refusals(db)
        return bool(inserted)

    def reject(self, workspace: str, reason: str) -> None:
        """Count a delivery refused for `reason`: on disk with the next accepted delivery,
        within `REFUSALS_WRITTEN_EVERY` seconds, or when the inbox is closed."""
        with self._lock:
            self._refusals[(workspace, reason)] += 1
            if self._refusals_timer is None:
                timer = threading.Timer(REFUSALS_WRITTEN_EVERY, self._write_refusals_soon)
                timer.daemon = True
                timer.start()
                self._refusals_timer = timer

    def write_refusals(self) -> None:
        """Write the refusals counted since the last write."""
        with self._transaction() as db:
            self._write_refusals(db)

    def _write_refusals_soon(self) -> None:
        # Closed meanwhile, or the disk refused: the counts wait for the next write.
        with suppress(sqlite3.Error, OSError):
            self.write_refusals()

    def _write_refusals(self, db: sqlite3.Connection) -> None:
        """In a transaction (the inbox's lock held)."""
        if self._refusals_timer is not None:
            self._refusals_timer.cancel()
            self._refusals_timer = None
        for (workspace, reason), times in self._refusals.items():
            _count(db, workspace, REJECTED, reason, times)
        self._refusals.clear()

    # ------------------------------------------------------------------ the drains

    def waiting(self, workspace: str, limit: int) -> list[Delivery]:
        """The oldest deliveries of `workspace` no drain has loaded yet."""
        with self._lock:
            rows = self._db.execute(
                "select * from deliveries where workspace = ? and done_at is null "
                "and set_aside is null order by received_at, delivery_id limit ?",
                (workspace, limit),
            ).fetchall()
        return [Delivery.from_row(row) for row in rows]

    def waiting_workspaces(self) -> set[str]:
        with self._lock:
            rows = self._db.execute(
                "select distinct workspace from deliveries where done_at is null "
                "and set_aside is null"
            ).fetchall()
        return {row[0] for row in rows}

    def waiting_for(self, workspace_id: str, received_before: datetime) -> list[Delivery]:
        """The deliveries for a workspace id, under any path, received before a time and not
        loaded yet (what a poll that began then covers)."""
        with self._lock:
            rows = self._db.execute(
                "select * from deliveries where workspace_id = ? and done_at is null "
                "and received_at < ?",
                (workspace_id, stamp(received_before)),
            ).fetchall()
        return [Delivery.from_row(row) for row in rows]

    def mark_done(self, deliveries: Iterable[Delivery], load_id: str | None) -> None:
        """These deliveries are loaded: their load committed."""
        done = stamp(now_utc())
        by_workspace: dict[str, list[tuple[str, str | None, str, str]]] = {}
        for d in deliveries:
            by_workspace.setdefault(d.workspace, []).append(
                (done, load_id, d.workspace, d.delivery_id)
            )
        with self._transaction() as db:
            for workspace, rows in by_workspace.items():
                count = db.executemany(
                    "update deliveries set done_at = ?, load_id = ? "
                    "where workspace = ? and delivery_id = ? and done_at is null",
                    rows,
                ).rowcount  # the rows changed, summed
                if count > 0:  # counted, as the rows go after KEPT_DAYS
                    _count(db, workspace, LOADED, "", count)

    def set_aside(self, deliveries: Iterable[tuple[Delivery, str]]) -> None:
        """Deliveries whose record the service would not serve (each with the reason): no
        drain takes them again; the next load of their workspace does (`waiting_for`)."""
        with self._transaction() as db:
            db.executemany(
                "update deliveries set set_aside = ? where workspace = ? and delivery_id = ?",
                [(reason, d.workspace, d.delivery_id) for d, reason in deliveries],
            )

    def remember_drained(self, workspace_id: str, digests: dict[tuple[str, str], str]) -> None:
        """The content (digest) of each record a drain loaded, by (kind, id)."""
        now = stamp(now_utc())
        rows = [(workspace_id, kind, rid, digest, now) for (kind, rid), digest in digests.items()]
        with self._transaction() as db:
            db.executemany("insert or replace into drained values (?, ?, ?, ?, ?)", rows)

    def record_drain(self, record: DrainRecord) -> None:
        with self._transaction() as db:
            db.execute(
                "insert into drains values (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.workspace,
                    record.started_at,
                    record.finished_at,
                    record.outcome,
                    record.deliveries,
                    record.records,
                    record.requests,
                    record.reason,
                ),
            )
            # The drains of the last days are enough to say how the receiver is doing; a
            # delivery loaded days ago is needed no more (a resend of it is stale, refused on
            # its timestamp), so the inbox does not grow with every delivery ever received.
            kept_from = _days_before(record.started_at, KEPT_DAYS)
            db.execute(
                "delete from drains where workspace = ? and started_at < ?",
                (record.workspace, kept_from),
            )
            db.execute(
                "delete from deliveries where workspace = ? and done_at < ?",
                (record.workspace, kept_from),
            )

    # ------------------------------------------------------------------ the polls

    def drained(self, workspace_id: str) -> dict[tuple[str, str], str]:
        """The digest of each record the drains loaded, by (kind, id)."""
        with self._lock:
            rows = self._db.execute(
                "select record_kind, record_id, digest from drained where workspace_id = ?",
                (workspace_id,),
            ).fetchall()
        return {(kind, record_id): digest for kind, record_id, digest in rows}

    def waiting_records(self, workspace_id: str) -> set[tuple[str, str]]:
        """The (kind, id) of records that deliveries not yet loaded name."""
        with self._lock:
            rows = self._db.execute(
                "select distinct record_kind, record_id from deliveries where workspace_id = ? "
                "and done_at is null and record_id is not null",
                (workspace_id,),
            ).fetchall()
        return {(kind, record_id) for kind, record_id in rows}

    def forget_drained(self, workspace_id: str, before: datetime) -> None:
        """Digests of drains before `before`, which no later poll reads again."""
        with self._transaction() as db:
            db.execute(
                "delete from drained where workspace_id = ? and drained_at < ?",
                (workspace_id, stamp(before)),
            )

    # ------------------------------------------------------------------ status

    def status(self) -> dict[str, InboxStatus]:
        """Per workspace: counts, what waits and since when, the last drain."""
        found: dict[str, InboxStatus] = {}
        with self._lock:
            counts = self._db.execute("select * from counts").fetchall()
            waiting = self._db.execute(
                "select workspace, count(*) filter (where done_at is null and set_aside is null), "
                "min(received_at) filter (where done_at is null and set_aside is null), "
                "count(*) filter (where done_at is null and set_aside is not null), "
                "max(set_aside) filter (where done_at is null) "
                "from deliveries group by workspace"
            ).fetchall()
            drains = self._db.execute(
                "select * from drains d where started_at = (select max(started_at) "
                "from drains e where e.workspace = d.workspace)"
            ).fetchall()
        for workspace, outcome, reason, count in counts:
            status = found.setdefault(workspace, InboxStatus(workspace))
            if outcome == REJECTED:
                status.rejected[reason] = count
            elif outcome == ACCEPTED:
                status.accepted = count
            elif outcome == LOADED:
                status.loaded = count
            else:
                status.duplicated = count
        for workspace, count, oldest, set_aside, reason in waiting:
            status = found.setdefault(workspace, InboxStatus(workspace))
            status.waiting, status.oldest_waiting = count, oldest
            status.set_aside, status.set_aside_reason = set_aside, reason
        for row in drains:
            found.setdefault(
                row["workspace"], InboxStatus(row["workspace"])
            ).last_drain = DrainRecord(**dict(row))
        return found


def _count(
    db: sqlite3.Connection, workspace: str, outcome: str, reason: str, times: int = 1
) -> None:
    db.execute(
        "insert into counts values (?, ?, ?, ?) on conflict (workspace, outcome, reason) "
        "do update set count = count + excluded.count",
        (workspace, outcome, reason, times),
    )


def _days_before(moment: str, days: int) -> str:
    return stamp(datetime.fromisoformat(moment) - timedelta(days=days))
