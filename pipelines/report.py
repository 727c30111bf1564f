"""The funnel report: run `notebooks/signing_funnel.ipynb` on a warehouse and write it as HTML."""

from __future__ import annotations

import sys
from collections.abc import Mapping
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


def write_report(warehouse: Path, out_dir: Path = DEFAULT_REPORTS_DIR) -> Path:
    """Execute the funnel notebook on a warehouse and write it as one self-contained HTML file.

    The charts are PNG images embedded in the page (`data:` URLs) and the code cells are left
    out, so the file opens anywhere, offline, and can be mailed as it is.

    Args:
        warehouse: DuckDB file whose `marts` schema the models built.
        out_dir: folder of the report (created if missing).

    Returns:
        The path of the HTML file: `<out_dir>/<warehouse's stem>_funnel.html`.

    Raises:
        ReportError: the warehouse is missing, cannot be opened, has no marts, or the notebook
            failed; the message is one line.
    """
    warehouse = Path(warehouse).resolve()
    problem = marts_problem(warehouse)
    if problem:
        raise ReportError(problem)
    try:
        executed = execute_notebook(FUNNEL_NOTEBOOK, {"warehouse": str(warehouse)})
    except CellExecutionError as error:
        raise ReportError(
            f"the report notebook failed: {error.ename}: {_first_line(error.evalue)}"
        ) from None
    except CellTimeoutError as error:
        raise ReportError(f"the report notebook timed out: {_first_line(str(error))}") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{warehouse.stem}_funnel.html"
    path.write_text(notebook_html(executed), encoding="utf-8")
    return path


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


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else "(no message)"
