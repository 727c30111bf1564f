"""The source's settings as one typed object: `[sources.signing]` in `.dlt/config.toml` and
`.dlt/secrets.toml`, or `SOURCES__SIGNING__<NAME>`, resolved by dlt (the defaults are the
constants of `settings`). Whatever connects to the service takes this object, so a reader finds
every setting that reaches the client here, and nothing passes settings as a loose dict.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import dlt
from dlt.common.configuration import configspec, resolve_configuration
from dlt.common.configuration.specs import BaseConfiguration
from dlt.common.typing import TSecretStrValue

from . import settings
from .client import RequestLimits
from .deletions import DeleteMode, DeletionSettings
from .errors import SigningAPIError, one_line
from .privacy import PrivacyConfiguration

SECTIONS = ("sources", "signing")


@dataclass(frozen=True)
class Pacing:
    """A pacer's ceiling and burst to use instead of the configured ones: for a service whose
    limits are known to be higher (the demo's sandbox, or the tests' with limits off)."""

    requests_per_second: float
    burst: int


@configspec
class SigningConfiguration(BaseConfiguration):
    """`[sources.signing]` as dlt resolves it. `api_key` is a secret: it is never shown (the
    object's `repr` leaves it out), logged or kept in state; only the client's
    `Authorization` header carries it."""

    api_key: TSecretStrValue = dlt.secrets.value  # workspace API key
    base_url: str = dlt.config.value  # API root ending in `/v1`
    # How far before each pass's start the next pass begins.
    lag_seconds: float = settings.CURSOR_LAG_SECONDS
    page_size: int = settings.PAGE_SIZE  # list page size (5..200: pages overlap by 4 records)
    concurrency: int = settings.CHILD_CONCURRENCY  # child requests in flight, one pacer
    # The pacer's ceiling before the service's headers say more (the reference: 10/s per key),
    # and the requests it may send at once before settling to the rate.
    requests_per_second: float = settings.REQUESTS_PER_SECOND
    burst: int = settings.BURST
    # Seconds of failures in a row (from the sending of the first failed request, 5xx answers
    # included) after which the service is given up on.
    give_up_after_seconds: float = settings.GIVE_UP_AFTER_SECONDS
    # A longer `Retry-After` (or `X-RateLimit-Reset` with nothing left) stops the run.
    max_retry_after_seconds: float = settings.MAX_RETRY_AFTER_SECONDS
    # The longest one request may take, answer included (retried like a time-out past it).
    request_deadline_seconds: float = settings.REQUEST_DEADLINE_SECONDS
    # The largest answer read, decompressed; a larger one stops the run and is not retried.
    max_response_bytes: int = settings.MAX_RESPONSE_BYTES
    # List pages in a row that bring no record not read before, after which a pass gives up
    # on a list that makes no sense (the cursor stays, a warning says what the service did).
    max_pages_without_new_records: int = settings.MAX_PAGES_WITHOUT_NEW_RECORDS
    # The privacy policy, `[sources.signing.privacy]`; checked before any request.
    privacy: PrivacyConfiguration = dlt.config.value
    # `soft`: a deleted record's rows stay, with `_deleted_at`; `hard`: they are removed.
    deletes: str = "soft"
    # A full pass over a list's ids runs when the last one is older (the service's clock).
    full_check_max_age_hours: float = settings.FULL_CHECK_MAX_AGE_HOURS
    # A run that loaded nothing of a list checks its count (and reads the subscriptions) when
    # the last check is this old (the service's clock; 0: every run).
    count_check_every_hours: float = settings.COUNT_CHECK_EVERY_HOURS
    # A full pass finding more than this share of a table's live rows gone marks nothing and
    # fails the run, unless the load allows a mass deletion.
    mass_delete_share: float = settings.MASS_DELETE_SHARE

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{name}={getattr(self, name)!r}"
            for name in self.get_resolvable_fields()
            if name not in ("api_key", "privacy")
        )
        return f"{type(self).__name__}({shown}, api_key=***)"

    __str__ = __repr__

    def check(self) -> None:
        """One line for a setting out of range, before any request.

        Raises:
            SigningAPIError: the setting, its range and the value given.
        """
        if any(char.isspace() or not char.isprintable() for char in str(self.api_key)):
            # A header cannot carry it, and the HTTP library's refusal would quote it whole.
            raise SigningAPIError(
                "api_key holds a space, a line break or another invisible character (pasted "
                "with it?): set it to the key alone (SOURCES__SIGNING__API_KEY, or api_key in "
                ".dlt/secrets.toml)"
            )
        if not str(self.api_key).isascii():
            # A header is ASCII: the HTTP library would fail with a traceback quoting it.
            raise SigningAPIError(
                "api_key holds a character that is not ASCII (a typographic quote pasted with "
                "it?): set it to the key alone (SOURCES__SIGNING__API_KEY, or api_key in "
                ".dlt/secrets.toml)"
            )
        self._check_pacing()
        smallest = settings.PAGE_OVERLAP + 1
        if not smallest <= self.page_size <= settings.MAX_PAGE_SIZE:
            raise SigningAPIError(
                f"page_size must be {smallest}..{settings.MAX_PAGE_SIZE} (pages overlap by "
                f"{settings.PAGE_OVERLAP} records), not {self.page_size}"
            )
        if self.request_deadline_seconds <= 0:
            raise SigningAPIError(
                f"request_deadline_seconds must be above 0, not {self.request_deadline_seconds}"
            )
        if self.max_response_bytes < 1:
            raise SigningAPIError(
                f"max_response_bytes must be 1 or more, not {self.max_response_bytes}"
            )
        if self.max_pages_without_new_records < 1:
            raise SigningAPIError(
                "max_pages_without_new_records must be 1 or more, not "
                f"{self.max_pages_without_new_records}"
            )
        for name in ("full_check_max_age_hours", "count_check_every_hours"):
            if getattr(self, name) < 0:
                raise SigningAPIError(f"{name} must be 0 or more, not {getattr(self, name)}")
        if not 0 <= self.mass_delete_share <= 1:
            raise SigningAPIError(
                f"mass_delete_share must be between 0 and 1, not {self.mass_delete_share}"
            )
        self.delete_mode()

    def _check_pacing(self) -> None:
        """The pacer's and the retries' settings in their ranges: a burst under 1 never lets
        a request go (the run would hang, holding the warehouse), a rate of 0 divides by zero,
        a negative one turns the pacer off, no child thread fetches nothing."""
        at_least = {"burst": 1, "concurrency": 1}
        for name, least in at_least.items():
            if not getattr(self, name) >= least:
                raise SigningAPIError(f"{name} must be {least} or more, not {getattr(self, name)}")
        above_zero = ("requests_per_second", "give_up_after_seconds")
        at_least_zero = ("lag_seconds", "max_retry_after_seconds")
        for name in above_zero:
            if not 0 < getattr(self, name) < math.inf:
                raise SigningAPIError(f"{name} must be above 0, not {getattr(self, name)}")
        for name in at_least_zero:
            if not 0 <= getattr(self, name) < math.inf:
                raise SigningAPIError(f"{name} must be 0 or more, not {getattr(self, name)}")

    def delete_mode(self) -> DeleteMode:
        """`deletes` as a mode, or one line naming the variable to set."""
        chosen = str(self.deletes).strip().lower()
        if chosen == "soft":
            return "soft"
        if chosen == "hard":
            return "hard"
        raise SigningAPIError(
            f"deletes must be {' or '.join(settings.DELETE_MODES)} (SOURCES__SIGNING__DELETES), "
            f"not {one_line(self.deletes, 40)!r}"
        )

    def paced(self, pacing: Pacing | None) -> SigningConfiguration:
        """These settings with `pacing`'s rate and burst instead (themselves when None)."""
        if pacing is None:
            return self
        return dataclasses.replace(
            self, requests_per_second=pacing.requests_per_second, burst=pacing.burst
        )

    def request_limits(self, max_requests: int | None = None) -> RequestLimits:
        """What bounds the client's requests; `max_requests` is the run's budget."""
        return RequestLimits(
            max_requests=max_requests,
            give_up_after_seconds=self.give_up_after_seconds,
            max_retry_after_seconds=self.max_retry_after_seconds,
            request_deadline_seconds=self.request_deadline_seconds,
            max_response_bytes=self.max_response_bytes,
            connections=self.concurrency + 2,
        )

    def deletion_settings(self, reconcile: bool, allow_mass_delete: bool) -> DeletionSettings:
        """The run's treatment of deleted records: these settings and the load's options."""
        return DeletionSettings(
            self.delete_mode(),
            reconcile,
            allow_mass_delete,
            self.full_check_max_age_hours,
            self.mass_delete_share,
            self.count_check_every_hours,
        )


def configured_source(
    *, api_key: str | None = None, base_url: str | None = None, deletes: str | None = None
) -> SigningConfiguration:
    """The source's settings from dlt's configuration, with the values given taking precedence
    (a configured workspace's own key, API root and treatment of deletions).

    Raises:
        ConfigFieldMissingException: the key or the base URL is set nowhere.
        ConfigValueCannotBeCoercedException: a setting is not of its type (`page_size = "x"`).
    """
    given: dict[str, Any] = {
        name: value
        for name, value in (("api_key", api_key), ("base_url", base_url), ("deletes", deletes))
        if value is not None
    }
    return resolve_configuration(
        SigningConfiguration(), sections=SECTIONS, explicit_value=given or None
    )
