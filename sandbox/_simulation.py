"""Synthetic workspace data and the signing behaviour of its recipients.

Every shipment gets its whole future planned when it is created (sent, delivered, opened,
signed, completed, or expired, revoked, failed, archived), drawn from one seeded random stream.
The store then applies the steps whose time has come, so history and later activity follow one
set of rules and the same seed always gives the same data.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from ._model import (
    Contact,
    Document,
    DocumentField,
    Kind,
    Recipient,
    Workspace,
    pack_step,
)

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS

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
FAILED_DELIVERY_ERROR = "550 5.1.1 mailbox unavailable"


@dataclass(frozen=True, slots=True)
class Behaviour:
    """How recipients behave; defaults give a realistic funnel (about 92% open, 90% of those
    sign, a few percent revoked or undeliverable)."""

    p_delivery_failure: float = 0.02
    p_open: float = 0.92
    p_sign_after_open: float = 0.9
    p_revoke: float = 0.03
    p_archive: float = 0.25
    median_open_hours: float = 3.0
    median_sign_hours: float = 1.5
    max_extra_views: int = 3


def _hex(rng: random.Random, length: int = 16) -> str:
    return f"{rng.getrandbits(length * 4):0{length}x}"


def _lognormal_ms(rng: random.Random, median_hours: float, sigma: float = 1.3) -> int:
    return int(rng.lognormvariate(math.log(median_hours), sigma) * HOUR_MS) + 1_000


def make_workspace(rng: random.Random, plan: str) -> Workspace:
    """The single workspace a sandbox serves."""
    return Workspace(
        id=f"ws_{_hex(rng, 12)}", name="Nordlicht Signing Demo", slug="nordlicht", plan=plan
    )


def make_documents(rng: random.Random, count: int, start_ms: int) -> list[Document]:
    """Templates with text fields, some with a payment field, and placeholders."""
    documents = []
    for number in range(count):
        signer_count = rng.choice((1, 1, 2, 2, 3))
        fields = []
        for position in range(rng.randint(1, 4)):
            fields.append(
                DocumentField(
                    id=f"fld_{_hex(rng, 10)}",
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
                    id=f"fld_{_hex(rng, 10)}",
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
                id=f"doc_{_hex(rng, 12)}",
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


def make_contact(rng: random.Random, created_ms: int) -> Contact:
    """A contact with custom properties whose keys contain dots, in zero to two groups."""
    name, email, phone, company = random_person(rng)
    custom = {
        key: f"{key.split('.')[0]}-{rng.randrange(1000)}"
        for key in rng.sample(CUSTOM_KEYS, rng.randint(0, 3))
    }
    return Contact(
        id=f"ct_{_hex(rng, 12)}",
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


def plan_timeline(
    rng: random.Random,
    created_ms: int,
    recipients: list[Recipient],
    sign_mode: str,
    expires_ms: int,
    behaviour: Behaviour,
) -> list[int]:
    """Every step the shipment will go through, sorted by time (packed ints)."""
    steps: list[int] = []
    revoke_at = (
        created_ms + rng.randrange(HOUR_MS, max(HOUR_MS + 1, expires_ms - created_ms))
        if rng.random() < behaviour.p_revoke
        else None
    )
    cutoff = min(expires_ms, revoke_at) if revoke_at else expires_ms
    send_at = created_ms + rng.randrange(1_000, 30_000)
    all_signed_at: int | None = 0
    for recipient in recipients:
        index = recipient.position
        if send_at >= cutoff:
            all_signed_at = None
            break
        steps.append(pack_step(send_at, Kind.SENT, index))
        if recipient.email.endswith(".invalid") or rng.random() < behaviour.p_delivery_failure:
            steps.append(
                pack_step(send_at + rng.randrange(2_000, 60_000), Kind.DELIVERY_FAILED, index)
            )
            all_signed_at = None
            if sign_mode == "sequential":
                break
            continue
        delivered = send_at + rng.randrange(1_000, 120_000)
        steps.append(pack_step(delivered, Kind.DELIVERED, index))
        signed_at: int | None = None
        if rng.random() < behaviour.p_open:
            opened = delivered + _lognormal_ms(rng, behaviour.median_open_hours)
            if opened < cutoff:
                steps.append(pack_step(opened, Kind.OPENED, index))
                view_at = opened
                for _ in range(rng.randint(0, behaviour.max_extra_views)):
                    view_at += _lognormal_ms(rng, 6.0)
                    if view_at < cutoff:
                        steps.append(pack_step(view_at, Kind.VIEWED, index))
                if rng.random() < behaviour.p_sign_after_open:
                    candidate = opened + _lognormal_ms(rng, behaviour.median_sign_hours)
                    if candidate < cutoff:
                        signed_at = candidate
                        steps.append(pack_step(signed_at, Kind.SIGNED, index))
        if signed_at is None:
            all_signed_at = None
            if sign_mode == "sequential":
                break
        elif all_signed_at is not None:
            all_signed_at = max(all_signed_at, signed_at)
        if sign_mode == "sequential" and signed_at is not None:
            send_at = signed_at + rng.randrange(1_000, 10_000)
    if all_signed_at:
        end = all_signed_at + 1
        steps.append(pack_step(end, Kind.COMPLETED, 0))
    elif revoke_at is not None:
        end = revoke_at
        steps.append(pack_step(revoke_at, Kind.REVOKED, 0))
    else:
        end = expires_ms
        steps.append(pack_step(expires_ms, Kind.EXPIRED, 0))
    if rng.random() < behaviour.p_archive:
        steps.append(pack_step(end + rng.randrange(7 * DAY_MS, 60 * DAY_MS), Kind.ARCHIVED, 0))
    steps.sort()
    return steps
