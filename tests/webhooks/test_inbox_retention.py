"""The receiver's inbox does not grow with every delivery ever received: a delivery loaded more
than `KEPT_DAYS` ago goes at the next drain's record, while what waits, what was loaded lately
and the count of everything loaded stay. Read back with plain sqlite3 and `Inbox.status`."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

from pipelines.webhooks.inbox import KEPT_DAYS, Delivery, DrainRecord, Inbox
from pipelines.webhooks.inbox_rows import SCHEMA
from pipelines.webhooks.secrets_file import now_utc, stamp


def delivery(number: int) -> Delivery:
    return Delivery(
        "default", f"dlv_{number}", "ws_1", "shipment.sent", "shipments", f"shp_{number}"
    )


def kept_ids(path: Path) -> set[str]:
    with sqlite3.connect(path) as db:
        return {row[0] for row in db.execute("select delivery_id from deliveries")}


def test_deliveries_loaded_days_ago_go_and_the_count_of_loaded_ones_stays(tmp_path: Path) -> None:
    inbox = Inbox.open(tmp_path)
    for number in range(6):
        assert inbox.accept(delivery(number))
    inbox.mark_done([delivery(n) for n in range(4)], "load_1")
    inbox.mark_done([delivery(0)], "load_2")  # loaded again: counted once
    # Two were loaded long ago, two lately; two still wait.
    long_ago = stamp(now_utc() - timedelta(days=KEPT_DAYS + 1))
    with sqlite3.connect(inbox.path) as db:
        db.execute(
            "update deliveries set done_at = ? where delivery_id in ('dlv_0', 'dlv_1')", (long_ago,)
        )
    now = stamp(now_utc())
    inbox.record_drain(DrainRecord("default", now, now, "completed", 0, 0, 0))

    assert kept_ids(inbox.path) == {"dlv_2", "dlv_3", "dlv_4", "dlv_5"}
    status = inbox.status()["default"]
    assert (status.loaded, status.waiting, status.accepted) == (4, 2, 6)
    inbox.close()


def test_an_inbox_of_an_earlier_version_counts_the_deliveries_it_had_loaded(tmp_path: Path) -> None:
    """Before, `loaded` was counted from the rows; an older inbox keeps its figure."""
    path = tmp_path / "inbox.sqlite"
    earlier = SCHEMA.replace("    signed text,\n", "")
    with sqlite3.connect(path) as db:
        db.executescript(earlier)
        db.executemany(
            "insert into deliveries (workspace, delivery_id, workspace_id, event, received_at, "
            "done_at) values ('default', ?, 'ws_1', 'shipment.sent', '2026-01-01', ?)",
            [("dlv_a", "2026-01-02"), ("dlv_b", "2026-01-02"), ("dlv_c", None)],
        )
    for _ in range(2):  # opened twice (the receiver, then `webhooks status`): counted once
        inbox = Inbox(path)
        status = inbox.status()["default"]
        assert (status.loaded, status.waiting) == (2, 1)
        inbox.close()
