"""The checks for deleted records on their default cadence: hourly runs with nothing new make
four requests (GET /me and one per list), and the count checks and the subscriptions list come
back every `count_check_every_hours` by the service's clock.

The suite otherwise runs every check on every run (`tests/support/cli.py`, `SUITE_CADENCE`), so
that "the next run notices" holds in the tests written before the cadence existed; this module
runs with the product's defaults. The sandbox's clock is moved without any activity, so each
run here really has nothing new.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import duckdb
import pytest

from pipelines.load.run import LoadResult, load_incremental
from sandbox import RunningSandbox
from sources.signing import settings
from tests.support import SandboxFactory, admin, differences, fast, pointed_at
from tests.support.truth import actual, compare, deleted_rows, expected

pytestmark = pytest.mark.slow  # a day of hourly loads

HOUR_MS = 3_600_000
CADENCE_HOURS = 6  # the documented default of count_check_every_hours
# A run with nothing new: GET /me and one request per list (documents, shipments, contacts).
QUIET_RUN = {"/me": 1, "/documents": 1, "/shipments": 1, "/contacts": 1}
# A run whose checks are due: each list's count (`limit=1`) and the subscriptions too.
CHECKING_RUN = {"/me": 1, "/documents": 2, "/shipments": 2, "/contacts": 2, "/webhooks": 1}


def _load_an_hour_later(running: RunningSandbox, warehouse: Path) -> LoadResult:
    """Move the sandbox's clock one hour on (no activity: nothing changes), then load with the
    product's default cadence."""
    running.store.clock.advance(HOUR_MS)
    with pointed_at(running):
        defaults = replace(
            fast(),
            count_check_every_hours=settings.COUNT_CHECK_EVERY_HOURS,
            full_check_max_age_hours=settings.FULL_CHECK_MAX_AGE_HOURS,
        )
        return load_incremental(warehouse, settings=defaults)


def _marked_deleted(warehouse: Path) -> set[str]:
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        rows = connection.execute(
            "select id from raw.shipments where _deleted_at is not null"
        ).fetchall()
    return {row[0] for row in rows}


def test_quiet_hourly_runs_cost_four_requests_and_the_checks_come_back_on_their_cadence(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    assert settings.COUNT_CHECK_EVERY_HOURS == CADENCE_HOURS  # the README's figure
    running = make_sandbox(shipments=40, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"
    first = _load_an_hour_later(running, warehouse)
    assert first.exit_code == 0
    assert differences(warehouse, running.store) == {}

    hourly = [_load_an_hour_later(running, warehouse) for _ in range(CADENCE_HOURS)]

    spent = [dict(run.stats.by_endpoint) for run in hourly]
    assert spent == [QUIET_RUN] * (CADENCE_HOURS - 1) + [CHECKING_RUN], spent
    assert sum(run.stats.requests for run in hourly) / len(hourly) <= 5
    assert all(not run.rows for run in hourly)

    # A deletion inside the cadence waits for the next check; the check then marks it (its
    # count disagrees, a full pass misses it, and its own GET answers 404).
    gone = running.store.live_ids("shipments")[0]
    admin(running, "POST", "/delete", {"kind": "shipments", "id": gone})
    quiet = _load_an_hour_later(running, warehouse)
    assert dict(quiet.stats.by_endpoint) == QUIET_RUN
    assert _marked_deleted(warehouse) == set()
    for _ in range(CADENCE_HOURS - 1):
        checked = _load_an_hour_later(running, warehouse)
    assert _marked_deleted(warehouse) == {gone}, checked.deletions
    assert compare(expected(running.store), actual(warehouse, deleted=False)) == {}
    assert compare(deleted_rows(running.store), actual(warehouse, deleted=True)) == {}
