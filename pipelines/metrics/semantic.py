"""The funnel metrics of the semantic layer (`models/models/semantic/`): a request by name,
checked against the layer's own lists, compiled by MetricFlow into SQL for the warehouse's
engine, and run where nothing can be written."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

from metricflow.engine.metricflow_engine import (
    MetricFlowEngine,
    MetricFlowQueryRequest,
    OutputColumnOrderMode,
)
from metricflow.protocols.sql_client import SqlEngine
from metricflow.sql.render.duckdb_renderer import DuckDbSqlPlanRenderer
from metricflow.sql.render.postgres import PostgresSQLSqlPlanRenderer
from metricflow.sql.render.sql_plan_renderer import SqlPlanRenderer
from metricflow_semantic_interfaces.type_enums.dimension_type import DimensionType
from metricflow_semantics.model.dbt_manifest_parser import (
    parse_manifest_from_dbt_generated_manifest,
)
from metricflow_semantics.model.semantic_manifest_lookup import SemanticManifestLookup

from pipelines.errors import MetricsError, MetricsUsageError
from pipelines.metrics.manifest import semantic_manifest
from pipelines.warehouse import Warehouse

# The periods a time dimension can be cut into (`metric_time__week`); all are UTC.
GRAINS = ("day", "week", "month", "quarter", "year")
# What a metric's or a group-by's name may look like before it is even looked up.
_NAME = re.compile(r"[a-z][a-z0-9_]{0,99}")
MOST_ROWS = 100_000


@dataclass(frozen=True)
class MetricsRequest:
    """Metrics by name, grouped by dimensions by name, for periods from `start` to `end`
    (days, both included; None: open)."""

    metrics: tuple[str, ...]
    group_by: tuple[str, ...] = ()
    start: date | None = None
    end: date | None = None


@dataclass(frozen=True)
class MetricsTable:
    """A metrics query's answer: its columns (the group-bys, then the metrics) and rows, with
    counts as integers, rates and hours as floats and periods as dates on every engine."""

    names: list[str]
    rows: list[tuple[Any, ...]]

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.names, row, strict=True)) for row in self.rows]


class _Compiler:
    """The part of MetricFlow's SQL client it needs to write SQL (it runs nothing)."""

    def __init__(self, engine: SqlEngine, renderer: SqlPlanRenderer) -> None:
        self.sql_engine_type = engine
        self.sql_plan_renderer = renderer

    def render_bind_parameter_key(self, key: str) -> str:
        raise MetricsError(f"the metrics' SQL asked for a parameter ({key}); none is passed")


_ENGINES: dict[str, tuple[SqlEngine, type[SqlPlanRenderer]]] = {
    "duckdb": (SqlEngine.DUCKDB, DuckDbSqlPlanRenderer),
    "postgres": (SqlEngine.POSTGRES, PostgresSQLSqlPlanRenderer),
}


class SemanticLayer:
    """The semantic layer a warehouse's last model build parsed: its metrics, what groups
    them, and their SQL for one engine."""

    def __init__(self, manifest: dict[str, Any], destination: str) -> None:
        if destination not in _ENGINES:
            raise MetricsError(f"metrics are computed on duckdb and postgres, not {destination}")
        engine, renderer = _ENGINES[destination]
        semantic = parse_manifest_from_dbt_generated_manifest(json.dumps(_anywhere(manifest)))
        self.metric_names = tuple(sorted(metric.name for metric in semantic.metrics))
        if not self.metric_names:
            raise MetricsError("the semantic layer defines no metrics")
        self._engine = MetricFlowEngine(
            SemanticManifestLookup(semantic),
            _Compiler(engine, renderer()),  # type: ignore[arg-type]
        )
        self._group_bys: dict[tuple[str, ...], tuple[str, ...]] = {}

    @classmethod
    def of(cls, warehouse: Warehouse) -> SemanticLayer:
        """The layer the warehouse's last model build parsed, for its engine.

        Raises:
            MetricsError: no such DuckDB file, or no build has parsed a semantic layer for it
                yet (one line that says which command comes first).
        """
        if warehouse.is_file and not warehouse.path.exists():  # `models` would say the same
            raise MetricsError(f"no warehouse at {warehouse.path}; run `signing-etl load` first")
        path = semantic_manifest(warehouse)
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            manifest = {}
        if not manifest.get("metrics"):
            where = (
                f"--duckdb {warehouse.path}"
                if warehouse.is_file
                else f"--destination {warehouse.destination}"
            )
            raise MetricsError(
                f"no metrics built for {warehouse.label}; run `signing-etl models {where}`"
            )
        return cls(manifest, warehouse.destination)

    def group_by_names(self, metrics: Sequence[str]) -> tuple[str, ...]:
        """Every name that groups all of `metrics`: `metric_time` and each time dimension cut
        into each grain, the categorical dimensions, and the entities (`workspace`)."""
        key = tuple(sorted(metrics))
        if key not in self._group_bys:
            names = {f"metric_time__{grain}" for grain in GRAINS}
            for item in self._engine.list_group_bys(list(key)):
                name = str(getattr(item, "dunder_name", None) or item.name)
                if getattr(item, "type", None) == DimensionType.TIME:
                    bare = re.sub(rf"__(?:{'|'.join(GRAINS)})$", "", name)
                    names.update(f"{bare}__{grain}" for grain in GRAINS)
                else:
                    names.add(name)
            self._group_bys[key] = tuple(sorted(names))
        return self._group_bys[key]

    def check(self, request: MetricsRequest) -> None:
        """Refuse, in one line, a request that names a metric or a group-by the layer does
        not define (or one twice): only the layer's own names reach MetricFlow.

        Raises:
            MetricsUsageError: what is wrong, and the names to choose from.
        """
        if not request.metrics:
            raise MetricsUsageError(f"name one metric at least: {', '.join(self.metric_names)}")
        for kind, names in (("metric", request.metrics), ("group-by", request.group_by)):
            if len(set(names)) != len(names):
                raise MetricsUsageError(f"a {kind} is named twice: {', '.join(names)}")
        unknown = [m for m in request.metrics if m not in self.metric_names]
        if unknown:
            raise MetricsUsageError(
                f"no metric {_shown(unknown[0])}; the metrics are: {', '.join(self.metric_names)}"
            )
        allowed = self.group_by_names(request.metrics)
        wrong = [g for g in request.group_by if not _NAME.fullmatch(g) or g not in allowed]
        if wrong:
            raise MetricsUsageError(
                f"no group-by {_shown(wrong[0])} for these metrics; choose from: "
                f"{', '.join(allowed)}"
            )
        if request.start and request.end and request.start > request.end:
            raise MetricsUsageError(
                f"the period starts after it ends ({request.start} > {request.end})"
            )

    def sql(self, request: MetricsRequest) -> str:
        """The SQL that computes the request on this layer's engine, ordered by its
        group-bys (checked first: `check`)."""
        self.check(request)
        # MetricFlow keeps the days from the start's to the end's, both included.
        start = datetime.combine(request.start, time()) if request.start else None
        end = datetime.combine(request.end, time()) if request.end else None
        explained = self._engine.explain(
            MetricFlowQueryRequest.create(
                metric_names=list(request.metrics),
                group_by_names=list(request.group_by),
                order_by_names=list(request.group_by),
                time_constraint_start=start,
                time_constraint_end=end,
                # the group-bys as asked for, then the metrics as asked for
                output_column_order_mode=OutputColumnOrderMode.INPUT_ORDER,
            )
        )
        return str(explained.sql_statement.sql)


def query_metrics(
    warehouse: Warehouse,
    request: MetricsRequest,
    *,
    layer: SemanticLayer | None = None,
    most: int = MOST_ROWS,
) -> MetricsTable:
    """The metrics of `request` on the warehouse, read as `sql` reads (DuckDB read-only with
    external access off, or a read-only Postgres transaction), with weeks and days in UTC.

    Raises:
        MetricsUsageError: a name the semantic layer does not define (exit 2).
        MetricsError: no semantic layer built for this warehouse yet.
        WarehouseError: the warehouse cannot be read.
    """
    layer = layer or SemanticLayer.of(warehouse)
    names, rows = warehouse.read_only_query(layer.sql(request), most, in_utc=True)
    periods = [i for i, name in enumerate(names) if name in request.group_by]
    return MetricsTable(names, [_normalised(row, periods) for row in rows])


def _normalised(row: tuple[Any, ...], periods: list[int]) -> tuple[Any, ...]:
    """One row as every engine gives it: whole numbers as int (Postgres sums are numeric),
    other numbers as float, and periods (day or coarser) as dates."""
    values = list(row)
    for i, value in enumerate(values):
        if isinstance(value, Decimal):
            values[i] = int(value) if value == value.to_integral_value() else float(value)
        elif isinstance(value, datetime) and i in periods:
            values[i] = value.date()
    return tuple(values)


def _anywhere(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest with its tables named by schema and name only, so that the SQL reads the
    database it is run on (a build names the file or database it wrote)."""
    copied: dict[str, Any] = json.loads(json.dumps(manifest))
    relations = [model["node_relation"] for model in copied.get("semantic_models", [])]
    configuration = copied.get("project_configuration") or {}
    relations += [spine["node_relation"] for spine in configuration.get("time_spines", [])]
    for relation in relations:
        relation["database"] = None
        relation["relation_name"] = f'"{relation["schema_name"]}"."{relation["alias"]}"'
    return copied


def _shown(name: str) -> str:
    """A name from the command line as a message shows it: quoted, at most 60 characters."""
    return repr(name if len(name) <= 60 else f"{name[:60]}…")
