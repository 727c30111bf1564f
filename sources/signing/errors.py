"""The errors a sync can end with: one base class, and one subclass per way a run stops."""

from __future__ import annotations


class SigningAPIError(Exception):
    """Anything the signing API or the network made impossible."""


class AuthError(SigningAPIError):
    """401 or 403: the key is wrong, revoked, expired, or lacks a scope."""


class Forbidden(AuthError):
    """403: the key lacks a scope for this request."""


class NotFound(SigningAPIError):
    """404 for an addressed resource."""


class TransientError(SigningAPIError):
    """A failure that may pass: time-out, dropped connection, 5xx, 408, a truncated body."""


class RunStopped(SigningAPIError):
    """The run stops early: what was fetched is loaded, the state is saved, and the next run
    continues from there. `exit_code` is what the command line exits with: 75 (EX_TEMPFAIL)
    for a stop on purpose, 1 for a failure that still kept what was fetched."""

    exit_code = 75


class DailyLimitReached(RunStopped):
    """A 429 whose scope is `daily`: waiting makes no sense within this run."""


class RequestBudgetExhausted(RunStopped):
    """The run used the number of requests it was allowed (`--max-requests`)."""


class RetryAfterTooLong(RunStopped):
    """A 429 asked to wait longer than the run is willing to (`max_retry_after_seconds`)."""


class Interrupted(RunStopped):
    """SIGINT or SIGTERM: stop within seconds; the exit code is the shell's, 128 + signal."""

    def __init__(self, message: str, signal_number: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signal_number


class ServiceUnreachable(RunStopped):
    """The service stopped answering (or kept failing) for longer than the run waits."""

    exit_code = 1


class KeyRefused(RunStopped, AuthError):
    """A 401 or 403 in the middle of a run: no later request can succeed."""

    exit_code = 1


class SourceConfigError(SigningAPIError):
    """The source was configured with something it does not have (an unknown resource)."""
