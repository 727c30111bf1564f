"""The demo: everything working on a fresh machine with no key and no configuration.

A sandbox starts in this process with its clock four weeks back, the pipeline loads it, the
clock moves a week at a time with an incremental load after each (the application deletes a
few records meanwhile, which the loads find and mark), a shipment sent in the sandbox reaches
`raw` through the webhook receiver, the models are built, and the report is written if the
notebook exists.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.text import Text

from pipelines.console import output
from pipelines.console.commands import fail, warehouse_named
from pipelines.console.output import printable
from pipelines.console.tables import out
from pipelines.environment import environment_set, source_environment
from pipelines.errors import EXPECTED_FAILURES, failure_reason
from pipelines.load.run import LoadResult, load_incremental
from pipelines.modeling.cli import build_models_or_fail
from pipelines.report.cli import write_report_or_fail
from pipelines.warehouse import Warehouse
from pipelines.webhooks.demo import WebhookTrip, webhook_step
from sources.signing import Pacing, configured_source

DEMO_WAREHOUSE = Path("warehouse/demo.duckdb")
# Generous limits: the demo shows the pipeline, not the patience of a free plan.
DEMO_RATE = 400.0
DEMO_BURST = 400
DEMO_PACING = Pacing(DEMO_RATE, DEMO_BURST)
# The application deletes this share of each kind's live records per simulated day, so the
# weekly loads find deletions to mark (about 1.4% a week: well under the 10% that a load
# refuses to mark as a mass deletion). `signing-etl sandbox` serves with it too.
DEMO_DELETE_RATE = 0.002

EXAMPLE_QUERIES = (
    "-- completion by week of sending\n"
    "  select sent_week, sum(count_shipments_sent) as sent,\n"
    "         sum(count_shipments_completed) as completed\n"
    "  from marts.fct_signing_funnel group by 1 order by 1 desc limit 8;",
    "-- the documents that stall: most sent, least completed\n"
    "  select document_name, count_shipments_sent, completion_rate\n"
    "  from marts.dim_documents order by count_shipments_sent desc limit 10;",
    "-- how long signing takes, per document\n"
    "  select document_name, median_hours_to_sign, p90_hours_to_sign\n"
    "  from marts.fct_time_to_sign where time_grain = 'document'\n"
    "  order by p90_hours_to_sign desc limit 10;",
    "-- the signers shipments are waiting on now, longest first\n"
    "  select shipment_id, recipient_name, recipient_email, waiting_since\n"
    "  from marts.fct_signer_waits\n"
    "  where is_waiting order by waiting_since limit 10;",
)


def headline(warehouse: Warehouse) -> str:
    """The funnel in a few lines, read from `marts.fct_shipments`."""
    with warehouse.reader() as client:
        (row,) = client.execute_sql(
            """
            select count(*) filter (where is_sent), count(*) filter (where is_opened),
                   count(*) filter (where is_completed), count(*) filter (where is_expired),
                   count(*) filter (where is_revoked), median(hours_to_completion)
            from marts.fct_shipments
            """
        )
    sent, opened, completed, expired, revoked, median_hours = row

    def share(count: int) -> str:
        return f"{count / sent:.0%}" if sent else "-"

    median = f"{median_hours:.1f} h" if median_hours is not None else "-"
    return (
        f"Shipments sent {sent:,}: opened {opened:,} ({share(opened)}), completed "
        f"{completed:,} ({share(completed)}), expired {expired:,} ({share(expired)}), "
        f"revoked {revoked:,} ({share(revoked)}); median time to completion {median}."
    )


@dataclass
class DemoResult:
    warehouse: Warehouse
    loads: list[LoadResult] = field(default_factory=list)
    sandbox_now: str = ""
    webhook: WebhookTrip | None = None  # a shipment sent, and its way to raw by webhook


def run_demo(
    warehouse: Warehouse | Path = DEMO_WAREHOUSE,
    *,
    shipments: int = 3_000,
    weeks: int = 4,
    seed: int = 42,
    say: Callable[[str], None] = print,
) -> DemoResult:
    """Serve a sandbox, load it, advance `weeks` weeks loading after each, and return."""
    from sandbox import RunningSandbox, SandboxConfig  # the server only when the demo runs

    place = Warehouse.of(warehouse)
    place.remove()
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    start = today - timedelta(weeks=weeks)
    config = SandboxConfig(
        seed=seed,
        shipments=shipments,
        start_ms=int(start.timestamp() * 1000),
        plan="business",
        requests_per_second=DEMO_RATE,
        burst=DEMO_BURST,
        requests_per_minute=60 * int(DEMO_RATE),
        ip_requests_per_second=2 * DEMO_RATE,
        ip_burst=2 * DEMO_BURST,
        delete_rate=DEMO_DELETE_RATE,
    )
    result = DemoResult(place)
    say(f"Starting the sandbox: {shipments:,} shipments of history up to {start:%Y-%m-%d}…")
    with (
        RunningSandbox(config) as running,
        environment_set(source_environment(running.base_url, running.api_key)),
    ):
        say("Initial load…")
        result.loads.append(_load(place))
        say(_line(result.loads[-1]))
        for week in range(1, weeks + 1):
            httpx.post(
                f"{running.root_url}/_sandbox/advance", json={"days": 7}, timeout=120
            ).raise_for_status()
            say(f"Week {week} of {weeks} passed in the sandbox; incremental load…")
            result.loads.append(_load(place))
            say(_line(result.loads[-1]))
        result.webhook = webhook_step(place, running.base_url, running.api_key, say, DEMO_PACING)
        result.sandbox_now = datetime.fromtimestamp(
            running.store.clock.now_ms() / 1000, UTC
        ).strftime("%Y-%m-%d %H:%M UTC")
    return result


def _load(warehouse: Warehouse) -> LoadResult:
    """A load of the demo's sandbox (configured in the environment), paced as it allows."""
    return load_incremental(warehouse, settings=configured_source().paced(DEMO_PACING))


def _line(result: LoadResult) -> str:
    rows = sum(result.rows.values())
    marked = sum(result.marked.values())
    return (
        f"  {rows:,} rows, {marked:,} deleted records found, {result.stats.requests:,} "
        f"requests, {result.stats.throttled} 429s, {result.seconds:.1f} s"
    )


def demo_command(
    duckdb: Annotated[Path, typer.Option("--duckdb", help="Warehouse file to (re)create.")] = (
        DEMO_WAREHOUSE
    ),
    shipments: Annotated[int, typer.Option(min=10, help="Shipments of history.")] = 3_000,
    weeks: Annotated[int, typer.Option(min=0, max=12, help="Simulated weeks.")] = 4,
) -> None:
    """Everything on a fresh machine, no key needed: sandbox, loads over simulated weeks,
    models, report; ends with the warehouse's path, the funnel and queries to try."""
    started = time.monotonic()
    warehouse = warehouse_named(duckdb)
    try:
        run_demo(warehouse, shipments=shipments, weeks=weeks, say=output.info)
    except EXPECTED_FAILURES as error:
        raise fail(failure_reason(error)) from None
    build_models_or_fail(warehouse)
    out.print(Text.assemble("\n", ("Warehouse:", "bold"), f" {printable(str(warehouse.path))}"))
    out.print(headline(warehouse))
    out.print(
        f'\nTry these with `uv run signing-etl sql --duckdb {duckdb} "<query>"` '
        "(or in the duckdb CLI):"
    )
    for query in EXAMPLE_QUERIES:
        out.print(f"  {query}", highlight=False)
    report_path = write_report_or_fail(warehouse)
    out.print(f"\nDemo finished in {time.monotonic() - started:.0f} s.")
    out.print(
        Text.assemble(("Report:", "bold"), f" {printable(str(report_path.resolve()))}"),
        soft_wrap=True,
    )
