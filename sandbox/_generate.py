"""Synthetic workspace data: documents, contacts and shipments, deterministic from a seed.

Names, companies and documents are drawn from small tables so that the data reads like a real
German-speaking workspace; every shipment's future comes from `plan_timeline`. Record ids come
from streams of their own (`Ids`), so that workspaces can share ids while their data differs.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any

from ._config import SandboxConfig
from ._model import Contact, Document, DocumentField, Recipient, Shipment, Workspace
from ._timeline import DAY_MS, Behaviour, apply_until, plan_timeline

# (name, email, phone, company, contact id) of one recipient to be.
Person = tuple[str, str, str | None, str | None, str | None]

FIRST_NAMES = (
    "Anna",
    "Ben",
    "Clara",
    "David",
    "Elif",
    "Felix",
    "Greta",
    "Hannes",
    "Ida",
    "Jonas",
    "Kira",
    "Lukas",
    "Mia",
    "Noah",
    "Olga",
    "Paul",
    "Quentin",
    "Rosa",
    "Sven",
    "Tara",
    "Umut",
    "Vera",
    "Wim",
    "Xenia",
    "Yusuf",
    "Zoe",
)
LAST_NAMES = (
    "Schmidt",
    "Müller",
    "Weber",
    "Fischer",
    "Wagner",
    "Becker",
    "Hoffmann",
    "Koch",
    "Richter",
    "Klein",
    "Wolf",
    "Neumann",
    "Schwarz",
    "Braun",
    "Zimmermann",
    "Krüger",
    "Hartmann",
    "Lange",
    "Werner",
    "Krause",
    "Meier",
    "Lehmann",
    "Huber",
    "Kaya",
    "Nowak",
    "Rossi",
    "Dubois",
)
COMPANIES = (
    "Nordlicht GmbH",
    "Bergmann & Söhne KG",
    "Rheinwerk AG",
    "Alpenblick Immobilien",
    "Hansa Logistik",
    "Isar Software",
    "Elbe Energie",
    "Spree Consulting",
    "Main Finanz",
    "Weser Bau",
    None,
    None,
)
POSITIONS = ("CEO", "Head of Sales", "Procurement", "Legal Counsel", "Office Manager", None)
DOCUMENT_NAMES = (
    "Employment contract",
    "NDA",
    "Rental agreement",
    "Service agreement",
    "Order form",
    "Data processing agreement",
    "Consent form",
    "Membership application",
    "Power of attorney",
    "Supplier contract",
    "Loan agreement",
    "Offer letter",
    "SEPA mandate",
    "Change request",
)
PLACEHOLDER_NAMES = ("customer_name", "contract_no", "start_date", "amount", "city")
FIELD_LABELS = ("Full name", "IBAN", "City", "Date of birth", "Tax ID", "Comment", "Job title")
OWNERS = (
    ("Maria Vogel", "maria.vogel@example.com"),
    ("Tom Berger", "tom.berger@example.com"),
    ("Lena Roth", "lena.roth@example.com"),
)
GROUP_IDS = tuple(f"grp_{name}" for name in ("customers", "suppliers", "staff", "vip", "board"))
CUSTOM_KEYS = ("crm.account_id", "billing.vat.id", "region", "hubspot.owner", "tier")
_ASCII = str.maketrans(
    {"ä": "ae", "ö": "oe", "ü": "ue", "ß": "ss", "Ä": "Ae", "Ö": "Oe", "Ü": "Ue"}
)


@dataclass(frozen=True, slots=True)
class Ids:
    """Where record ids come from: a random stream per kind of record (recipients' ids derive
    from their shipment's)."""

    documents: random.Random
    fields: random.Random
    contacts: random.Random
    shipments: random.Random
    webhooks: random.Random

    @classmethod
    def seeded(cls, id_seed: int) -> Ids:
        """One stream per kind, so the n-th record of a kind has the same id in every
        workspace with this id seed, whatever its data (which decides, say, how many
        recipients a shipment has)."""
        kinds = ("documents", "fields", "contacts", "shipments", "webhooks")
        return cls(*(random.Random(f"{id_seed}:{kind}") for kind in kinds))

    @classmethod
    def from_rng(cls, rng: random.Random) -> Ids:
        """Ids drawn from `rng` itself, for a record the API creates from its request."""
        return cls(rng, rng, rng, rng, rng)


@dataclass(slots=True)
class World:
    """What a workspace starts with: the records of its history up to the clock start."""

    workspace: Workspace
    documents: list[Document]
    contacts: list[Contact]
    shipments: list[Shipment]


def generate(config: SandboxConfig, position: int, ids: Ids) -> World:
    """The workspace's history: shipments created evenly over `history_days` before the clock
    start, each with the steps of its timeline that happened by then applied."""
    rng = random.Random(config.seed)
    workspace = make_workspace(config.seed, position, config.plan)
    now = config.start_ms
    history_ms = config.history_days * DAY_MS
    begin = now - history_ms - 30 * DAY_MS
    documents = make_documents(rng, ids, max(8, min(200, config.shipments // 1000)), begin)
    for doc in documents:
        doc.updated_at = min(doc.updated_at, now - 1)
    contacts = [
        make_contact(rng, ids, begin + rng.randrange(0, history_ms + 30 * DAY_MS))
        for _ in range(max(50, min(50_000, config.shipments // 4)))
    ]
    for contact in contacts:
        if rng.random() < 0.3:
            contact.updated_at = rng.randrange(contact.created_at, now)
    shipments: list[Shipment] = []
    first_created = now - history_ms
    count = config.shipments
    for number in range(count):
        created = first_created + (history_ms * number) // max(1, count)
        created += rng.randrange(0, max(1, history_ms // max(1, count)))
        shipment = new_shipment(
            rng, ids, created, rng.choice(documents), None, contacts, config.behaviour
        )
        for at_ms, _, _ in apply_until(shipment, now):
            shipment.updated_at = max(shipment.updated_at, at_ms)
        shipments.append(shipment)
    return World(workspace, documents, contacts, shipments)


def _hex(rng: random.Random, length: int = 16) -> str:
    return f"{rng.getrandbits(length * 4):0{length}x}"


def make_workspace(seed: int, position: int, plan: str) -> Workspace:
    """The workspace's identity comes from its seed and its position in the server, never from
    the id seed: two workspaces of one server always have different ids."""
    digest = hashlib.sha256(f"{seed}:{position}:workspace".encode()).hexdigest()
    number = f" {position + 1}" if position else ""
    return Workspace(
        id=f"ws_{digest[:12]}",
        name=f"Nordlicht Signing Demo{number}",
        slug=f"nordlicht{number.replace(' ', '-')}",
        plan=plan,
    )


def make_documents(rng: random.Random, ids: Ids, count: int, start_ms: int) -> list[Document]:
    """Templates with text fields, some with a payment field, and placeholders."""
    documents = []
    for number in range(count):
        signer_count = rng.choice((1, 1, 2, 2, 3))
        fields = []
        for position in range(rng.randint(1, 4)):
            fields.append(
                DocumentField(
                    id=f"fld_{_hex(ids.fields, 10)}",
                    type="text",
                    label=rng.choice(FIELD_LABELS),
                    required=rng.random() < 0.6,
                    external_id=f"ext.{number}.{position}" if rng.random() < 0.5 else None,
                    assigned_recipient_index=(
                        rng.randrange(signer_count) if rng.random() < 0.5 else None
                    ),
                )
            )
        if number % 3 == 0:
            fields.append(
                DocumentField(
                    id=f"fld_{_hex(ids.fields, 10)}",
                    type="payment",
                    label="Plan",
                    required=True,
                    external_id="payment.plan",
                    assigned_recipient_index=0,
                )
            )
        created = start_ms + rng.randrange(0, 30 * DAY_MS)
        documents.append(
            Document(
                id=f"doc_{_hex(ids.documents, 12)}",
                name=f"{DOCUMENT_NAMES[number % len(DOCUMENT_NAMES)]} v{number // 14 + 1}",
                kind="document",
                language=rng.choice(("de", "de", "en", "fr")),
                folder_id=f"fol_{rng.randrange(5)}" if rng.random() < 0.6 else None,
                status=rng.choice(("draft", "active", "active")),
                signer_count=signer_count,
                password_protected=rng.random() < 0.1,
                placeholders=tuple(rng.sample(PLACEHOLDER_NAMES, rng.randint(0, 3))),
                fields=tuple(fields),
                created_at=created,
                updated_at=created + rng.randrange(0, 5 * DAY_MS),
                theme_id=f"thm_{rng.randrange(3)}",
                block_texts=("Between the parties {{customer_name}} and us.", "Terms apply."),
            )
        )
    return documents


def random_person(rng: random.Random) -> tuple[str, str, str | None, str | None]:
    """A name, a unique-enough e-mail address, a phone and a company."""
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    ascii_name = f"{first}.{last}".translate(_ASCII).lower()
    email = f"{ascii_name}.{_hex(rng, 6)}@example.org"
    phone = f"+49 30 {rng.randrange(1000000, 9999999)}" if rng.random() < 0.5 else None
    return f"{first} {last}", email, phone, rng.choice(COMPANIES)


def make_contact(rng: random.Random, ids: Ids, created_ms: int) -> Contact:
    """A contact with custom properties whose keys contain dots, in zero to two groups."""
    name, email, phone, company = random_person(rng)
    custom = {
        key: f"{key.split('.')[0]}-{rng.randrange(1000)}"
        for key in rng.sample(CUSTOM_KEYS, rng.randint(0, 3))
    }
    return Contact(
        id=f"ct_{_hex(ids.contacts, 12)}",
        name=name,
        email=email,
        phone=phone,
        company=company,
        position=rng.choice(POSITIONS),
        notes="Prefers e-mail" if rng.random() < 0.1 else None,
        custom=custom,
        group_ids=sorted(rng.sample(GROUP_IDS, rng.choice((0, 1, 1, 2)))),
        created_at=created_ms,
        updated_at=created_ms,
    )


def _recipient_ids(shipment_id: str, position: int) -> tuple[str, str]:
    """A recipient's id and link id, from its shipment's id and its place: the k-th recipient of
    shipments with one id has one id, however many recipients came before in either workspace."""
    digest = hashlib.blake2b(f"{shipment_id}:{position}".encode(), digest_size=18).hexdigest()
    return f"rcp_{digest[:16]}", f"lnk_{digest[16:]}"


def new_shipment(
    rng: random.Random,
    ids: Ids,
    created: int,
    document: Document,
    people: list[Person] | None,
    contacts: list[Contact],
    behaviour: Behaviour,
    *,
    channel: str | None = None,
    signature_level: str | None = None,
    expires_in_days: int | None = None,
    password: str | None = None,
    placeholders: dict[str, str] | None = None,
    field_values: dict[str, Any] | None = None,
) -> Shipment:
    """A shipment with its planned future; `people` are drawn from `contacts` and strangers
    when not given. The keyword arguments are what a POST /shipments may set."""
    if people is None:
        people = _draw_people(rng, document, contacts)
    days = expires_in_days or rng.choice((7, 14, 14, 30))
    expires = created + days * DAY_MS
    shipment_id = f"shp_{ids.shipments.getrandbits(64):016x}"
    recipients = _recipients(shipment_id, people, expires)
    sign_mode = "sequential" if len(recipients) > 1 and rng.random() < 0.7 else "parallel"
    owner_name, owner_email = rng.choice(OWNERS)
    return Shipment(
        id=shipment_id,
        uuid=f"{ids.shipments.getrandbits(128):032x}",
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
        timeline=plan_timeline(rng, created, recipients, sign_mode, expires, behaviour),
        placeholders=placeholders
        if placeholders is not None
        else {name: f"{name}-{rng.randrange(10_000)}" for name in document.placeholders},
        field_values=dict(field_values or {}),
        updated_at=created,
    )


def _draw_people(rng: random.Random, document: Document, contacts: list[Contact]) -> list[Person]:
    """As many recipients as the document has signers (sometimes one more), 70% contacts."""
    people: list[Person] = []
    for _ in range(max(1, document.signer_count + rng.choice((0, 0, 0, 1)))):
        if rng.random() < 0.7 and contacts:  # the draw first: the same stream either way
            c = rng.choice(contacts)
            people.append((c.name, c.email, c.phone, c.company, c.id))
        else:
            people.append((*random_person(rng), None))
    return people


def _recipients(shipment_id: str, people: list[Person], expires: int) -> list[Recipient]:
    return [
        Recipient(
            *_recipient_ids(shipment_id, position),
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
