"""The marts' traps closed, on DuckDB and on PostgreSQL, against the sandbox's own records.

Two workspaces whose ids collide are loaded under the configured names `w1` and `w2` and the
models built; then the application deletes documents (whose shipments stay), shipments and
contacts, one contact is touched without a change and another renamed, and both workspaces are
loaded again (reconciling) and the models built again. The expected side is what the sandbox
holds and what this module did to it, never what the models say:

- every mart with an id carries its key across workspaces (`<workspace_id>:<id>`), unique
  although the ids repeat;
- `dim_documents` keeps deleted documents, flagged, so a join from shipments or recipients to
  their document drops no row; a document deleted before the first load, which the pipeline
  never sees, is there too, named by its shipments;
- `fct_recipients` and the status-interval marts carry the names a report shows;
- `fct_deleted_records` and `fct_deletions_by_day` list and count what was deleted, noticed
  after the deletion and last seen alive before it;
- `dim_workspaces` has the configured name beside the service's;
- a contact gets a new version only when an attribute the version holds changed;
- the README's first query prints a table that fits a terminal, with the sandbox's numbers.
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from pipelines.load.run import LoadOptions, load_incremental
from pipelines.modeling.build import build_models
from pipelines.modeling.refresh import refresh_marts
from sandbox import RunningSandbox, Store
from tests.models.workspaces import colliding_workspaces
from tests.support import (
    MODELS_BUILT,
    admin,
    cli_env,
    client_for,
    describe,
    earliest,
    fast,
    run_cli,
    week_of,
)
from tests.support.destinations import DESTINATIONS, WarehouseUnderTest, warehouse_under_test

pytestmark = pytest.mark.slow  # dbt builds of the models, on DuckDB and PostgreSQL

README = Path(__file__).resolve().parents[2] / "README.md"
NAMES = ("w1", "w2")  # the configured names the two workspaces load under
DELETED_EACH = 3  # documents, shipments and contacts the application deletes in each workspace
KINDS = {"documents": "document", "shipments": "shipment", "contacts": "contact"}
# Per mart: the keys it carries, each with the id it is made of.
MART_KEYS = {
    "fct_shipments": {"shipment_key": "shipment_id", "document_key": "document_id"},
    "fct_recipients": {
        "recipient_key": "recipient_id",
        "shipment_key": "shipment_id",
        "contact_key": "contact_id",
        "document_key": "document_id",
    },
    "dim_documents": {"document_key": "document_id"},
    "dim_contacts": {"contact_key": "contact_id"},
    "fct_signing_funnel": {"document_key": "document_id"},
    "fct_time_to_sign": {"document_key": "document_id"},
    "fct_shipment_status_intervals": {"shipment_key": "shipment_id"},
    "fct_recipient_status_intervals": {"recipient_key": "recipient_id"},
    "fct_signer_waits": {"recipient_key": "recipient_id", "shipment_key": "shipment_id"},
    "fct_shipments_waiting": {"shipment_key": "shipment_id"},
    "dim_shipment_versions": {"shipment_key": "shipment_id"},
    "dim_recipient_versions": {"recipient_key": "recipient_id"},
    "dim_contact_versions": {"contact_key": "contact_id"},
}
# The marts whose own key is one row each.
OWN_KEYS = {
    "fct_shipments": "shipment_key",
    "fct_recipients": "recipient_key",
    "dim_documents": "document_key",
    "dim_contacts": "contact_key",
}


@dataclass
class Traps:
    """The warehouse, the sandbox, and what this module did to the sandbox."""

    place: WarehouseUnderTest
    running: RunningSandbox
    deleted: dict[tuple[str, str], set[str]]  # (workspace id, kind) -> ids the sandbox deleted
    gone_first: dict[str, str]  # workspace id -> the document deleted before the first load
    deleting_began: datetime
    deleting_ended: datetime
    touched_contact: str  # workspace w1's contact whose `updated_at` alone moved
    renamed_contact: tuple[str, str, str]  # its id, old name, new name

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        return self.place.query(sql)


def _load_and_build(place: WarehouseUnderTest, running: RunningSandbox, reconcile: bool) -> None:
    with place.configured() as warehouse:
        for name, key in zip(NAMES, running.api_keys, strict=True):
            loaded = load_incremental(
                warehouse,
                LoadOptions(reconcile=reconcile),
                workspace_name=name,
                settings=fast(running, key),
            )
            assert loaded.exit_code == 0, loaded.stopped
        built = build_models(warehouse)
    assert built.success, built.summary
    assert built.models_passed == MODELS_BUILT, built.summary


def _delete(running: RunningSandbox) -> dict[tuple[str, str], set[str]]:
    """The application deletes some documents, shipments and contacts in each workspace."""
    deleted: dict[tuple[str, str], set[str]] = {}
    for kind in KINDS:
        answer = admin(running, "POST", "/delete", {"kind": kind, "count": DELETED_EACH})
        for each in answer["workspaces"]:
            deleted[each["workspace_id"], kind] = set(each["deleted"])
    return deleted


def _delete_a_document_before_the_first_load(running: RunningSandbox) -> dict[str, str]:
    """Each workspace's most sent document is deleted before the warehouse ever sees it; its
    shipments stay and name it."""
    gone: dict[str, str] = {}
    for store in running.stores:
        workspace = store.workspace.id
        sent = Counter(shipment.document_id for shipment in store.shipments.by_id.values())
        ((document_id, _),) = sent.most_common(1)
        query = f"/delete?workspace={workspace}"
        admin(running, "POST", query, {"kind": "documents", "id": document_id})
        gone[workspace] = document_id
    return gone


def _change_contacts(store: Store) -> tuple[str, tuple[str, str, str]]:
    """One contact's `updated_at` moves with nothing else (as a change of custom properties
    moves it); another contact is renamed."""
    with store.lock:
        touched, renamed = sorted(store.contacts.by_id.values(), key=lambda c: c.id)[:2]
        now = store.clock.now_ms()
        assert touched.updated_at < now
        assert renamed.updated_at < now
        store.contacts.touch(touched, now)
        old_name, renamed.name = renamed.name, f"{renamed.name} (renamed)"
        store.contacts.touch(renamed, now)
    return touched.id, (renamed.id, old_name, renamed.name)


@pytest.fixture(scope="module", params=DESTINATIONS)
def traps(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Traps]:
    folder = tmp_path_factory.mktemp(f"traps_{request.param}")
    place = warehouse_under_test(request.param, folder, request)
    with RunningSandbox(*colliding_workspaces(seed=29, shipments=80)) as running:
        gone_first = _delete_a_document_before_the_first_load(running)
        _load_and_build(place, running, reconcile=False)
        began = datetime.now(UTC)
        deleted = _delete(running)
        ended = datetime.now(UTC)
        touched, renamed = _change_contacts(running.stores[0])
        _load_and_build(place, running, reconcile=True)
        yield Traps(place, running, deleted, gone_first, began, ended, touched, renamed)


# ---------------------------------------------------------------------- keys


def test_every_key_names_its_workspace_and_id_and_is_unique_although_ids_repeat(
    traps: Traps,
) -> None:
    for mart, keys in MART_KEYS.items():
        columns = ", ".join(f"{key}, {column}" for key, column in keys.items())
        for row in traps.rows(f"select workspace_id, {columns} from marts.{mart}"):
            workspace, pairs = row[0], row[1:]
            for key, record_id in zip(pairs[::2], pairs[1::2], strict=True):
                assert key == (None if record_id is None else f"{workspace}:{record_id}"), mart
    for mart, key in OWN_KEYS.items():
        ((rows, keys, ids),) = traps.rows(
            f"select count(*), count(distinct {key}), count(distinct {MART_KEYS[mart][key]}) "
            f"from marts.{mart}"
        )
        assert keys == rows, mart
        assert ids < rows, f"{mart}: the test needs ids that repeat across workspaces"


def test_the_shipment_keys_are_the_sandboxes_live_shipments(traps: Traps) -> None:
    expected = {
        f"{store.workspace.id}:{shipment_id}"
        for store in traps.running.stores
        for shipment_id in store.shipments.by_id
    }
    assert {key for (key,) in traps.rows("select shipment_key from marts.fct_shipments")} == (
        expected
    )


# ---------------------------------------------------------------------- deleted documents


def test_dim_documents_keeps_deleted_documents_flagged(traps: Traps) -> None:
    expected: dict[tuple[str, str], bool | None] = {
        (store.workspace.id, document_id): False
        for store in traps.running.stores
        for document_id in store.documents.by_id
    }
    for (workspace, kind), ids in traps.deleted.items():
        if kind == "documents":
            expected.update({(workspace, document_id): True for document_id in ids})
    # Never loaded, so not known to be deleted (its record may only be late): null.
    expected.update(dict.fromkeys(traps.gone_first.items(), None))
    found = traps.rows("select workspace_id, document_id, is_deleted from marts.dim_documents")
    assert {(w, d): None if flag is None else bool(flag) for w, d, flag in found} == expected


def test_a_document_deleted_before_the_first_load_is_named_by_its_shipments(
    traps: Traps,
) -> None:
    expected = {}
    for store in traps.running.stores:
        workspace = store.workspace.id
        document_id = traps.gone_first[workspace]
        assert document_id not in store.documents.by_id  # still deleted
        shipments = [x for x in store.shipments.by_id.values() if x.document_id == document_id]
        assert shipments, "the test needs shipments of the document"
        latest = max(shipments, key=lambda x: (x.created_at, x.id))
        sent = sum(any(r.sent_at for r in x.recipients) for x in shipments)
        expected[workspace, document_id] = (latest.document_name, False, len(shipments), sent)
    found = traps.rows(
        "select workspace_id, document_id, document_name, is_loaded, count_shipments, "
        "count_shipments_sent from marts.dim_documents where not is_loaded"
    )
    assert {(w, d): (n, bool(f), c, s) for w, d, n, f, c, s in found} == expected


def test_joining_documents_drops_no_shipment_or_recipient_of_a_deleted_document(
    traps: Traps,
) -> None:
    gone = {(w, i) for (w, kind), ids in traps.deleted.items() if kind == "documents" for i in ids}
    shipments = [
        (s.workspace.id, x) for s in traps.running.stores for x in s.shipments.by_id.values()
    ]
    of_deleted = sum((w, x.document_id) in gone for w, x in shipments)
    recipients = sum(len(x.recipients) for _, x in shipments)
    assert of_deleted > 0, "the test needs live shipments of deleted documents"
    ((joined_deleted,),) = traps.rows(
        "select count(*) from marts.fct_shipments s "
        "join marts.dim_documents d on d.document_key = s.document_key where d.is_deleted"
    )
    ((joined_recipients,),) = traps.rows(
        "select count(*) from marts.fct_recipients r "
        "join marts.dim_documents d on d.document_key = r.document_key"
    )
    assert (joined_deleted, joined_recipients) == (of_deleted, recipients)


# ---------------------------------------------------------------------- names


def test_recipients_and_status_intervals_carry_the_names_a_report_shows(traps: Traps) -> None:
    documents, recipients = {}, {}
    for store in traps.running.stores:
        for shipment in store.shipments.by_id.values():
            documents[store.workspace.id, shipment.id] = shipment.document_name
            for r in shipment.recipients:
                recipients[store.workspace.id, r.id] = (r.name, shipment.document_name)
    found = traps.rows("select workspace_id, recipient_id, document_name from marts.fct_recipients")
    assert {(w, r): name for w, r, name in found} == {k: v[1] for k, v in recipients.items()}
    found = traps.rows(
        "select distinct workspace_id, shipment_id, document_name "
        "from marts.fct_shipment_status_intervals"
    )
    assert {(w, s): name for w, s, name in found} == documents
    found = traps.rows(
        "select distinct workspace_id, recipient_id, recipient_name, document_name "
        "from marts.fct_recipient_status_intervals"
    )
    assert {(w, r): (name, doc) for w, r, name, doc in found} == recipients


# ---------------------------------------------------------------------- deletions


def test_the_deletions_marts_list_and_count_what_the_application_deleted(traps: Traps) -> None:
    expected = {
        (workspace, KINDS[kind], record_id)
        for (workspace, kind), ids in traps.deleted.items()
        for record_id in ids
    }
    assert len(expected) == len(traps.running.stores) * len(KINDS) * DELETED_EACH
    listed = traps.rows(
        "select workspace_id, record_kind, record_id, record_key, noticed_at, noticed_day, "
        "last_seen_alive_at from marts.fct_deleted_records"
    )
    assert {(w, kind, i) for w, kind, i, *_ in listed} == expected
    for workspace, kind, record_id, key, noticed, day, alive in listed:
        assert key == f"{workspace}:{kind}:{record_id}"
        # The deletion happened between the last sighting and the notice.
        assert alive <= traps.deleting_began < traps.deleting_ended <= noticed
        assert day == noticed.astimezone(UTC).date()
    counted = traps.rows(
        "select workspace_id, record_kind, sum(count_deleted) "
        "from marts.fct_deletions_by_day group by 1, 2"
    )
    assert {(w, kind): int(n) for w, kind, n in counted} == Counter(
        (w, kind) for w, kind, _ in expected
    )


# ---------------------------------------------------------------------- workspaces


def test_dim_workspaces_has_the_configured_name_beside_the_services(traps: Traps) -> None:
    found = traps.rows(
        "select workspace_id, workspace_name, configured_name from marts.dim_workspaces"
    )
    assert {w: (service, configured) for w, service, configured in found} == {
        store.workspace.id: (store.workspace.name, name)
        for store, name in zip(traps.running.stores, NAMES, strict=True)
    }


# ---------------------------------------------------------------------- versions


def test_a_contact_gets_a_version_only_when_an_attribute_it_holds_changed(traps: Traps) -> None:
    workspace = traps.running.stores[0].workspace.id
    renamed, old_name, new_name = traps.renamed_contact

    def names(contact_id: str) -> list[str]:
        rows = traps.place.query(
            "select contact_name from marts.dim_contact_versions "
            "where contact_key = ? order by version_number",
            f"{workspace}:{contact_id}",
        )
        return [name for (name,) in rows]

    assert names(traps.touched_contact) == [
        traps.running.stores[0].contacts.by_id[traps.touched_contact].name
    ]
    assert names(renamed) == [old_name, new_name]


# ---------------------------------------------------------------------- the README


def readme_first_query() -> str:
    """The query of the README's first `signing-etl sql` example, as one line."""
    found = re.search(r'signing-etl sql --duckdb \S+ "([^"]+)"', README.read_text())
    assert found is not None, "the README has no `signing-etl sql` example"
    return " ".join(found[1].split())


def test_the_readmes_first_query_prints_a_readable_table_of_the_sandboxes_numbers(
    traps: Traps, tmp_path: Path
) -> None:
    expected: dict[tuple[str, date], tuple[int, int]] = {}
    for store in traps.running.stores:
        for shipment in store.shipments.by_id.values():
            first = earliest([r.sent_at for r in shipment.recipients])
            if first is not None:
                key = (store.workspace.name, week_of(first))
                sent, completed = expected.get(key, (0, 0))
                expected[key] = (sent + 1, completed + (shipment.status == "completed"))
    args = ["sql", *traps.place.cli_args(), readme_first_query()]
    env = {**cli_env(None), **traps.place.env}
    table = run_cli(args, cwd=tmp_path, env=env)
    as_csv = run_cli([*args, "--format", "csv"], cwd=tmp_path, env=env)
    assert table.returncode == as_csv.returncode == 0, describe(table) + describe(as_csv)
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert 0 < len(rows) <= 5
    assert list(rows[0]) == ["workspace_name", "sent_week", "sent", "completed"]
    for row in rows:
        week = date.fromisoformat(row["sent_week"])
        assert (int(row["sent"]), int(row["completed"])) == expected[row["workspace_name"], week]
        assert row["workspace_name"] in table.stdout  # whole, not cut to fit
    assert max(len(line) for line in table.stdout.splitlines()) <= 80, table.stdout


# ---------------------------------------------------------------------- fresh after a drain
# Last in the module: it changes the sandbox and the warehouse the tests above read.


def test_a_refresh_brings_the_marts_up_to_date_with_raw(traps: Traps) -> None:
    store = traps.running.stores[1]
    with client_for(traps.running, traps.running.api_keys[1]) as api:
        document = api.get("/documents", params={"limit": 1}).json()["data"][0]["id"]
        recipient = {"name": "Ada", "email": "ada.fresh@example.com", "company": "Acme"}
        answer = api.post("/shipments", json={"document_id": document, "recipients": [recipient]})
    shipment_id = answer.json()["data"]["id"]
    with traps.place.configured() as warehouse:
        loaded = load_incremental(
            warehouse, workspace_name=NAMES[1], settings=fast(traps.running, store.main_key.secret)
        )
        assert loaded.exit_code == 0, loaded.stopped
        key = f"{store.workspace.id}:{shipment_id}"
        query = (
            "select shipment_status, count_recipients from marts.fct_shipments "
            "where shipment_key = ?"
        )
        assert traps.place.query(query, key) == []  # raw has it, the marts not yet
        refreshed = refresh_marts(warehouse)
    assert refreshed is not None
    assert refreshed.success, refreshed.summary
    shipment = store.shipments.by_id[shipment_id]
    assert traps.place.query(query, key) == [(shipment.status, len(shipment.recipients))]
    ((sent,),) = traps.place.query(
        "select sum(count_shipments_sent) from marts.fct_signing_funnel where workspace_id = ?",
        store.workspace.id,
    )
    assert sent == sum(
        any(r.sent_at is not None for r in s.recipients) for s in store.shipments.by_id.values()
    )
