"""A window of change times read again (`load --reload FROM..TO`): what it holds, from its text."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from .errors import SourceConfigError
from .times import parse_iso, to_iso

EXAMPLE = "2026-01-01..2026-01-31 or 2026-01-01T08:00Z..2026-01-01T12:00Z"


@dataclass(frozen=True)
class ReloadWindow:
    """Changes from `start` to `end` (both included): the lists are read with
    `updated_since=start`, and records stamped after `end` are left to the incremental runs
    (a record without `updated_at`, a shipment, cannot be told apart and is kept)."""

    start: datetime
    end: datetime

    @classmethod
    def parse(cls, text: str) -> ReloadWindow:
        """`FROM..TO`, each an ISO 8601 date or time (UTC when it names no zone); a date as
        `TO` means the end of that day.

        Raises:
            SourceConfigError: one line that says what is wrong and shows the form.
        """
        start_text, dots, end_text = text.partition("..")
        try:
            if not dots or not start_text.strip() or not end_text.strip():
                raise ValueError
            start = parse_iso(start_text.strip())
            end = _end_of(end_text.strip())
        except ValueError:
            raise SourceConfigError(
                f"--reload {text!r} is not FROM..TO in ISO 8601 dates or times (e.g. {EXAMPLE})"
            ) from None
        if start > end:
            raise SourceConfigError(f"--reload {text!r}: FROM is after TO")
        return cls(start, end)

    @property
    def since(self) -> str:
        """The `updated_since` the lists are read from."""
        return to_iso(self.start)

    def holds(self, record: dict[str, Any]) -> bool:
        """Whether a record read since `start` changed within the window."""
        stamp = record.get("updated_at")
        if not isinstance(stamp, str):
            return True
        try:
            return parse_iso(stamp) <= self.end
        except ValueError:
            return True

    def __str__(self) -> str:
        return f"{to_iso(self.start)}..{to_iso(self.end)}"


def _end_of(text: str) -> datetime:
    """A time as it is; a date as the last millisecond of that day."""
    if len(text) == 10:
        day = date.fromisoformat(text)
        return parse_iso(day.isoformat()) + timedelta(days=1) - timedelta(milliseconds=1)
    return parse_iso(text)
