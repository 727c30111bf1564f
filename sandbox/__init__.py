"""A local, faithful server of the signing service's API v1 with synthetic data.

Public surface: `SandboxConfig` to describe a workspace, `RunningSandbox` to serve one or several
on loopback, `Store` for a workspace's data (its live records, and in `Store.deleted` those the
application deleted), and `signature` to check webhook deliveries.
"""

from ._config import PLAN_REQUESTS_PER_MINUTE, SandboxConfig
from ._model import JSON, WEBHOOK_EVENTS, Contact, Document, Recipient, Shipment, iso
from ._server import RunningSandbox, bind, serve_forever
from ._store import RECORD_KINDS, Deleted, RecordKind, Store
from ._timeline import Behaviour
from ._webhooks import signature

__all__ = [
    "JSON",
    "PLAN_REQUESTS_PER_MINUTE",
    "RECORD_KINDS",
    "WEBHOOK_EVENTS",
    "Behaviour",
    "Contact",
    "Deleted",
    "Document",
    "Recipient",
    "RecordKind",
    "RunningSandbox",
    "SandboxConfig",
    "Shipment",
    "Store",
    "bind",
    "iso",
    "serve_forever",
    "signature",
]
