"""The report's figures are the funnel metrics: for a chosen workspace and period, every number
in the page's tiles and sentences (read in headless Chromium, offline) equals the metric the
semantic layer gives for that workspace and those days, and the counts equal the sandbox's own
records (the issue's page said "Expired 9, Revoked 0" above "25 shipments expired and 1 were
revoked" for one period)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from pipelines.metrics.semantic import MetricsRequest, query_metrics
from pipelines.report.notebook import write_report
from pipelines.warehouse import Warehouse
from sandbox import RunningSandbox
from tests.metrics.test_metrics import ALL_METRICS
from tests.models.workspaces import SHARED_SEED, colliding_workspaces, shared_workspaces
from tests.support.browser import offline_page
from tests.support.funnel import sent_between

pytestmark = pytest.mark.slow  # the report rendered and read in Chromium

METRICS = ALL_METRICS  # every metric the semantic layer defines
TILES = {
    "kpi-sent": "sent",
    "kpi-delivered": "delivered",
    "kpi-opened": "opened",
    "kpi-signed": "signed",
    "kpi-completed": "completed",
    "kpi-expired": "expired",
    "kpi-revoked": "revoked",
    "kpi-waiting-shipments": "waiting_now",
    "kpi-waiting-signers": "signers_waiting_now",
}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningSandbox, Path]]:
    """The two colliding workspaces every report test reads, loaded once per session."""
    configs = colliding_workspaces(seed=SHARED_SEED)
    with RunningSandbox(*configs) as running:
        yield running, shared_workspaces(tmp_path_factory, configs).warehouse


@pytest.fixture(scope="module")
def report(loaded: tuple[RunningSandbox, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The second workspace's report, written once: each period's test only reads it (one
    page of its own each), and a notebook run costs seconds."""
    running, warehouse = loaded
    folder = tmp_path_factory.mktemp("reports")
    return write_report(warehouse, folder, running.stores[1].workspace.id)


def _hours(hours: float) -> str:
    """Hours as the page writes them (minutes, hours or days)."""
    if hours < 1:
        return f"{round(hours * 60)} min"
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} d"


def _numbers(text: str) -> list[int]:
    return [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", text)]


def _metric(warehouse: Path, workspace: str, start: date | None, end: date | None) -> Any:
    request = MetricsRequest(METRICS, ("workspace",), start, end)
    (row,) = [
        r
        for r in query_metrics(Warehouse.at(warehouse), request).records()
        if r["workspace"] == workspace
    ]
    return row


@pytest.mark.parametrize("period", ["30", "90", "all"])
def test_every_number_of_the_tiles_and_sentences_is_the_metric_for_that_period(
    loaded: tuple[RunningSandbox, Path], report: Path, period: str
) -> None:
    running, warehouse = loaded
    store = running.stores[1]
    workspace = store.workspace.id
    with offline_page(report) as (page, refused):
        page.select_option("#period", period)
        first = date.fromisoformat(page.input_value("#from"))
        last = date.fromisoformat(page.input_value("#to"))
        shown = {i: page.locator(f"#{i}").text_content() or "" for i in TILES}
        shown["kpi-completion"] = page.locator("#kpi-completion").text_content() or ""
        captions = {
            name: page.locator(f"#caption-{name}").text_content() or ""
            for name in ("funnel", "endings", "time", "weekly")
        }
    assert refused == []
    bounded = period != "all"
    metric = _metric(warehouse, workspace, first if bounded else None, last if bounded else None)
    assert metric["sent"] > 0
    for tile, name in TILES.items():
        assert shown[tile] == f"{metric[name]:,}", (tile, period)
    rate = f"{round(100 * metric['completion_rate'])}%"
    assert shown["kpi-completion"] == rate
    assert captions["funnel"].startswith(
        f"Of {metric['sent']:,} shipments sent, {metric['completed']:,} ({rate}) were completed."
    )
    assert _numbers(captions["endings"]) == [metric["sent"], metric["expired"], metric["revoked"]]
    assert f"half were made within {_hours(metric['median_hours_to_sign'])}" in captions["time"]

    if not bounded:  # the weekly cohorts are the weeks the metrics have shipments sent in
        weeks = query_metrics(
            Warehouse.at(warehouse), MetricsRequest(("sent",), ("metric_time__week", "workspace"))
        ).records()
        cohorts = [w for w in weeks if w["workspace"] == workspace and w["sent"]]
        assert captions["weekly"].startswith(f"{len(cohorts)} weekly cohorts")

    # ... and the counts are the sandbox's own: the shipments of the workspace sent then
    sent = sent_between(store, first if bounded else date.min, last if bounded else date.max)
    assert metric["sent"] == len(sent)
    for status in ("completed", "expired", "revoked"):
        assert metric[status] == sum(s.status == status for s in sent), status
