"""How fast each kind of stop ends a load: the time from the event to the process's exit.

For every stop a scheduler can meet, a `signing-etl load --no-models` subprocess runs against a
sandbox on loopback (served by this process), the event happens, and the clock runs until the
process exits. Printed per stop: the exit code, seconds from the event to the exit, and requests
the sandbox answered after the event.

    uv run python -m benchmarks.stops_bench
    uv run python -m benchmarks.stops_bench --shipments 2000 --give-up-after 120

Events: SIGINT, SIGTERM, the request budget (`--max-requests`; its event is the last request
of the budget), the daily limit (its event is the first 429 with scope `daily`), a key revoked
through the admin API, and the sandbox stopped (given up on after `--give-up-after` seconds).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from sandbox import RunningSandbox, SandboxConfig

START_MS = 1_767_225_600_000
RATE = 40  # requests per second: slow enough that every event lands in the middle of the load


def served(running: RunningSandbox) -> int:
    return sandbox_count(running, "requests_served")


def sandbox_count(running: RunningSandbox, name: str) -> int:
    """A counter of the sandbox's state: `requests_served`, or `requests_refused` (429s)."""
    body = httpx.get(f"{running.root_url}/_sandbox/state", timeout=30).json()
    return int(body[name])


def start_load(
    running: RunningSandbox,
    folder: Path,
    key: str,
    *extra: str,
    give_up_after_seconds: float | None = None,
) -> subprocess.Popen[str]:
    """`signing-etl load` of the sandbox in a process of its own, configured as a user does."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOURCES__")}
    env.update(
        {
            "SOURCES__SIGNING__API_KEY": key,
            "SOURCES__SIGNING__BASE_URL": running.base_url,
            "SOURCES__SIGNING__REQUESTS_PER_SECOND": str(RATE),
            "SOURCES__SIGNING__BURST": "5",
        }
    )
    if give_up_after_seconds is not None:
        env["SOURCES__SIGNING__GIVE_UP_AFTER_SECONDS"] = str(give_up_after_seconds)
    warehouse = folder / "signing.duckdb"
    args = ["load", "--duckdb", str(warehouse), "--no-models", *extra]
    return subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_until(condition: Callable[[], bool], process: subprocess.Popen[str]) -> None:
    while not condition():
        if process.poll() is not None:
            raise RuntimeError("the load ended before the event")
        time.sleep(0.01)


def measure(
    label: str,
    running: RunningSandbox,
    process: subprocess.Popen[str],
    event: Callable[[], float],
    *,
    serving: bool = True,
) -> None:
    """Let `event` happen (it returns the moment it happened), then time the exit; `serving`:
    the sandbox still answers, so the requests it answered after the event can be counted."""
    happened = event()
    after = served(running) if serving else 0
    _, stderr = process.communicate(timeout=900)
    seconds = time.monotonic() - happened
    line = next((x for x in stderr.splitlines() if " s  " not in x), "").strip()
    answered = f"{served(running) - after:>3}" if serving else "  -"
    print(
        f"{label:<28} exit {process.returncode:>3}  {seconds:6.2f} s from event to exit  "
        f"{answered} requests after it | {line[:110]}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shipments", type=int, default=600)
    parser.add_argument("--give-up-after", type=float, default=120.0)
    args = parser.parse_args()
    config = SandboxConfig(
        seed=3, shipments=args.shipments, start_ms=START_MS, limits_enabled=False
    )
    with tempfile.TemporaryDirectory() as scratch, RunningSandbox(config) as running:
        base = Path(scratch)
        print(
            f"{args.shipments:,} shipments; the load paced at {RATE}/s; events after 100 requests"
        )

        def after_requests(process: subprocess.Popen[str], count: int) -> None:
            start = served(running)
            wait_until(lambda: served(running) - start >= count, process)

        for name, number in (("SIGINT", signal.SIGINT), ("SIGTERM", signal.SIGTERM)):
            folder = base / name
            process = start_load(running, folder, running.api_key)

            def send(process: subprocess.Popen[str] = process, number: int = number) -> float:
                after_requests(process, 100)
                process.send_signal(number)
                return time.monotonic()

            measure(name, running, process, send)

        budget = base / "budget"
        start = served(running)
        process = start_load(running, budget, running.api_key, "--max-requests", "100")

        def budget_spent() -> float:
            wait_until(lambda: served(running) - start >= 100, process)
            return time.monotonic()

        measure("--max-requests 100", running, process, budget_spent)

        key = httpx.post(
            f"{running.root_url}/_sandbox/keys", json={"name": "bench", "scopes": ["read"]}
        ).json()["key"]
        process = start_load(running, base / "revoked", key)

        def revoke() -> float:
            after_requests(process, 100)
            httpx.post(f"{running.root_url}/_sandbox/keys/revoke", json={"key": key})
            return time.monotonic()

        measure("key revoked", running, process, revoke)

        httpx.patch(
            f"{running.root_url}/_sandbox/config",
            json={
                "limits_enabled": True,
                "requests_per_second": 1000,
                "burst": 1000,
                "requests_per_minute": 100_000,
                "daily_requests": served(running) + 100,
            },
        ).raise_for_status()
        refused = sandbox_count(running, "requests_refused")
        process = start_load(running, base / "daily", running.api_key)

        def daily_limit() -> float:  # the first 429 of the daily cap
            wait_until(lambda: sandbox_count(running, "requests_refused") > refused, process)
            return time.monotonic()

        measure("daily limit", running, process, daily_limit)
        httpx.patch(
            f"{running.root_url}/_sandbox/config",
            json={"limits_enabled": False, "daily_requests": None},
        ).raise_for_status()

        process = start_load(
            running, base / "gone", running.api_key, give_up_after_seconds=args.give_up_after
        )

        def service_gone() -> float:
            after_requests(process, 100)
            running.stop()
            return time.monotonic()

        label = f"service gone (give up {args.give_up_after:.0f} s)"
        measure(label, running, process, service_gone, serving=False)
        running.start()


if __name__ == "__main__":
    main()
