"""The errors a sync can end with: one base class, and one subclass per way a run stops; and
`one_line`, which every text that came from the service passes through before it is part of
one of their messages."""

from __future__ import annotations

import unicodedata

# Longest excerpt of the service's own words (an error message, a body) quoted in a message.
QUOTE_LIMIT = 160


class SigningAPIError(Exception):
    """Anything the signing API or the network made impossible."""


class AuthError(SigningAPIError):
    """401 or 403: the key is wrong, revoked, expired, or lacks a scope."""


class Forbidden(AuthError):
    """403: the key lacks a scope for this request."""


class NotFound(SigningAPIError):
    """404 for an addressed resource."""


class Unserved(SigningAPIError):
    """An answer the API gives to no such request (a redirect, a 4xx other than 401, 403, 404,
    408 and 429): asking again gets the same, so it is not retried."""


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


class UnexpectedAnswer(RunStopped):
    """A complete answer the API does not allow (a 200 without `data`, a record without an id):
    asking again would most likely get the same, so the run stops and keeps what it fetched."""

    exit_code = 1


class ResponseTooLarge(UnexpectedAnswer):
    """An answer larger, once decompressed, than `max_response_bytes`. Not retried: a body that
    large (a gzip bomb) comes back the same, and reading it again costs as much again."""


class KeyRefused(RunStopped, AuthError):
    """A 401 or 403 in the middle of a run: no later request can succeed."""

    exit_code = 1


class SourceConfigError(SigningAPIError):
    """The source was configured with something it does not have (an unknown resource)."""


def one_line(text: object, limit: int = QUOTE_LIMIT) -> str:
    """`text` as one clean line: control and format characters (newlines, ANSI escapes, bidi
    marks) written as escapes, and cut to `limit` characters, so that words from the service
    can neither forge a log line nor recolour a terminal."""
    raw = str(text)
    cleaned = "".join(_escaped(char) for char in raw[: limit + 1])  # escapes only lengthen it
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"


def without_secret(text: object, secret: str | None, limit: int = QUOTE_LIMIT) -> str:
    """`one_line(text)` with `secret` blanked (`***`) before the line is cut, as written and as
    Python quotes it in bytes or text (an HTTP library's error shows a bad header's value so),
    so that no part of it survives the cut or the escapes."""
    line = str(text)
    if secret:
        forms = {secret, repr(secret)[1:-1], repr(secret.encode())[2:-1]}
        for form in sorted(forms, key=len, reverse=True):
            line = line.replace(form, "***")
    return one_line(line, limit)


def _escaped(char: str) -> str:
    if unicodedata.category(char) not in ("Cc", "Cf", "Zl", "Zp"):
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
