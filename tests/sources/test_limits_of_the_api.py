"""What the API's own limits do to a load: an audit trail cut at its 500-event cap is counted
and shown, and a Retry-After longer than the run will wait stops it as a daily limit does."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from pipelines.load.run import load_incremental
from pipelines.status.read import read_status
from sandbox import JSON, Shipment, iso
from tests.support import (
    SandboxFactory,
    admin,
    cli_env,
    describe,
    differences,
    fast,
    load_args,
    message_lines,
    pointed_at,
    run_cli,
)


def test_an_audit_trail_cut_at_500_events_is_counted_and_shown(
    make_sandbox: SandboxFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = make_sandbox(shipments=20, limits_enabled=False)
    store = running.store
    with store.lock:
        long_one = sorted(store.shipments.by_id)[3]
        first_recipient = store.shipments.by_id[long_one].recipients[0]
    trail = Shipment.audit_events

    def with_a_long_trail(self: Shipment) -> list[JSON]:
        events = trail(self)
        if self.id != long_one:
            return events
        views = [
            {
                "id": f"evt_view_{n:04d}",
                "type": "opened",
                "at": iso(self.created_at + 60_000 * (n + 1)),
                "recipient_id": first_recipient.id,
                "actor": {"name": first_recipient.name, "ip": "10.0.0.9"},
            }
            for n in range(600)
        ]
        return events + views

    monkeypatch.setattr(Shipment, "audit_events", with_a_long_trail)
    warehouse = tmp_path / "signing.duckdb"
    with pointed_at(running):
        result = load_incremental(warehouse, settings=fast())

    assert result.stats.truncated_trails == 1, result.stats
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        per_shipment = dict(
            connection.execute(
                "select shipment_id, count(*) from raw.audit_events group by 1"
            ).fetchall()
        )
    assert per_shipment[long_one] == 500
    assert max(n for s, n in per_shipment.items() if s != long_one) < 500
    assert read_status(warehouse).truncated_trails == 1
    shown = run_cli(["status", "--duckdb", str(warehouse)], cwd=tmp_path, env=cli_env(running))
    assert "Audit trails cut at the API's 500 events: 1 " in shown.stdout, describe(shown)


@pytest.mark.slow
def test_a_retry_after_longer_than_the_run_waits_stops_it_with_exit_75(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    # One request in ten answered 429 with a Retry-After three weeks ahead.
    three_weeks = 21 * 24 * 3600
    running = make_sandbox(
        shipments=40, limits_enabled=False, fault_429_rate=0.1, fault_retry_after_s=three_weeks
    )
    warehouse = tmp_path / "signing.duckdb"
    stopped = run_cli(load_args(warehouse), cwd=tmp_path, env=cli_env(running), timeout=120)

    assert stopped.returncode == 75, describe(stopped)
    lines = message_lines(stopped.stderr)
    assert len(lines) == 1, describe(stopped)
    assert "1,814,400 s (Retry-After)" in lines[0], describe(stopped)
    assert "max_retry_after_seconds" in lines[0], describe(stopped)

    admin(running, "PATCH", "/config", {"fault_429_rate": 0})
    finished = run_cli(load_args(warehouse), cwd=tmp_path, env=cli_env(running))
    assert finished.returncode == 0, describe(finished)
    assert differences(warehouse, running.store) == {}
