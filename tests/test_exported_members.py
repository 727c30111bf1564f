"""Each package's public face, pinned: a name renamed or dropped from `__all__` breaks a user's
import, so it fails here first (httpx's `tests/test_exported_members.py` does the same)."""

from __future__ import annotations

import importlib

import pytest

# What each face exports, written out here rather than read from the code: a change to one of
# these lists is a change to what users may import, made on purpose in both places.
EXPORTED: dict[str, list[str]] = {
    "sources.signing": [
        "AuthError",
        "CHILD_TABLES",
        "DELETABLE_TABLES",
        "DELETED_AT",
        "DELETE_MODES",
        "DailyLimitReached",
        "DeletionSettings",
        "Deletions",
        "EVENTS_LIMIT",
        "FullCheck",
        "Interrupted",
        "KeyRefused",
        "PERSONAL_COLUMNS",
        "RELOADED_RESOURCES",
        "Pacing",
        "PrivacyConfigError",
        "PrivacyPolicy",
        "RESOURCES",
        "ReloadWindow",
        "RequestBudgetExhausted",
        "ResourceSyncStatus",
        "ResponseTooLarge",
        "RetryAfterTooLong",
        "RunControl",
        "RunCounters",
        "RunStats",
        "RunStopped",
        "SHIPMENT_RESOURCES",
        "SOURCE_TABLES",
        "ServiceUnreachable",
        "SigningAPIError",
        "SigningConfiguration",
        "SourceConfigError",
        "SyncContext",
        "TableDeletions",
        "UnexpectedAnswer",
        "WarehouseRecords",
        "checked_base_url",
        "chosen_resources",
        "configured_privacy",
        "configured_source",
        "connect",
        "describe_deletions",
        "describe_policy",
        "describe_sync",
        "fingerprint",
        "incomplete_shipments",
        "parse_iso",
        "reloaded_resources",
        "signing_source",
        "to_iso",
    ],
    "sandbox": [
        "JSON",
        "PLAN_REQUESTS_PER_MINUTE",
        "RECORD_KINDS",
        "WEBHOOK_EVENTS",
        "Behaviour",
        "Contact",
        "Deleted",
        "Document",
        "Recipient",
        "RecordKind",
        "RunningSandbox",
        "SandboxConfig",
        "Shipment",
        "Store",
        "bind",
        "iso",
        "serve_forever",
        "signature",
    ],
    "pipelines.warehouse": [
        "BRIEF_HOLD_WAIT_SECONDS",
        "DATASET",
        "DEFAULT_DESTINATION",
        "DEFAULT_WAREHOUSE",
        "DbtTarget",
        "LoadFileFormat",
        "LoadedWorkspace",
        "PARQUET_FROM_RECORDS",
        "PRIVACY_KEY",
        "SqlClient",
        "WAREHOUSE_VARIABLE",
        "Warehouse",
        "batches",
        "catalog_changes",
        "columns_by_table",
        "confirm_run_locks",
        "ensure_datasets",
        "ensure_table",
        "has_table",
        "insert_rows",
        "load_step",
        "loaded_workspaces",
        "lock_for_transaction",
        "retried",
        "staging_dataset",
        "staging_datasets",
        "tables_in",
        "transaction",
    ],
    "pipelines.console": [
        "PlainTable",
        "Progress",
        "fail",
        "out",
        "print_rows",
        "printable",
        "warehouse_named",
    ],
    "pipelines.raw": [
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
    ],
    "pipelines.privacy": [
        "Erasure",
        "ErasureRefused",
        "ErasureResult",
        "PolicyChangeRefused",
        "PolicyRecord",
        "PrivacyPlan",
        "apply_privacy",
        "forget_command",
        "forget_person",
        "prepare_privacy",
        "read_erasures",
        "read_policies",
    ],
    "pipelines.load": [
        "LoadOptions",
        "LoadResult",
        "LoadWatcher",
        "WorkspaceLoad",
        "in_turns",
        "load_command",
        "load_incremental",
        "load_workspace",
        "load_workspaces",
        "stop_on_signals",
    ],
    "pipelines.status": [
        "Status",
        "WorkspaceStatus",
        "last_attempts",
        "read_status",
        "status_command",
    ],
    "pipelines.modeling": [
        "PROJECT_DIR",
        "ModelsResult",
        "build_models",
        "build_models_or_fail",
        "models_command",
        "refresh_marts",
    ],
    "pipelines.metrics": [
        "MANIFEST",
        "MetricsRequest",
        "MetricsTable",
        "SemanticLayer",
        "metrics_command",
        "query_metrics",
        "semantic_manifest",
    ],
    "pipelines.report": [
        "report_command",
        "snapshot_marts",
        "write_report",
        "write_report_or_fail",
    ],
}


@pytest.mark.parametrize("package", sorted(EXPORTED))
def test_each_face_exports_the_pinned_names(package: str) -> None:
    exported = importlib.import_module(package).__all__
    assert len(set(exported)) == len(exported), f"{package}.__all__ names one twice"
    assert sorted(exported) == sorted(EXPORTED[package]), package


@pytest.mark.parametrize("package", sorted(EXPORTED))
def test_every_exported_name_can_be_imported(package: str) -> None:
    """`from package import name` works for each name, those loaded on first use included."""
    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing, f"{package} exports names it does not have: {missing}"
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{package}.{name}"
    star: dict[str, object] = {}
    exec(f"from {package} import *", star)  # the names are this file's own, not input
    assert set(star) - {"__builtins__"} == set(module.__all__)
