"""One workspace's records, the list queries over them, and the application's deletes and restores.

All access goes through `Store.lock`, because the server's event loop, the background activity
and in-process tests touch the same records. The rules of the API's writes are in `_writes`,
the simulated activity in `_activity`.

Records the application deletes leave every index, list and alias and wait in `Store.deleted`,
exactly as they were, until a restore puts them back (see `Store.delete` and `Store.restore`).
"""

from __future__ import annotations

import heapq
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from ._config import SandboxConfig
from ._errors import SandboxError
from ._generate import Ids, generate
from ._index import Index, Page, filtered_page
from ._keys import ALL_SCOPES, Keyring, derived_secret
from ._model import Contact, Document, IdempotentReply, Recipient, Shipment, Webhook
from ._steps import WEBHOOK_EVENT
from ._timeline import SandboxClock, apply_until, next_step_ms

# The kinds of record the application can delete and restore (webhooks go through the API).
RecordKind = Literal["contacts", "documents", "shipments"]
RECORD_KINDS: tuple[RecordKind, ...] = get_args(RecordKind)


@dataclass(slots=True)
class StepEvent:
    """A change that subscribers may hear about."""

    event: str
    at_ms: int
    shipment: Shipment | None = None
    recipient: Recipient | None = None
    contact: Contact | None = None


@dataclass(slots=True)
class Deleted:
    """Records the application deleted and has not restored, by id, exactly as they were when
    deleted; `at_ms` says when (sandbox time), by kind and id."""

    documents: dict[str, Document] = field(default_factory=dict)
    contacts: dict[str, Contact] = field(default_factory=dict)
    shipments: dict[str, Shipment] = field(default_factory=dict)
    at_ms: dict[tuple[RecordKind, str], int] = field(default_factory=dict)

    def of(self, kind: RecordKind) -> dict[str, Any]:
        records: dict[str, Any] = getattr(self, kind)
        return records


class Store:
    """All records of one workspace and the rules that change them.

    `position` is the workspace's place among its server's workspaces: with `config.seed` it
    makes the workspace id and the main key, so that no two workspaces of a server share them.
    """

    def __init__(self, config: SandboxConfig, *, position: int = 0) -> None:
        started = time.perf_counter()
        self.config = config
        self.lock = threading.RLock()
        self.clock = SandboxClock(config.start_ms)
        self.activity_rng = random.Random(config.seed * 7919 + 1)
        # Deletes and restores draw from a stream of their own: turning them on leaves the rest
        # of the activity's choices as they were.
        self.deletion_rng = random.Random(config.seed * 7919 + 2)
        # Generation and later activity draw ids from the same streams, so ids keep colliding
        # across workspaces with one id seed as their clocks advance.
        self.ids = Ids.seeded(config.effective_id_seed)
        self.listeners: list[Callable[[Store, StepEvent], None]] = []
        self.keys = Keyring()
        self.main_key = self.keys.create(
            "Sandbox all scopes", ALL_SCOPES, secret=derived_secret(config.seed, position, "main")
        )
        self.webhooks: dict[str, Webhook] = {}
        self.idempotency: dict[str, IdempotentReply] = {}
        self.daily_shipments_used: dict[int, int] = {}
        world = generate(config, position, self.ids)
        self.workspace = world.workspace
        # Lists beside the indexes, for random choices by the activity simulation.
        self.document_list = world.documents
        self.contact_list = world.contacts
        self.documents: Index[Document] = Index(world.documents)
        self.contacts: Index[Contact] = Index(world.contacts)
        self.contacts_by_email = {c.email.lower(): c for c in world.contacts}
        self.shipments: Index[Shipment] = Index(world.shipments)
        self.unarchived_shipments: Index[Shipment] = Index(
            s for s in world.shipments if s.archived_at is None
        )
        # (time of the next planned step, shipment id) of every shipment with steps to come.
        self.pending = [
            (at_ms, s.id) for s in world.shipments if (at_ms := next_step_ms(s)) is not None
        ]
        heapq.heapify(self.pending)
        self.deleted = Deleted()
        self._aliases: dict[str, Shipment] | None = None
        self._shipment_ids: list[str] | None = None
        self.generation_seconds = time.perf_counter() - started

    # ----------------------------------------------------------------- bookkeeping
    def emit(self, event: StepEvent) -> None:
        for listener in self.listeners:
            listener(self, event)

    def add_shipment(self, shipment: Shipment) -> None:
        self.shipments.add(shipment)
        if shipment.archived_at is None:
            self.unarchived_shipments.add(shipment)
        if self._aliases is not None:
            self._add_aliases(self._aliases, shipment)
        self._shipment_ids = None

    def add_contact(self, contact: Contact) -> None:
        """A contact is in its index, the list for random choice and the e-mail lookup."""
        self.contacts.add(contact)
        self.contact_list.append(contact)
        self.contacts_by_email[contact.email.lower()] = contact

    def change_email(self, contact: Contact, email: str) -> None:
        """Give a live contact another e-mail address, and the e-mail lookup with it; one that
        another live contact has is refused (422), as e-mails name one contact."""
        holder = self.contacts_by_email.get(email.lower())
        if holder is not None and holder is not contact:
            raise SandboxError(
                422, "invalid_request", f"contact {holder.id!r} has the e-mail already"
            )
        self.contacts_by_email.pop(contact.email.lower(), None)
        contact.email = email
        self.contacts_by_email[email.lower()] = contact

    def move_shipment(self, shipment: Shipment, updated_at: int) -> None:
        """Shipments sit in two indexes (all, and not archived); re-key both, then the record."""
        self.shipments.move(shipment.id, shipment.updated_at, updated_at)
        self.unarchived_shipments.move(shipment.id, shipment.updated_at, updated_at)
        shipment.updated_at = updated_at

    def apply_due(self, shipment: Shipment, until_ms: int) -> None:
        """Apply every planned step up to `until_ms`, telling listeners of each; keep the
        shipment queued for the rest."""
        was_archived = shipment.archived_at is not None
        last_at: int | None = None
        for at_ms, kind, recipient in apply_until(shipment, until_ms):
            last_at = at_ms
            if kind in WEBHOOK_EVENT:
                self.emit(StepEvent(WEBHOOK_EVENT[kind], at_ms, shipment, recipient))
        next_at = next_step_ms(shipment)
        if next_at is not None:
            heapq.heappush(self.pending, (next_at, shipment.id))
        if last_at is None:
            return
        if shipment.archived_at is not None and not was_archived:
            self.unarchived_shipments.discard(shipment)
        self.move_shipment(shipment, max(shipment.updated_at, last_at))

    def shipment_ids(self) -> list[str]:
        """Every live shipment id, for random choice; rebuilt when shipments came or went."""
        if self._shipment_ids is None:
            self._shipment_ids = list(self.shipments.by_id)
        return self._shipment_ids

    # ----------------------------------------------------------------- deletes and restores
    def live_ids(self, kind: RecordKind) -> list[str]:
        """The ids of the records of `kind` that lists and GETs serve, in a fixed order."""
        return list(self._index(kind).by_id)

    def is_live(self, kind: RecordKind, record_id: str) -> bool:
        """Whether lists and GETs serve the record: it exists and is not deleted."""
        return record_id in self._index(kind).by_id

    def deleted_ids(self, kind: RecordKind) -> set[str]:
        """The ids of the records of `kind` the application deleted and has not restored."""
        with self.lock:
            return set(self.deleted.of(kind))

    def delete(self, kind: RecordKind, ids: Iterable[str]) -> list[str]:
        """Delete records now, as the application does: see `delete_at`."""
        with self.lock:
            return self.delete_at(kind, dict.fromkeys(ids, self.clock.now_ms()))

    def delete_at(self, kind: RecordKind, instants: Mapping[str, int]) -> list[str]:
        """Delete records as the application does, each at its instant (sandbox time), all or
        none: they vanish from lists, totals, GETs and a shipment's children, and keep their
        `updated_at`. A deleted shipment's remaining planned steps are cancelled (no webhook
        event either), so it comes back from a restore as it went."""
        with self.lock:
            self._delete_at(kind, instants)
        return list(instants)

    def _delete_at(self, kind: RecordKind, instants: Mapping[str, int]) -> None:
        index = self._index(kind)
        missing = [record_id for record_id in instants if record_id not in index.by_id]
        if missing:
            raise SandboxError(404, "not_found", f"no live {kind} with id {missing[0]!r}")
        for record_id, at_ms in instants.items():
            record = index.by_id[record_id]
            self.deleted.of(kind)[record_id] = record
            self.deleted.at_ms[(kind, record_id)] = at_ms
            if kind == "shipments":
                self._forget_shipment(record)
            elif kind == "contacts":
                self.contacts.discard(record)
                if self.contacts_by_email.get(record.email.lower()) is record:
                    del self.contacts_by_email[record.email.lower()]
            else:
                self.documents.discard(record)
        # The lists beside the indexes lose them in one pass, however many went.
        if kind == "contacts":
            self.contact_list[:] = [c for c in self.contact_list if c.id not in instants]
        elif kind == "documents":
            self.document_list[:] = [d for d in self.document_list if d.id not in instants]

    def delete_some(self, kind: RecordKind, count: int) -> list[str]:
        """Delete `count` live records of `kind` (all when fewer), chosen by the workspace's
        deletion stream: the same seed and the same calls delete the same records."""
        with self.lock:
            live = self.live_ids(kind)
            chosen = self.deletion_rng.sample(live, min(count, len(live)))
            return sorted(self.delete(kind, chosen))

    def restore(self, kind: RecordKind, record_id: str) -> None:
        """Bring a deleted record back as it was, without a new change stamp: `updated_since`
        does not show it again, only a complete pass over the ids notices. A contact whose
        e-mail another contact took meanwhile cannot come back (409)."""
        with self.lock:
            self._restore(kind, record_id)

    def _restore(self, kind: RecordKind, record_id: str) -> None:
        record = self.deleted.of(kind).get(record_id)
        if record is None:
            raise SandboxError(404, "not_found", f"no deleted {kind} with id {record_id!r}")
        if kind == "contacts":
            holder = self.contacts_by_email.get(record.email.lower())
            if holder is not None:
                raise SandboxError(
                    409, "conflict", f"contact {holder.id!r} has the e-mail of {record_id!r} now"
                )
        del self.deleted.of(kind)[record_id]
        del self.deleted.at_ms[(kind, record_id)]
        if kind == "shipments":
            self.add_shipment(record)
        elif kind == "contacts":
            self.add_contact(record)
        else:
            self.documents.add(record)
            self.document_list.append(record)

    def _forget_shipment(self, shipment: Shipment) -> None:
        self.shipments.discard(shipment)
        self.unarchived_shipments.discard(shipment)
        if self._aliases is not None:
            self._aliases.pop(shipment.uuid, None)
            for recipient in shipment.recipients:
                self._aliases.pop(recipient.link_id, None)
        self._shipment_ids = None
        del shipment.timeline[shipment.applied :]

    def _index(self, kind: RecordKind) -> Index[Any]:
        if kind not in RECORD_KINDS:
            raise SandboxError(422, "invalid_request", f"kind must be one of {RECORD_KINDS}")
        index: Index[Any] = getattr(self, kind)
        return index

    # ----------------------------------------------------------------- reads
    def list_documents(
        self, since: int | None, offset: int, limit: int, search: str | None
    ) -> Page:
        order = self.config.order
        if search:
            needle = search.lower()
            return filtered_page(
                self.documents.scan(since, order), lambda d: needle in d.name.lower(), offset, limit
            )
        return self.documents.page(since, order, offset, limit)

    def list_shipments(
        self,
        since: int | None,
        offset: int,
        limit: int,
        *,
        status: str | None,
        document_id: str | None,
        include_archived: bool,
    ) -> Page:
        index = self.shipments if include_archived else self.unarchived_shipments
        order = self.config.order
        if status is None and document_id is None:
            return index.page(since, order, offset, limit)

        def keep(shipment: Shipment) -> bool:
            return (status is None or shipment.activity_status == status) and (
                document_id is None or shipment.document_id == document_id
            )

        return filtered_page(index.scan(since, order), keep, offset, limit)

    def list_contacts(
        self, since: int | None, offset: int, limit: int, search: str | None, email: str | None
    ) -> Page:
        order = self.config.order
        if email is not None:
            found = self.contacts_by_email.get(email.lower())
            matches = [found] if found and (since is None or found.updated_at >= since) else []
            return Page(matches[offset : offset + limit], len(matches))
        if search:
            needle = search.lower()

            def keep(c: Contact) -> bool:
                return any(
                    needle in (value or "").lower()
                    for value in (c.name, c.email, c.company, c.phone)
                )

            return filtered_page(self.contacts.scan(since, order), keep, offset, limit)
        return self.contacts.page(since, order, offset, limit)

    def find_shipment(self, any_id: str) -> Shipment:
        """By shipment id, internal UUID or a recipient's link id, as the reference allows."""
        shipment = self.shipments.by_id.get(any_id)
        if shipment is None:
            shipment = self._shipment_by_alias().get(any_id)
        if shipment is None:
            raise SandboxError(404, "not_found", f"shipment {any_id!r} not found")
        return shipment

    def _shipment_by_alias(self) -> dict[str, Shipment]:
        # Built on first use and kept up to date by add_shipment: most clients never need it.
        if self._aliases is None:
            self._aliases = {}
            for shipment in self.shipments.by_id.values():
                self._add_aliases(self._aliases, shipment)
        return self._aliases

    @staticmethod
    def _add_aliases(aliases: dict[str, Shipment], shipment: Shipment) -> None:
        aliases[shipment.uuid] = shipment
        for recipient in shipment.recipients:
            aliases[recipient.link_id] = shipment
