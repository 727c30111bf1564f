"""A load survives what the service and the machine do to it: injected 429s, 5xx and truncated
bodies, real rate limits, the daily limit, a request budget and a SIGKILL. Every case ends with
the warehouse equal to the sandbox's own records, with no key loaded twice.

All of it runs over real HTTP against sandboxes, into DuckDB files under tmp_path; the cases about
the CLI's exit codes run `signing-etl` as a subprocess configured through the environment."""

from __future__ import annotations

import random
import re
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pipelines.load.run import LoadOptions, load_incremental
from pipelines.status.read import read_status
from sandbox import RunningSandbox
from sources.signing import Pacing, SigningConfiguration, configured_source, parse_iso
from tests.support import (
    SandboxFactory,
    admin,
    cli_env,
    describe,
    differences,
    duplicate_keys,
    fast,
    load_args,
    pointed_at,
    problem_lines,
    raw_row_counts,
    run_cli,
    served,
    start_cli,
)

pytestmark = pytest.mark.slow  # loads under injected faults and rate limits

# Limits that never bind, for tests about one other limit.
UNBOUND = {"requests_per_second": 1000, "burst": 1000, "requests_per_minute": 100_000}
CONTACT_TABLES = {"contacts", "contacts__custom"}


def paced(requests_per_second: float, burst: int) -> SigningConfiguration:
    """The source's settings as configured now (`pointed_at`), paced as given."""
    return configured_source().paced(Pacing(requests_per_second, burst))


def missing_rows(warehouse: Path, running: RunningSandbox) -> int:
    """How many of the sandbox's rows the warehouse lacks, over all compared tables."""
    return sum(table["counts"][0] for table in differences(warehouse, running.store).values())


# ---------------------------------------------------------------------- injected faults
@pytest.mark.parametrize(
    ("faults", "proof"),
    [
        # Each of these 429s asks for a 1 s wait, which pauses every request: few of them.
        pytest.param(
            {"fault_429_rate": 0.08, "fault_retry_after": "seconds"}, "throttled", id="429-seconds"
        ),
        pytest.param(
            {"fault_429_rate": 0.08, "fault_retry_after": "http-date"},
            "throttled",
            id="429-http-date",
        ),
        pytest.param(
            {"fault_429_rate": 0.3, "fault_retry_after": "zero"}, "throttled", id="429-zero"
        ),
        pytest.param({"fault_5xx_rate": 0.2}, "retries", id="5xx"),
        pytest.param({"fault_truncate_rate": 0.2}, "retries", id="truncated-body"),
    ],
)
def test_injected_faults_change_nothing_in_the_result(
    make_sandbox: SandboxFactory, tmp_path: Path, faults: dict[str, Any], proof: str
) -> None:
    running = make_sandbox(shipments=30, limits_enabled=False, **faults)
    warehouse = tmp_path / "signing.duckdb"

    with pointed_at(running):
        result = load_incremental(warehouse, settings=fast())

    assert result.stopped is None
    assert getattr(result.stats, proof) > 0, result.stats  # the faults did happen
    if faults.get("fault_retry_after") in ("seconds", "http-date"):
        # Retry-After was honoured: at least one full second went to waiting.
        assert result.stats.waited_seconds >= 1.0, result.stats
    assert differences(warehouse, running.store) == {}
    assert duplicate_keys(warehouse) == {}


# ---------------------------------------------------------------------- pacing
def test_no_429_when_the_pacer_matches_steady_limits(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(
        shipments=70,
        limits_enabled=True,
        requests_per_second=20,
        burst=20,
        requests_per_minute=600,
    )
    warehouse = tmp_path / "signing.duckdb"

    with pointed_at(running):
        result = load_incremental(warehouse, settings=paced(20, 20))

    assert result.stats.requests >= 150
    assert result.stats.throttled == 0, result.stats
    assert admin(running, "GET", "/state")["requests_refused"] == 0
    assert differences(warehouse, running.store) == {}


def test_the_pacer_reads_a_tight_per_minute_window_from_the_headers(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """60 requests a minute and a burst of 40: a run of 70+ requests must cross the window
    (so it takes a minute). The pacer learns the window from X-RateLimit-* only once it is the
    tightest bucket, and then holds back until X-RateLimit-Reset. Measured: no 429 at all.
    Two are tolerated: up to 8 requests are in flight, and a response reports Remaining as of
    its own arrival, so when the window fills one or two already sent may meet it."""
    running = make_sandbox(
        shipments=30, limits_enabled=True, requests_per_second=10, burst=40, requests_per_minute=60
    )
    warehouse = tmp_path / "signing.duckdb"

    with pointed_at(running):
        result = load_incremental(warehouse, settings=paced(10, 40))

    assert result.stats.requests > 60  # the window was crossed
    assert result.stats.throttled <= 2, result.stats
    assert result.stopped is None
    assert differences(warehouse, running.store) == {}


def test_a_pacer_burst_below_the_services_does_not_slow_the_run_to_a_crawl(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """The reference's limits (10/s, burst 40, pro plan 300/min) and a cautious pacer (10/s,
    burst 20). X-RateLimit-Limit 40 is the service's burst (reference: "maximum concurrently
    available requests"), not a per-minute figure: ~35 requests take about 2 s at 10/s, and
    would take ~20 s if the pacer slowed to 40 per minute. What is measured is the pacer's own
    waiting, not the run's wall time, which a busy machine stretches."""
    running = make_sandbox(shipments=10)
    warehouse = tmp_path / "signing.duckdb"

    with pointed_at(running):
        result = load_incremental(warehouse, settings=paced(10, 20))

    assert result.stats.throttled == 0, result.stats
    assert result.stats.waited_seconds < 5, result.stats
    assert differences(warehouse, running.store) == {}


# ---------------------------------------------------------------------- stopping early
def test_the_daily_limit_stops_with_exit_75_and_the_next_day_finishes(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=60, daily_requests=40, **UNBOUND)
    warehouse = tmp_path / "signing.duckdb"
    load = load_args(warehouse)
    env = cli_env(running)

    try:
        first = run_cli(load, cwd=tmp_path, env=env, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("`load` was still running 30 s after the daily limit instead of stopping")

    assert first.returncode == 75, describe(first)
    assert "Traceback" not in first.stderr, describe(first)
    lines = problem_lines(first.stderr)
    assert len(lines) == 1, describe(first)
    assert "daily limit" in lines[0], describe(first)
    assert sum(raw_row_counts(warehouse).values()) > 0  # what was fetched is loaded

    admin(running, "POST", "/advance", {"days": 1})  # the next day; new activity too
    admin(running, "PATCH", "/config", {"daily_requests": None})
    second = run_cli(load, cwd=tmp_path, env=env)

    assert second.returncode == 0, describe(second)
    assert differences(warehouse, running.store) == {}
    assert duplicate_keys(warehouse) == {}


def test_a_request_budget_stops_each_run_and_the_runs_add_up_to_the_whole(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    budget = 30
    running = make_sandbox(shipments=20, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"
    # Small pages make every list several requests long, so a budget can stop one mid-pass.
    env = cli_env(running, page_size=10)
    load = load_args(warehouse, "--max-requests", str(budget))
    missing = 10**9
    stopped_runs, status_checked = 0, False

    for _ in range(10):
        before = served(running)
        result = run_cli(load, cwd=tmp_path, env=env)
        assert served(running) - before <= budget, describe(result)
        if result.returncode == 0:
            break
        assert result.returncode == 75, describe(result)
        assert "Traceback" not in result.stderr, describe(result)
        assert "request budget" in result.stderr, describe(result)
        stopped_runs += 1
        now_missing = missing_rows(warehouse, running)
        assert now_missing < missing, f"run {stopped_runs} made no progress"
        missing = now_missing
        interrupted = read_status(warehouse).interrupted
        if interrupted and not status_checked:
            shown = run_cli(["status", "--duckdb", str(warehouse)], cwd=tmp_path, env=env)
            assert shown.returncode == 0, describe(shown)
            assert "stopped (request budget" in shown.stdout, describe(shown)
            for name in interrupted:
                row = rf"│ {name}\s*│.*\(pass interrupted\)"
                assert re.search(row, shown.stdout), (name, interrupted, shown.stdout)
            status_checked = True
    else:
        pytest.fail(f"still not done after {stopped_runs} runs of {budget} requests")

    assert stopped_runs >= 2
    assert status_checked, "no run stopped inside a list pass"
    assert differences(warehouse, running.store) == {}
    assert duplicate_keys(warehouse) == {}


def test_a_request_budget_is_spent_exactly_while_the_pacer_holds_requests_back(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """A slow pacer (4/s, burst 1) keeps the child threads waiting to send. The budget is
    spent exactly: no waiting thread slips past it once it ran out, and none that was counted
    against it is dropped unsent (a run that stops after two of nine requests wastes a run)."""
    budget = 9
    running = make_sandbox(shipments=10, **UNBOUND)

    with pointed_at(running):
        result = load_incremental(
            tmp_path / "signing.duckdb",
            LoadOptions(max_requests=budget),
            settings=paced(4, 1),
        )

    assert result.stopped is not None
    assert result.stats.requests == budget, result.stats
    assert served(running) == budget


def test_a_list_pass_stopped_before_its_first_answer_keeps_the_services_clock(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """Cursors are the service's time (its `Date`), never this machine's: the sandbox clock
    runs months apart from the machine's. A contacts pass of several pages is followed by a
    catch-up pass; a budget one short of the whole run stops right at that catch-up's first
    request, before any answer told the pass what time it is."""
    running = make_sandbox(shipments=10, limits_enabled=False)
    contacts = ("contacts",)
    warehouse = tmp_path / "signing.duckdb"

    with pointed_at(running):
        settings = replace(fast(), page_size=10)
        probe = tmp_path / "probe" / "signing.duckdb"
        whole = load_incremental(probe, LoadOptions(resources=contacts), settings=settings)
        budget = whole.stats.requests - 1
        first = load_incremental(
            warehouse, LoadOptions(resources=contacts, max_requests=budget), settings=settings
        )
        assert first.stopped is not None
        load_incremental(warehouse, LoadOptions(resources=contacts), settings=settings)
        cursor = read_status(warehouse).cursors["contacts"]
        service_now = admin(running, "GET", "/state")["now"]
        admin(running, "POST", "/touch", {"entity": "contacts", "count": 5})
        load_incremental(warehouse, settings=settings)

    report = differences(warehouse, running.store)
    assert {t: report[t] for t in CONTACT_TABLES if t in report} == {}
    assert parse_iso(cursor) <= parse_iso(service_now), (cursor, service_now)


def test_children_left_by_a_stopped_run_are_fetched_when_nothing_else_changed(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """60 shipments fit in the first page; ~14 requests go to /me, the lists and the document
    details, so a budget of 40 stops among the 120 child requests of that page."""
    running = make_sandbox(shipments=60, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"

    with pointed_at(running):
        first = load_incremental(warehouse, LoadOptions(max_requests=40), settings=fast())
        after_first = differences(warehouse, running.store)
        second = load_incremental(warehouse, settings=fast())

    assert first.stopped is not None
    assert "shipments" not in after_first  # the page itself was loaded...
    assert {"audit_events", "shipment_fields"} & set(after_first)  # ...not all its children
    assert second.stopped is None
    assert second.rows.get("shipments", 0) == 0  # nothing changed in the list
    fetched_again = second.stats.by_endpoint["/shipments/{id}/events"]
    assert 0 < fetched_again < 60
    assert differences(warehouse, running.store) == {}
    assert duplicate_keys(warehouse) == {}


@pytest.mark.parametrize(
    ("budget", "stops_among"),
    [(5, "/documents/{id}"), (30, "/shipments/{id}/events")],
    ids=["among-document-details", "among-shipment-children"],
)
def test_what_a_stopped_run_fetched_is_kept_and_no_parent_is_asked_twice(
    make_sandbox: SandboxFactory, tmp_path: Path, budget: int, stops_among: str
) -> None:
    """A budget stops a first load while its details or children are under way. The details
    the stopped run received are loaded by it (not dropped with the requests still queued),
    and the next run, which fetches the stopped run's backlog first and then lists the same
    parents again, asks for each parent once at most; a shipment's trail and fields are asked
    for once over both runs (its page was done, so only the backlog holds it)."""
    running = make_sandbox(shipments=40, limits_enabled=False)
    store = running.store
    warehouse = tmp_path / "signing.duckdb"

    with pointed_at(running):
        first = load_incremental(warehouse, LoadOptions(max_requests=budget), settings=fast())
        second = load_incremental(warehouse, settings=fast())

    assert first.stopped is not None
    assert first.stats.by_endpoint.get(stops_among, 0) > 0, first.stats.by_endpoint
    asked = {
        endpoint: (first.stats.by_endpoint.get(endpoint, 0), second.stats.by_endpoint[endpoint])
        for endpoint in ("/documents/{id}", "/shipments/{id}/events", "/shipments/{id}/fields")
    }
    documents, shipments = len(store.documents.by_id), len(store.shipments.by_id)
    kept_documents = first.rows.get("documents", 0)
    assert kept_documents == asked["/documents/{id}"][0]  # every detail received is loaded
    # Stopped among the details, the next run asks for each document once (its backlog, then
    # the others of the page listed again); stopped later, for none.
    assert asked["/documents/{id}"][1] == (documents if kept_documents < documents else 0)
    assert first.rows.get("shipments", 0) in (0, shipments)  # one page, listed whole or not
    if first.rows.get("shipments"):  # its cursor moved: the children are asked once in all
        assert sum(asked["/shipments/{id}/events"]) == shipments, asked
        assert sum(asked["/shipments/{id}/fields"]) == shipments, asked
    assert second.stopped is None
    assert differences(warehouse, store) == {}
    assert duplicate_keys(warehouse) == {}


# ---------------------------------------------------------------------- SIGKILL
@pytest.mark.parametrize("seed", [1, 5, 2])
def test_a_run_killed_at_any_moment_is_completed_by_the_next(
    make_sandbox: SandboxFactory, tmp_path: Path, seed: int
) -> None:
    """~1,200 requests paced at 250/s after a burst of 200: about 4 s of fetching, then
    normalize and load. The kill comes a seeded 0-5 s after the first request reached the
    sandbox (seeds 1, 5 and 2: early in the fetch, mid-way, and around its end)."""
    running = make_sandbox(shipments=600, limits_enabled=False)
    warehouse = tmp_path / "signing.duckdb"
    load = load_args(warehouse)
    delay = random.Random(seed).uniform(0.0, 5.0)

    process = start_cli(
        load, cwd=tmp_path, env=cli_env(running, requests_per_second=250, burst=200)
    )
    try:
        deadline = time.monotonic() + 60
        while served(running) == 0:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the load sent no request within 60 s"
            time.sleep(0.02)
        time.sleep(delay)
        assert process.poll() is None, f"the run ended before the kill at {delay:.2f} s"
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL

    result = run_cli(load, cwd=tmp_path, env=cli_env(running))

    assert result.returncode == 0, describe(result)
    assert differences(warehouse, running.store) == {}
    assert duplicate_keys(warehouse) == {}
