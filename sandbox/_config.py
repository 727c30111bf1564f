"""What makes one sandbox workspace: its data's seed and size, its plan, limits and faults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from ._errors import SandboxError
from ._timeline import Behaviour

Order = Literal["asc", "desc"]
# How an injected 429 says when to come back: `Retry-After` in seconds, as an HTTP date, 0, or
# any of these by chance.
RetryAfterForm = Literal["seconds", "http-date", "zero", "mixed"]
PLAN_REQUESTS_PER_MINUTE = {"free": 30, "starter": 60, "pro": 300, "business": 1000}


def default_start_ms() -> int:
    """Midnight UTC of today: the generated history ends where the user's calendar is."""
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return int(today.timestamp() * 1000)


@dataclass(slots=True)
class SandboxConfig:
    """Everything that makes one sandbox instance; tests use tight limits, the demo generous."""

    seed: int = 42
    # Seed of the record ids (default: `seed`). Workspaces with one id_seed and different seeds
    # have different data under the same ids: the n-th shipment of each has the same id.
    id_seed: int | None = None
    shipments: int = 2_000
    history_days: int = 180
    start_ms: int = field(default_factory=default_start_ms)
    plan: str = "pro"
    order: Order = "asc"
    # Limits. `None` for requests_per_minute means the plan's figure.
    limits_enabled: bool = True
    requests_per_second: float = 10.0
    burst: int = 40
    requests_per_minute: int | None = None
    daily_shipments: int = 2_000
    daily_requests: int | None = None
    ip_requests_per_second: float = 100.0
    ip_burst: int = 400
    # Faults injected into /v1 responses, as rates between 0 and 1.
    fault_429_rate: float = 0.0
    fault_5xx_rate: float = 0.0
    fault_truncate_rate: float = 0.0
    fault_retry_after: RetryAfterForm = "seconds"
    fault_retry_after_s: int = 1  # the wait an injected 429 asks for (not "zero")
    # The scope GET /webhooks needs: the reference gives webhooks to `write`; the sandbox lets
    # `read` list them unless told to be as strict as a service may be.
    webhooks_list_scope: Literal["read", "write"] = "read"
    # The application's deletes and restores during simulated activity (advance, background):
    # the share of each kind's live records (contacts, documents, shipments) it deletes per
    # simulated day, and the share of its deleted ones it restores per day. 0: none, so the
    # data stays exactly as without them.
    delete_rate: float = 0.0
    restore_rate: float = 0.0
    # Webhook delivery.
    webhook_timeout_s: float = 5.0
    webhook_retry_base_s: float = 1.0
    # Webhook faults, per delivery (rates between 0 and 1), drawn from a seeded stream: never
    # sent at all; sent once more after its 2xx (same delivery id); body changed after signing
    # or a forged signature; a correctly signed timestamp ten minutes old. Every delivery waits
    # webhook_delay_s, plus a random hold of up to webhook_reorder_s that shuffles their order.
    webhook_drop_rate: float = 0.0
    webhook_duplicate_rate: float = 0.0
    webhook_tamper_rate: float = 0.0
    webhook_stale_rate: float = 0.0
    webhook_delay_s: float = 0.0
    webhook_reorder_s: float = 0.0
    # A service that changes under its clients (`_drift.py`): fields the reference does not
    # list, on people; a status it does not list and a count sent as text.
    new_personal_fields: bool = False
    new_values_and_types: bool = False
    # A service that stops answering for a while: once the workspace has had `hold_after`
    # more /v1 requests, every further one waits, unanswered and not refused, until this is
    # set back to None. A test keeps a run in the middle of its reads exactly as long as it
    # needs, where pacing the run slowly would only make that likely. With `hold_key`, only
    # the requests that carry that key count and wait: one client of a workspace is held
    # while its other clients are answered.
    hold_after: int | None = None
    hold_key: str | None = None
    behaviour: Behaviour = field(default_factory=Behaviour)

    @property
    def effective_requests_per_minute(self) -> int:
        if self.requests_per_minute is not None:
            return self.requests_per_minute
        return PLAN_REQUESTS_PER_MINUTE.get(self.plan, 300)

    @property
    def effective_id_seed(self) -> int:
        return self.seed if self.id_seed is None else self.id_seed

    def workspaces(self, count: int) -> list[SandboxConfig]:
        """`count` workspaces for one server, this one first: seeds `seed`, `seed + 1`, ... and
        one id_seed, so their ids collide on purpose while their data differs."""
        return [
            replace(self, seed=self.seed + n, id_seed=self.effective_id_seed) for n in range(count)
        ]


# What PATCH /_sandbox/config may change at run time.
RUNTIME_SETTINGS = (
    "burst",
    "daily_requests",
    "daily_shipments",
    "delete_rate",
    "fault_429_rate",
    "fault_5xx_rate",
    "fault_retry_after",
    "fault_retry_after_s",
    "fault_truncate_rate",
    "hold_after",
    "hold_key",
    "limits_enabled",
    "new_personal_fields",
    "new_values_and_types",
    "order",
    "requests_per_minute",
    "requests_per_second",
    "restore_rate",
    "webhook_delay_s",
    "webhook_drop_rate",
    "webhook_duplicate_rate",
    "webhook_reorder_s",
    "webhook_retry_base_s",
    "webhook_stale_rate",
    "webhook_tamper_rate",
    "webhook_timeout_s",
)


def check_runtime_settings(changes: Mapping[str, Any]) -> None:
    """Refuse (422) changes to what is no run-time setting, or values that would break the
    sandbox instead of changing it; nothing is changed here."""
    unknown = set(changes) - set(RUNTIME_SETTINGS)
    if unknown:
        raise SandboxError(422, "invalid_request", f"unknown settings: {sorted(unknown)}")
    for name, value in changes.items():
        _check_setting(name, value)


def _check_setting(name: str, value: Any) -> None:
    if name == "order":
        if value not in get_args(Order):
            raise SandboxError(422, "invalid_request", "order must be asc or desc")
        return
    if name == "fault_retry_after":
        if value not in get_args(RetryAfterForm):
            raise SandboxError(422, "invalid_request", "fault_retry_after is not a known form")
        return
    if name in ("limits_enabled", "new_personal_fields", "new_values_and_types"):
        if not isinstance(value, bool):
            raise SandboxError(422, "invalid_request", f"{name} must be true or false")
        return
    if value is None and name in ("requests_per_minute", "daily_requests", "hold_after"):
        return
    if name == "hold_after" and (not isinstance(value, int) or isinstance(value, bool)):
        raise SandboxError(422, "invalid_request", "hold_after must be a whole number or null")
    if name == "hold_key":
        if value is not None and not isinstance(value, str):
            raise SandboxError(422, "invalid_request", "hold_key must be a key or null")
        return
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise SandboxError(422, "invalid_request", f"{name} must be a number of at least 0")
    if name.endswith("_rate") and value > 1:
        raise SandboxError(422, "invalid_request", f"{name} is a rate between 0 and 1")
    if name in ("burst", "requests_per_second", "requests_per_minute") and value == 0:
        raise SandboxError(422, "invalid_request", f"{name} must be above 0")
