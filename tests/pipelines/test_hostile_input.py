"""Hostile input on the pipeline's side, tried as an attacker would: queries that try to write
through `sql`, data and names that try to become markup in a terminal, a log or the report, and
paths that are no warehouse. Each is refused in one line, or shown as the text it is, and the
warehouse is left exactly as it was."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.resources
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import asdict
from html.parser import HTMLParser
from pathlib import Path

import dlt
import duckdb
import pytest
from dlt.pipeline.exceptions import PipelineStepFailed
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from pipelines.errors import failure_reason
from pipelines.modeling.build import build_models
from pipelines.report.notebook import write_report
from sandbox import RunningSandbox, SandboxConfig
from tests.support import (
    FAST,
    START_MS,
    SandboxFactory,
    admin,
    cli_env,
    client_for,
    describe,
    error_lines,
    load_args,
    message_lines,
    problem_lines,
    run_cli,
    served,
    start_cli,
)
from tests.support.browser import dom_after_load, offline_page
from tests.support.sandboxes import holding, wait_until_held
from tests.support.standin import StandIn

pytestmark = pytest.mark.slow  # loads and builds under attack

# Contact names that are markup to rich, a terminal or a log if anything reads them as such.
MARKUP = "[/]"
HIDDEN_LINK = "[link=https://evil.example]Click[/link] :warning:"
CONTROL = "bell\x07 clear\x1b[2J new\nline"
HOSTILE_NAMES = (MARKUP, HIDDEN_LINK, CONTROL)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclasses.dataclass
class Loaded:
    running: RunningSandbox
    warehouse: Path
    folder: Path


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    """A sandbox whose contacts carry hostile names, loaded into a warehouse by the CLI."""
    config = SandboxConfig(seed=18, shipments=40, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(config) as running, client_for(running) as api:
        for number, name in enumerate(HOSTILE_NAMES):
            made = api.post(
                "/contacts", json={"email": f"hostile{number}@example.com", "name": name}
            )
            assert made.status_code == 201, made.text
        folder = tmp_path_factory.mktemp("hostile")
        warehouse = folder / "signing.duckdb"
        result = run_cli(load_args(warehouse), cwd=folder, env=cli_env(running))
        assert result.returncode == 0, describe(result)
        yield Loaded(running, warehouse, folder)


def sql(loaded: Loaded, query: str, *options: str) -> tuple[int, str, str]:
    args = ["sql", "--duckdb", str(loaded.warehouse), *options, query]
    result = run_cli(args, cwd=loaded.folder, env=cli_env(None))
    return result.returncode, result.stdout, result.stderr


# ---------------------------------------------------------------------- sql


def test_a_model_selection_that_matches_nothing_is_a_usage_error(
    loaded: Loaded, tmp_path: Path
) -> None:
    """A typo in `--select` ran nothing and exited 0 (dbt only says it has nothing to do)."""
    warehouse = tmp_path / "signing.duckdb"
    shutil.copyfile(loaded.warehouse, warehouse)
    args = ["models", "--duckdb", str(warehouse), "--select", "nosuch_model"]
    result = run_cli(args, cwd=tmp_path, env=cli_env(None))
    assert result.returncode == 2, describe(result)
    (line,) = error_lines(result.stderr)
    assert "--select 'nosuch_model' matches no model, snapshot or test" in line


def hostile_queries(folder: Path) -> dict[str, str]:
    warehouse = folder / "signing.duckdb"
    return {
        "overwrite the warehouse": f"copy (select 'x' as x) to '{warehouse}' (format csv)",
        "write a file": f"copy (select 1 as x) to '{folder / 'out.csv'}' (format csv)",
        "attach another database": f"attach '{folder / 'other.duckdb'}' as other (read_only false)",
        "read a local file": "select * from read_csv('/etc/passwd')",
        "list local files": "select * from glob('/etc/*')",
        "two statements": "select 1; select 2",
        "turn access back on": "set enable_external_access = true",
        "create a table": "create table raw.planted as select 1 as x",
        "delete rows": "delete from raw.contacts",
        "install an extension": "install httpfs",
        "not sql": "this is not sql",
    }


def test_sql_refuses_anything_but_one_reading_statement_and_the_warehouse_stays_as_it_was(
    loaded: Loaded,
) -> None:
    other = loaded.folder / "other.duckdb"
    duckdb.connect(str(other)).close()
    before, other_before = digest(loaded.warehouse), digest(other)
    for what, query in hostile_queries(loaded.folder).items():
        code, stdout, stderr = sql(loaded, query)
        assert code == 1, (what, stdout, stderr)
        assert len(message_lines(stderr)) == 1, (what, stderr)
        assert "Traceback" not in stderr, what
        assert digest(loaded.warehouse) == before, what
        assert digest(other) == other_before, what
        assert not (loaded.folder / "out.csv").exists(), what
    code, stdout, stderr = sql(
        loaded, "select count(*) as contacts from raw.contacts", "--format", "json"
    )
    assert code == 0, stderr
    assert json.loads(stdout)["contacts"] == len(loaded.running.store.contacts.by_id)
    # JSON has no NaN nor infinity: a strict parser reads them as null (Python wrote `NaN`).
    query = "select 0/0 as nan, 1e308 * 10 as inf, 1.5::double as x"
    code, stdout, stderr = sql(loaded, query, "--format", "json")
    assert code == 0, stderr
    strict = json.loads(stdout, parse_constant=lambda name: pytest.fail(f"{name} in {stdout}"))
    assert strict == {"nan": None, "inf": None, "x": 1.5}


def test_sql_shows_markup_and_control_characters_from_the_data_as_text(loaded: Loaded) -> None:
    query = "select name from raw.contacts where email like 'hostile%' order by email"
    code, stdout, stderr = sql(loaded, query)

    assert code == 0, stderr
    assert MARKUP in stdout
    assert "[link=https://evil.example]Click[/link] :warning:" in stdout
    assert "⚠" not in stdout
    for raw, shown in (("\x1b", "\\x1b[2J"), ("\x07", "\\x07"), ("\n", "new\\nline")):
        assert raw not in stdout.replace("\n", "") or raw == "\n"
        assert shown in stdout
    as_csv = sql(loaded, query, "--format", "csv")[1]
    assert all(name.replace("\n", "") in as_csv.replace("\n", "") for name in HOSTILE_NAMES)


def test_status_reads_a_warehouse_whose_data_holds_markup(loaded: Loaded) -> None:
    args = ["status", "--duckdb", str(loaded.warehouse)]
    shown = run_cli(args, cwd=loaded.folder, env=cli_env(None))
    assert shown.returncode == 0, describe(shown)
    assert "Traceback" not in shown.stderr


# ---------------------------------------------------------------------- names and logs


def test_configured_workspace_names_with_markup_and_dots_load_and_print_as_written(
    tmp_path: Path,
) -> None:
    # Two workspaces: one key under two names is refused (they would be one workspace).
    config = SandboxConfig(seed=19, shipments=20, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(*config.workspaces(2)) as running:
        _names_with_markup_load_and_print_as_written(running, tmp_path)


def _names_with_markup_load_and_print_as_written(running: RunningSandbox, tmp_path: Path) -> None:
    markup_key, sales_key = running.api_keys
    (tmp_path / ".dlt").mkdir()
    (tmp_path / ".dlt" / "secrets.toml").write_text(
        f'[sources.signing]\nbase_url = "{running.base_url}"\n'
        f'[sources.signing.workspaces."{MARKUP}"]\napi_key = "{markup_key}"\n'
        f'[sources.signing.workspaces."eu.sales"]\napi_key = "{sales_key}"\n'
    )
    env = {
        **cli_env(None),
        **{f"SOURCES__SIGNING__{k.upper()}": str(v) for k, v in asdict(FAST).items()},
    }

    result = run_cli(load_args(tmp_path / "signing.duckdb"), cwd=tmp_path, env=env)

    assert result.returncode == 0, describe(result)
    assert f"Workspaces: {MARKUP} completed, eu.sales completed" in result.stderr, describe(result)
    assert "Traceback" not in result.stderr
    shown = run_cli(["load", "--help"], cwd=tmp_path, env=env)
    assert "([sources.signing.workspaces.<name>])" in " ".join(shown.stdout.split())


def test_a_workspace_name_with_a_line_break_cannot_start_a_line_of_status(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    """A configured name is the user's (or whoever wrote the secrets file): `status` prints
    it escaped, on its own line, in every place it is named."""
    running = make_sandbox(shipments=5, limits_enabled=False)
    forged = "2026-11-27T00:00:00Z ERROR forged line"
    (tmp_path / ".dlt").mkdir()
    (tmp_path / ".dlt" / "secrets.toml").write_text(
        f'[sources.signing]\nbase_url = "{running.base_url}"\n'
        f'[sources.signing.workspaces."acme\\n{forged}"]\napi_key = "{running.api_key}"\n'
    )
    env = {
        **cli_env(None),
        **{f"SOURCES__SIGNING__{k.upper()}": str(v) for k, v in asdict(FAST).items()},
    }
    warehouse = tmp_path / "signing.duckdb"
    assert run_cli(load_args(warehouse), cwd=tmp_path, env=env).returncode == 0

    shown = run_cli(["status", "--duckdb", str(warehouse)], cwd=tmp_path, env=env)

    assert shown.returncode == 0, describe(shown)
    lines = shown.stdout.splitlines()
    assert not [line for line in lines if line.startswith(forged)], shown.stdout
    assert [line for line in lines if f"acme\\n{forged}" in line], shown.stdout


def test_a_refusal_whose_message_forges_a_log_line_stays_one_escaped_line(tmp_path: Path) -> None:
    """The service's words reach the log through an error: they can neither start a line of
    their own nor drive the terminal."""
    forged = "nope\n2026-01-01T00:00:00Z INFO run=forged everything fine\x1b[2J"

    async def refuse(request: Request) -> JSONResponse:
        return JSONResponse({"error": {"code": "unauthorized", "message": forged}}, 401)

    with StandIn(Starlette(routes=[Route("/v1/{path:path}", refuse)])) as stand_in:
        env = {**cli_env(None), **signing_variables(stand_in.base_url, "sk_test_refused")}
        for log_format in ("text", "json"):
            result = run_cli(
                ["--log-format", log_format, *load_args(tmp_path / "signing.duckdb")],
                cwd=tmp_path,
                env=env,
            )
            assert result.returncode == 1, describe(result)
            assert "\x1b" not in result.stderr
            lines = message_lines(result.stderr)
            assert len(lines) == 1, describe(result)
            assert not any(line.startswith("2026-01-01T00:00:00Z INFO") for line in lines)
            if log_format == "json":
                assert "run=forged" in json.loads(lines[0])["message"]


def test_a_dlt_step_that_fails_is_named_with_its_cause(tmp_path: Path) -> None:
    """dlt's own message names only the step ("Pipeline execution failed at step=extract ...");
    the line a run records and prints names the cause too."""

    @dlt.resource(name="records")
    def failing() -> Iterator[dict[str, int]]:
        yield {"id": 1}
        raise ValueError("the 2nd record could not be read")

    pipeline = dlt.pipeline("failing", pipelines_dir=str(tmp_path), destination="duckdb")
    with pytest.raises(PipelineStepFailed) as failed:
        pipeline.extract(failing())

    reason = failure_reason(failed.value)
    assert reason == "the extract step failed: ValueError: the 2nd record could not be read"


def signing_variables(base_url: str, key: str) -> dict[str, str]:
    return {
        "SOURCES__SIGNING__BASE_URL": base_url,
        "SOURCES__SIGNING__API_KEY": key,
        **{f"SOURCES__SIGNING__{k.upper()}": str(v) for k, v in asdict(FAST).items()},
    }


# ---------------------------------------------------------------------- paths


def test_a_load_through_a_symbolic_link_is_refused_while_a_load_on_the_file_runs(
    make_sandbox: SandboxFactory, tmp_path: Path
) -> None:
    running = make_sandbox(shipments=150, limits_enabled=False)
    real = tmp_path / "data" / "signing.duckdb"
    real.parent.mkdir()
    link = tmp_path / "link.duckdb"
    link.symlink_to(real)
    # The warehouse exists (a first load publishes it only when it ends), with a week to load.
    made = run_cli(load_args(real), cwd=tmp_path, env=cli_env(running))
    assert made.returncode == 0, describe(made)
    admin(running, "POST", "/advance", {"days": 7})
    workspace_id = running.store.workspace.id
    first = None
    try:
        # The first load reads on until the second has been turned away (its 4th request waits).
        with holding(running, workspace_id, after=3):
            first = start_cli(load_args(real), cwd=tmp_path, env=cli_env(running))
            wait_until_held(
                running, workspace_id, lambda: first is not None and first.poll() is None
            )
            impatient = {**cli_env(running), "SIGNING_ETL_LOCK_WAIT_SECONDS": "0"}
            second = run_cli(load_args(link), cwd=tmp_path, env=impatient, timeout=60)
            assert first.poll() is None, "the first load ended before the second started"
    finally:
        if first is not None:
            _, stderr = first.communicate(timeout=300)

    assert second.returncode == 75, describe(second)  # busy: a stop, tried again later
    (line,) = problem_lines(second.stderr)
    assert "another load is running" in line
    assert f"pid {first.pid} since" in line
    assert str(real) in line
    assert first.returncode == 0, stderr


@pytest.fixture(scope="module")
def unasked() -> Iterator[RunningSandbox]:
    """A sandbox no refused load may ask anything of, for the refused paths' cases."""
    config = SandboxConfig(shipments=5, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(config) as running:
        yield running


@pytest.mark.parametrize("kind", ["dangling link", "device", "folder", "quote in the name"])
def test_a_path_that_is_no_warehouse_file_is_refused_in_one_line_before_anything_is_written(
    unasked: RunningSandbox, tmp_path: Path, kind: str
) -> None:
    running = unasked
    if kind == "dangling link":
        path = tmp_path / "gone.duckdb"
        path.symlink_to(tmp_path / "nowhere" / "signing.duckdb")
    elif kind == "device":
        path = Path(os.devnull)
    elif kind == "folder":
        path = tmp_path / "folder.duckdb"
        path.mkdir()
    else:
        path = tmp_path / "it's.duckdb"
    before = sorted(p.name for p in tmp_path.iterdir())
    result = run_cli(load_args(path), cwd=tmp_path, env=cli_env(running))

    assert result.returncode == 1, describe(result)
    assert len(message_lines(result.stderr)) == 1, describe(result)
    assert "Traceback" not in result.stderr
    assert served(running) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not Path(os.devnull).with_name(f".{Path(os.devnull).name}.lock").exists()


# ---------------------------------------------------------------------- the report


def _page_scripts() -> list[str]:
    """The report's own scripts: the explorer and the plotly wheel's bundle, as shipped."""
    plotly = importlib.resources.files("plotly") / "package_data" / "plotly.min.js"
    explorer = (
        Path(__file__).resolve().parents[2] / "pipelines" / "report" / "assets" / "explorer.js"
    )
    return [plotly.read_text(encoding="utf-8"), explorer.read_text(encoding="utf-8")]


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Elements(HTMLParser):
    """The elements, attributes, title and text of a page, as an HTML parser reads them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attributes: dict[str, list[str]] = {}
        self.text = ""
        self.title = ""
        self._in_title = False
        self._in_script = False
        self.scripts: list[tuple[dict[str, str], str]] = []  # (attributes, body) of each

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self._in_title = tag == "title"
        if tag == "script":
            self.scripts.append(({name: value or "" for name, value in attrs}, ""))
            self._in_script = True
            return  # the page's own script elements: their attributes are checked apart
        for name, value in attrs:
            self.attributes.setdefault(name, []).append(value or "")

    def handle_endtag(self, tag: str) -> None:
        self._in_title = False
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            attributes, body = self.scripts[-1]
            self.scripts[-1] = (attributes, body + data)
            return
        self.text += data
        if self._in_title:
            self.title += data


SCRIPTED_NAME = (
    "<img src=x onerror=\"document.title='pwned'\"> **bold** `tick` "
    "<script>document.title='scripted'</script> [link](javascript:alert(1))"
)


def test_a_workspace_name_with_html_stays_text_in_the_report(tmp_path: Path) -> None:
    """A workspace's name is set by any admin of that workspace and reaches the report's page;
    opened in a browser, it is shown as the text it is and runs nothing."""
    configs = SandboxConfig(seed=21, shipments=60, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(*configs.workspaces(2)) as running:
        for store in running.stores:
            store.workspace = dataclasses.replace(store.workspace, name=SCRIPTED_NAME)
        warehouse = tmp_path / "signing.duckdb"
        for key in running.api_keys:
            loaded = run_cli(load_args(warehouse), cwd=tmp_path, env=cli_env(running, key=key))
            assert loaded.returncode == 0, describe(loaded)
    assert build_models(warehouse).success
    page = write_report(warehouse, tmp_path / "reports")

    html = page.read_text(encoding="utf-8")
    # The page's own scripts are the only ones: Plotly and the explorer, allowed by their hashes,
    # and the data as JSON, which no browser runs; the name is in none of them as markup.
    own = {_sha256(script) for script in _page_scripts()}
    for document in (html, dom_after_load(page)):
        elements = Elements()
        elements.feed(document)
        assert elements.scripts, "the explorer's scripts are missing"
        for attributes, body in elements.scripts:
            assert "src" not in attributes
            if attributes.get("type") == "application/json":
                assert "<" not in body  # escaped: the data cannot end its element
            else:
                assert _sha256(body) in own
        assert [src for src in elements.attributes.get("src", []) if src == "x"] == []
        assert not [name for name in elements.attributes if name.startswith("on")]
        links = elements.attributes.get("href", [])
        assert not [h for h in links if h.strip().lower().startswith("javascript:")]
        assert elements.title not in ("pwned", "scripted")
        if document is html:  # before the scripts ran, the name is data, not text yet
            (data,) = [json.loads(b) for a, b in elements.scripts if a.get("type")]
            assert [ws["name"] for ws in data["workspaces"]] == [SCRIPTED_NAME] * 2
        else:
            assert "<img src=x onerror=" in elements.text  # the name is there, as text
    with offline_page(page) as (opened, refused):
        assert opened.title() not in ("pwned", "scripted")
        assert opened.locator("#workspace option").count() == 2
        for option in opened.locator("#workspace option").all_text_contents():
            assert option.startswith("<img src=x onerror=")  # shown as the text it is
        assert opened.locator("#explorer img, #explorer [onerror], #explorer a[href]").count() == 0
    assert refused == []
