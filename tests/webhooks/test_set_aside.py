"""A record the service will not serve is set aside: a drain through a stand-in in front of the
sandbox that answers one shipment with a 307 loads the other deliveries' records, sets that
delivery aside (counted by `webhooks status`, with the reason) instead of failing every drain,
and the next load against the honest sandbox brings the record and takes the delivery."""

from __future__ import annotations

from pathlib import Path

import duckdb
import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from pipelines.configuration import WorkspaceEntry
from pipelines.load.run import load_incremental
from pipelines.warehouse import Warehouse
from pipelines.webhooks.drain import drain_workspace
from pipelines.webhooks.inbox import Delivery, Inbox
from pipelines.webhooks.secrets_file import SecretsFile, StoredSubscription, WorkspaceSecrets
from sandbox import RunningSandbox
from sources.signing import RunControl
from tests.support import FAST, SandboxFactory, client_for, differences, fast
from tests.support.cli import cli_env
from tests.support.standin import StandIn
from tests.support.webhooks import inbox_status

pytestmark = pytest.mark.slow  # drains and loads through a stand-in


class Redirecting:
    """The sandbox's API, except that one shipment (and what lies under it) answers 307."""

    def __init__(self, running: RunningSandbox, shipment_id: str) -> None:
        self.upstream = running.base_url.removesuffix("/v1")
        self.refused = f"/v1/shipments/{shipment_id}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        if path == self.refused or path.startswith(self.refused + "/"):
            moved = Response(status_code=307, headers={"location": "https://elsewhere.test/"})
            await moved(scope, receive, send)
            return
        request = Request(scope, receive)
        async with httpx.AsyncClient(timeout=60) as client:
            answer = await client.get(
                f"{self.upstream}{path}",
                params=dict(request.query_params),
                headers={"authorization": request.headers.get("authorization", "")},
            )
        passed = {k: v for k, v in answer.headers.items() if k.lower() in ("content-type", "date")}
        await Response(answer.content, answer.status_code, passed)(scope, receive, send)


def new_shipments(running: RunningSandbox, count: int) -> list[str]:
    """Shipments sent through the API after the first load: the changes to drain."""
    with client_for(running) as api:
        document = api.get("/documents", params={"limit": 1}).json()["data"][0]["id"]
        recipient = {"name": "Ada Aside", "email": "ada.aside@example.com"}
        return [
            api.post(
                "/shipments", json={"document_id": document, "recipients": [recipient]}
            ).json()["data"]["id"]
            for _ in range(count)
        ]


def test_a_record_the_service_will_not_serve_is_set_aside_and_the_next_load_brings_it(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(limits_enabled=False, shipments=60)
    path = tmp_path / "signing.duckdb"
    warehouse = Warehouse.at(path)
    load_incremental(warehouse, settings=fast(running))
    workspace_id = running.store.workspace.id
    SecretsFile(warehouse.webhooks_dir).update(  # subscribed: loads take what waits
        "default",
        lambda _: WorkspaceSecrets(
            workspace_id,
            (StoredSubscription("wh_1", "shipment.sent", "https://x", "whsec_x", "2026-01-01"),),
        ),
    )
    served, refused = new_shipments(running, 2)
    inbox = Inbox.open(warehouse.webhooks_dir)
    for number, shipment_id in enumerate((refused, served)):
        event = "shipment.sent"
        inbox.accept(
            Delivery("default", f"dlv_{number}", workspace_id, event, "shipments", shipment_id)
        )

    with StandIn(Redirecting(running, refused)) as standin:
        entry = WorkspaceEntry("default", standin.base_url, running.api_key)
        drained = drain_workspace(warehouse, entry, inbox, control=RunControl(), pacing=FAST)

    assert drained.outcome == "completed", drained.reason
    assert (drained.deliveries, drained.set_aside) == (1, 1)
    assert inbox.waiting("default", 10) == []  # no drain takes it again
    held = {row[0] for row in _query(path, "select id from raw.shipments")}
    assert served in held
    assert refused not in held
    status = inbox_status(tmp_path, path, cli_env(None))["default"]
    assert status["set_aside"] == 1
    assert status["set_aside_reason"] == f"GET /shipments/{refused} answered HTTP 307"
    assert status["waiting"] == 0

    load_incremental(warehouse, settings=fast(running))

    assert refused in {row[0] for row in _query(path, "select id from raw.shipments")}
    assert differences(path, running.store) == {}
    after = inbox_status(tmp_path, path, cli_env(None))["default"]
    assert (after["set_aside"], after["loaded"]) == (0, 2)
    inbox.close()


def _query(path: Path, sql: str) -> list[tuple[object, ...]]:
    with duckdb.connect(str(path), read_only=True) as db:
        return db.execute(sql).fetchall()
