"""The sandbox's data: generation, the clock, list queries and every change the API or the
activity simulation makes.

Lists are served from sorted indexes of `(updated_at, id)`, so `updated_since` is a bisection
and a page is a slice whatever the size. All access goes through `Store.lock`, because the
server's event loop, the background activity and in-process tests touch the same records.
"""

from __future__ import annotations

import hashlib
import heapq
import random
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, Literal, Protocol, TypeVar

from sortedcontainers import SortedList

from ._model import (
    JSON,
    WEBHOOK_EVENT,
    ApiKey,
    Contact,
    Document,
    IdempotentReply,
    Kind,
    Recipient,
    Shipment,
    Webhook,
    unpack_step,
)
from ._simulation import (
    DAY_MS,
    FAILED_DELIVERY_ERROR,
    OWNERS,
    Behaviour,
    make_contact,
    make_documents,
    make_workspace,
    plan_timeline,
    random_person,
)

Order = Literal["asc", "desc"]
PLAN_REQUESTS_PER_MINUTE = {"free": 30, "starter": 60, "pro": 300, "business": 1000}
ALL_SCOPES = frozenset({"read", "write", "send"})
MAX_RECIPIENTS = 200


def default_start_ms() -> int:
    """Midnight UTC of today: the generated history ends where the user's calendar is."""
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return int(today.timestamp() * 1000)


@dataclass(slots=True)
class SandboxConfig:
    """Everything that makes one sandbox instance; tests use tight limits, the demo generous."""

    seed: int = 42
    shipments: int = 2_000
    history_days: int = 180
    start_ms: int = field(default_factory=default_start_ms)
    plan: str = "pro"
    order: Order = "asc"
    # Limits. `None` for requests_per_minute means the plan's figure.
    limits_enabled: bool = True
    requests_per_second: float = 10.0
    burst: int = 40
    requests_per_minute: int | None = None
    daily_shipments: int = 2_000
    daily_requests: int | None = None
    ip_requests_per_second: float = 100.0
    ip_burst: int = 400
    # Faults injected into /v1 responses, as rates between 0 and 1.
    fault_429_rate: float = 0.0
    fault_5xx_rate: float = 0.0
    fault_truncate_rate: float = 0.0
    fault_retry_after: Literal["seconds", "http-date", "zero", "mixed"] = "seconds"
    # Webhook delivery.
    webhook_timeout_s: float = 5.0
    webhook_retry_base_s: float = 1.0
    behaviour: Behaviour = field(default_factory=Behaviour)

    @property
    def effective_requests_per_minute(self) -> int:
        if self.requests_per_minute is not None:
            return self.requests_per_minute
        return PLAN_REQUESTS_PER_MINUTE.get(self.plan, 300)


class SandboxClock:
    """Sandbox time: the start instant plus real elapsed time plus every advance."""

    def __init__(self, start_ms: int) -> None:
        self._start_ms = start_ms
        self._real_start = time.monotonic()
        self._advanced_ms = 0

    def now_ms(self) -> int:
        elapsed = int((time.monotonic() - self._real_start) * 1000)
        return self._start_ms + self._advanced_ms + elapsed

    def advance(self, milliseconds: int) -> None:
        self._advanced_ms += max(0, milliseconds)


@dataclass(slots=True)
class Page:
    items: list[Any]
    total: int


@dataclass(slots=True)
class StepEvent:
    """A change that subscribers may hear about."""

    event: str
    at_ms: int
    shipment: Shipment | None = None
    recipient: Recipient | None = None
    contact: Contact | None = None


class Indexed(Protocol):
    id: str
    updated_at: int


R = TypeVar("R", bound=Indexed)


class Index(Generic[R]):
    """Records of one kind sorted by `(updated_at, id)`."""

    def __init__(self, records: Iterable[R] = ()) -> None:
        self.by_id: dict[str, R] = {r.id: r for r in records}
        self._keys = SortedList((r.updated_at, r.id) for r in self.by_id.values())

    def __len__(self) -> int:
        return len(self.by_id)

    def add(self, record: R) -> None:
        self.by_id[record.id] = record
        self._keys.add((record.updated_at, record.id))

    def discard(self, record: R) -> None:
        if self.by_id.pop(record.id, None) is not None:
            self._keys.discard((record.updated_at, record.id))

    def touch(self, record: R, updated_at: int) -> None:
        """Move a record to its new `updated_at`; must be the only way it changes."""
        self.move(record.id, record.updated_at, updated_at)
        record.updated_at = updated_at

    def move(self, record_id: str, old: int, new: int) -> None:
        """Re-key a record held by several indexes: each needs the old key to find it."""
        if record_id in self.by_id:
            self._keys.discard((old, record_id))
            self._keys.add((new, record_id))

    def page(self, since_ms: int | None, order: Order, offset: int, limit: int) -> Page:
        start = 0 if since_ms is None else self._keys.bisect_left((since_ms, ""))
        total = len(self._keys) - start
        if order == "asc":
            keys = self._keys.islice(start + offset, start + offset + limit)
        else:
            stop = len(self._keys) - offset
            keys = self._keys.islice(max(start, stop - limit), max(start, stop), reverse=True)
        return Page([self.by_id[key[1]] for key in keys], total)

    def scan(self, since_ms: int | None, order: Order) -> Iterator[R]:
        start = 0 if since_ms is None else self._keys.bisect_left((since_ms, ""))
        keys = self._keys.islice(start, len(self._keys), reverse=(order == "desc"))
        return (self.by_id[key[1]] for key in keys)


def filtered_page(
    records: Iterator[Any], keep: Callable[[Any], bool], offset: int, limit: int
) -> Page:
    """Offset paging over a filter, for the rarely used filters that have no index."""
    items: list[Any] = []
    total = 0
    for record in records:
        if keep(record):
            if offset <= total < offset + limit:
                items.append(record)
            total += 1
    return Page(items, total)


class SandboxError(Exception):
    """A request the API refuses; `status` and `code` as in the reference's Errors part."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class Store:
    """All records of the sandbox's one workspace and the rules that change them."""

    def __init__(self, config: SandboxConfig) -> None:
        started = time.perf_counter()
        self.config = config
        self.lock = threading.RLock()
        self.clock = SandboxClock(config.start_ms)
        self._rng = random.Random(config.seed)
        self._activity_rng = random.Random(config.seed * 7919 + 1)
        self.listeners: list[Callable[[StepEvent], None]] = []
        self.workspace = make_workspace(self._rng, config.plan)
        self.keys: dict[str, ApiKey] = {}
        self.webhooks: dict[str, Webhook] = {}
        self.idempotency: dict[str, IdempotentReply] = {}
        self.daily_shipments_used: dict[int, int] = {}
        self._pending: list[tuple[int, str]] = []  # heap of (next step time, shipment id)
        self.main_key = self.create_key(
            "Sandbox all scopes", ALL_SCOPES, secret=self._derive_secret("main")
        )
        self._generate()
        self.generation_seconds = time.perf_counter() - started

    # ----------------------------------------------------------------- generation
    def _derive_secret(self, purpose: str) -> str:
        digest = hashlib.sha256(f"{self.config.seed}:{purpose}".encode()).hexdigest()
        return f"sk_live_{digest[:40]}"

    def _generate(self) -> None:
        config, rng = self.config, self._rng
        now = config.start_ms
        history_ms = config.history_days * DAY_MS
        begin = now - history_ms - 30 * DAY_MS
        documents = make_documents(rng, max(8, min(200, config.shipments // 1000)), begin)
        for doc in documents:
            doc.updated_at = min(doc.updated_at, now - 1)
        self.documents: Index[Document] = Index(documents)
        contacts = [
            make_contact(rng, begin + rng.randrange(0, history_ms + 30 * DAY_MS))
            for _ in range(max(50, min(50_000, config.shipments // 4)))
        ]
        for contact in contacts:
            if rng.random() < 0.3:
                contact.updated_at = rng.randrange(contact.created_at, now)
        self.contacts: Index[Contact] = Index(contacts)
        self._contacts_by_email = {c.email.lower(): c for c in contacts}
        self._contact_list = contacts
        self._document_list = documents
        self.shipments: Index[Shipment] = Index()
        self.unarchived_shipments: Index[Shipment] = Index()
        shipments: list[Shipment] = []
        first_created = now - history_ms
        for number in range(config.shipments):
            created = first_created + (history_ms * number) // max(1, config.shipments)
            created += rng.randrange(0, max(1, history_ms // max(1, config.shipments)))
            shipment = self._new_shipment(rng, created, rng.choice(documents), None)
            self._apply_due(shipment, now, notify=False, reindex=False)
            shipments.append(shipment)
        self.shipments = Index(shipments)
        self.unarchived_shipments = Index(s for s in shipments if s.archived_at is None)

    def _new_shipment(
        self,
        rng: random.Random,
        created: int,
        document: Document,
        people: list[tuple[str, str, str | None, str | None, str | None]] | None,
        *,
        channel: str | None = None,
        signature_level: str | None = None,
        expires_in_days: int | None = None,
        password: str | None = None,
        placeholders: dict[str, str] | None = None,
        field_values: dict[str, Any] | None = None,
    ) -> Shipment:
        """A shipment with its planned future; `people` are (name, email, phone, company,
        contact id), drawn from contacts and strangers when not given."""
        if people is None:
            people = []
            for _ in range(max(1, document.signer_count + rng.choice((0, 0, 0, 1)))):
                if rng.random() < 0.7:
                    c = rng.choice(self._contact_list)
                    people.append((c.name, c.email, c.phone, c.company, c.id))
                else:
                    people.append((*random_person(rng), None))
        days = expires_in_days or rng.choice((7, 14, 14, 30))
        expires = created + days * DAY_MS
        shipment_id = f"shp_{rng.getrandbits(64):016x}"
        recipients = [
            Recipient(
                id=f"rcp_{rng.getrandbits(64):016x}",
                link_id=f"lnk_{rng.getrandbits(80):020x}",
                position=position,
                name=name,
                email=email,
                phone=phone,
                company=company,
                contact_id=contact_id,
                expires_at=expires,
            )
            for position, (name, email, phone, company, contact_id) in enumerate(people)
        ]
        sign_mode = "sequential" if len(recipients) > 1 and rng.random() < 0.7 else "parallel"
        owner_name, owner_email = rng.choice(OWNERS)
        return Shipment(
            id=shipment_id,
            uuid=f"{rng.getrandbits(128):032x}",
            document_id=document.id,
            document_name=document.name,
            document_fields=document.fields,
            channel=channel or ("email" if rng.random() < 0.9 else "sms"),
            sign_mode=sign_mode,
            signature_level=signature_level or rng.choice(("fes", "fes", "ees")),
            password_protected=bool(password) or rng.random() < 0.05,
            folder_id=document.folder_id,
            owner_name=owner_name,
            owner_email=owner_email,
            created_at=created,
            expires_at=expires,
            recipients=recipients,
            timeline=plan_timeline(
                rng, created, recipients, sign_mode, expires, self.config.behaviour
            ),
            placeholders=placeholders
            if placeholders is not None
            else {name: f"{name}-{rng.randrange(10_000)}" for name in document.placeholders},
            field_values=dict(field_values or {}),
            updated_at=created,
        )

    # ----------------------------------------------------------------- timeline
    def _apply_due(
        self, shipment: Shipment, until_ms: int, *, notify: bool, reindex: bool = True
    ) -> None:
        """Apply every planned step up to `until_ms`; keep the shipment queued for the rest."""
        last_at: int | None = None
        was_archived = shipment.archived_at is not None
        while shipment.applied < len(shipment.timeline):
            at_ms, kind, index = unpack_step(shipment.timeline[shipment.applied])
            if at_ms > until_ms:
                heapq.heappush(self._pending, (at_ms, shipment.id))
                break
            shipment.applied += 1
            last_at = at_ms
            recipient = shipment.recipients[index]
            _apply_step(shipment, recipient, kind, at_ms)
            if notify and kind in WEBHOOK_EVENT:
                self._emit(StepEvent(WEBHOOK_EVENT[kind], at_ms, shipment, recipient))
        if last_at is None:
            return
        if not reindex:
            shipment.updated_at = max(shipment.updated_at, last_at)
            return
        if shipment.archived_at is not None and not was_archived:
            self.unarchived_shipments.discard(shipment)
        self._move_shipment(shipment, max(shipment.updated_at, last_at))

    def _move_shipment(self, shipment: Shipment, updated_at: int) -> None:
        """Shipments sit in two indexes (all, and not archived); re-key both, then the record."""
        self.shipments.move(shipment.id, shipment.updated_at, updated_at)
        self.unarchived_shipments.move(shipment.id, shipment.updated_at, updated_at)
        shipment.updated_at = updated_at

    def _emit(self, event: StepEvent) -> None:
        for listener in self.listeners:
            listener(event)

    def advance(self, milliseconds: int) -> dict[str, int]:
        """Move the clock forward and let that period's activity happen, in time order."""
        with self.lock:
            start = self.clock.now_ms()
            end = start + max(0, milliseconds)
            counts = {"new_shipments": 0, "steps": 0, "contacts_changed": 0}
            rng, config = self._activity_rng, self.config
            per_day = config.shipments / max(1, config.history_days)
            expected_new = per_day * milliseconds / DAY_MS
            new_count = int(expected_new) + (rng.random() < expected_new % 1)
            for created in sorted(rng.randrange(start, end + 1) for _ in range(new_count)):
                shipment = self._new_shipment(rng, created, rng.choice(self._document_list), None)
                self.shipments.add(shipment)
                self.unarchived_shipments.add(shipment)
                heapq.heappush(self._pending, (unpack_step(shipment.timeline[0])[0], shipment.id))
                counts["new_shipments"] += 1
            while self._pending and self._pending[0][0] <= end:
                due_ms, shipment_id = heapq.heappop(self._pending)
                shipment = self.shipments.by_id[shipment_id]
                if shipment.applied >= len(shipment.timeline) or (
                    unpack_step(shipment.timeline[shipment.applied])[0] != due_ms
                ):
                    continue  # a stale entry: the step was applied by another path
                before = shipment.applied
                self._apply_due(shipment, end, notify=True)
                counts["steps"] += shipment.applied - before
            edits = int(len(self.contacts) * 0.002 * milliseconds / DAY_MS)
            for at_ms in sorted(rng.randrange(start, end + 1) for _ in range(edits)):
                contact = rng.choice(self._contact_list)
                contact.custom["crm.last_touch"] = f"t{at_ms}"
                self.contacts.touch(contact, max(contact.updated_at, at_ms))
                counts["contacts_changed"] += 1
            self.clock.advance(end - self.clock.now_ms())
            return counts

    def jiggle(self, count: int) -> None:
        """Update `count` random old records one by one, as people edit contacts and reopen
        finished documents: the changes that shift records between pages of a list."""
        if count <= 0:
            return
        with self.lock:
            rng = self._activity_rng
            for _ in range(count):
                now = self.clock.now_ms()
                if rng.random() < 0.5:
                    contact = rng.choice(self._contact_list)
                    contact.custom["crm.last_touch"] = str(now)
                    self.contacts.touch(contact, max(contact.updated_at, now))
                else:
                    shipment = self.shipments.by_id[rng.choice(self._shipment_ids())]
                    recipient = shipment.recipients[0]
                    if recipient.sent_at is None:
                        continue
                    recipient.view_count += 1
                    recipient.last_viewed_at = now
                    self._move_shipment(shipment, max(shipment.updated_at, now))

    def _shipment_ids(self) -> list[str]:
        # Cached list for random choice; rebuilt when shipments were added.
        ids: list[str] | None = getattr(self, "_ids_cache", None)
        if ids is None or len(ids) != len(self.shipments):
            ids = list(self.shipments.by_id)
            self._ids_cache = ids
        return ids

    def touch(self, entity: str, count: int) -> int:
        """Give `count` records one shared `updated_at` (a bulk update), as real data has."""
        with self.lock:
            now, rng = self.clock.now_ms(), self._activity_rng
            if entity == "contacts":
                contacts = rng.sample(self._contact_list, min(count, len(self.contacts)))
                for contact in contacts:
                    contact.notes = f"bulk update {now}"
                    self.contacts.touch(contact, now)
                return len(contacts)
            if entity == "shipments":
                ids = rng.sample(self._shipment_ids(), min(count, len(self.shipments)))
                for shipment_id in ids:
                    shipment = self.shipments.by_id[shipment_id]
                    shipment.recipients[0].view_count += 1
                    shipment.recipients[0].last_viewed_at = now
                    self._move_shipment(shipment, now)
                return len(ids)
            if entity == "documents":
                documents = rng.sample(self._document_list, min(count, len(self.documents)))
                for doc in documents:
                    doc.status = "active"
                    self.documents.touch(doc, now)
                return len(documents)
            raise SandboxError(422, "invalid_request", f"unknown entity {entity!r}")

    # ----------------------------------------------------------------- keys
    def create_key(
        self,
        name: str,
        scopes: Iterable[str],
        *,
        secret: str | None = None,
        expires_at: int | None = None,
        ip_allowlist: Iterable[str] = (),
    ) -> ApiKey:
        key = ApiKey(
            name=name,
            secret=secret or f"sk_live_{secrets.token_hex(20)}",
            scopes=frozenset(scopes),
            expires_at=expires_at,
            ip_allowlist=tuple(ip_allowlist),
        )
        with self.lock:
            self.keys[key.secret] = key
        return key

    def authenticate(self, secret: str | None, client_ip: str | None) -> ApiKey:
        """The key behind a bearer token, or 401 for missing, unknown, revoked, expired or
        out-of-allowlist keys (the reference gives them all one code)."""
        key = self.keys.get(secret or "")
        if key is None or key.revoked:
            raise SandboxError(401, "unauthorized", "API key missing, invalid or revoked")
        if key.expires_at is not None and key.expires_at <= self.clock.now_ms():
            raise SandboxError(401, "unauthorized", "API key expired")
        if key.ip_allowlist and client_ip not in key.ip_allowlist:
            raise SandboxError(401, "unauthorized", "API key not allowed from this address")
        return key

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
            found = self._contacts_by_email.get(email.lower())
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
        # Built on first use and extended by create_shipment: most clients never need it.
        aliases: dict[str, Shipment] | None = getattr(self, "_aliases", None)
        if aliases is None:
            aliases = {}
            for shipment in self.shipments.by_id.values():
                aliases[shipment.uuid] = shipment
                for recipient in shipment.recipients:
                    aliases[recipient.link_id] = shipment
            self._aliases = aliases
        return aliases

    # ----------------------------------------------------------------- writes
    def create_shipment(self, body: JSON, idempotency_key: str | None) -> tuple[int, JSON]:
        """Validate, resolve recipients, spend the daily allowance and plan the shipment."""
        digest = hashlib.sha256(repr(sorted(body.items())).encode()).hexdigest()
        if idempotency_key:
            stored = self.idempotency.get(idempotency_key)
            if stored is not None:
                if stored.body_digest != digest:
                    raise SandboxError(
                        422, "invalid_request", "Idempotency-Key was used with a different body"
                    )
                return stored.status_code, stored.body
        document = self.documents.by_id.get(str(body.get("document_id")))
        if document is None:
            raise SandboxError(404, "not_found", "document not found")
        _check_field_values(document, body.get("field_values") or {})
        people = self._resolve_recipients(body)
        if not people:
            raise SandboxError(422, "invalid_request", "at least one recipient is required")
        now = self.clock.now_ms()
        day = now // DAY_MS
        if self.daily_shipments_used.get(day, 0) >= self.config.daily_shipments:
            raise DailyAllowanceExhausted((day + 1) * DAY_MS - now)
        self.daily_shipments_used[day] = self.daily_shipments_used.get(day, 0) + 1
        rng = random.Random(f"{self.config.seed}:{now}:{digest}:{len(self.shipments)}")
        shipment = self._new_shipment(
            rng,
            now,
            document,
            people,
            channel=body.get("channel"),
            signature_level=body.get("signature_level"),
            expires_in_days=body.get("expires_in_days"),
            password=body.get("password"),
            placeholders={str(k): str(v) for k, v in (body.get("placeholders") or {}).items()},
            field_values=body.get("field_values") or {},
        )
        self.shipments.add(shipment)
        self.unarchived_shipments.add(shipment)
        aliases = self._shipment_by_alias()
        aliases[shipment.uuid] = shipment
        for recipient in shipment.recipients:
            aliases[recipient.link_id] = shipment
        # What the dispatch queue gets out at once: every step within the first few seconds.
        self._apply_due(shipment, now + 30_000, notify=True)
        sent = sum(1 for r in shipment.recipients if r.sent_at is not None)
        failed = sum(1 for r in shipment.recipients if r.delivery_status == "failed")
        dispatch = {
            "sent": sent - failed,
            "failed": failed,
            "remaining": len(shipment.recipients) - sent,
        }
        reply = {"data": shipment.to_json(), "dispatch": dispatch}
        if idempotency_key:
            self.idempotency[idempotency_key] = IdempotentReply(digest, 201, reply, now)
        return 201, reply

    def _resolve_recipients(
        self, body: JSON
    ) -> list[tuple[str, str, str | None, str | None, str | None]]:
        people: dict[str, tuple[str, str, str | None, str | None, str | None]] = {}
        for item in body.get("recipients") or []:
            email = str(item.get("email") or "").strip()
            if "@" not in email:
                raise SandboxError(422, "invalid_request", "each recipient needs an e-mail")
            people.setdefault(
                email.lower(),
                (str(item.get("name") or email), email, None, item.get("company"), None),
            )
        contacts = [self._contact_or_422(cid) for cid in body.get("contact_ids") or []]
        for group in body.get("group_ids") or []:
            contacts.extend(c for c in self._contact_list if group in c.group_ids)
        for c in contacts:
            people.setdefault(c.email.lower(), (c.name, c.email, c.phone, c.company, c.id))
        if len(people) > MAX_RECIPIENTS:
            raise SandboxError(
                422, "invalid_request", f"at most {MAX_RECIPIENTS} recipients per shipment"
            )
        return list(people.values())

    def _contact_or_422(self, contact_id: str) -> Contact:
        contact = self.contacts.by_id.get(contact_id)
        if contact is None:
            raise SandboxError(422, "invalid_request", f"unknown contact id {contact_id!r}")
        return contact

    def upsert_contact(self, body: JSON) -> tuple[int, Contact]:
        """Update by e-mail or id when the contact exists (200), else create it (201)."""
        email, contact_id = body.get("email"), body.get("id")
        if not email and not contact_id:
            raise SandboxError(422, "invalid_request", "email or id is required")
        now = self.clock.now_ms()
        existing = (self.contacts.by_id.get(contact_id) if contact_id else None) or (
            self._contacts_by_email.get(email.lower()) if email else None
        )
        if existing is None:
            if not email:
                raise SandboxError(422, "invalid_request", "a new contact needs an email")
            contact = Contact(
                id=contact_id or f"ct_{secrets.token_hex(6)}",
                name=body.get("name") or email,
                email=email,
                phone=body.get("phone"),
                company=body.get("company"),
                position=body.get("position"),
                notes=body.get("notes"),
                custom=dict(body.get("custom") or {}),
                group_ids=sorted(set(body.get("group_ids") or [])),
                created_at=now,
                updated_at=now,
            )
            self.contacts.add(contact)
            self._contact_list.append(contact)
            self._contacts_by_email[email.lower()] = contact
            self._emit(StepEvent("contact.created", now, contact=contact))
            return 201, contact
        if email and email.lower() != existing.email.lower():
            self._contacts_by_email.pop(existing.email.lower(), None)
            existing.email = email
            self._contacts_by_email[email.lower()] = existing
        for name in ("name", "phone", "company", "position", "notes"):
            if name in body:
                setattr(existing, name, body[name])
        existing.custom.update(body.get("custom") or {})
        if "group_ids" in body:
            existing.group_ids = sorted(set(body["group_ids"] or []))
        self.contacts.touch(existing, max(now, existing.updated_at))
        return 200, existing

    def create_webhook(self, event: str, target_url: str) -> Webhook:
        hook = Webhook(
            id=f"wh_{secrets.token_hex(8)}",
            event=event,
            target_url=target_url,
            secret=f"whsec_{secrets.token_hex(24)}",
            created_at=self.clock.now_ms(),
        )
        self.webhooks[hook.id] = hook
        return hook

    def delete_webhook(self, hook_id: str) -> None:
        if self.webhooks.pop(hook_id, None) is None:
            raise SandboxError(404, "not_found", f"webhook {hook_id!r} not found")


def _check_field_values(document: Document, values: JSON) -> None:
    """Pre-filled values must have the shape the filled-in content shows for their field type:
    a string for text, `{variantId, extras}` for payment. Ids of no field are ignored."""
    for fld in document.fields:
        if fld.id not in values:
            continue
        value = values[fld.id]
        if fld.type == "payment":
            extras = value.get("extras") if isinstance(value, dict) else None
            valid = (
                isinstance(value, dict)
                and isinstance(value.get("variantId"), str)
                and isinstance(extras, dict)
                and all(isinstance(v, str) for v in extras.values())
            )
            expected = "an object with variantId (string) and extras (strings)"
        else:
            valid = isinstance(value, str)
            expected = "a string"
        if not valid:
            raise SandboxError(
                422, "invalid_request", f"field_values[{fld.id!r}] must be {expected}"
            )


class DailyAllowanceExhausted(SandboxError):
    """The workspace sent its daily number of shipments; `wait_ms` until the sandbox's midnight."""

    def __init__(self, wait_ms: int) -> None:
        super().__init__(429, "rate_limited", "daily shipment allowance exhausted")
        self.wait_ms = wait_ms


def _apply_step(shipment: Shipment, recipient: Recipient, kind: Kind, at_ms: int) -> None:
    """What one planned step does to the records."""
    if kind is Kind.SENT:
        recipient.status = "sent"
        recipient.sent_at = at_ms
        recipient.delivery_status = "queued"
    elif kind is Kind.DELIVERED:
        recipient.delivery_status = "delivered"
        recipient.delivered_at = at_ms
    elif kind is Kind.DELIVERY_FAILED:
        recipient.delivery_status = "failed"
        recipient.last_error = FAILED_DELIVERY_ERROR
    elif kind in (Kind.OPENED, Kind.VIEWED):
        if recipient.status != "signed":
            recipient.status = "opened"
        if recipient.first_opened_at is None:
            recipient.first_opened_at = at_ms
        recipient.view_count += 1
        recipient.last_viewed_at = at_ms
    elif kind is Kind.SIGNED:
        recipient.status = "signed"
        recipient.signed_at = at_ms
    elif kind is Kind.COMPLETED:
        shipment.status = "completed"
        shipment.completed_at = at_ms
    elif kind is Kind.EXPIRED:
        shipment.status = "expired"
        shipment.expired_at = at_ms
    elif kind is Kind.REVOKED:
        shipment.status = "revoked"
        shipment.revoked_at = at_ms
    elif kind is Kind.ARCHIVED:
        shipment.archived_at = at_ms
