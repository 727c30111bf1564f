"""One run's connection to one workspace: the paced client the settings make
(`configuration.SigningConfiguration`), and the workspace `/me` names, asked before anything
else so that a wrong key or URL fails at once and the caller knows which workspace's state to
open before it builds the source."""

from __future__ import annotations

from .client import SigningClient
from .configuration import SigningConfiguration
from .context import SyncContext, check_service
from .control import RunControl
from .deletions import Deletions
from .pacing import Pacer
from .privacy import PrivacyPolicy


def connect(
    configuration: SigningConfiguration,
    *,
    since: str | None = None,
    max_requests: int | None = None,
    reconcile: bool = False,
    allow_mass_delete: bool = False,
    control: RunControl | None = None,
) -> SyncContext:
    """A connection to the workspace of the configuration's key, which has asked `/me`.

    Args:
        configuration: the source's settings (`configured_source()`).
        since: ISO time the first run starts from instead of the whole history.
        max_requests: stop cleanly after this many requests; the next run continues.
        reconcile: a full pass over every list this run (`load --reconcile`).
        allow_mass_delete: `load --allow-mass-delete`.
        control: the run's `RunControl`, to stop it from outside and read its counters; its
            `finish()` releases the connection's threads and sockets.

    Raises:
        SigningAPIError: a setting out of range, or `/me` refused or not the signing API's.
        PrivacyConfigError: the privacy policy names an unknown preset, column or action, or
            hashes without a key.
    """
    policy = PrivacyPolicy.configured(configuration.privacy)
    configuration.check()
    deletions = Deletions(configuration.deletion_settings(reconcile, allow_mass_delete))
    run = control or RunControl()
    pacer = Pacer(
        configuration.requests_per_second,
        configuration.burst,
        control=run,
        max_wait=configuration.max_retry_after_seconds,
    )
    client = SigningClient(
        configuration.base_url,
        configuration.api_key,
        control=run,
        pacer=pacer,
        limits=configuration.request_limits(max_requests),
    )
    connection = SyncContext(
        client,
        since,
        configuration.lag_seconds,
        configuration.page_size,
        configuration.concurrency,
        configuration.max_pages_without_new_records,
        privacy=policy,
        deletions=deletions,
    )
    run.on_finish(connection.close)  # also when /me fails: the run's finish releases the client
    check_service(connection)
    return connection
