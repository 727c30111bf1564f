"""How a run ended, named once: the run record, the CLI's lines and exit code, `status` and
Dagster's tags all say it with this enum.

A run stopped on purpose (the daily limit, a request budget, an over-long Retry-After) or by a
signal (SIGINT, SIGTERM) is `stopped`: what it fetched is loaded, its state is saved, and the
next run continues; only the exit code tells the two apart (75, or 128 + the signal).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

EXIT_DONE = 0
EXIT_FAILED = 1
EXIT_STOPPED = 75  # EX_TEMPFAIL: stopped early on purpose, the next run continues
SIGNAL_BASE = 128  # a shell's exit code for a signal: 128 + its number


class Outcome(StrEnum):
    """`completed`, `stopped` or `failed`, as every view of a run names it."""

    COMPLETED = "completed"
    STOPPED = "stopped"
    FAILED = "failed"

    @classmethod
    def from_exit_code(cls, code: int) -> Outcome:
        """0 completed; 75 or a signal's code stopped; anything else failed."""
        if code == EXIT_DONE:
            return cls.COMPLETED
        if code == EXIT_STOPPED or code > SIGNAL_BASE:
            return cls.STOPPED
        return cls.FAILED


def is_signal(code: int) -> bool:
    """An exit code that a signal caused (130 for SIGINT, 143 for SIGTERM)."""
    return code > SIGNAL_BASE


def worst_exit_code(codes: Iterable[int]) -> int:
    """The exit code of a run over several workspaces: an interruption (128 + signal) first,
    then a failure (any other non-zero but 75), then a stop on purpose (75), else 0."""

    def severity(code: int) -> int:
        if is_signal(code):
            return 3
        return {EXIT_DONE: 0, EXIT_STOPPED: 1}.get(code, 2)

    return max(codes, key=severity, default=EXIT_DONE)
