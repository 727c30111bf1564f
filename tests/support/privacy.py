"""What personal data a sandbox holds, computed from its store, and scans that look for it
wherever a run may have written it: files (dlt's working folders, dbt's target, reports, logs,
decoded where they are compressed), and every table and column of a warehouse (dlt's state
decompressed)."""

from __future__ import annotations

import gzip
import hashlib
import hmac
import json
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ahocorasick
import duckdb
from dlt.common.versioned_state import decompress_state

from sandbox import Store
from tests.support.warehouse import MARTS

# The settings of a policy that hides everything the `minimal` preset hides.
HASH_KEY = "test-hash-key-0123456789abcdef"
MINIMAL = {
    "SOURCES__SIGNING__PRIVACY__PRESET": "minimal",
    "SOURCES__SIGNING__PRIVACY__HASH_KEY": HASH_KEY,
}
KEEP_WITH_KEY = {
    "SOURCES__SIGNING__PRIVACY__PRESET": "keep",
    "SOURCES__SIGNING__PRIVACY__HASH_KEY": HASH_KEY,
}
# Filled-in text values shorter than this also occur as ordinary words and numbers in any file
# ("no", "42"); they are checked in the warehouse's value column instead.
DISTINCTIVE = 5


def keyed(text: str, key: str = HASH_KEY) -> str:
    """HMAC-SHA256 of exactly `text` with `key`, as hexadecimal digits."""
    return hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest()


def keyed_email(address: str, key: str = HASH_KEY) -> str:
    """The documented hash of an e-mail address: trimmed and lower-cased first."""
    return keyed(address.strip().lower(), key)


def keyed_name(name: str, key: str = HASH_KEY) -> str:
    """The documented hash of a name: spaces collapsed and case folded first."""
    return keyed(" ".join(unicodedata.normalize("NFC", name).split()).casefold(), key)


def keyed_phone(phone: str, key: str = HASH_KEY) -> str:
    """The documented hash of a phone number: `+` and its digits."""
    return keyed("+" + "".join(ch for ch in phone if ch.isdigit()), key)


@dataclass
class PersonalData:
    """The sandbox's personal values by kind."""

    emails: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)
    phones: set[str] = field(default_factory=set)
    ips: set[str] = field(default_factory=set)
    texts: set[str] = field(default_factory=set)  # notes, custom values, typed-in values, ...

    def all(self) -> set[str]:
        return self.emails | self.names | self.phones | self.ips | self.texts


def personal_data(store: Store) -> PersonalData:
    """Every personal value of the store: contacts, recipients, senders, audit actors, typed-in
    and pre-filled values (the distinctive ones), notes, custom values, delivery errors."""
    found = PersonalData()
    with store.lock:
        contacts = list(store.contacts.by_id.values()) + list(store.deleted.contacts.values())
        shipments = list(store.shipments.by_id.values()) + list(store.deleted.shipments.values())
        for contact in contacts:
            _person(found, contact.name, contact.email, contact.phone)
            found.texts.update(v for v in [contact.notes, *contact.custom.values()] if v)
        for shipment in shipments:
            _person(found, shipment.owner_name, shipment.owner_email, None)
            for recipient in shipment.recipients:
                _person(found, recipient.name, recipient.email, recipient.phone)
                if recipient.last_error:
                    found.texts.add(recipient.last_error)
            found.ips.update(e["actor"]["ip"] for e in shipment.audit_events())
            found.texts.update(typed_values(shipment.filled_fields(), DISTINCTIVE))
    return found


def typed_values(body: Mapping[str, Any], shortest: int = 1) -> set[str]:
    """The text values of a filled-in form (`GET /shipments/{id}/fields`): what was typed into
    text fields and the placeholders' values."""
    values: set[str] = set()
    for entry in body["data"]:
        values.update(v for v in entry["placeholders"].values() if isinstance(v, str))
        values.update(f["value"] for f in entry["fields"] if f["type"] != "payment" and f["value"])
    return {value for value in values if len(value) >= shortest}


def _person(found: PersonalData, name: str, email: str, phone: str | None) -> None:
    found.names.add(name)
    found.emails.add(email)
    if phone:
        found.phones.add(phone)


class Needles:
    """A set of needles, each found as written or escaped the way JSON writes non-ASCII, in one
    pass of an Aho-Corasick automaton (pyahocorasick) over a text, overlapping occurrences
    included: a 15 MB warehouse file searched for a thousand values, one search per value,
    took a minute of CPU."""

    def __init__(self, needles: Iterable[str]) -> None:
        self.wanted = set(needles)
        self._automaton = ahocorasick.Automaton()
        forms: dict[str, set[str]] = {}
        for needle in self.wanted:
            for form in (needle, json.dumps(needle)[1:-1]):
                if form:  # the empty needle is in every text; it is answered apart
                    forms.setdefault(form, set()).add(needle)
        for form, needles_of_form in forms.items():
            self._automaton.add_word(form, frozenset(needles_of_form))
        if forms:
            self._automaton.make_automaton()

    def found_in(self, text: str) -> set[str]:
        """The needles `text` holds."""
        found: set[str] = {""} & self.wanted
        if self._automaton.kind == ahocorasick.AHOCORASICK:
            for _, needles in self._automaton.iter(text):
                found.update(needles)
        return found


def found_in(text: str, needles: Iterable[str]) -> set[str]:
    """The needles `text` holds, as written or escaped the way JSON writes non-ASCII."""
    return Needles(needles).found_in(text)


def file_text(path: Path) -> str:
    """A file's content as text: gzip decompressed, parquet read back as rows."""
    if path.suffix == ".parquet":
        with duckdb.connect() as reader:
            rows = reader.execute("select * from read_parquet(?)", [str(path)]).fetchall()
        return json.dumps(rows, default=str, ensure_ascii=False)
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


def scan_files(folder: Path, needles: Iterable[str]) -> dict[str, set[str]]:
    """Per file under `folder` (every file, decoded), the needles it holds."""
    search = Needles(needles)
    hits: dict[str, set[str]] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        found = search.found_in(file_text(path))
        if found:
            hits[str(path.relative_to(folder))] = found
    return hits


def duckdb_contents(warehouse: Path) -> dict[str, str]:
    """Every table of every schema of a DuckDB file (`schema.table`), as text: each row's
    values, with dlt's compressed state decompressed."""
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        tables = connection.execute(
            "select table_schema, table_name from information_schema.tables "
            "where table_type = 'BASE TABLE'"
        ).fetchall()
        return {
            f"{schema}.{table}": _as_text(
                table, connection.execute(f'select * from "{schema}"."{table}"')
            )
            for schema, table in tables
        }


def postgres_contents(connection: Any) -> dict[str, str]:
    """`duckdb_contents` of a Postgres database, through a psycopg2 connection."""
    with connection.cursor() as cursor:
        cursor.execute(
            "select table_schema, table_name from information_schema.tables where "
            "table_type = 'BASE TABLE' and table_schema not in ('pg_catalog', 'information_schema')"
        )
        tables = cursor.fetchall()
        contents = {}
        for schema, table in tables:
            cursor.execute(f'select * from "{schema}"."{table}"')
            contents[f"{schema}.{table}"] = _as_text(table, cursor)
    connection.rollback()
    return contents


def _as_text(table: str, cursor: Any) -> str:
    names = [column[0] for column in cursor.description or []]
    lines = []
    for row in cursor.fetchall():
        values = dict(zip(names, row, strict=True))
        if table == "_dlt_pipeline_state" and values.get("state"):
            values["state"] = json.dumps(decompress_state(values["state"]), default=str)
        lines.append(json.dumps(values, default=str, ensure_ascii=False))
    return "\n".join(lines)


def scan_tables(contents: Mapping[str, str], needles: Iterable[str]) -> dict[str, set[str]]:
    """Per table, the needles its rows hold."""
    wanted = set(needles)
    hits = {table: found_in(text, wanted) for table, text in contents.items()}
    return {table: found for table, found in hits.items() if found}


# The marts' columns that name a person (hashed or dropped under `minimal`); every other column
# of every mart compared is the same under `keep` and `minimal`. The recipients' company is
# kept by `minimal`, so it is compared.
PERSONAL_MART_COLUMNS = frozenset(
    {
        "owner_email",
        "contact_name",
        "contact_email",
        "delivery_error",
        "recipient_name",
        "recipient_email",
    }
)
# The marts compared under the two policies: the six the README promises and those that name
# who is waited on and when shipments completed.
COMPARED_MARTS = (
    *MARTS,
    "fct_signer_waits",
    "fct_shipments_waiting",
    "fct_completions_by_week",
)
