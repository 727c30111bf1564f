"""The refusals the API answers with its error envelope, raised wherever a rule is broken."""

from __future__ import annotations


class SandboxError(Exception):
    """A request the API refuses; `status` and `code` as in the reference's Errors part."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class DailyAllowanceExhausted(SandboxError):
    """The workspace sent its daily number of shipments; `wait_ms` until the sandbox's midnight."""

    def __init__(self, wait_ms: int) -> None:
        super().__init__(429, "rate_limited", "daily shipment allowance exhausted")
        self.wait_ms = wait_ms
