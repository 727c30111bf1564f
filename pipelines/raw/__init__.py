"""What every load keeps in `raw` beside the rows, in layer order: `pipeline` (each workspace's
dlt pipeline and the state it keeps, a workspace forgotten for a full refresh),
`privacy_records` (the privacy policy each workspace's rows are under, and the erasures),
`privacy_gate` (the policy every writer's rows are under: the warehouse's), `steps` (dlt's
steps of one load, shared by runs and webhook drains, through the gate, and what a load changed
in the service's shape, `schema_changes`), `run_records` (every
run's record and the shipments still loading) and `deletions` (what a run found deleted,
marked or removed)."""

from __future__ import annotations

from .deletions import PipelineRecords, deleted_rows, mark_deletions
from .pipeline import (
    StoredState,
    adopt_legacy_state,
    forget_workspace,
    make_pipeline,
    pipeline_name_for,
    stored_states,
)
from .run_records import RunRecord, read_runs, record_incomplete_shipments, record_run
from .schema_changes import SchemaChanges
from .steps import LoadSteps

__all__ = [
    "LoadSteps",
    "PipelineRecords",
    "RunRecord",
    "SchemaChanges",
    "StoredState",
    "adopt_legacy_state",
    "deleted_rows",
    "forget_workspace",
    "make_pipeline",
    "mark_deletions",
    "pipeline_name_for",
    "read_runs",
    "record_incomplete_shipments",
    "record_run",
    "stored_states",
]
