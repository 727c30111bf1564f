"""The funnel report: run `notebooks/signing_funnel.ipynb` on a warehouse and write it as HTML."""

from __future__ import annotations

import re
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import nbformat
import zmq
from jinja2 import DictLoader
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError
from nbconvert import HTMLExporter
from nbformat import NotebookNode

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
FUNNEL_NOTEBOOK = NOTEBOOKS_DIR / "signing_funnel.ipynb"
DEFAULT_REPORTS_DIR = Path("reports")
MARTS = (
    "fct_shipments",
    "fct_recipients",
    "fct_signing_funnel",
    "fct_time_to_sign",
    "dim_documents",
    "dim_contacts",
)
CELL_TIMEOUT_SECONDS = 600

# JupyterLab's look, without the scripts it loads from CDNs (require.js, MathJax, Mermaid):
# the report has only static images and must open offline.
_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block data_png scoped -%}
<div class="jp-RenderedImage jp-OutputArea-output {{ extra_class }}">
<img src="data:image/png;base64,{{ output.data['image/png'] | escape_html }}"
 alt="{{ ((output | get_metadata('alt', 'image/png')) or 'Chart') | escape_html }}">
</div>
{%- endblock data_png -%}
"""


class ReportError(Exception):
    """The report cannot be written; the message is one line that says why."""


@dataclass(frozen=True)
class Workspace:
    """A workspace loaded into a warehouse (`raw.workspaces`)."""

    id: str
    name: str | None

    def __str__(self) -> str:
        return f"{self.name} ({self.id})" if self.name else self.id


def write_report(
    warehouse: Path,
    out_dir: Path = DEFAULT_REPORTS_DIR,
    workspace: str | None = None,
    destination: str = "duckdb",
) -> Path:
    """Execute the funnel notebook on a warehouse and write it as one self-contained HTML file.

    The charts are PNG images embedded in the page (`data:` URLs) and the code cells are left
    out, so the file opens anywhere, offline, and can be mailed as it is. A warehouse with
    several workspaces shows each one apart (a table comparing them, then every section once
    per workspace, under its name), never one funnel that mixes them; with one workspace the
    report has no per-workspace headings.

    Args:
        warehouse: DuckDB file whose `marts` schema the models built.
        out_dir: folder of the report (created if missing).
        workspace: the id or name of one workspace to report on alone (see `find_workspace`);
            None: every workspace of the warehouse.
        destination: the warehouse's dlt destination. Other than DuckDB, the marts (small,
            aggregated tables) and `raw.workspaces` are read through the destination's own
            connection into a DuckDB snapshot named after `warehouse`, which the notebook reads.

    Returns:
        The path of the HTML file: `<out_dir>/<warehouse's stem>_funnel.html`, or
        `<out_dir>/<warehouse's stem>_<workspace>_funnel.html` for one workspace (`workspace`
        as given, with anything but letters, digits, `.`, `_` and `-` made a `-`).

    Raises:
        ReportError: the warehouse is missing, cannot be opened, has no marts, has no such
            workspace (the message lists the ones it has), or the notebook failed; the
            message is one line.
    """
    if destination != "duckdb":
        with tempfile.TemporaryDirectory() as folder:
            snapshot = snapshot_marts(destination, Path(folder) / Path(warehouse).name)
            return write_report(snapshot, out_dir, workspace)
    warehouse = Path(warehouse).resolve()
    problem = marts_problem(warehouse)
    if problem:
        raise ReportError(problem)
    parameters = {"warehouse": str(warehouse)}
    name = f"{warehouse.stem}_funnel.html"
    if workspace is not None:
        parameters["workspace"] = find_workspace(warehouse, workspace).id
        name = f"{warehouse.stem}_{_file_name_part(workspace)}_funnel.html"
    try:
        executed = execute_notebook(FUNNEL_NOTEBOOK, parameters)
    except CellExecutionError as error:
        raise ReportError(
            f"the report notebook failed: {error.ename}: {_first_line(error.evalue)}"
        ) from None
    except CellTimeoutError as error:
        raise ReportError(f"the report notebook timed out: {_first_line(str(error))}") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    path.write_text(notebook_html(executed), encoding="utf-8")
    return path


def snapshot_marts(destination: str, into: Path) -> Path:
    """Copy the marts and `raw.workspaces` of a warehouse in any dlt destination (read through
    the destination's connection, configured as a load is) into a new DuckDB file `into`.

    Raises:
        ReportError: the destination cannot be read or lacks a mart (one line).
    """
    from pipelines.signing_pipeline import warehouse_client

    try:
        with warehouse_client(into, destination) as client, duckdb.connect(str(into)) as local:
            for schema, table in [("raw", "workspaces"), *(("marts", m) for m in MARTS)]:
                local.execute(f"create schema if not exists {schema}")
                with client.execute_query(f"select * from {schema}.{table}") as cursor:
                    frame = cursor.df()
                local.register("copied", frame)
                local.execute(f"create table {schema}.{table} as select * from copied")
                local.unregister("copied")
    except ReportError:
        raise
    except Exception as error:  # the destination's own message, in one line
        raise ReportError(
            f"cannot read the marts of the {destination} destination: {_first_line(str(error))}"
            f"; run `signing-etl models --destination {destination}` after a load"
        ) from None
    return into


def find_workspace(warehouse: Path, workspace: str) -> Workspace:
    """The workspace of the warehouse (`raw.workspaces`) whose id or name is `workspace`.

    An id matches exactly; a name exactly, else ignoring case and surrounding spaces.

    Args:
        warehouse: DuckDB file the pipeline loaded.
        workspace: a workspace id or name.

    Returns:
        The one matching workspace.

    Raises:
        ReportError: no workspace matches, or the name is shared by several (give the id
            then); the message is one line that lists the warehouse's workspaces.
    """
    known = workspaces(warehouse)
    wanted = workspace.strip().casefold()
    for matches in (
        [w for w in known if w.id == workspace],
        [w for w in known if w.name == workspace],
        [w for w in known if (w.name or "").strip().casefold() == wanted],
    ):
        if len(matches) == 1:
            return matches[0]
        if matches:
            listed = ", ".join(map(str, matches))
            raise ReportError(
                f"{len(matches)} workspaces of {warehouse} are named {workspace!r}: "
                f"give the id of one ({listed})"
            )
    listed = ", ".join(map(str, known)) or "none loaded yet"
    raise ReportError(f"no workspace {workspace!r} in {warehouse}; its workspaces: {listed}")


def workspaces(warehouse: Path) -> list[Workspace]:
    """The workspaces loaded into a warehouse (`raw.workspaces`), by name; none if it has no
    such table or cannot be read.

    Args:
        warehouse: DuckDB file the pipeline loaded.

    Returns:
        One entry per workspace id.
    """
    try:
        with duckdb.connect(str(warehouse), read_only=True) as connection:
            rows = connection.execute(
                "select id, max(name) from raw.workspaces where id is not null "
                "group by id order by max(name), id"
            ).fetchall()
    except duckdb.Error:
        return []
    return [Workspace(id=str(id_), name=name) for id_, name in rows]


def marts_problem(warehouse: Path) -> str | None:
    """Why the warehouse's marts cannot be reported on, in one line; None when they can.

    Args:
        warehouse: DuckDB file.

    Returns:
        None if every mart exists; else a sentence naming the file and the command to run.
    """
    if not warehouse.is_file():
        return f"no warehouse at {warehouse}; run `signing-etl load` (or `signing-etl demo`)"
    try:
        with duckdb.connect(str(warehouse), read_only=True) as connection:
            found = {
                name
                for (name,) in connection.execute(
                    "select table_name from information_schema.tables where table_schema = 'marts'"
                ).fetchall()
            }
    except duckdb.Error as error:
        return f"cannot open {warehouse}: {_first_line(str(error))}"
    missing = [name for name in MARTS if name not in found]
    if missing:
        return (
            f"{warehouse} has no marts ({', '.join(missing)} missing); "
            f"run `signing-etl models --duckdb {warehouse}`"
        )
    return None


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


def notebook_html(notebook: NotebookNode) -> str:
    """An executed notebook as one HTML page: markdown and outputs, no code, images inline.

    Args:
        notebook: an executed notebook.

    Returns:
        The page's HTML, with no external scripts, styles or images.
    """
    exporter = HTMLExporter(
        extra_loaders=[DictLoader({"signing_report.html.j2": _TEMPLATE})],
        template_file="signing_report.html.j2",
        exclude_input=True,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
    )
    body, _ = exporter.from_notebook_node(notebook)
    return body


def strip_outputs(path: Path) -> None:
    """Clear a notebook's outputs and execution counts in place, as it is committed.

    Args:
        path: the `.ipynb` file.
    """
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)
    nbformat.write(notebook, path)


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


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else "(no message)"
