"""The notebooks, executed cell by cell in a fresh kernel against a small demo warehouse (any
cell that raises fails the test), the HTML report made from the funnel notebook, and what both
do on a warehouse without marts."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path
from typing import Any

import duckdb
import nbformat
import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.demo import run_demo
from pipelines.errors import ReportError
from pipelines.modeling.build import build_models
from pipelines.report.notebook import (
    FUNNEL_NOTEBOOK,
    NOTEBOOKS_DIR,
    execute_notebook,
    write_report,
)
from tests.support import error_lines
from tests.support.browser import offline_page

pytestmark = pytest.mark.slow  # notebooks executed in a kernel, on built models

ADHOC_NOTEBOOK = NOTEBOOKS_DIR / "adhoc_sql.ipynb"
# The title of every chart of the funnel notebook, in order (the images' alternative text).
CHART_TITLES = (
    "Overall signing funnel",
    "Weekly cohort conversion (by week of sending)",
    "Time to sign: document reaching the signer to their signature",
    "Documents by volume | Documents by completion rate (lowest first)",
    "Drop-off by recipient position in sequential flows",
    "Expired and revoked shipments per week",
    "Shipments waiting on a signer, by day",
)
EMBEDDED_PNG = re.compile(r'<img [^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"')
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A demo warehouse, small: 400 shipments, two simulated weeks, models built."""
    path = tmp_path_factory.mktemp("notebooks") / "demo.duckdb"
    demo = run_demo(path, shipments=400, weeks=2, say=lambda _: None)
    # The application deleted some records meanwhile, and the weekly loads found them.
    assert any(load.marked for load in demo.loads[1:])
    result = build_models(path)
    assert result.success, result.summary
    return path


@pytest.fixture
def without_marts(tmp_path: Path) -> Path:
    """A DuckDB file with a loaded `raw` table and no `marts` schema."""
    path = tmp_path / "raw_only.duckdb"
    with duckdb.connect(str(path)) as connection:
        connection.execute("create schema raw; create table raw.shipments (id varchar)")
    return path


def outputs(notebook: Any) -> list[Any]:
    return [
        output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
    ]


def texts(notebook: Any) -> str:
    """Everything the notebook printed or displayed as text (prose as its Markdown with the
    escapes taken out), tracebacks included."""
    parts = []
    for output in outputs(notebook):
        parts.append(output.get("text", ""))
        parts.append(output.get("data", {}).get("text/plain", ""))
        parts.append(re.sub(r"\\(.)", r"\1", output.get("data", {}).get("text/markdown", "")))
        parts.extend(output.get("traceback", []))
    return "\n".join(parts)


def images(notebook: Any) -> list[Any]:
    return [output for output in outputs(notebook) if "image/png" in output.get("data", {})]


def assert_clean(notebook: Any) -> None:
    """No cell raised and nothing went to stderr (warnings would end up in the report)."""
    assert [o for o in outputs(notebook) if o.output_type == "error"] == []
    assert [o.text for o in outputs(notebook) if o.get("name") == "stderr"] == []
    assert "Traceback" not in texts(notebook)


@pytest.mark.parametrize("path", [FUNNEL_NOTEBOOK, ADHOC_NOTEBOOK], ids=lambda p: p.name)
def test_committed_notebooks_have_no_outputs(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code
    assert [cell.outputs for cell in code if cell.outputs] == []
    assert [cell.execution_count for cell in code if cell.execution_count is not None] == []
    assert sorted(NOTEBOOKS_DIR.glob("*.ipynb")) == sorted([FUNNEL_NOTEBOOK, ADHOC_NOTEBOOK])


@pytest.mark.parametrize("path", [FUNNEL_NOTEBOOK, ADHOC_NOTEBOOK], ids=lambda p: p.name)
def test_each_notebook_takes_its_inputs_from_one_parameters_cell(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    tagged = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    assert 'warehouse = ""' in tagged[0].source


def test_funnel_notebook_charts_a_demo_warehouse_with_every_cell_passing(
    warehouse: Path,
) -> None:
    notebook = execute_notebook(FUNNEL_NOTEBOOK, {"warehouse": str(warehouse)})
    assert_clean(notebook)
    charts = images(notebook)
    assert [chart.metadata["image/png"]["alt"] for chart in charts] == list(CHART_TITLES)
    printed = texts(notebook)
    assert "shipments sent" in printed
    assert "half were made within" in printed


def test_adhoc_notebook_answers_its_questions_on_the_warehouse_named_by_the_environment(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIGNING_WAREHOUSE", str(warehouse))
    notebook = execute_notebook(ADHOC_NOTEBOOK)  # no parameters: the variable decides
    assert_clean(notebook)
    printed = texts(notebook)
    assert f"Connected to {warehouse}" in printed
    assert "one row per workspace and shipment" in printed  # the table list carries each grain
    # every cell after the connection shows a result, and none is an empty frame
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    answered = [cell for cell in code if cell.outputs]
    assert len(answered) >= 8, [cell.source[:60] for cell in code if not cell.outputs]
    assert "email" in printed  # the question about channels has its answer


def test_report_is_one_html_file_whose_scripts_are_its_own_and_run_offline(
    warehouse: Path, tmp_path: Path
) -> None:
    path = write_report(warehouse, tmp_path / "reports")
    assert path == tmp_path / "reports" / "demo_funnel.html"
    html = path.read_text(encoding="utf-8")
    # self-contained: nothing to fetch, and the only scripts run are the page's own two, by hash
    markup = re.sub(r"(<script[^>]*>).*?</script>", r"\1</script>", html, flags=re.S)
    assert re.findall(r'(?:src|href)="(?!data:|#)[^"]*"', markup) == []
    (meta,) = [m for m in re.findall(r"<meta [^>]*>", html) if "Content-Security-Policy" in m]
    policy = re.search(r'content="([^"]+)"', meta)
    assert policy
    assert "default-src 'none'" in policy[1]
    allowed = set(re.findall(r"'sha256-([^']+)'", policy[1]))
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S)
    run = [body for attributes, body in scripts if 'type="application/json"' not in attributes]
    assert len(run) == 2
    assert {base64.b64encode(hashlib.sha256(b.encode()).digest()).decode() for b in run} == allowed
    # every section of the explorer, none of the static images, no code or traceback
    for heading in ("Overall signing funnel", "Weekly cohort conversion", "Time to sign"):
        assert f"<h3>{heading}</h3>" in html
    assert EMBEDDED_PNG.findall(html) == []
    assert "&lt;h1" not in html  # markdown is markup, not escaped into visible tags
    assert "import duckdb" not in html
    assert "Traceback" not in html
    with offline_page(path) as (page, refused):
        assert page.locator(".js-plotly-plot .main-svg").count() >= 8
        page.hover("#chart-funnel .bars path", force=True)  # Plotly hears it on its drag layer
        assert page.locator("#chart-funnel .hovertext").count() == 1
        with page.expect_download() as download:
            page.click("#download-waiting")
        csv = download.value.path().read_text(encoding="utf-8").splitlines()
        assert csv[0].startswith("Shipment,Document,Waiting on,E-mail")
        assert len(csv) - 1 == page.locator("#table-waiting tbody tr").count() > 0
    assert refused == []


def test_funnel_notebook_on_a_warehouse_without_marts_says_so_without_a_traceback(
    without_marts: Path,
) -> None:
    notebook = execute_notebook(FUNNEL_NOTEBOOK, {"warehouse": str(without_marts)})
    assert_clean(notebook)
    assert images(notebook) == []
    printed = texts(notebook)
    assert f"The warehouse {without_marts} has no marts" in printed
    assert "signing-etl models" in printed


def test_funnel_notebook_with_marts_but_no_sent_shipment_says_so(tmp_path: Path) -> None:
    path = tmp_path / "nothing_sent.duckdb"
    with duckdb.connect(str(path)) as connection:
        connection.execute("create schema marts")
        for name in ("fct_recipients", "fct_signing_funnel", "fct_time_to_sign"):
            connection.execute(f"create table marts.{name} (id varchar)")
        for name in (
            "dim_documents",
            "dim_contacts",
            "fct_waiting_by_day",
            "fct_shipments_waiting",
            "dim_workspaces",
        ):
            connection.execute(f"create table marts.{name} (id varchar)")
        connection.execute("create table marts.fct_shipments (shipment_id varchar, is_sent bool)")
        connection.execute("insert into marts.fct_shipments values ('shp_1', false)")
    notebook = execute_notebook(FUNNEL_NOTEBOOK, {"warehouse": str(path)})
    assert_clean(notebook)
    assert images(notebook) == []
    assert "has no sent shipments yet" in texts(notebook)


def test_report_without_marts_is_a_one_line_error_and_writes_nothing(
    without_marts: Path, tmp_path: Path
) -> None:
    with pytest.raises(ReportError, match="has no marts") as raised:
        write_report(without_marts, tmp_path / "reports")
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "reports").exists()
    result = CliRunner().invoke(
        app, ["report", "--duckdb", str(without_marts), "--out", str(tmp_path / "reports")]
    )
    assert result.exit_code == 1
    errors = error_lines(result.stderr)
    assert len(errors) == 1
    assert "has no marts" in errors[0]
    assert "Traceback" not in result.output
