"""The errors a sync can end with: one base class, and one subclass per way a run stops."""

from __future__ import annotations


class SigningAPIError(Exception):
    """Anything the signing API or the network made impossible."""


class AuthError(SigningAPIError):
    """401 or 403: the key is wrong, revoked, expired, or lacks a scope."""


class NotFound(SigningAPIError):
    """404 for an addressed resource."""


class TransientError(SigningAPIError):
    """A failure that may pass: time-out, dropped connection, 5xx, 408, a truncated body."""


class RunStopped(SigningAPIError):
    """The run must stop early, on purpose: what was fetched is kept and the next run resumes."""


class DailyLimitReached(RunStopped):
    """A 429 whose scope is `daily`: waiting makes no sense within this run."""


class RequestBudgetExhausted(RunStopped):
    """The run used the number of requests it was allowed (`--max-requests`)."""
