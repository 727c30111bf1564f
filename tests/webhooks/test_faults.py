"""The whole way under faults: the sandbox sends thousands of webhook deliveries with
duplicates, reordering, tampered bodies, forged signatures, stale timestamps and drops, while
the receiver (`signing-etl webhooks serve`, draining as it goes) is killed outright and started
again twice. After its drains and one reconciling poll, `raw` and the marts equal the sandbox;
every tampered or stale delivery was refused and counted (the sender's own record of each
attempt is the truth); no record is loaded twice; and no secret is in the warehouse, dlt's
folder, the inbox or any log."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from pipelines.webhooks.inbox import REFUSALS_WRITTEN_EVERY
from sandbox import RunningSandbox, SandboxConfig
from tests.models.test_marts import assert_marts_match
from tests.support import (
    START_MS,
    admin,
    cli_env,
    describe,
    differences,
    duplicate_keys,
    run_cli,
)
from tests.support.waiting import wait_until
from tests.support.webhooks import ServedReceiver, free_port, inbox_status, sender_done

# About three minutes: thousands of deliveries, dbt at the end. The waits for the sender and the
# receiver are bounds, not figures under test: on a busy 2-core CI runner the sender needed over
# 300 s, so they allow 900 s, and the module's first test (which sets it all up) 30 minutes.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
SETTLE_S = 900
# How long before a SIGKILL a refusal's count may still be in memory: the receiver writes counts
# within REFUSALS_WRITTEN_EVERY, plus slack for a busy machine's timer and disk.
LOST_ON_KILL_S = REFUSALS_WRITTEN_EVERY + 5.0

# The sandbox, the warehouse, what every command and the receiver printed, the SIGKILLs' times.
Faults = tuple[RunningSandbox, Path, list[str], list[float]]

FAULTS = {
    "webhook_duplicate_rate": 0.1,
    "webhook_tamper_rate": 0.05,
    "webhook_stale_rate": 0.05,
    "webhook_drop_rate": 0.03,
    "webhook_reorder_s": 1.0,
}


@pytest.fixture(scope="module")
def through_faults(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Faults]:
    """The sandbox, the warehouse, every output the commands and the receiver printed, and when
    the receiver was killed."""
    folder = tmp_path_factory.mktemp("faults")
    config = SandboxConfig(
        seed=31,
        shipments=1_000,
        history_days=10,
        start_ms=START_MS,
        limits_enabled=False,
        webhook_retry_base_s=0.5,
        webhook_timeout_s=5.0,
    )
    with RunningSandbox(config) as running:
        yield running, *_run_through_faults(running, folder)


def _run_through_faults(
    running: RunningSandbox, folder: Path
) -> tuple[Path, list[str], list[float]]:
    env = cli_env(running)
    warehouse = folder / "signing.duckdb"
    outputs: list[str] = []
    killed_at: list[float] = []  # wall times of the SIGKILLs

    def cli(*args: str) -> None:
        done = run_cli(list(args), cwd=folder, env=env, timeout=600)
        outputs.append(done.stdout + done.stderr)
        assert done.returncode == 0, describe(done)

    cli("load", "--duckdb", str(warehouse), "--no-models")
    port = free_port()
    cli(
        "webhooks",
        "subscribe",
        "--duckdb",
        str(warehouse),
        "--target-url",
        f"http://127.0.0.1:{port}",
    )
    admin(running, "PATCH", "/config", FAULTS)
    options = ("--port", str(port), "--load-after", "1", "--load-within", "10")
    receiver = ServedReceiver(folder, warehouse, env, *options)
    receiver.start()
    for crash in range(2):
        admin(running, "POST", "/advance", {"days": 1})
        time.sleep(0.5 + 3 * crash)  # mid-delivery, then (likely) mid-drain
        killed_at.append(time.time())  # a second's slack after it too, below
        receiver.kill()
        admin(running, "POST", "/advance", {"days": 1})  # sent while it is down: retried
        time.sleep(1.0)
        receiver.start()
    admin(running, "POST", "/advance", {"days": 1})
    sender_done(running, deadline_s=SETTLE_S)

    def inbox_empty() -> bool:
        return bool(inbox_status(folder, warehouse, env)["default"]["waiting"] == 0)

    # Each look is a `webhooks status` command: once a second is enough for a wait this long.
    wait_until(inbox_empty, SETTLE_S, "the receiver to drain its inbox", poll_at_most_s=1.0)
    receiver.stop()
    outputs.append(receiver.log())
    cli("load", "--duckdb", str(warehouse))  # the reconciling poll, then the models
    cli("webhooks", "status", "--duckdb", str(warehouse))
    cli("status", "--duckdb", str(warehouse))
    return warehouse, outputs, killed_at


def test_raw_and_marts_equal_the_sandbox_and_no_record_is_loaded_twice(
    through_faults: Faults,
) -> None:
    running, warehouse, _, _ = through_faults
    assert len(running.app.state.dispatcher.deliveries(running.store)) >= 2_000
    assert differences(warehouse, running.store) == {}
    assert duplicate_keys(warehouse) == {}
    with duckdb.connect(str(warehouse), read_only=True) as db:
        repeated = db.execute(
            "select count(*) from (select workspace_id, delivery_id from raw.webhook_deliveries "
            "group by all having count(*) > 1)"
        ).fetchone()
    assert repeated == (0,)
    assert_marts_match(warehouse, running.store)


def test_every_tampered_or_stale_delivery_was_refused_and_counted(
    through_faults: Faults,
) -> None:
    running, warehouse, _, killed_at = through_faults
    sent = running.app.state.dispatcher.deliveries(running.store)
    tampered = [d for d in sent if d.tampered]
    stale = [d for d in sent if d.stale and not d.tampered]
    assert tampered
    assert stale
    for each in tampered:
        assert {a.status for a in each.attempts} <= {401, None}, each.to_json()
    for each in stale:
        assert {a.status for a in each.attempts} <= {400, None}, each.to_json()
    found = inbox_status(warehouse.parent, warehouse, cli_env(running))["default"]
    assert set(found["rejected"]) == {"bad_signature", "stale"}

    # Each attempt that was answered is counted; one the receiver counted and was killed before
    # answering shows in the sender's record as a network error. A refusal's count waits up to
    # REFUSALS_WRITTEN_EVERY in memory (a flood of refusals is not a flood of writes), so one
    # answered just before a SIGKILL may never be written: those are left out of the floor.
    def before_a_kill(sent_at: float) -> bool:
        return any(-1 <= kill - sent_at <= LOST_ON_KILL_S for kill in killed_at)

    for reason, group in (("bad_signature", tampered), ("stale", stale)):
        answered = [a for d in group for a in d.attempts if a.status is not None]
        attempted = sum(len(d.attempts) for d in group)
        written = sum(not before_a_kill(a.sent_at) for a in answered)
        assert written <= found["rejected"][reason] <= attempted
    with duckdb.connect(str(warehouse), read_only=True) as db:
        loaded = {
            row[0]
            for row in db.execute("select delivery_id from raw.webhook_deliveries").fetchall()
        }
    refused = {d.delivery_id for d in tampered + stale}
    dropped = {d.delivery_id for d in sent if d.dropped}
    accepted = {
        d.delivery_id
        for d in sent
        if not (d.tampered or d.stale or d.dropped) and any(a.status == 200 for a in d.attempts)
    }
    assert not loaded & (refused | dropped)
    assert accepted <= loaded
    assert found["accepted"] == len(loaded)


def test_no_secret_is_in_the_warehouse_dlts_folder_the_inbox_or_a_log(
    through_faults: Faults,
) -> None:
    running, warehouse, outputs, _ = through_faults
    folder = warehouse.parent / ".signing.webhooks"
    kept = json.loads((folder / "secrets.json").read_text())["workspaces"]["default"]
    secrets = {s["secret"] for s in kept["subscriptions"]}
    with running.store.lock:
        secrets |= {h.secret for h in running.store.webhooks.values()}
    assert len(secrets) >= 7
    texts = [*outputs, *_text_values_of_duckdb(warehouse), *_text_values_of_sqlite(folder)]
    for path in (warehouse.parent / ".signing.dlt").rglob("*"):
        if path.is_file():
            texts.append(path.read_bytes().decode("latin-1"))
    for secret in secrets:
        assert not any(secret in text for text in texts)


def _text_values_of_duckdb(warehouse: Path) -> list[str]:
    """Every text value of every table of the warehouse (raw, staging, marts)."""
    values: list[str] = []
    with duckdb.connect(str(warehouse), read_only=True) as db:
        columns = db.execute(
            "select table_schema, table_name, column_name from information_schema.columns "
            "where data_type = 'VARCHAR'"
        ).fetchall()
        for schema, table, column in columns:
            rows = db.execute(f'select "{column}" from "{schema}"."{table}"').fetchall()
            values.extend(str(value) for (value,) in rows if value is not None)
    return values


def _text_values_of_sqlite(folder: Path) -> list[str]:
    """Every value of every table of the inbox."""
    values: list[str] = []
    with sqlite3.connect(folder / "inbox.sqlite") as db:
        tables = [
            name for (name,) in db.execute("select name from sqlite_master where type = 'table'")
        ]
        for table in tables:
            for row in db.execute(f'select * from "{table}"'):
                values.extend(str(value) for value in row)
    return values
