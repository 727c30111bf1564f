"""A deletion is confirmed before it is marked: loads through a stand-in that sits in front of
the sandbox and lies in its lists (hides a share of the records, or answers every list empty
with a total of 0) while it still serves each record by id, as the sandbox does. Under
`deletes=soft` and `hard`, nothing the service still holds is marked or removed, what it did
delete is, and one honest pass leaves every table equal to the sandbox (the truth is the
sandbox's own store)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from pipelines.load.run import LoadOptions, LoadResult, load_incremental
from sandbox import RecordKind, RunningSandbox
from sources.signing import configured_source
from tests.support import FAST, SandboxFactory, admin
from tests.support.destinations import WarehouseUnderTest
from tests.support.standin import StandIn
from tests.support.truth import compare, deleted_ids, expected

pytestmark = pytest.mark.slow  # several loads per test

KINDS: tuple[RecordKind, ...] = ("documents", "contacts", "shipments")
PASSED_HEADERS = (
    *("content-type", "date", "retry-after", "x-ratelimit-limit"),
    *("x-ratelimit-remaining", "x-ratelimit-reset", "x-ratelimit-scope"),
)


class LyingLists:
    """The sandbox's API, except that its lists leave out the records in `hidden` (their
    `total` counted without them too), or answer empty with a total of 0 (`empty`), and that
    the path `broken` answers a gateway's 404 (a JSON body, not the API's error)."""

    def __init__(
        self,
        running: RunningSandbox,
        hidden: set[str],
        empty: bool = False,
        broken: str | None = None,
    ) -> None:
        self.upstream = running.base_url.removesuffix("/v1")
        self.hidden = hidden
        self.empty = empty
        self.broken = broken

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == self.broken:
            gateway = orjson.dumps({"message": "no Route matched with those values"})
            await Response(gateway, 404, media_type="application/json")(scope, receive, send)
            return
        request = Request(scope, receive)
        headers = {"authorization": request.headers.get("authorization", "")}
        async with httpx.AsyncClient(timeout=60) as client:
            answer = await client.request(
                request.method,
                f"{self.upstream}{scope['path']}",
                params=dict(request.query_params),
                headers=headers,
                content=await request.body(),
            )
        body = answer.content
        listed = scope["path"].rstrip("/").split("/")[-1] in KINDS
        if listed and answer.status_code == 200:
            body = orjson.dumps(self._lie(orjson.loads(body)))
        passed = {k: v for k, v in answer.headers.items() if k.lower() in PASSED_HEADERS}
        await Response(body, answer.status_code, passed)(scope, receive, send)

    def _lie(self, page: dict[str, Any]) -> dict[str, Any]:
        if self.empty:
            return {**page, "data": [], "total": 0}
        kept = [record for record in page["data"] if record["id"] not in self.hidden]
        left_out = len(page["data"]) - len(kept)
        total = page.get("total")
        return {**page, "data": kept, "total": total - left_out if total else total}


def load(
    place: WarehouseUnderTest, running: RunningSandbox, base_url: str, mode: str
) -> LoadResult:
    settings = configured_source(api_key=running.api_key, base_url=base_url, deletes=mode)
    with place.configured() as warehouse:
        return load_incremental(
            warehouse, LoadOptions(reconcile=True), settings=settings.paced(FAST)
        )


def every_25th_live_id(running: RunningSandbox) -> set[str]:
    """About 4 % of each list's live records."""
    store = running.store
    with store.lock:
        return {
            record_id
            for kind in KINDS
            for number, record_id in enumerate(sorted(store.live_ids(kind)))
            if number % 25 == 0
        }


@pytest.mark.parametrize("mode", ["soft", "hard"])
def test_lists_that_lie_mark_only_what_the_service_deleted(
    make_sandbox: SandboxFactory, tmp_path: Path, mode: str
) -> None:
    running = make_sandbox(shipments=150, limits_enabled=False)
    place = WarehouseUnderTest(tmp_path / "signing.duckdb")
    assert load(place, running, running.base_url, mode).exit_code == 0
    gone = {
        kind: admin(running, "POST", "/delete", {"kind": kind, "count": 2})["deleted"]
        for kind in ("contacts", "shipments")
    }
    assert all(gone.values())
    hidden = every_25th_live_id(running)
    assert hidden

    with StandIn(LyingLists(running, hidden)) as hiding:
        through_hiding = load(place, running, hiding.base_url, mode)
    assert through_hiding.exit_code == 0, through_hiding.stopped
    # Every record the service still holds is in the warehouse, live; of what it deleted,
    # only what answered 404 by id is gone (marked, or removed under `hard`).
    assert compare(expected(running.store), place.actual(deleted=False)) == {}
    assert through_hiding.marked == {kind: len(ids) for kind, ids in gone.items()}

    with StandIn(LyingLists(running, set(), empty=True)) as empty:
        through_empty = load(place, running, empty.base_url, mode)
    assert compare(expected(running.store), place.actual(deleted=False)) == {}
    assert not through_empty.marked

    honest = load(place, running, running.base_url, mode)
    assert honest.exit_code == 0, honest.stopped
    assert compare(expected(running.store), place.actual(deleted=False)) == {}
    if mode == "soft":
        held = {
            kind: {
                row[0]
                for row in place.query(f"select id from raw.{kind} where _deleted_at is not null")
            }
            for kind in KINDS
        }
        assert held == deleted_ids(running.store)


def test_a_404_on_a_shipments_children_that_its_own_get_denies_marks_nothing(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """A gateway's 404 on one shipment's audit trail, while the shipment's own GET answers,
    deletes nothing (under `hard`, where a mark removes the rows); the shipment's children
    wait, and the next run fetches them."""
    running = make_sandbox(shipments=40, limits_enabled=False)
    place = WarehouseUnderTest(tmp_path / "signing.duckdb")
    with running.store.lock:
        shipment = sorted(running.store.live_ids("shipments"))[0]
    broken = f"/v1/shipments/{shipment}/events"

    with StandIn(LyingLists(running, set(), broken=broken)) as gateway:
        through_gateway = load(place, running, gateway.base_url, "hard")

    assert through_gateway.exit_code == 0, through_gateway.stopped
    assert not through_gateway.marked
    assert [w for w in through_gateway.stats.warnings if "own GET did not" in w]
    assert place.query("select count(*) from raw.shipments where id = ?", shipment) == [(1,)]
    honest = load(place, running, running.base_url, "hard")
    assert honest.exit_code == 0, honest.stopped
    assert compare(expected(running.store), place.actual(deleted=False)) == {}
