"""The dlt pipeline of the signing source: one function per scenario, called by the CLI.

A run takes an exclusive lock beside the warehouse (overlapping runs would fight over the same
state), loads what the source fetched even when it stopped early, and records its outcome in
`raw._signing_runs` for `signing-etl status`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dlt
import duckdb

from sources.signing import ResourceSyncStatus, RunStats, describe_sync, signing_source

PIPELINE_NAME = "signing"
DATASET = "raw"
DEFAULT_WAREHOUSE = Path("warehouse/signing.duckdb")
RUNS_TABLE = "_signing_runs"
SOURCE_TABLES = (
    "workspaces",
    "documents",
    "documents__fields",
    "documents__placeholders",
    "documents__blocks",
    "shipments",
    "shipments__recipients",
    "contacts",
    "contacts__custom",
    "contacts__group_ids",
    "audit_events",
    "shipment_fields",
    "webhooks",
)
RESOURCES = (
    "workspaces",
    "documents",
    "shipments",
    "audit_events",
    "shipment_fields",
    "contacts",
    "webhooks",
)


class AlreadyRunning(RuntimeError):
    """Another run holds the warehouse's lock."""


@dataclass
class LoadResult:
    """What one run did, for the summary and the exit code."""

    started_at: datetime
    finished_at: datetime
    stats: RunStats
    rows: dict[str, int] = field(default_factory=dict)
    stopped: str | None = None
    step_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return (self.finished_at - self.started_at).total_seconds()


def pipelines_dir_for(warehouse: Path) -> Path:
    """dlt's working folder lives beside its warehouse, so two warehouses never share state."""
    return warehouse.parent / f".{warehouse.stem}.dlt"


def make_pipeline(warehouse: Path, destination: str = "duckdb") -> dlt.Pipeline:
    """The pipeline: DuckDB at `warehouse` by default, any dlt destination by name."""
    warehouse.parent.mkdir(parents=True, exist_ok=True)
    target: Any = (
        dlt.destinations.duckdb(str(warehouse)) if destination == "duckdb" else destination
    )
    return dlt.pipeline(
        pipeline_name=PIPELINE_NAME,
        pipelines_dir=str(pipelines_dir_for(warehouse)),
        destination=target,
        dataset_name=DATASET,
    )


@contextlib.contextmanager
def exclusive(warehouse: Path) -> Iterator[None]:
    """Hold the warehouse's run lock, or fail at once if another run has it."""
    warehouse.parent.mkdir(parents=True, exist_ok=True)
    lock_path = warehouse.parent / f".{warehouse.name}.lock"
    with open(lock_path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise AlreadyRunning(
                f"another load is running on {warehouse} ({holder}); try again when it ends"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def load_incremental(
    warehouse: Path = DEFAULT_WAREHOUSE,
    *,
    since: str | None = None,
    full_refresh: bool = False,
    resources: Sequence[str] | None = None,
    max_requests: int | None = None,
    destination: str = "duckdb",
    stats: RunStats | None = None,
    **source_options: Any,
) -> LoadResult:
    """One incremental sync: fetch what changed since the last run, merge it into `raw`.

    A run stopped on purpose (daily limit, request budget) still loads what it fetched and
    saves its position; `LoadResult.stopped` says why, and the next run continues.
    """
    stats = stats or RunStats()
    started = datetime.now(UTC)
    with exclusive(warehouse):
        pipeline = make_pipeline(warehouse, destination)
        source = signing_source(
            since=since, max_requests=max_requests, stats=stats, **source_options
        )
        if resources:
            source = source.with_resources(*_checked_resources(resources))
        if full_refresh:
            pipeline.run(source, refresh="drop_sources")
        else:
            pipeline.run(source)
        rows = _row_counts(pipeline)
        result = LoadResult(
            started,
            datetime.now(UTC),
            stats,
            rows,
            stats.stop_reason,
            _step_seconds(pipeline),
        )
        _record_run(pipeline, result)
    return result


def _checked_resources(resources: Sequence[str]) -> list[str]:
    """The chosen resources, or a one-line error naming the unknown ones."""
    unknown = sorted(set(resources) - set(RESOURCES))
    if unknown:
        raise ValueError(
            f"unknown resources {', '.join(unknown)}; choose from {', '.join(RESOURCES)}"
        )
    return list(resources)


def _row_counts(pipeline: dlt.Pipeline) -> dict[str, int]:
    trace = pipeline.last_trace
    if trace is None or trace.last_normalize_info is None:
        return {}
    counts = trace.last_normalize_info.row_counts
    return {table: n for table, n in counts.items() if not table.startswith("_dlt")}


def _step_seconds(pipeline: dlt.Pipeline) -> dict[str, float]:
    """Seconds per dlt step (extract is when the network is used) of the last run."""
    trace = pipeline.last_trace
    if trace is None:
        return {}
    return {
        step.step: (step.finished_at - step.started_at).total_seconds()
        for step in trace.steps
        if step.finished_at is not None and step.step != "run"
    }


def _record_run(pipeline: dlt.Pipeline, result: LoadResult) -> None:
    stats = result.stats
    row = {
        "started_at": result.started_at,
        "finished_at": result.finished_at,
        "outcome": "stopped" if result.stopped else "completed",
        "stop_reason": result.stopped,
        "requests": stats.requests,
        "throttled": stats.throttled,
        "retries": stats.retries,
        "waited_seconds": round(stats.waited_seconds, 3),
        "rows": dict(result.rows),
        "requests_by_endpoint": dict(stats.by_endpoint),
    }
    pipeline.run(
        [row],
        table_name=RUNS_TABLE,
        write_disposition="append",
        columns={
            "rows": {"data_type": "json"},
            "requests_by_endpoint": {"data_type": "json"},
            "stop_reason": {"data_type": "text"},
        },
    )


@dataclass
class Status:
    """What `signing-etl status` shows."""

    warehouse: Path
    last_run: dict[str, Any] | None
    resources: list[ResourceSyncStatus]
    row_counts: dict[str, int]

    @property
    def cursors(self) -> dict[str, str]:
        """Per list: the time the next run reads changes from."""
        return {
            r.name: r.cursor or "(first pass not finished)"
            for r in self.resources
            if r.cursor or r.interrupted
        }

    @property
    def interrupted(self) -> list[str]:
        """The lists whose last pass a stop cut short."""
        return [r.name for r in self.resources if r.interrupted]


def status(warehouse: Path = DEFAULT_WAREHOUSE) -> Status:
    """The last run, the cursors and the row counts of a warehouse, read without writing."""
    if not warehouse.exists():
        raise FileNotFoundError(f"no warehouse at {warehouse}; run `signing-etl load` first")
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        tables = {
            r[0]
            for r in connection.execute(
                "select table_name from information_schema.tables where table_schema = ?", [DATASET]
            ).fetchall()
        }
        counts = {
            t: connection.execute(f'select count(*) from {DATASET}."{t}"').fetchone()[0]  # type: ignore[index]
            for t in SOURCE_TABLES
            if t in tables
        }
        last_run = None
        if RUNS_TABLE in tables:
            cursor = connection.execute(
                f"select * from {DATASET}.{RUNS_TABLE} order by started_at desc limit 1"
            )
            names = [d[0] for d in cursor.description or []]
            found = cursor.fetchone()
            last_run = dict(zip(names, found, strict=True)) if found else None
    return Status(warehouse, last_run, describe_sync(_pipeline_state(warehouse)), counts)


def _pipeline_state(warehouse: Path) -> dict[str, Any]:
    try:
        pipeline = dlt.attach(PIPELINE_NAME, pipelines_dir=str(pipelines_dir_for(warehouse)))
    except Exception:  # no local working folder: nothing known beyond the warehouse
        return {}
    return dict(pipeline.state)
