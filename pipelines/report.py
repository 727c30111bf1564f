"""The funnel report: run `notebooks/signing_funnel.ipynb` on a warehouse and write it as HTML."""

from __future__ import annotations

import base64
import hashlib
import importlib.resources
import json
import re
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nbformat
import zmq
from jinja2 import DictLoader
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError
from nbconvert import HTMLExporter
from nbformat import NotebookNode

from pipelines.errors import ReportError, WarehouseError
from pipelines.run_records import read_runs
from pipelines.warehouse import LoadedWorkspace, Warehouse, columns_by_table
from pipelines.workspaces import DEFAULT_NAME

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
    "fct_waiting_by_day",
    "fct_shipments_waiting",
    "dim_workspaces",
)
# What the notebook reads: the marts, and the workspaces' names.
REPORT_TABLES = (("raw", "workspaces"), *(("marts", mart) for mart in MARTS))
CELL_TIMEOUT_SECONDS = 600
# The explorer: the notebook's data for it (an output of this type), the page's own markup and
# script (`report_assets/`), and the charting library inlined from the plotly wheel.
EXPLORER_MIME = "application/vnd.signing-etl.explorer+json"
ASSETS_DIR = Path(__file__).resolve().parent / "report_assets"
STATIC_TAG = "static"  # cells of the notebook's static charts, left out of the report

# JupyterLab's look, without the scripts it loads from CDNs (require.js, MathJax, Mermaid): the
# report must open offline. Values from the data are escaped by the notebook and set as text by
# the explorer; as a second guard the page loads nothing from anywhere and runs only its own two
# scripts, by their hashes (its Content-Security-Policy, completed in `notebook_html`), and
# nbconvert sanitizes the outputs' HTML.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; "
    "form-action 'none'"
)
_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}
<meta http-equiv="Content-Security-Policy" content="{{ resources.content_security_policy }}">
{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block data_png scoped -%}
<div class="jp-RenderedImage jp-OutputArea-output {{ extra_class }}">
<img src="data:image/png;base64,{{ output.data['image/png'] | escape_html }}"
 alt="{{ ((output | get_metadata('alt', 'image/png')) or 'Chart') | escape_html }}">
</div>
{%- endblock data_png -%}
"""


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
    place = Warehouse.of(warehouse)
    names = configured_names(place)
    try:
        with place.local_copy(REPORT_TABLES) as local:
            return _write(local, out_dir, workspace, names)
    except WarehouseError as error:
        raise ReportError(str(error)) from None


def _write(
    warehouse: Warehouse, out_dir: Path, workspace: str | None, names: dict[str, str]
) -> Path:
    problem = warehouse.marts_missing(MARTS)
    if problem:
        raise ReportError(problem)
    path = warehouse.path.resolve()
    parameters: dict[str, Any] = {
        "warehouse": str(path),
        "workspace_names": names,
        "static_charts": False,
    }
    name = f"{path.stem}_funnel.html"
    if workspace is not None:
        chosen = find_workspace(warehouse, workspace).id
        parameters["workspace"] = chosen
        name = f"{path.stem}_{_file_name_part(names.get(chosen) or workspace)}_funnel.html"
    try:
        executed = execute_notebook(FUNNEL_NOTEBOOK, parameters)
    except CellExecutionError as error:
        raise ReportError(
            f"the report notebook failed: {error.ename}: {_first_line(error.evalue)}"
        ) from None
    except CellTimeoutError as error:
        raise ReportError(f"the report notebook timed out: {_first_line(str(error))}") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    report = out_dir / name
    report.write_text(notebook_html(executed), encoding="utf-8")
    return report


def configured_names(warehouse: Warehouse) -> dict[str, str]:
    """The name each workspace was last loaded under (`--workspace` of `load`), by its id, as
    the warehouse's run records keep them; none for a warehouse without records, nor for the
    single key's implicit `default` (no user chose it: the service's name says more)."""
    try:
        with warehouse.reader() as client:
            runs = read_runs(client, columns_by_table(client))
    except Exception:  # no records to read: the report names what is wrong with the warehouse
        return {}
    names: dict[str, str] = {}
    for run in runs:  # newest first: the newest name wins
        if run.workspace_id and run.workspace_name:
            names.setdefault(run.workspace_id, run.workspace_name)
    return {id_: name for id_, name in names.items() if name != DEFAULT_NAME}


def snapshot_marts(warehouse: Warehouse, into: Path) -> Path:
    """A DuckDB file `into` with the marts and `raw.workspaces` of `warehouse` (any destination).

    Raises:
        ReportError: the destination cannot be read or lacks a mart (one line).
    """
    try:
        return warehouse.copy_into(into, REPORT_TABLES)
    except WarehouseError as error:
        raise ReportError(str(error)) from None


def find_workspace(warehouse: Warehouse | Path, workspace: str) -> LoadedWorkspace:
    """The workspace of the warehouse (`raw.workspaces`) whose id or name is `workspace`.

    An id matches exactly; a name exactly, else ignoring case and surrounding spaces.

    Raises:
        ReportError: no workspace matches, or the name is shared by several (give the id
            then); the message is one line that lists the warehouse's workspaces.
    """
    place = Warehouse.of(warehouse)
    known = place.workspaces()
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
                f"{len(matches)} workspaces of {place.label} are named {workspace!r}: "
                f"give the id of one ({listed})"
            )
    listed = ", ".join(map(str, known)) or "none loaded yet"
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


def notebook_html(notebook: NotebookNode) -> str:
    """An executed notebook as one HTML page: markdown and outputs, no code, images inline.

    The notebook's explorer data (an output of type `EXPLORER_MIME`) becomes the interactive
    explorer: the page's markup and script with Plotly, all inlined, the data embedded as JSON
    that no browser parses as markup, and a Content-Security-Policy that runs those two
    scripts (by their hashes) and nothing else. Cells tagged `static` are left out then, and
    nothing the kernel wrote to stderr (a library's warning names files of this machine).

    Args:
        notebook: an executed notebook.

    Returns:
        The page's HTML, with no external scripts, styles or images.
    """
    explorer = _take_explorer(notebook)
    remove = {STATIC_TAG} if explorer else set()
    exporter = HTMLExporter(
        extra_loaders=[DictLoader({"signing_report.html.j2": _TEMPLATE})],
        template_file="signing_report.html.j2",
        exclude_input=True,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
        sanitize_html=True,
        filters={"clean_html": _clean_html},
    )
    exporter.register_preprocessor(_tag_remover(remove), enabled=True)
    scripts = [_plotly_js(), (ASSETS_DIR / "explorer.js").read_text(encoding="utf-8")]
    policy = CONTENT_SECURITY_POLICY
    if explorer:
        hashes = " ".join(f"'sha256-{_sha256(script)}'" for script in scripts)
        policy = f"{policy}; script-src {hashes}"
    body, _ = exporter.from_notebook_node(notebook, resources={"content_security_policy": policy})
    if explorer:
        token, data = explorer
        body = _put_explorer(body, token, _explorer_html(data, scripts))
    return body


def _take_explorer(notebook: NotebookNode) -> tuple[str, Any] | None:
    """Take the explorer's data out of the notebook, leaving a random token where it was (the
    sanitizer drops unknown outputs), and every stderr output out; None without explorer."""
    found: tuple[str, Any] | None = None
    for cell in notebook.cells:
        kept = []
        for output in cell.get("outputs", []):
            if output.get("name") == "stderr":
                continue
            data = output.get("data", {})
            if EXPLORER_MIME in data and found is None:
                token = f"signing-explorer-{uuid.uuid4().hex}"
                found = (token, data[EXPLORER_MIME])
                output["data"] = {"text/plain": token}
            kept.append(output)
        if cell.cell_type == "code":
            cell.outputs = kept
    return found


def _put_explorer(body: str, token: str, explorer: str) -> str:
    """The page with the output that holds `token` replaced by the explorer."""
    output = re.compile(r"<div[^>]*>\s*<pre>" + re.escape(token) + r"\s*</pre>\s*</div>")
    replaced, count = output.subn(lambda _: explorer, body, count=1)
    return replaced if count else body.replace(token, explorer)


def _explorer_html(data: Any, scripts: list[str]) -> str:
    """The explorer: its markup, its data as JSON in a non-executed script element (`<`, `>`,
    `&` escaped, so no value can end the element), then the scripts."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    for character, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(character, escaped)
    markup = (ASSETS_DIR / "explorer.html").read_text(encoding="utf-8")
    parts = [markup, f'<script type="application/json" id="explorer-data">{text}</script>']
    parts += [f"<script>{script}</script>" for script in scripts]
    return "\n".join(parts)


def _plotly_js() -> str:
    """Plotly's own bundle, from the installed `plotly` package (nothing is downloaded)."""
    bundle = importlib.resources.files("plotly") / "package_data" / "plotly.min.js"
    script = bundle.read_text(encoding="utf-8")
    if "</script" in script.lower():  # would end the inline element early
        raise ReportError("the installed plotly.min.js cannot be inlined (it holds </script)")
    return script


def _sha256(script: str) -> str:
    return base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")


# What markdown makes, kept by the sanitizer: nbconvert's own list lacks headings, paragraphs and
# table heads, and escaped them into visible tags. No script, style, form or event attribute.
_ALLOWED_TAGS = {
    *("a", "abbr", "b", "blockquote", "br", "code", "div", "em", "hr", "i", "li", "ol", "p"),
    *("pre", "span", "strong", "sub", "sup", "ul", "h1", "h2", "h3", "h4", "h5", "h6"),
    *("table", "thead", "tbody", "tr", "th", "td"),
}
_ALLOWED_ATTRIBUTES = {
    "*": ["class", "id"],
    "a": ["href", "title"],
    "th": ["style"],
    "td": ["style"],
}


def _clean_html(element: Any) -> str:
    """nbconvert's `clean_html` (bleach, only http(s) and mailto links), with markdown's tags."""
    import bleach  # type: ignore[import-untyped]
    from bleach.css_sanitizer import CSSSanitizer  # type: ignore[import-untyped]

    text = element.decode() if isinstance(element, bytes) else str(element)
    return str(
        bleach.clean(
            text,
            tags=_ALLOWED_TAGS,
            attributes=_ALLOWED_ATTRIBUTES,
            css_sanitizer=CSSSanitizer(allowed_css_properties=["text-align"]),
        )
    )


def _tag_remover(tags: set[str]) -> Any:
    from nbconvert.preprocessors import TagRemovePreprocessor

    return TagRemovePreprocessor(remove_cell_tags=tags, enabled=True)


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
