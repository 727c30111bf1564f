"""The funnel report: run `notebooks/signing_funnel.ipynb` on a warehouse and write it as HTML."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import nbformat
import zmq
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError
from nbformat import NotebookNode

from pipelines.configuration import DEFAULT_NAME
from pipelines.errors import MetricsError, ReportError, WarehouseError, first_line
from pipelines.metrics import semantic_manifest
from pipelines.raw import run_records
from pipelines.report.page import notebook_html
from pipelines.shipped import shipped
from pipelines.status.read import recorded_runs
from pipelines.warehouse import (
    LoadedWorkspace,
    Warehouse,
)

NOTEBOOKS_DIR = shipped("notebooks")
FUNNEL_NOTEBOOK = NOTEBOOKS_DIR / "signing_funnel.ipynb"
DEFAULT_REPORTS_DIR = Path("reports")
MARTS = (
    "fct_shipments",
    "fct_recipients",
    "fct_signing_funnel",
    "fct_time_to_sign",
    "dim_documents",
    "dim_contacts",
    "fct_waiting_by_day",
    "fct_shipments_waiting",
    "dim_workspaces",
)
# What the notebook reads: the marts, and the workspaces' names.
REPORT_TABLES = (("raw", "workspaces"), *(("marts", mart) for mart in MARTS))
CELL_TIMEOUT_SECONDS = 600


def write_report(
    warehouse: Warehouse | Path,
    out_dir: Path = DEFAULT_REPORTS_DIR,
    workspace: str | None = None,
) -> Path:
    """Execute the funnel notebook on a warehouse and write it as one self-contained HTML file.

    The charts are PNG images embedded in the page (`data:` URLs) and the code cells are left
    out, so the file opens anywhere, offline, and can be mailed as it is. A warehouse with
    several workspaces shows each one apart (a table comparing them, then every section once
    per workspace, under its name), never one funnel that mixes them; with one workspace the
    report has no per-workspace headings.

    Args:
        warehouse: the warehouse whose `marts` schema the models built (a DuckDB file's path,
            or any destination: its marts and `raw.workspaces`, small tables, are then read
            through its own connection into a local DuckDB copy, which the notebook reads).
        out_dir: folder of the report (created if missing).
        workspace: the id or name of one workspace to report on alone (see `find_workspace`);
            None: every workspace of the warehouse.

    Returns:
        The path of the HTML file: `<out_dir>/<warehouse's stem>_funnel.html`, or
        `<out_dir>/<warehouse's stem>_<workspace>_funnel.html` for one workspace (`workspace`
        as given, with anything but letters, digits, `.`, `_` and `-` made a `-`).

    Raises:
        ReportError: the warehouse is missing, cannot be opened, has no marts, has no such
            workspace (the message lists the ones it has), or the notebook failed; the
            message is one line.
    """
    _writable_folder(out_dir)
    place = Warehouse.of(warehouse)
    names = configured_names(place)
    # The metrics' definitions: those the warehouse's last model build parsed.
    try:
        with place.local_copy(REPORT_TABLES) as local:
            return _write(local, out_dir, workspace, names, lambda: semantic_manifest(place))
    except (WarehouseError, MetricsError) as error:
        raise ReportError(str(error)) from None


def _write(
    warehouse: Warehouse,
    out_dir: Path,
    workspace: str | None,
    names: dict[str, str],
    manifest_of: Callable[[], Path],
) -> Path:
    problem = warehouse.marts_missing(MARTS)
    if problem:
        raise ReportError(problem)
    manifest = manifest_of()
    path = warehouse.path.resolve()
    parameters: dict[str, Any] = {
        "warehouse": str(path),
        "workspace_names": names,
        "static_charts": False,
        "semantic_manifest": str(manifest) if manifest.is_file() else "",
    }
    name = f"{path.stem}_funnel.html"
    if workspace is not None:
        chosen = find_workspace(warehouse, workspace, names).id
        parameters["workspace"] = chosen
        name = f"{path.stem}_{_file_name_part(names.get(chosen) or workspace)}_funnel.html"
    try:
        executed = execute_notebook(FUNNEL_NOTEBOOK, parameters)
    except CellExecutionError as error:
        raise ReportError(
            f"the report notebook failed: {error.ename}: {first_line(error.evalue)}"
        ) from None
    except CellTimeoutError as error:
        raise ReportError(f"the report notebook timed out: {first_line(error)}") from None
    report = out_dir / name
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        report.write_text(notebook_html(executed), encoding="utf-8")
    except OSError as error:
        raise ReportError(f"cannot write {report}: {error.strerror or error}") from None
    return report


def _writable_folder(out_dir: Path) -> None:
    """One line, before the notebook's seconds of work, when `out_dir` cannot be a folder:
    it, or the nearest of its parents that exists, is a file."""
    nearest = next((p for p in (out_dir, *out_dir.parents) if p.exists()), None)
    if nearest is not None and not nearest.is_dir():
        raise ReportError(f"cannot write the report in {out_dir}: {nearest} is not a folder")


def configured_names(warehouse: Warehouse) -> dict[str, str]:
    """The name each workspace was last loaded under (`--workspace` of `load`), by its id, as
    the warehouse's run records keep them; none for a warehouse without records, nor for the
    single key's implicit `default` (no user chose it: the service's name says more)."""
    names = run_records.configured_names(recorded_runs(warehouse))
    return {id_: name for id_, name in names.items() if id_ and name != DEFAULT_NAME}


def snapshot_marts(warehouse: Warehouse, into: Path) -> Path:
    """A DuckDB file `into` with the marts and `raw.workspaces` of `warehouse` (any destination).

    Raises:
        ReportError: the destination cannot be read or lacks a mart (one line).
    """
    try:
        return warehouse.copy_into(into, REPORT_TABLES)
    except WarehouseError as error:
        raise ReportError(str(error)) from None


def find_workspace(
    warehouse: Warehouse | Path, workspace: str, configured: Mapping[str, str] | None = None
) -> LoadedWorkspace:
    """The workspace of the warehouse (`raw.workspaces`) whose id, configured name (`configured`:
    by id, the names `load --workspace` ran under) or name at the service is `workspace`.

    Each matches exactly first, then ignoring case and surrounding spaces.

    Raises:
        ReportError: no workspace matches, or the name is shared by several (give the id
            then); the message is one line that lists the warehouse's workspaces.
    """
    place = Warehouse.of(warehouse)
    known = place.workspaces()
    names = configured or {}
    matches = run_records.workspaces_named(known, workspace, names)
    if len(matches) == 1:
        return matches[0]
    if matches:
        listed = ", ".join(map(str, matches))
        raise ReportError(
            f"{len(matches)} workspaces of {place.label} are named {workspace!r}: "
            f"give the id of one ({listed})"
        )
    described = ", ".join(run_records.described_workspace(w, names) for w in known)
    listed = described or "none loaded yet"
    raise ReportError(f"no workspace {workspace!r} in {place.label}; its workspaces: {listed}")


def execute_notebook(
    path: Path, parameters: Mapping[str, Any] | None = None, *, cwd: Path | None = None
) -> NotebookNode:
    """Run every cell of a notebook in a fresh kernel of this interpreter and return it.

    Parameters are injected as papermill does: assignments in a new cell, tagged
    `injected-parameters`, right after the cell tagged `parameters` (or first, when none is).
    The kernel is this Python's ipykernel whatever kernels are installed for the user, so
    the notebook runs on the project's environment with no set-up.

    Args:
        path: the `.ipynb` file; it is not modified.
        parameters: names and values (anything whose `repr` is a Python literal).
        cwd: working folder of the kernel; the notebook's folder by default.

    Returns:
        The notebook with its outputs.

    Raises:
        CellExecutionError: a cell raised; the notebook stops there.
        CellTimeoutError: a cell ran longer than `CELL_TIMEOUT_SECONDS`.
    """
    notebook: NotebookNode = nbformat.read(path, as_version=4)
    if parameters:
        _inject(notebook, parameters)
    manager = AsyncKernelManager(
        kernel_name="python3", kernel_spec_manager=_ThisInterpreterKernels()
    )
    if zmq.has("curve"):  # encrypt the kernel's loopback traffic (ipykernel warns otherwise)
        manager.curve_publickey, manager.curve_secretkey = zmq.curve_keypair()
    client = NotebookClient(
        notebook,
        km=manager,
        timeout=CELL_TIMEOUT_SECONDS,
        resources={"metadata": {"path": str(cwd or path.parent)}},
    )
    client.execute(cleanup_kc=True)
    return notebook


class _ThisInterpreterKernels(KernelSpecManager):
    """Every kernel name resolves to ipykernel on this interpreter (the project's venv)."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return KernelSpec(
            # -Xfrozen_modules=off: the kernel's debugger warns on every start without it.
            argv=[
                sys.executable,
                "-Xfrozen_modules=off",
                "-m",
                "ipykernel_launcher",
                "-f",
                "{connection_file}",
            ],
            display_name="Python 3 (signing-etl)",
            language="python",
        )


def _inject(notebook: NotebookNode, parameters: Mapping[str, Any]) -> None:
    lines = ["# Injected parameters"] + [
        f"{name} = {value!r}" for name, value in parameters.items()
    ]
    cell = nbformat.v4.new_code_cell("\n".join(lines))
    cell.metadata["tags"] = ["injected-parameters"]
    after = next(
        (
            i + 1
            for i, existing in enumerate(notebook.cells)
            if "parameters" in existing.metadata.get("tags", [])
        ),
        0,
    )
    notebook.cells.insert(after, cell)


def _file_name_part(text: str) -> str:
    """`text` as part of a file name: runs of anything but letters, digits, `.`, `_`, `-` are
    one `-` (a name with spaces or slashes stays one file in `out_dir`)."""
    return re.sub(r"[^\w.-]+", "-", text).strip("-.") or "workspace"
