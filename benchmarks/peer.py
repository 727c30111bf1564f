"""The peer the load is measured against: dlt's generic `rest_api` source configured for the
signing API, as a user without our source would write it.

It reads what our source reads (the workspace from /me, documents with their details, shipments
with their audit trails and filled-in fields, contacts, webhooks) with offset paging over pages
of 200, `updated_since` on the two lists that carry `updated_at`, child requests through dlt's
parallel extraction (`parallelized`, `extract.workers` threads), and merges on `id`. Shipments
have no `updated_at`, so the peer re-reads every shipment on each run; that is its limit, not a
setting we chose for it.
"""

from __future__ import annotations

from typing import Any

from dlt.sources.rest_api import rest_api_source

PAGE = {
    "type": "offset",
    "limit": 200,
    "offset_param": "offset",
    "limit_param": "limit",
    "total_path": "total",
}
SINGLE = {"type": "single_page"}


def _list(name: str, path: str, *, incremental: bool, **params: Any) -> dict[str, Any]:
    endpoint: dict[str, Any] = {"path": path, "paginator": PAGE, "data_selector": "data"}
    if incremental:
        endpoint["incremental"] = {
            "start_param": "updated_since",
            "cursor_path": "updated_at",
            "initial_value": "1970-01-01T00:00:00Z",
        }
    if params:
        endpoint["params"] = params
    return {"name": name, "endpoint": endpoint}


def _child(name: str, path: str, data_selector: str, **params: Any) -> dict[str, Any]:
    endpoint: dict[str, Any] = {"path": path, "paginator": SINGLE, "data_selector": data_selector}
    if params:
        endpoint["params"] = params
    return {"name": name, "endpoint": endpoint, "parallelized": True}


def peer_source(base_url: str, api_key: str) -> Any:
    """The signing API as a `rest_api` source (name `signing_peer`)."""
    events = _child("audit_events", "shipments/{resources.shipments.id}/events", "data", limit=500)
    fields = _child("shipment_fields", "shipments/{resources.shipments.id}/fields", "$")
    config: Any = {
        "client": {"base_url": base_url, "auth": {"type": "bearer", "token": api_key}},
        "resource_defaults": {
            "write_disposition": "merge",
            "primary_key": "id",
            "max_table_nesting": 1,
        },
        "resources": [
            {
                "name": "workspaces",
                "endpoint": {"path": "me", "paginator": SINGLE, "data_selector": "workspace"},
            },
            _list("documents", "documents", incremental=True),
            _child("document_details", "documents/{resources.documents.id}", "data"),
            _list("shipments", "shipments", incremental=False, include_archived="true"),
            {**events, "include_from_parent": ["id"]},
            {**fields, "primary_key": "shipment_id"},
            _list("contacts", "contacts", incremental=True),
            {
                "name": "webhooks",
                "endpoint": {"path": "webhooks", "paginator": SINGLE, "data_selector": "data"},
            },
        ],
    }
    return rest_api_source(config, name="signing_peer")
