"""The rows of the webhook inbox (`inbox.py`): its tables, and what they hold as typed objects."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from pipelines.webhooks.secrets_file import now_utc, stamp

SCHEMA = """
create table if not exists deliveries (
    workspace text not null,
    delivery_id text not null,
    workspace_id text not null,
    event text not null,
    record_kind text,
    record_id text,
    recipient_id text,
    occurred_at text,
    sent_at text,
    received_at text not null,
    done_at text,
    load_id text,
    set_aside text,
    signed text,
    primary key (workspace, delivery_id)
);
create index if not exists deliveries_waiting on deliveries (workspace, done_at, received_at);
create table if not exists counts (
    workspace text not null,
    outcome text not null,
    reason text not null,
    count integer not null,
    primary key (workspace, outcome, reason)
);
create table if not exists drained (
    workspace_id text not null,
    record_kind text not null,
    record_id text not null,
    digest text not null,
    drained_at text not null,
    primary key (workspace_id, record_kind, record_id)
);
create table if not exists drains (
    workspace text not null,
    started_at text not null,
    finished_at text not null,
    outcome text not null,
    deliveries integer not null,
    records integer not null,
    requests integer not null,
    reason text
);
-- status reads each workspace's last drain among a week of them (one every 30 s or so)
create index if not exists drains_by_start on drains (workspace, started_at);
"""


@dataclass(frozen=True)
class Delivery:
    """One delivery as the inbox keeps it: who sent it, what it names, when it came."""

    workspace: str  # the configured name whose path received it
    delivery_id: str
    workspace_id: str
    event: str
    record_kind: str | None  # `shipments` or `contacts`; None for events naming neither
    record_id: str | None
    recipient_id: str | None = None
    occurred_at: str | None = None  # the event's time, as the payload says
    sent_at: str | None = None  # X-Service-Timestamp
    received_at: str = field(default_factory=lambda: stamp(now_utc()))
    # A digest of what the service signed (the timestamp and the body): the same signed
    # delivery sent again under another id (the id is not signed) is a replay, kept once.
    signed: str | None = None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Delivery:
        return cls(**{name: row[name] for name in DELIVERY_FIELDS})


DELIVERY_FIELDS = {
    "workspace",
    "delivery_id",
    "workspace_id",
    "event",
    "record_kind",
    "record_id",
    "recipient_id",
    "occurred_at",
    "sent_at",
    "received_at",
    "signed",
}


@dataclass(frozen=True)
class DrainRecord:
    """What one drain of one workspace did."""

    workspace: str
    started_at: str
    finished_at: str
    outcome: str  # completed, stopped, failed, busy
    deliveries: int
    records: int
    requests: int
    reason: str | None = None


@dataclass
class InboxStatus:
    """One workspace's inbox, for `webhooks status`."""

    workspace: str
    accepted: int = 0
    duplicated: int = 0
    rejected: dict[str, int] = field(default_factory=dict)  # by reason
    waiting: int = 0  # accepted, not loaded yet (those set aside apart)
    oldest_waiting: str | None = None  # when the oldest of them was received
    loaded: int = 0
    # Deliveries whose record the service would not serve a drain, left to the next load, and
    # one of their reasons (the request and its answer; never a body or a secret).
    set_aside: int = 0
    set_aside_reason: str | None = None
    last_drain: DrainRecord | None = None

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())


# Columns added since the inbox's first version: a file an earlier version made gains them.
ADDED_COLUMNS = {"deliveries": {"set_aside": "text", "signed": "text"}}


def upgrade(db: sqlite3.Connection) -> None:
    """Add the columns an inbox made by an earlier version lacks."""
    for table, columns in ADDED_COLUMNS.items():
        held = {row[1] for row in db.execute(f"pragma table_info({table})")}
        for name, kind in columns.items():
            if name not in held:
                db.execute(f"alter table {table} add column {name} {kind}")
    # Deliveries loaded were counted from their rows, which now go after some days: an inbox
    # with no count of them yet counts those it holds, once.
    if not db.execute("select 1 from counts where outcome = 'loaded' limit 1").fetchone():
        db.execute(
            "insert or ignore into counts select workspace, 'loaded', '', count(*) "
            "from deliveries "
            "where done_at is not null group by workspace"
        )
    # One row per signed content and workspace: a replay under a new id is a duplicate.
    db.execute(
        "create unique index if not exists deliveries_signed on deliveries (workspace, signed)"
    )
