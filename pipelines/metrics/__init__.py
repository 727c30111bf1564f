"""The funnel metrics, defined once in the dbt project's semantic layer, in layer order:
`manifest` (where the layer's definitions are read from), `semantic` (a request by name,
checked and compiled by MetricFlow, run read-only) and `cli` (`signing-etl metrics`).
`semantic` is imported on first use: MetricFlow costs seconds that other commands don't
need."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipelines import lazy_exports

from .cli import metrics_command
from .manifest import MANIFEST, semantic_manifest

if TYPE_CHECKING:
    from .semantic import MetricsRequest, MetricsTable, SemanticLayer, query_metrics

__all__ = [
    "MANIFEST",
    "MetricsRequest",
    "MetricsTable",
    "SemanticLayer",
    "metrics_command",
    "query_metrics",
    "semantic_manifest",
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
