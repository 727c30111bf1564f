"""The options the `signing-etl` commands share, each defined once with its help."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sources.signing import RESOURCES

WarehouseFile = Annotated[
    Path,
    typer.Option(
        "--duckdb",
        help="Warehouse file; the working folders (dlt's, the webhooks' inbox and secrets) are "
        "beside it.",
    ),
]
# `--duckdb` of the demo, which starts the file afresh.
NewWarehouseFile = Annotated[Path, typer.Option("--duckdb", help="Warehouse file to (re)create.")]
WorkspacesOption = Annotated[
    list[str] | None,
    typer.Option(
        "--workspace",
        help="Only this configured workspace ([sources.signing.workspaces.<name>]); repeat for "
        "several. Default: all of them.",
    ),
]
SinceOption = Annotated[
    str | None, typer.Option(help="First run only: start at this ISO time, not the beginning.")
]
FullRefreshOption = Annotated[
    bool,
    typer.Option(
        "--full-refresh",
        help="Delete the chosen workspaces' rows and state and reload them; others stay. "
        "With --resources: read those lists again from the start and merge them over their "
        "rows (readers keep the old rows until then); other lists and cursors stay.",
    ),
]
ReloadOption = Annotated[
    str | None,
    typer.Option(
        "--reload",
        metavar="FROM..TO",
        help="Read again the lists' changes in this window (ISO 8601 dates or times, e.g. "
        "2026-01-01..2026-01-31) and merge them; no cursor moves.",
    ),
]
ResourcesOption = Annotated[
    str | None, typer.Option(help=f"Comma-separated subset of: {', '.join(RESOURCES)}.")
]
MaxRequestsOption = Annotated[
    int | None,
    typer.Option(min=1, help="Stop cleanly after this many requests per workspace (exit 75)."),
]
ReconcileOption = Annotated[
    bool, typer.Option("--reconcile", help="Page every list's ids to find deleted records.")
]
AllowMassDeleteOption = Annotated[
    bool,
    typer.Option("--allow-mass-delete", help="Mark what a full check found deleted, any share."),
]
LoadDestination = Annotated[
    str, typer.Option(help="Any dlt destination; its credentials come from dlt config.")
]
ParallelOption = Annotated[
    int,
    typer.Option(
        min=1,
        help="Workspaces loading at once, for destinations that take concurrent writers "
        "(postgres); DuckDB takes one writer.",
    ),
]
# `--destination` of the commands that read a warehouse (`load` has its own help).
WarehouseDestination = Annotated[
    str, typer.Option(help="The warehouse's dlt destination (duckdb, postgres, ...).")
]
StatusFormat = Annotated[
    str, typer.Option("--format", help="table (for people) or json (one document, for monitors).")
]
CheckOption = Annotated[
    bool,
    typer.Option(
        "--check",
        help="Print only the workspaces not loaded within --max-age-hours, one line each, and "
        "exit 1 if there is any (nothing printed, exit 0, when all are fresh): for cron alerts.",
    ),
]
MaxAgeOption = Annotated[
    float,
    typer.Option(
        min=0.01,
        max=876_000,  # a century: more cannot be a time span (infinity failed with a traceback)
        help="How old a workspace's last load may be for --check.",
    ),
]
# What `sql` and `metrics` print their rows as, and how many at most.
ROW_FORMATS = ("table", "csv", "json")
RowsFormat = Annotated[
    str, typer.Option("--format", help="table (for people), csv or json (one object a row).")
]
RowLimit = Annotated[int, typer.Option(min=1, help="Rows printed at most.")]
