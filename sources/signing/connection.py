"""One run's connection to one workspace: the settings dlt resolves (`SOURCES__SIGNING__<NAME>`
or `[sources.signing]`), the paced client they make, and the workspace `/me` names, asked before
anything else so that a wrong key or URL fails at once and the caller knows which workspace's
state to open before it builds the source."""

from __future__ import annotations

import dlt
from dlt.common.configuration import with_config

from . import settings
from .client import SigningClient
from .context import SyncContext, check_service
from .control import RunControl
from .deletions import DeleteMode, Deletions, DeletionSettings
from .errors import SigningAPIError, one_line
from .pacing import Pacer
from .privacy import PrivacyConfiguration, PrivacyPolicy


@with_config(sections=("sources", "signing"))
def connect(
    api_key: str = dlt.secrets.value,
    base_url: str = dlt.config.value,
    since: str | None = None,
    max_requests: int | None = None,
    lag_seconds: float = settings.CURSOR_LAG_SECONDS,
    page_size: int = settings.PAGE_SIZE,
    concurrency: int = settings.CHILD_CONCURRENCY,
    requests_per_second: float = settings.REQUESTS_PER_SECOND,
    burst: int = settings.BURST,
    give_up_after_seconds: float = settings.GIVE_UP_AFTER_SECONDS,
    max_retry_after_seconds: float = settings.MAX_RETRY_AFTER_SECONDS,
    request_deadline_seconds: float = settings.REQUEST_DEADLINE_SECONDS,
    max_response_bytes: int = settings.MAX_RESPONSE_BYTES,
    max_pages_without_new_records: int = settings.MAX_PAGES_WITHOUT_NEW_RECORDS,
    privacy: PrivacyConfiguration = dlt.config.value,
    deletes: str = "soft",
    full_check_max_age_hours: float = settings.FULL_CHECK_MAX_AGE_HOURS,
    mass_delete_share: float = settings.MASS_DELETE_SHARE,
    reconcile: bool = False,
    allow_mass_delete: bool = False,
    control: RunControl | None = None,
) -> SyncContext:
    """A connection to the workspace of `api_key`, which has asked `/me`.

    Args:
        api_key: workspace API key (`SOURCES__SIGNING__API_KEY` or `.dlt/secrets.toml`).
        base_url: API root ending in `/v1` (`SOURCES__SIGNING__BASE_URL`).
        since: ISO time the first run starts from instead of the whole history.
        max_requests: stop cleanly after this many requests; the next run continues.
        lag_seconds: how far before each pass's start the next pass begins.
        page_size: list page size (5..200: pages overlap by 4 records).
        concurrency: child requests in flight at once (all through one pacer).
        requests_per_second: the pacer's ceiling before the service's headers say more; the
            reference states 10/s per key.
        burst: requests the pacer may send at once before settling to the rate.
        give_up_after_seconds: seconds of failures in a row (from the sending of the first
            failed request, 5xx answers included) after which the service is given up on.
        max_retry_after_seconds: a longer `Retry-After` (or `X-RateLimit-Reset` with nothing
            left) stops the run instead of waiting.
        request_deadline_seconds: the longest one request may take, answer included; a
            request past it is retried like a time-out.
        max_response_bytes: the largest answer read, decompressed; a larger one stops the
            run (exit 1) and is not retried.
        max_pages_without_new_records: list pages in a row that bring no record not read
            before, after which a pass gives up on a list that makes no sense (the cursor
            stays for the next run, and a warning says what the service did).
        privacy: the privacy policy, `[sources.signing.privacy]` (`preset`, `columns`, and the
            secret `hash_key`); checked before any request.
        deletes: `soft` (a deleted record's rows stay, with `_deleted_at`) or `hard`
            (its rows, nested and child rows are removed).
        full_check_max_age_hours: a full pass over a list's ids runs when the last one is
            older (service's clock), whatever the cheap check says.
        mass_delete_share: a full pass finding more than this share of a table's live rows
            gone marks nothing and fails the run, unless `allow_mass_delete`.
        reconcile: a full pass over every list this run (`load --reconcile`).
        allow_mass_delete: `load --allow-mass-delete`.
        control: the run's `RunControl`, to stop it from outside and read its counters; its
            `finish()` releases the connection's threads and sockets.

    Raises:
        SigningAPIError: a setting out of range, or `/me` refused or not the signing API's.
        PrivacyConfigError: the privacy policy names an unknown preset, column or action, or
            hashes without a key.
    """
    policy = PrivacyPolicy.configured(privacy)
    _check_settings(
        page_size, request_deadline_seconds, max_response_bytes, max_pages_without_new_records
    )
    deletion_settings = _deletion_settings(
        deletes, reconcile, allow_mass_delete, full_check_max_age_hours, mass_delete_share
    )
    run = control or RunControl()
    pacer = Pacer(requests_per_second, burst, control=run, max_wait=max_retry_after_seconds)
    client = SigningClient(
        base_url,
        api_key,
        control=run,
        pacer=pacer,
        max_requests=max_requests,
        give_up_after_seconds=give_up_after_seconds,
        max_retry_after_seconds=max_retry_after_seconds,
        request_deadline_seconds=request_deadline_seconds,
        max_response_bytes=max_response_bytes,
        connections=concurrency + 2,
    )
    connection = SyncContext(
        client,
        since,
        lag_seconds,
        page_size,
        concurrency,
        max_pages_without_new_records,
        privacy=policy,
        deletions=Deletions(deletion_settings),
    )
    run.on_finish(connection.close)  # also when /me fails: the run's finish releases the client
    check_service(connection)
    return connection


def _check_settings(
    page_size: int, deadline: float, max_bytes: int, max_pages_without_new: int
) -> None:
    """One line for a setting out of range, before any request."""
    smallest = settings.PAGE_OVERLAP + 1
    if not smallest <= page_size <= settings.MAX_PAGE_SIZE:
        raise SigningAPIError(
            f"page_size must be {smallest}..{settings.MAX_PAGE_SIZE} (pages overlap by "
            f"{settings.PAGE_OVERLAP} records), not {page_size}"
        )
    if deadline <= 0:
        raise SigningAPIError(f"request_deadline_seconds must be above 0, not {deadline}")
    if max_bytes < 1:
        raise SigningAPIError(f"max_response_bytes must be 1 or more, not {max_bytes}")
    if max_pages_without_new < 1:
        raise SigningAPIError(
            f"max_pages_without_new_records must be 1 or more, not {max_pages_without_new}"
        )


def _delete_mode(value: str) -> DeleteMode:
    chosen = str(value).strip().lower()
    if chosen == "soft":
        return "soft"
    if chosen == "hard":
        return "hard"
    raise SigningAPIError(
        f"deletes must be {' or '.join(settings.DELETE_MODES)} (SOURCES__SIGNING__DELETES), "
        f"not {one_line(value, 40)!r}"
    )


def _deletion_settings(
    deletes: str, reconcile: bool, allow_mass: bool, max_age_hours: float, share: float
) -> DeletionSettings:
    """The run's treatment of deleted records, or one line for a setting out of range."""
    if max_age_hours < 0:
        raise SigningAPIError(f"full_check_max_age_hours must be 0 or more, not {max_age_hours}")
    if not 0 <= share <= 1:
        raise SigningAPIError(f"mass_delete_share must be between 0 and 1, not {share}")
    return DeletionSettings(_delete_mode(deletes), reconcile, allow_mass, max_age_hours, share)
