"""The funnel report on a warehouse with two workspaces whose ids collide: each workspace's
funnel apart, with the numbers of its own sandbox store, or one workspace alone when named."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipelines.errors import ReportError
from pipelines.report import find_workspace, write_report
from pipelines.signing_pipeline import load_incremental
from pipelines.warehouse import LoadedWorkspace
from sandbox import RunningSandbox, Store
from tests.models.test_marts import truth
from tests.models.workspaces import colliding_workspaces, load_every_workspace
from tests.support import FAST, cli_env, describe, run_cli

ROW = re.compile(r"<tr>(.*?)</tr>", re.S)
CELL = re.compile(r"<td[^>]*>(.*?)</td>", re.S)
TAG = re.compile(r"<[^>]+>")
FUNNEL_LINE = re.compile(r"Of ([\d,]+) shipments sent, ([\d,]+) \(\d+%\) were completed\.")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningSandbox, Path]]:
    """One sandbox serving two colliding workspaces, both loaded into one warehouse with their
    own keys, models built; shared by the tests of this module."""
    with RunningSandbox(*colliding_workspaces(seed=31)) as running:
        warehouse = tmp_path_factory.mktemp("workspace_reports") / "signing.duckdb"
        load_every_workspace(running, warehouse)
        yield running, warehouse


def funnel_numbers(store: Store) -> dict[str, int]:
    """The report's funnel counts of one workspace, from its sandbox store."""
    numbers: dict[str, Any] = truth(store)
    return {
        "sent": numbers["sent"],
        "opened": numbers["opened"],
        # at least one signature: completed shipments are signed by every recipient
        "signed": numbers["stages"]["signed"] + numbers["stages"]["completed"],
        "completed": numbers["completed"],
    }


def summary_table(html: str) -> dict[str, dict[str, int]]:
    """The report's table of workspaces: per workspace id, its funnel counts."""
    table: dict[str, dict[str, int]] = {}
    for row in ROW.findall(html):
        cells = [TAG.sub("", cell).strip() for cell in CELL.findall(row)]
        if len(cells) == 8 and cells[1].startswith("ws_"):
            sent, opened, signed, completed = (int(c.replace(",", "")) for c in cells[2:6])
            table[cells[1]] = {
                "sent": sent,
                "opened": opened,
                "signed": signed,
                "completed": completed,
            }
    return table


def funnel_line_after(html: str, heading: str) -> tuple[int, int]:
    """Sent and completed shipments of the first funnel summary after `heading`."""
    found = FUNNEL_LINE.search(html, html.index(heading))
    assert found, f"no funnel summary after {heading}"
    return int(found[1].replace(",", "")), int(found[2].replace(",", ""))


def test_report_shows_each_workspace_funnel_apart_with_its_own_sandbox_numbers(
    loaded: tuple[RunningSandbox, Path], tmp_path: Path
) -> None:
    running, warehouse = loaded
    path = write_report(warehouse, tmp_path / "reports")
    assert path == tmp_path / "reports" / "signing_funnel.html"
    html = path.read_text(encoding="utf-8")

    expected = {store.workspace.id: funnel_numbers(store) for store in running.stores}
    assert expected[running.stores[0].workspace.id] != expected[running.stores[1].workspace.id]
    assert summary_table(html) == expected

    funnel_section = html.index("Overall signing funnel")
    for store in running.stores:
        name, id_ = store.workspace.name, store.workspace.id
        heading = f"{name} (<code>{id_}</code>)"
        assert html.count(heading) == 7, "one heading per section"  # seven sections
        want = expected[id_]
        assert funnel_line_after(html[funnel_section:], heading) == (
            want["sent"],
            want["completed"],
        )
        assert f'alt="Overall signing funnel — {name}"' in html
    # never one funnel of both workspaces together
    assert 'alt="Overall signing funnel"' not in html
    lines = FUNNEL_LINE.findall(html)
    assert len(lines) == 2
    both = sum(numbers["sent"] for numbers in expected.values())
    assert all(int(sent.replace(",", "")) != both for sent, _ in lines)


def test_report_of_one_workspace_named_shows_only_it_and_names_the_file(
    loaded: tuple[RunningSandbox, Path], tmp_path: Path
) -> None:
    running, warehouse = loaded
    chosen, other = running.stores[1].workspace, running.stores[0].workspace
    path = write_report(warehouse, tmp_path / "reports", workspace=chosen.name.upper())
    file_part = re.sub(r"[^\w.-]+", "-", chosen.name.upper())
    assert path == tmp_path / "reports" / f"signing_{file_part}_funnel.html"
    html = path.read_text(encoding="utf-8")

    assert f"workspace <strong>{chosen.name}</strong> (<code>{chosen.id}</code>)" in html
    assert other.id not in html
    assert summary_table(html) == {}  # no table of workspaces: only one is shown
    want = funnel_numbers(running.stores[1])
    assert FUNNEL_LINE.findall(html) == [(f"{want['sent']:,}", f"{want['completed']:,}")]
    assert 'alt="Overall signing funnel"' in html  # titles as in a one-workspace warehouse


def test_a_workspace_is_found_by_its_id_or_its_name_in_any_case(
    loaded: tuple[RunningSandbox, Path],
) -> None:
    running, warehouse = loaded
    for store in running.stores:
        workspace = LoadedWorkspace(id=store.workspace.id, name=store.workspace.name)
        assert find_workspace(warehouse, store.workspace.id) == workspace
        assert find_workspace(warehouse, store.workspace.name) == workspace
        assert find_workspace(warehouse, f" {store.workspace.name.lower()} ") == workspace


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
        api_key=running.api_keys[1],
        base_url=running.base_url,
        workspace_name="bravo",
        **FAST,
    )
    assert again.exit_code == 0, again.stopped
    args = ["report", "--duckdb", str(warehouse), "--out", str(tmp_path), "--workspace", "bravo"]
    result = run_cli(args, cwd=tmp_path, env=cli_env(None))
    assert result.returncode == 0, describe(result)
    path = tmp_path / f"signing_{chosen.id}_funnel.html"
    assert result.stdout.strip().endswith(path.name), describe(result)
    html = path.read_text(encoding="utf-8")
    assert chosen.id in html
    assert other.id not in html
