"""The suite's fixtures: sandboxes served over loopback HTTP, an API client, a PostgreSQL server."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandbox import RunningSandbox, SandboxConfig
from tests.support import START_MS, SandboxFactory, client_for, cpu_log
from tests.support.cli import SUITE_CADENCE
from tests.support.destinations import DESTINATIONS, WarehouseUnderTest, warehouse_under_test
from tests.support.ordering import longest_first, read_module_seconds
from tests.support.postgres import PostgresServer, in_ci, missing_server, running_postgres
from tests.support.redis import RedisServer, missing_redis, running_redis


def _isolated_from_the_users_configuration() -> None:
    """dlt reads `.dlt/` of the folder it runs in and of the user's home: a checkout whose
    `.dlt/secrets.toml` names workspaces (as the README tells users to write) must not change
    what the tests load. Each test process gets empty folders of its own instead; the CLI's
    subprocesses already run in a test's own folder without any `DLT_*` variable."""
    empty = tempfile.mkdtemp(prefix="signing-tests-dlt-")
    atexit.register(shutil.rmtree, empty, True)
    os.environ["DLT_PROJECT_DIR"] = empty
    os.environ["DLT_DATA_DIR"] = os.path.join(empty, "global")
    os.environ["XDG_STATE_HOME"] = os.path.join(empty, "state")  # the journals' fallback
    os.environ["XDG_CACHE_HOME"] = os.path.join(empty, "cache")  # dbt's kept parse, per process
    os.environ.update(SUITE_CADENCE)


_isolated_from_the_users_configuration()


def pytest_configure(config: pytest.Config) -> None:
    """Each test phase's CPU logged when `SIGNING_TEST_CPU_LOG` is set (`benchmarks.suite_cpu`)."""
    cpu_log.register(config)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` (the suite's default): one worker more than the cores this process may use.
    A worker waits on HTTP, a CLI process or a server for about a fifth of its time, so one
    worker per core leaves cores idle; on two cores three workers took the whole suite from
    34 to 32 minutes (docs/development.md). `PYTEST_XDIST_AUTO_NUM_WORKERS` still decides
    when it is set, as xdist documents."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook reads it
    usable = getattr(os, "sched_getaffinity", None)  # Linux; elsewhere every core counts
    cores = len(usable(0)) if usable else os.cpu_count() or 1
    return cores + 1


@pytest.fixture(scope="session")
def shared_sandbox() -> Iterator[RunningSandbox]:
    """One read-mostly sandbox for the suite, limits off; tests that change data or limits
    start their own with `make_sandbox`."""
    config = SandboxConfig(seed=7, shipments=1_500, start_ms=START_MS, limits_enabled=False)
    with RunningSandbox(config) as running:
        yield running


@pytest.fixture
def make_sandbox() -> Iterator[SandboxFactory]:
    """Start sandboxes with any `SandboxConfig` settings; all are stopped after the test."""
    started: list[RunningSandbox] = []

    def start(**settings: Any) -> RunningSandbox:
        settings.setdefault("start_ms", START_MS)
        settings.setdefault("shipments", 300)
        running = RunningSandbox(SandboxConfig(**settings)).start()
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()


@pytest.fixture
def api(shared_sandbox: RunningSandbox) -> Iterator[httpx.Client]:
    """A client of the shared sandbox with its main key."""
    with client_for(shared_sandbox) as client:
        yield client


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules in the order they should start, the longest first (`tests/support/ordering.py`;
    xdist keeps it: `--no-loadscope-reorder`). With no PostgreSQL server installed, the tests
    that use `postgres_server` are skipped with one line (per file) saying how to install it;
    in CI they run and fail instead."""
    items[:] = longest_first(items, read_module_seconds())
    needing = [
        item
        for item in items
        if "postgres_server" in getattr(item, "fixturenames", ())
        or "postgres" in getattr(getattr(item, "callspec", None), "id", "").split("-")
    ]
    if not needing or in_ci():
        return
    reason = missing_server()
    if reason is not None:
        for item in needing:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL cluster of its own for the session, removed afterwards; each test makes its
    database with `postgres_server.create_database()`. With no server installed the tests are
    skipped (see above), or fail with one line in CI (CI always has one)."""
    reason = missing_server()
    if reason is not None:
        if in_ci():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    with running_postgres() as server:
        yield server


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A Redis server of its own for the session (the Celery broker), removed afterwards;
    skipped with one line when none is installed, failed in CI (CI always has one)."""
    reason = missing_redis()
    if reason is not None:
        if in_ci():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    with running_redis() as server:
        yield server


@pytest.fixture(params=DESTINATIONS)
def each_destination(request: pytest.FixtureRequest, tmp_path: Path) -> WarehouseUnderTest:
    """An empty warehouse on each backend in turn: a DuckDB file, then a new database of the
    session's PostgreSQL server (started only by the tests that ask for it)."""
    return warehouse_under_test(request.param, tmp_path, request)
