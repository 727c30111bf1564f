"""What a scheduled load (the poll, which stays the truth) finds that the webhooks had missed,
and the deliveries it takes from the inbox.

A drain remembers a digest of each shipment and contact row it loaded (`RowDigests`, in the
inbox). A poll of a subscribed workspace looks at each shipment and contact row it loads: a row
whose content a drain had loaded already came by webhook; a row whose record a delivery still
waiting in the inbox names is on its way; any other is a change the webhooks missed (a delivery
dropped or refused, or a change that sends no event at all, such as a contact edited). The
poll's summary, its run record and `status` show the counts.

A poll also drains: the deliveries that waited in the inbox since before it began name records
it reads anew, so it loads them into `raw.webhook_deliveries` and marks them done once it ran
to its end (a drain would only read those records again).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from dlt.sources import DltResource

from pipelines.errors import WebhooksError
from pipelines.warehouse import Warehouse
from pipelines.webhooks.inbox import Inbox
from pipelines.webhooks.secrets_file import SecretsFile
from pipelines.webhooks.stream import deliveries_resource
from sources.signing import SyncContext, fingerprint

# The tables whose records deliveries name: a drain loads them, a poll compares them.
RECORD_TABLES = ("shipments", "contacts")


def row_digest(row: dict[str, Any]) -> str:
    """The content of a loaded row, whichever load read it (the read order left out)."""
    return fingerprint({name: value for name, value in row.items() if name != "_fetch_seq"})


class RowDigests:
    """Digests of the shipment and contact rows passing through a source's resources, by
    (table, id); the last read of a record counts."""

    def __init__(self) -> None:
        self.digests: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def watch(self, resources: Iterable[tuple[str, DltResource]]) -> None:
        """Look at each row of these (table, resource) pairs as it is extracted."""
        for table, resource in resources:
            resource.add_map(self._observer(table))

    def _observer(self, table: str) -> Any:
        def observe(row: Any) -> Any:
            if isinstance(row, dict) and "id" in row:
                with self._lock:
                    self.digests[table, str(row["id"])] = row_digest(row)
            return row

        return observe


class Reconciliation:
    """A poll of a subscribed workspace against what the webhooks brought: it counts the
    changes they missed, and takes the deliveries waiting since before it began into
    `raw.webhook_deliveries` (the poll reads their records itself, at least as new)."""

    def __init__(self, inbox: Inbox, workspace_id: str, started: datetime, reach: datetime) -> None:
        self.inbox = inbox
        self.workspace_id = workspace_id
        self.reach = reach
        self.seen = RowDigests()
        self.counting = False  # whether the poll reads any list from a cursor (`watch`)
        self.taken = inbox.waiting_for(workspace_id, started)

    @classmethod
    def for_workspace(
        cls,
        warehouse: Warehouse,
        workspace_id: str,
        started: datetime,
        reach: datetime,
        warn: Callable[[str], None],
    ) -> Reconciliation | None:
        """The reconciliation of a workspace this warehouse's receiver is subscribed for, for
        a poll that began at `started` and whose successor reads changes from `reach`; None
        when webhooks are off for it, or when its secrets or inbox cannot be read (`warn` says
        so: the poll loads all the same)."""
        folder = warehouse.webhooks_dir_of_record()
        if not folder.exists():
            return None
        try:
            secrets = SecretsFile(folder).read()
            if not any(w.workspace_id == workspace_id and w.active() for w in secrets.values()):
                return None
            return cls(Inbox.open(folder), workspace_id, started, reach)
        except WebhooksError as error:
            warn(f"webhooks: the changes they missed are not counted: {error}")
            return None

    @classmethod
    def of_poll(
        cls, warehouse: Warehouse, connection: SyncContext, started: datetime
    ) -> Reconciliation | None:
        """`for_workspace` for a poll through `connection` that began at `started`: the next
        poll reads from its start less the connection's lag and a second."""
        reach = started - timedelta(seconds=connection.lag_seconds + 1)
        warn = connection.client.stats.warn
        return cls.for_workspace(warehouse, connection.workspace_id, started, reach, warn)

    def watch(self, source: Any, incremental: Iterable[str]) -> None:
        """Look at the source's shipment and contact rows as the poll extracts them, of the
        lists in `incremental` (those read from a cursor: a first pass reads every record, not
        the changes, so none of its rows was missed), and load the deliveries taken with them."""
        chosen = source.selected_resources
        counted = [table for table in RECORD_TABLES if table in chosen and table in incremental]
        self.seen.watch((table, chosen[table]) for table in counted)
        self.counting = bool(counted)
        if self.taken:
            source.resources.add(deliveries_resource(self.taken))

    def counts(self) -> tuple[int, int]:
        """(changes the webhooks missed, changes they brought) among the poll's rows: brought
        when a drain had loaded that very content, or a delivery naming the record waits."""
        drained = self.inbox.drained(self.workspace_id)
        waiting = self.inbox.waiting_records(self.workspace_id)
        missed = brought = 0
        for key, digest in self.seen.digests.items():
            if drained.get(key) == digest or key in waiting:
                brought += 1
            else:
                missed += 1
        return missed, brought

    def settle(self, completed: bool, load_ids: list[str]) -> None:
        """After the poll's load committed: when it ran to its end, the deliveries it took are
        done (in the first of `load_ids`) and the digests of drains before its reach (where the
        next poll reads from) are no longer needed."""
        if not completed:
            return
        self.inbox.mark_done(self.taken, load_ids[0] if load_ids else None)
        self.inbox.forget_drained(self.workspace_id, self.reach)

    def close(self) -> None:
        self.inbox.close()
