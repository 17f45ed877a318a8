"""Adaptive pacing against a rate-limited server and a server whose latency rises with load (issue 15,
acceptance 3): the default run (every endpoint paces itself, items in flight chosen by the runner) beside
fixed concurrencies of 8 and 256 items with the pacing off (`?adaptive=0`).

Each scenario runs the one-call `single` protocol over N items against the mock server in its own process:
- rate:  `--rpm` requests a minute (a one-second burst), 429 with Retry-After beyond it; achievable
         throughput = rpm / 60 calls a second.
- load:  `--capacity` requests served at once at `--latency` each, the rest queued (latency rises with
         load), 503 beyond `--queue-limit` queued; achievable = capacity / latency calls a second.
Reported per run: calls/s and its share of the achievable, the share of requests the server refused
(429 or 503), the median and p99 latency of an item, and the items that failed. Goal for the default run:
>= 90% of the achievable with < 2% refused.

    .venv/bin/python bench/bench_adaptive.py [--rate-items 300] [--load-items 2000] [--rpm 200] [--capacity 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from medpanel.cases import Case
from medpanel.models import Runtime
from medpanel.models.retry import RetryPolicy
from medpanel.runs.runner import RunConfig, run_benchmark
from medpanel.runs.store import Store
from medpanel.testing.process import mock_server_process


def cases(n: int, tag: str) -> list[Case]:
    return [Case(id=f"{tag}{i}", question=f"Question {tag} {i}: which fits?", options={"A": "yes", "B": "no"}, reference={"answer": "A"})
            for i in range(n)]


async def one_run(base_url: str, n: int, tag: str, concurrency: int | None, adaptive: bool, db: Path) -> dict:
    store = Store(db)
    # Generous retries, as a patient user would set them against a rate-limited API.
    runtime = Runtime(cache=store, timeout_s=120, retry=RetryPolicy(max_attempts=20, base_delay_s=0.5, max_delay_s=30))
    spec = f"openai:mock-model@{base_url}" + ("" if adaptive else "?adaptive=0")
    config = RunConfig(dataset="synthetic", protocol="single", models=[spec], concurrency=concurrency)
    started = time.perf_counter()
    result = await run_benchmark(store, config, runtime, cases=cases(n, tag))
    wall = time.perf_counter() - started
    items = store.items(result.run_id)
    seconds = sorted(i["finished_at"] - i["started_at"] for i in items if i.get("finished_at") and i.get("started_at"))
    store.close()
    return {"wall_s": round(wall, 2), "done": result.progress.done, "failed": result.progress.failed,
            "item_s_p50": round(statistics.median(seconds), 3) if seconds else None,
            "item_s_p99": round(seconds[min(len(seconds) - 1, int(0.99 * len(seconds)))], 3) if seconds else None}


def scenario(name: str, server_args: list[str], achievable: float, n: int, tmp: Path) -> list[dict]:
    rows = []
    for label, concurrency, adaptive in (("default (adaptive)", None, True), ("fixed 8", 8, False), ("fixed 256", 256, False)):
        with mock_server_process(*server_args, "--reply", "choice") as mock:
            row = asyncio.run(one_run(mock.base_url, n, f"{name}-{concurrency}", concurrency, adaptive, tmp / f"{name}-{label[:5]}.db"))
            stats = mock.stats()
        refused = stats["errors"].get("429", 0) + stats["errors"].get("503", 0)
        calls_per_s = row["done"] / row["wall_s"]
        row |= {"scenario": name, "run": label, "requests": stats["requests"], "refused": refused,
                "refused_share": round(refused / max(1, stats["requests"]), 4), "calls_per_s": round(calls_per_s, 2),
                "achievable_per_s": round(achievable, 2), "share_of_achievable": round(calls_per_s / achievable, 3),
                "peak_in_flight_at_server": stats.get("peak_in_flight")}
        rows.append(row)
        print(f"{name:5} {label:19} {row['done']:>5} done {row['failed']:>3} failed  {calls_per_s:7.2f} calls/s = "
              f"{calls_per_s / achievable:5.1%} of {achievable:g}  refused {refused:>5} ({row['refused_share']:.2%})  "
              f"item p50 {row['item_s_p50']}s p99 {row['item_s_p99']}s  peak {row['peak_in_flight_at_server']} at the server", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rpm", type=float, default=200.0)
    ap.add_argument("--rate-latency", type=float, default=0.5)
    ap.add_argument("--rate-items", type=int, default=300, help="items of the rate-limit scenario (at 200 rpm, 300 take 90 s)")
    ap.add_argument("--capacity", type=int, default=32)
    ap.add_argument("--queue-limit", type=int, default=64)
    ap.add_argument("--latency", type=float, default=0.5)
    ap.add_argument("--load-items", type=int, default=2000)
    ap.add_argument("--only", choices=["rate", "load"], default=None)
    args = ap.parse_args()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "rate"):
            rows += scenario("rate", ["--latency", str(args.rate_latency), "--rpm", str(args.rpm), "--rate-burst", "1"],
                             args.rpm / 60, args.rate_items, Path(tmp))
        if args.only in (None, "load"):
            rows += scenario("load", ["--latency", str(args.latency), "--capacity", str(args.capacity), "--queue-limit", str(args.queue_limit)],
                             args.capacity / args.latency, args.load_items, Path(tmp))
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "adaptive.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
