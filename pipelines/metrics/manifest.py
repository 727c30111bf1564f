"""Where the semantic layer's definitions are read from: the warehouse's last model build, or,
on a host that never built the models (another worker, another `--duckdb` folder), a parse of
the shipped dbt project made once beside the warehouse. The definitions name tables by schema
and name only, so either serves every engine."""

from __future__ import annotations

from pathlib import Path

from pipelines.environment import environment_set
from pipelines.errors import MetricsError, ModelsError
from pipelines.warehouse import Warehouse

# The semantic layer a model build parsed, in the warehouse's dbt folder (`Warehouse.dbt_dir`).
MANIFEST = Path("target") / "semantic_manifest.json"
# Where a parse of the project alone writes it when no build is at hand (never the build's
# own target, whose compiled SQL the marts' refresh after a drain replays).
PARSED = Path("semantic") / "semantic_manifest.json"


def semantic_manifest(warehouse: Warehouse) -> Path:
    """The semantic manifest for the warehouse: its last model build's, else, for a shared
    destination (whose builds may have run on another host or folder), one parsed from the
    project (once; later calls find it). A DuckDB file's builds always write beside it: the
    path returned may not exist yet, which the caller reports.

    Raises:
        MetricsError: neither is at hand and the project cannot be parsed here (one line).
    """
    for candidate in (warehouse.dbt_dir / MANIFEST, warehouse.dbt_dir / PARSED):
        if candidate.is_file():
            return candidate
    if warehouse.is_file:  # its builds always write beside it: none built yet
        return warehouse.dbt_dir / MANIFEST
    parsed = warehouse.dbt_dir / PARSED
    _parse(warehouse, parsed.parent)
    if not parsed.is_file():
        raise MetricsError(
            f"no metrics at hand for {warehouse.label}: the models' project could not be "
            f"parsed (see {warehouse.dbt_dir / 'semantic_logs'})"
        )
    return parsed


def _parse(warehouse: Warehouse, target: Path) -> None:
    """`dbt parse` of the shipped project into `target`: no connection to the warehouse."""
    from dbt.cli.main import dbtRunner  # dbt's imports cost seconds: only when parsing

    from pipelines.modeling.build import PROJECT_DIR, neutral_argv

    try:
        dbt = warehouse.dbt_target()
    except ModelsError as error:  # a destination the models do not build on
        raise MetricsError(f"no metrics at hand for {warehouse.label}: {error}") from None
    args = [
        "parse",
        *("--project-dir", str(PROJECT_DIR), "--profiles-dir", str(PROJECT_DIR)),
        *("--target-path", str(target), "--log-path", str(target.parent / "semantic_logs")),
        *("--no-send-anonymous-usage-stats", "--no-use-colors", "--log-level", "none"),
    ]
    if dbt.name:
        args += ["--target", dbt.name]
    target.parent.mkdir(parents=True, exist_ok=True)
    with environment_set(dbt.environment), neutral_argv("parse"):
        dbtRunner().invoke(args)
