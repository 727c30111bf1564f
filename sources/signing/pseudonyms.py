"""What the privacy policy does to one personal value: its keyed hash, and its mask.

The hash is HMAC-SHA256 with the user's secret key over the value normalised by its kind, so one
person hashes the same wherever they appear (a contact's e-mail, a recipient's, a filled-in
form's) and the models can still join on it; without the key nobody can test a guess against
it, as they could against a plain or salted-in-the-code hash. The mask keeps enough of a
value's shape to read a report by (the e-mail's domain, a name's initials, a phone's last two
digits, an IP address's network) and never the value.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import unicodedata

from .columns import PersonalKind

# Text a hashed key's id is made from: the id names a key without saying anything about it.
_KEY_ID_TEXT = b"signing-etl privacy hash key id"
_NOT_DIGIT = re.compile(r"[^\d]")
# A digit followed, anywhere later, by at least two more digits: all but a phone's last two.
_HIDDEN_DIGIT = re.compile(r"\d(?=(?:\D*\d){2})")


def normalised(kind: PersonalKind, value: str) -> str:
    """The form of `value` that is hashed: e-mails trimmed and lower-cased, names with their
    spaces collapsed and case folded, phones as `+` and digits, IP addresses in their
    canonical form, anything else trimmed."""
    if kind == "email":
        return value.strip().lower()
    if kind == "name":
        return " ".join(unicodedata.normalize("NFC", value).split()).casefold()
    if kind == "phone":
        digits = _NOT_DIGIT.sub("", value)
        return f"+{digits}" if value.strip().startswith("+") else digits
    if kind == "ip":
        try:
            return ipaddress.ip_address(value.strip()).compressed
        except ValueError:
            return value.strip()
    return value.strip()


def keyed_hash(key: bytes, kind: PersonalKind, value: str) -> str:
    """HMAC-SHA256 of the normalised value, as 64 hexadecimal digits."""
    return hmac.new(key, normalised(kind, value).encode(), hashlib.sha256).hexdigest()


def key_id(key: bytes) -> str:
    """A short id of a hash key (a keyed hash of a constant), recorded beside the data so that
    a changed key is noticed; the key itself is never stored."""
    return hmac.new(key, _KEY_ID_TEXT, hashlib.sha256).hexdigest()[:12]


def masked(kind: PersonalKind, value: str) -> str:
    """`value` with what identifies someone hidden: `a***@example.org`, `A. M.`,
    `+49 30 *****67`, `203.0.113.0` (the /24; a /48 for IPv6), `N***` for a company or a
    position, and `***` for free text."""
    if kind == "email":
        local, at, domain = value.strip().rpartition("@")
        return f"{local[:1]}***@{domain.lower()}" if at else "***"
    if kind == "name":
        return " ".join(f"{word[0].upper()}." for word in value.split())
    if kind == "phone":
        return _HIDDEN_DIGIT.sub("*", value)
    if kind == "ip":
        try:
            address = ipaddress.ip_address(value.strip())
        except ValueError:
            return "***"
        prefix = 24 if address.version == 4 else 48
        return str(ipaddress.ip_network(f"{address}/{prefix}", strict=False).network_address)
    if kind == "work":
        return f"{value.strip()[:1]}***" if value.strip() else value
    return "***" if value else value
