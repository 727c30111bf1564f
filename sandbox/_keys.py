"""A workspace's API keys and the check every `/v1` request's key goes through."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from ._errors import SandboxError

ALL_SCOPES = frozenset({"read", "write", "send"})


@dataclass(slots=True)
class ApiKey:
    """A workspace key; `secret` is the whole bearer token."""

    name: str
    secret: str
    scopes: frozenset[str]
    expires_at: int | None = None
    ip_allowlist: tuple[str, ...] = ()
    revoked: bool = False


def derived_secret(*parts: object) -> str:
    """A key secret that is the same on every run for the same `parts`."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()
    return f"sk_live_{digest[:40]}"


class Keyring:
    """The keys of one workspace, by secret."""

    def __init__(self) -> None:
        self._by_secret: dict[str, ApiKey] = {}

    def create(
        self,
        name: str,
        scopes: Iterable[str],
        *,
        secret: str | None = None,
        expires_at: int | None = None,
        ip_allowlist: Iterable[str] = (),
    ) -> ApiKey:
        key = ApiKey(
            name=name,
            secret=secret or f"sk_live_{secrets.token_hex(20)}",
            scopes=frozenset(scopes),
            expires_at=expires_at,
            ip_allowlist=tuple(ip_allowlist),
        )
        self._by_secret[key.secret] = key
        return key

    def get(self, secret: str | None) -> ApiKey | None:
        return self._by_secret.get(secret or "")

    def authenticate(self, secret: str | None, client_ip: str | None, now_ms: int) -> ApiKey:
        """The key behind a bearer token, or 401 for missing, unknown, revoked, expired or
        out-of-allowlist keys (the reference gives them all one code)."""
        key = self.get(secret)
        if key is None or key.revoked:
            raise SandboxError(401, "unauthorized", "API key missing, invalid or revoked")
        if key.expires_at is not None and key.expires_at <= now_ms:
            raise SandboxError(401, "unauthorized", "API key expired")
        if key.ip_allowlist and client_ip not in key.ip_allowlist:
            raise SandboxError(401, "unauthorized", "API key not allowed from this address")
        return key
