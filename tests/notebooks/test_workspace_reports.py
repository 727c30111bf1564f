"""The funnel report on a warehouse with two workspaces whose ids collide, opened offline in
headless Chromium and driven through its selectors: each workspace and period shows the numbers
of its own sandbox store, or one workspace alone when named."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from pipelines.errors import ReportError
from pipelines.load.run import load_incremental
from pipelines.report.notebook import find_workspace, write_report
from pipelines.warehouse import LoadedWorkspace
from sandbox import RunningSandbox, Store
from tests.models.workspaces import SHARED_SEED, colliding_workspaces, shared_workspaces
from tests.support import cli_env, describe, earliest, fast, run_cli
from tests.support.browser import offline_page

pytestmark = pytest.mark.slow  # the report rendered and read in Chromium

DAY_MS = 86_400_000


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningSandbox, Path]]:
    """One sandbox serving two colliding workspaces, both loaded into one warehouse with their
    own keys, models built; shared by the tests of this module."""
    configs = colliding_workspaces(seed=SHARED_SEED)
    with RunningSandbox(*configs) as running:
        yield running, shared_workspaces(tmp_path_factory, configs).warehouse


def day_of(ms: int) -> date:
    return datetime.fromtimestamp(ms / 1000, UTC).date()


def period_numbers(store: Store, first: date, last: date) -> dict[str, str]:
    """What the explorer must show for one workspace and the days `first` to `last`, from the
    sandbox's records: shipments sent in the period (their first sending), those opened and
    completed, and the signers waited on now whom the document reached in the period."""
    with store.lock:
        sent = [
            s
            for s in store.shipments.by_id.values()
            if (when := earliest([r.sent_at for r in s.recipients])) is not None
            and first <= day_of(when) <= last
        ]
        waiting = [
            (s.id, r.id)
            for s in store.shipments.by_id.values()
            if s.status == "sent"
            for r in s.recipients
            if r.sent_at is not None and r.signed_at is None and first <= day_of(r.sent_at) <= last
        ]
    return {
        "kpi-sent": f"{len(sent):,}",
        "kpi-opened": f"{sum(any(r.first_opened_at for r in s.recipients) for s in sent):,}",
        "kpi-completed": f"{sum(s.status == 'completed' for s in sent):,}",
        "kpi-waiting-signers": f"{len(waiting):,}",
        "kpi-waiting-shipments": f"{len({shipment for shipment, _ in waiting}):,}",
    }


def shown(page: Any, ids: Any) -> dict[str, str]:
    return {i: page.locator(f"#{i}").text_content() for i in ids}


def test_choosing_a_workspace_and_a_period_in_the_page_shows_that_sandboxs_numbers(
    loaded: tuple[RunningSandbox, Path], tmp_path: Path
) -> None:
    running, warehouse = loaded
    path = write_report(warehouse, tmp_path / "reports")
    assert path == tmp_path / "reports" / "signing_funnel.html"
    html = path.read_text(encoding="utf-8")
    for folder in (tmp_path, warehouse.parent, Path.cwd(), Path.home()):
        assert str(folder) not in html  # no path of the machine that wrote it

    with offline_page(path) as (page, refused):
        assert page.locator(".js-plotly-plot .main-svg").count() >= 8  # the charts drew
        for store in running.stores:
            page.select_option("#workspace", label=store.workspace.name)
            page.select_option("#period", "all")
            everything = period_numbers(store, date.min, date.max)
            assert shown(page, everything) == everything
            # the middle half of the workspace's history, chosen in the page
            with store.lock:
                days = sorted(
                    day_of(when)
                    for s in store.shipments.by_id.values()
                    if (when := earliest([r.sent_at for r in s.recipients])) is not None
                )
            first, last = days[len(days) // 4], days[3 * len(days) // 4]
            page.fill("#from", first.isoformat())
            page.fill("#to", last.isoformat())
            want = period_numbers(store, first, last)
            assert want != everything
            assert shown(page, want) == want, store.workspace.name
            assert page.locator("#table-waiting tbody tr").count() == int(
                want["kpi-waiting-signers"].replace(",", "")
            )
        page.screenshot(path=str(tmp_path / "explorer.png"))
    assert refused == []


def test_report_of_one_workspace_named_shows_only_it_and_names_the_file(
    loaded: tuple[RunningSandbox, Path], tmp_path: Path
) -> None:
    running, warehouse = loaded
    chosen, other = running.stores[1].workspace, running.stores[0].workspace
    path = write_report(warehouse, tmp_path / "reports", workspace=chosen.name.upper())
    file_part = re.sub(r"[^\w.-]+", "-", chosen.name.upper())
    assert path == tmp_path / "reports" / f"signing_{file_part}_funnel.html"
    html = path.read_text(encoding="utf-8")
    assert other.id not in html
    with offline_page(path) as (page, refused):
        assert page.locator("#workspace option").all_text_contents() == [chosen.name]
        assert not page.locator("#workspace-choice").is_visible()  # nothing to choose
        want = period_numbers(running.stores[1], date.min, date.max)
        assert shown(page, want) == want
    assert refused == []


def test_a_workspace_is_found_by_its_id_or_its_name_in_any_case(
    loaded: tuple[RunningSandbox, Path],
) -> None:
    running, warehouse = loaded
    for store in running.stores:
        workspace = LoadedWorkspace(id=store.workspace.id, name=store.workspace.name)
        assert find_workspace(warehouse, store.workspace.id) == workspace
        assert find_workspace(warehouse, store.workspace.name) == workspace
        assert find_workspace(warehouse, f" {store.workspace.name.lower()} ") == workspace


def test_a_workspace_is_found_by_its_configured_name_or_its_id_in_any_case(
    loaded: tuple[RunningSandbox, Path],
) -> None:
    """As `report --workspace` takes them (docs/models.md): `BRAVO` for the workspace loaded
    as `bravo`, an id in capitals; a name that matches nothing lists the configured names."""
    running, warehouse = loaded
    store = running.stores[1]
    configured = {store.workspace.id: "bravo"}
    workspace = LoadedWorkspace(id=store.workspace.id, name=store.workspace.name)
    assert find_workspace(warehouse, "BRAVO", configured) == workspace
    assert find_workspace(warehouse, f" {store.workspace.id.upper()} ", configured) == workspace
    with pytest.raises(ReportError, match="no workspace 'charlie'") as raised:
        find_workspace(warehouse, "charlie", configured)
    assert f"{store.workspace.name} ({store.workspace.id}) as 'bravo'" in str(raised.value)


def test_report_of_an_unknown_workspace_is_one_line_listing_the_known_ones(
    loaded: tuple[RunningSandbox, Path], tmp_path: Path
) -> None:
    running, warehouse = loaded
    with pytest.raises(ReportError, match="no workspace 'Elsewhere'") as raised:
        write_report(warehouse, tmp_path / "reports", workspace="Elsewhere")
    message = str(raised.value)
    assert "\n" not in message
    for store in running.stores:
        assert f"{store.workspace.name} ({store.workspace.id})" in message
    assert not (tmp_path / "reports").exists()


def test_cli_report_takes_the_name_a_workspace_is_configured_under(
    loaded: tuple[RunningSandbox, Path], tmp_path: Path
) -> None:
    """`signing-etl report --workspace bravo` after `load` ran with an entry named `bravo`."""
    running, warehouse = loaded
    chosen, other = running.stores[1].workspace, running.stores[0].workspace
    again = load_incremental(
        warehouse,
        workspace_name="bravo",
        settings=fast(running, running.api_keys[1]),
    )
    assert again.exit_code == 0, again.stopped
    args = ["report", "--duckdb", str(warehouse), "--out", str(tmp_path), "--workspace", "bravo"]
    result = run_cli(args, cwd=tmp_path, env=cli_env(None))
    assert result.returncode == 0, describe(result)
    path = tmp_path / "signing_bravo_funnel.html"  # named as configured, not by the id
    assert result.stdout.strip().endswith(path.name), describe(result)
    html = path.read_text(encoding="utf-8")
    assert chosen.id in html
    assert other.id not in html
    with offline_page(path) as (page, _):
        assert page.locator("#stamp-workspace").text_content() == f"bravo ({chosen.name})"
