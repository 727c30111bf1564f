"""The privacy policy: what becomes of each personal column (`columns.PERSONAL_COLUMNS`) before a
row reaches dlt, and the people erased with `signing-etl forget`, whom no later load brings back.

The policy is dlt configuration, `[sources.signing.privacy]` (or `SOURCES__SIGNING__PRIVACY__*`):
a `preset` (`keep`, the default, changes nothing; `minimal` hashes e-mails, names and phones and
drops IP addresses and free text), refined per column in `columns` (`"contacts.notes" = "mask"`),
and the secret `hash_key` of the keyed hashes. Each column is kept, hashed, masked or dropped
(set to null) here, in the source, so what the policy hides is never in dlt's files, the
warehouse, dbt's files, the logs or the report.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final, Literal, get_args

import orjson
from dlt.common.configuration import configspec, resolve_configuration
from dlt.common.configuration.specs import BaseConfiguration
from dlt.common.typing import TSecretStrValue

from .columns import (
    PEOPLE_COLUMNS,
    PERSONAL_COLUMNS,
    TABLES,
    PersonalKind,
    column_name,
    describes_person,
)
from .errors import SourceConfigError, one_line
from .paging import Record
from .pseudonyms import key_id, keyed_hash, masked

Action = Literal["keep", "hash", "mask", "drop"]
ACTIONS: Final[tuple[Action, ...]] = get_args(Action)
# A shorter key would make the hashes cheap to guess once it leaks half-way (a word, a date).
MIN_KEY_LENGTH = 16
SECTIONS: Final = ("sources", "signing", "privacy")
PRESET_VARIABLE = "SOURCES__SIGNING__PRIVACY__PRESET"
KEY_VARIABLE = "SOURCES__SIGNING__PRIVACY__HASH_KEY"

# What each preset does with each kind of personal value. `minimal` keeps what the funnel
# needs: hashed e-mails still join recipients to contacts, and companies and job positions
# name no one.
PRESETS: Final[dict[str, dict[PersonalKind, Action]]] = {
    "keep": dict.fromkeys(get_args(PersonalKind), "keep"),
    "minimal": {
        "email": "hash",
        "name": "hash",
        "phone": "hash",
        "ip": "drop",
        "text": "drop",
        "work": "keep",
    },
}

# What an erasure clears in the rows that stay (a recipient's place in a shipment, the events
# of a shipment, the filled-in form): every column that says who the person was or what they
# typed. Their contacts go whole. Counts and times stay, so the funnel stays true.
ERASED_COLUMNS: Final[dict[str, tuple[str, ...]]] = {
    "shipments": ("owner_name", "owner_email"),
    "shipments__recipients": ("name", "email", "phone", "company", "last_error", "link_id"),
    "audit_events": ("actor__name", "actor__ip"),
    "shipment_fields": ("recipient_name", "recipient_email", "placeholders", "value"),
}

# dlt's variant column of a known column whose type changed: `<column>__v_<type>`.
VARIANT_MARK: Final = "__v_"


def erased_columns(table: str, columns: Collection[str]) -> list[str]:
    """The columns of `columns` (a table's, as dlt names them) an erasure clears in `table`'s
    rows that stay: `ERASED_COLUMNS`, and each column of a person that the source's tables do
    not name, one the service added (a recipient's `mobile_number`, an actor's `device`),
    whatever the policy does with it. A variant column goes as the column it varies."""
    named = ERASED_COLUMNS.get(table, ())
    unnamed = set(unnamed_person_columns(table, columns))
    return [c for c in columns if c in unnamed or c.split(VARIANT_MARK, 1)[0] in named]


def unnamed_person_columns(table: str, columns: Iterable[str]) -> list[str]:
    """The columns of `columns` (a table's, as dlt names them) that are a person's and that the
    source's tables do not name: ones the service added (a variant of a known column is
    that column's, not one of these)."""
    known = TABLES.get(table, {})
    return [
        column
        for column in columns
        if not column.startswith("_")
        and column.split(VARIANT_MARK, 1)[0] not in known
        and describes_person(f"{table}.{column}")
    ]


# Columns whose action spares the rows where another column has a value: a payment's value
# is a variant and its options, not something a signer typed.
EXCEPT_WHERE: Final[dict[str, tuple[str, str]]] = {"shipment_fields.value": ("type", "payment")}


@configspec
class PrivacyConfiguration(BaseConfiguration):
    """`[sources.signing.privacy]` as dlt resolves it (`columns` may be a TOML table or JSON
    text in `SOURCES__SIGNING__PRIVACY__COLUMNS`)."""

    preset: str = "keep"
    hash_key: TSecretStrValue | None = None
    columns: str | dict[str, Any] | None = None


class PrivacyConfigError(SourceConfigError):
    """The privacy policy names an unknown preset, column or action, or hashes without a key."""


def configured_privacy() -> PrivacyPolicy:
    """The policy of dlt's configuration, resolved as `configured_source` resolves it (for the
    commands that read or change a warehouse without asking the service)."""
    return PrivacyPolicy.configured(
        resolve_configuration(PrivacyConfiguration(), sections=SECTIONS)
    )


def preset_actions(preset: str) -> dict[str, Action]:
    """Every personal column's action under `preset`."""
    kinds = PRESETS[preset]
    return {column: kinds[kind] for column, kind in PERSONAL_COLUMNS.items()}


@dataclass(frozen=True)
class PrivacyPolicy:
    """The actions on every personal column, the hash key, and the erased people (the keyed
    hashes of their e-mail addresses)."""

    preset: str = "keep"
    actions: Mapping[str, Action] = field(default_factory=lambda: preset_actions("keep"))
    key: bytes | None = field(default=None, repr=False, compare=False)
    erased: frozenset[str] = frozenset()
    # The columns of people (`table.column`) the policy does not name, which the service sent
    # and `protect` held back: filled in while rows pass, read by the load that made them.
    held_back: set[str] = field(default_factory=set, repr=False, compare=False)

    @classmethod
    def configured(cls, configuration: PrivacyConfiguration) -> PrivacyPolicy:
        """The policy dlt's configuration describes, or one line that says what is wrong
        (before anything is fetched)."""
        preset = str(configuration.preset or "keep").strip().lower()
        if preset not in PRESETS:
            raise PrivacyConfigError(
                f"privacy preset {one_line(repr(configuration.preset), 40)} is unknown: "
                f"{PRESET_VARIABLE} is {' or '.join(PRESETS)}"
            )
        actions = preset_actions(preset)
        actions.update(_refinements(configuration.columns))
        key = str(configuration.hash_key) if configuration.hash_key else None
        policy = cls(preset, actions, key.encode() if key else None)
        if key is not None and len(key) < MIN_KEY_LENGTH:
            raise PrivacyConfigError(
                f"{KEY_VARIABLE} has {len(key)} characters; use a random secret of at least "
                f"{MIN_KEY_LENGTH}"
            )
        if policy.hashed and key is None:
            shown = ", ".join(policy.hashed[:3]) + (", ..." if len(policy.hashed) > 3 else "")
            raise PrivacyConfigError(
                f"the privacy policy hashes {shown} but no hash key is set: set {KEY_VARIABLE} "
                "(or hash_key under [sources.signing.privacy] in .dlt/secrets.toml)"
            )
        return policy

    @property
    def key_id(self) -> str | None:
        """The id of the hash key (never the key), recorded beside the data."""
        return key_id(self.key) if self.key else None

    @cached_property
    def changes_anything(self) -> bool:
        """Whether any column is not kept as it is."""
        return any(action != "keep" for action in self.actions.values())

    @cached_property
    def holds_back(self) -> bool:
        """Whether a person's column the policy does not name is held back: under a preset
        that hides personal data, a new field is not loaded until someone has decided."""
        return any(action != "keep" for action in PRESETS.get(self.preset, {}).values())

    @cached_property
    def _table_columns(self) -> dict[str, list[str]]:
        """The columns with an action, per table (the personal ones and any other named)."""
        tables: dict[str, list[str]] = {}
        for qualified in self.actions:
            table, _, column = qualified.partition(".")
            tables.setdefault(table, []).append(column)
        return tables

    @property
    def hashed(self) -> list[str]:
        return [column for column, action in self.actions.items() if action == "hash"]

    def describe(self) -> str:
        """One line: the preset, its refinements, the key's id."""
        return describe_policy(self.preset, self.actions, self.key_id)

    # ------------------------------------------------------------------ rows

    def protect(self, table: str, row: Record) -> Record:
        """`row` of `table` with each personal column kept, hashed, masked or dropped, and,
        when the policy holds back, without the fields of a person it does not name."""
        if self.holds_back and table in PEOPLE_COLUMNS:
            self._hold_back(table, row)
        if not self.changes_anything:
            return row
        for column in self._table_columns.get(table, ()):
            qualified = f"{table}.{column}"
            action = self.actions.get(qualified, "keep")
            spared = EXCEPT_WHERE.get(qualified)
            if action == "keep" or (spared is not None and row.get(spared[0]) == spared[1]):
                continue
            found = _locate(row, column)
            if found is not None:
                holder, name = found
                holder[name] = self.value(qualified, holder[name], action)
        return row

    def value(self, column: str, value: Any, action: Action | None = None) -> Any:
        """One value of `column` (`table.column`) under its action (or `action`)."""
        chosen = action or self.actions.get(column, "keep")
        if value is None or chosen == "keep":
            return value
        if chosen == "drop":
            return None
        kind = PERSONAL_COLUMNS.get(column, "text")  # a column named only by the policy: text
        if isinstance(value, dict):  # a JSON object of filled-in values: each value
            return {k: self._changed(kind, v, chosen) for k, v in value.items()}
        return self._changed(kind, value, chosen)

    def _hold_back(self, table: str, row: Record) -> None:
        """Remove from `row` each field of a person that neither the tables nor the policy
        name, and note it in `held_back` as `table.column`."""
        for holder, name, qualified in list(_unnamed_fields(table, row)):
            if qualified not in self.actions:
                del holder[name]
                self.held_back.add(qualified)

    def _changed(self, kind: PersonalKind, value: Any, action: Action) -> Any:
        if value is None:
            return None
        text = value if isinstance(value, str) else orjson.dumps(value).decode()
        if action == "mask":
            return masked(kind, text)
        if self.key is None:  # `configured` refuses this; a policy built in code may not
            raise PrivacyConfigError(f"the privacy policy hashes but no {KEY_VARIABLE} is set")
        return keyed_hash(self.key, kind, text)

    # ------------------------------------------------------------------ erasure

    def subject(self, email: str) -> str:
        """The keyed hash an erasure of `email` is recorded under (never the address)."""
        if self.key is None:
            raise PrivacyConfigError(
                f"an erasure is recorded as a keyed hash of the address: set {KEY_VARIABLE}"
            )
        return keyed_hash(self.key, "email", email)

    def erased_row(self, table: str, row: Record) -> Record:
        """`row` of `table` without what says who an erased person was (`erased_columns`:
        also the fields of a person the service added, inside objects too)."""
        for column in ERASED_COLUMNS[table]:
            found = _locate(row, column)
            if found is not None:
                holder, name = found
                holder[name] = None
        for holder, name, _ in list(_unnamed_fields(table, row)):
            holder[name] = None
        return row

    def erases(self, email: Any) -> bool:
        """Whether `email` belongs to someone erased from the warehouse."""
        return bool(self.erased) and isinstance(email, str) and self.subject(email) in self.erased

    def with_erased(self, subjects: Iterable[str]) -> PrivacyPolicy:
        return PrivacyPolicy(
            self.preset, self.actions, self.key, frozenset(subjects), self.held_back
        )


def describe_policy(preset: str, actions: Mapping[str, str], key_id: str | None) -> str:
    """A policy in one line: `minimal (contacts.notes=mask), hash key 3f9a0c1b2d4e`."""
    defaults: Mapping[str, str] = preset_actions(preset) if preset in PRESETS else {}
    refined = ", ".join(
        f"{column}={action}"
        for column, action in sorted(actions.items())
        if defaults.get(column, "keep") != action or (defaults and column not in defaults)
    )
    return (
        preset + (f" ({refined})" if refined else "") + (f", hash key {key_id}" if key_id else "")
    )


def _refinements(columns: Any) -> dict[str, Action]:
    """The per-column actions of the configuration, checked."""
    if columns is None or columns == "":
        return {}
    if isinstance(columns, str | bytes):
        try:
            columns = orjson.loads(columns)
        except orjson.JSONDecodeError:
            columns = None
    if not isinstance(columns, Mapping):
        raise PrivacyConfigError(
            "privacy columns must map `table.column` to an action, e.g. "
            'SOURCES__SIGNING__PRIVACY__COLUMNS=\'{"contacts.notes": "mask"}\''
        )
    refined: dict[str, Action] = {}
    for column, action in columns.items():
        if column not in PERSONAL_COLUMNS and not _new_person_column(column):
            raise PrivacyConfigError(
                f"privacy column {one_line(repr(column), 60)} is unknown; the personal columns "
                f"are {', '.join(PERSONAL_COLUMNS)}, and any new column of a person "
                f"({', '.join(f'{t}.{p}*' for t, p in PEOPLE_COLUMNS.items())})"
            )
        chosen = str(action).strip().lower()
        if chosen not in ACTIONS:
            raise PrivacyConfigError(
                f"privacy action {one_line(repr(action), 40)} for {column} is unknown: use "
                f"{', '.join(ACTIONS)}"
            )
        refined[column] = chosen  # type: ignore[assignment]
    return refined


def _new_person_column(qualified: Any) -> bool:
    """Whether `qualified` may name a column of a person the service may send one day (which
    the policy then releases: kept, hashed, masked or dropped)."""
    if not isinstance(qualified, str) or not describes_person(qualified):
        return False
    column = qualified.partition(".")[2]
    return column == column_name(column) and not column.startswith("_")


def _unnamed_fields(table: str, row: Record, prefix: str = "") -> Iterator[tuple[Record, str, str]]:
    """Each field of `row` (or of its object `prefix`) that is a column of a person the
    source's tables do not name, one the service added: (the object holding it, its field
    name, `table.column`). An object that is such a column is one field; any other object's
    fields are columns of their own (dlt makes `<column>__<field>` of them)."""
    known = TABLES[table]
    for field_name, value in list(row.items()):
        column = prefix + column_name(field_name)
        if field_name.startswith("_") or column in known or f"{table}__{column}" in TABLES:
            continue  # a column the source shapes, or a nested table it shapes
        qualified, inner = f"{table}.{column}", column + "__"
        if describes_person(qualified) and not any(c.startswith(inner) for c in known):
            yield row, field_name, qualified
        elif isinstance(value, dict):
            yield from _unnamed_fields(table, value, inner)


def _locate(row: Record, column: str) -> tuple[Record, str] | None:
    """Where `column` (dlt's name; `actor__ip` inside an `actor` object) is in `row`, whatever
    the API's spelling of the field (dlt's naming makes `Email` the column `email`)."""
    for field_name in row:
        if column_name(field_name) == column:
            return row, field_name
    head, _, rest = column.partition("__")
    for field_name, inner in row.items():
        if rest and isinstance(inner, dict) and column_name(field_name) == head:
            return _locate(inner, rest)
    return None
