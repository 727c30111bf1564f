"""The journal beside a warehouse: one JSON line per outcome the warehouse itself could not take
(a run another held the warehouse for, a failed publish, a model build that failed), which
`status` reads with what the warehouse records.

A line goes into the warehouse's working folder; when that disk is too full even for a line,
into the user's state folder (`$XDG_STATE_HOME/signing-etl`, by default
`~/.local/state/signing-etl`), under a name derived from the warehouse's path, so that the
outcome of a run on a full disk is still on record. Both are read.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import Any

import orjson


def append(primary: Path, row: dict[str, Any]) -> None:
    """Add `row` to the journal at `primary`, or to its fallback when that cannot be written;
    nothing when neither can (a full disk everywhere)."""
    line = orjson.dumps(row, default=str) + b"\n"
    for path in (primary, fallback(primary)):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("ab") as journal:
                journal.write(line)
                journal.flush()
                os.fsync(journal.fileno())
        except OSError:
            continue
        return


def read(primary: Path) -> list[dict[str, Any]]:
    """Every readable line of the journal at `primary` and of its fallback."""
    rows: list[dict[str, Any]] = []
    for path in (primary, fallback(primary)):
        try:
            lines = path.read_bytes().splitlines()
        except OSError:
            continue
        for line in lines:
            with contextlib.suppress(orjson.JSONDecodeError):
                row = orjson.loads(line)
                if isinstance(row, dict):
                    rows.append(row)
    return rows


def fallback(primary: Path) -> Path:
    """Where `primary`'s lines go when its disk is full: the user's state folder."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    digest = hashlib.sha256(str(primary).encode()).hexdigest()[:16]
    return Path(state) / "signing-etl" / f"{primary.stem}-{digest}.jsonl"
