"""How fast the sandbox is: time and memory to generate its data, and the latency of a
200-shipment page served over loopback HTTP.

    uv run python -m benchmarks.sandbox_bench --shipments 200000 --pages 300
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import httpx

from sandbox import RunningSandbox, SandboxConfig, Store

START_MS = 1_767_225_600_000


def current_rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


def measure_generation(shipments: int) -> tuple[float, float]:
    """Seconds to generate `shipments` shipments with their world, and the MiB the data holds
    (resident memory after minus before; tracing allocations would slow generation 7x)."""
    before = current_rss_mib()
    started = time.perf_counter()
    store = Store(SandboxConfig(seed=1, shipments=shipments, start_ms=START_MS))
    seconds = time.perf_counter() - started
    held = current_rss_mib() - before
    del store
    return seconds, held


def measure_pages(shipments: int, pages: int) -> list[float]:
    """Milliseconds per GET /shipments?limit=200 at offsets spread over the whole list."""
    config = SandboxConfig(seed=1, shipments=shipments, start_ms=START_MS, limits_enabled=False)
    latencies: list[float] = []
    with (
        RunningSandbox(config) as running,
        httpx.Client(
            base_url=running.base_url, headers={"Authorization": f"Bearer {running.api_key}"}
        ) as client,
    ):
        total = client.get("/shipments", params={"include_archived": "true", "limit": 1}).json()[
            "total"
        ]
        for number in range(pages):
            offset = (number * 7919 * 200) % max(1, total - 200)
            started = time.perf_counter()
            response = client.get(
                "/shipments", params={"include_archived": "true", "limit": 200, "offset": offset}
            )
            response.raise_for_status()
            assert len(response.json()["data"]) == 200
            latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shipments", type=int, default=200_000)
    parser.add_argument("--pages", type=int, default=300)
    args = parser.parse_args()
    seconds, held_mib = measure_generation(args.shipments)
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"generate {args.shipments:,} shipments: {seconds:.1f} s, "
        f"data holds {held_mib:,.0f} MiB resident, process peak RSS {rss_mib:,.0f} MiB"
    )
    latencies = sorted(measure_pages(args.shipments, args.pages))
    p50 = statistics.median(latencies)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    print(
        f"GET /shipments?limit=200 over loopback, {len(latencies)} pages: "
        f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {latencies[-1]:.1f} ms"
    )


if __name__ == "__main__":
    main()
