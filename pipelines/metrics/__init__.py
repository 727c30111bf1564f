"""The funnel metrics, defined once in the dbt project's semantic layer, in layer order:
`semantic` (a request by name, checked and compiled by MetricFlow, run read-only) and `cli`
(`signing-etl metrics`). `semantic` is imported on first use: MetricFlow costs seconds that
other commands don't need."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pipelines import lazy_exports

# The semantic layer a model build parsed, in the warehouse's dbt folder (`Warehouse.dbt_dir`).
MANIFEST = Path("target") / "semantic_manifest.json"

from .cli import metrics_command  # noqa: E402  (after MANIFEST, which `semantic` imports)

if TYPE_CHECKING:
    from .semantic import MetricsRequest, MetricsTable, SemanticLayer, query_metrics

__all__ = [
    "MANIFEST",
    "MetricsRequest",
    "MetricsTable",
    "SemanticLayer",
    "metrics_command",
    "query_metrics",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "MetricsRequest": "semantic",
        "MetricsTable": "semantic",
        "SemanticLayer": "semantic",
        "query_metrics": "semantic",
    },
)
