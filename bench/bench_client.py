"""The client's own cost (issue 15, acceptance 2): 10,000 model calls through the runner against the mock
server in its own process, and what the mock alone can take.

1. The mock's capacity: a bare aiohttp loop (no medpanel) keeps `--in-flight` requests open at latency 0
   for `--seconds`: requests/s the mock process answers.
2. medpanel at latency 0: N one-call items through `run_benchmark` (the `single` protocol, the store and
   call cache on, the endpoint's gate on), `--in-flight` items at once: calls/s, the ratio to (1), and the
   client's CPU seconds per call (calls/s per core of client capacity).
3. medpanel at `--latency` (LLM calls take seconds): the same N calls, twice on one mock: *cold* (the
   endpoint's gate new, as in a new `medpanel bench` process: the window starts at 4 and slow-starts, so the
   first calls wait in the client's queue) and *warm* (the gate as the cold run left it: what the harness
   itself adds). Per call, the latency the client saw (its wait at the gate included) minus the mock's
   (p50, p99), and the peak resident memory of the process so far (the warm figure is the peak of both).

    .venv/bin/python bench/bench_client.py [--calls 10000] [--in-flight 256] [--latency 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp

from medpanel import event_loop
from medpanel.cases import Case
from medpanel.models import Runtime
from medpanel.runs.runner import RunConfig, run_benchmark
from medpanel.runs.store import Store
from medpanel.testing.process import mock_server_process


async def mock_capacity(base_url: str, in_flight: int, seconds: float) -> float:
    body = json.dumps({"model": "mock-model", "messages": [{"role": "user", "content": "Question: which?\nA. yes\nB. no"}], "max_tokens": 16})
    done = 0
    stop = time.perf_counter() + seconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async def loop() -> None:
            nonlocal done
            while time.perf_counter() < stop:
                async with session.post(base_url + "/chat/completions", data=body, headers={"Content-Type": "application/json"}) as r:
                    await r.read()
                done += 1

        started = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(in_flight)))
        return done / (time.perf_counter() - started)


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def through_runner(base_url: str, n: int, in_flight: int, db: Path, tag: str) -> dict:
    store = Store(db)
    runtime = Runtime(cache=store, timeout_s=120)
    config = RunConfig(dataset="synthetic", protocol="single", models=[f"openai:mock-model@{base_url}"], concurrency=in_flight)
    cases = [Case(id=f"{tag}{i}", question=f"Question {tag} {i}: which fits?", options={"A": "yes", "B": "no"}, reference={"answer": "A"})
             for i in range(n)]
    cpu0, started = cpu_s(), time.perf_counter()
    result = await run_benchmark(store, config, runtime, cases=cases)
    wall, cpu = time.perf_counter() - started, cpu_s() - cpu0
    calls = store._query("SELECT record FROM calls")  # noqa: SLF001 (a benchmark reads the raw cache)
    latencies = sorted(json.loads(r["record"])["latency_s"] for r in calls)
    store.close()
    assert result.progress.done == n, result
    return {"calls": len(latencies), "wall_s": round(wall, 2), "calls_per_s": round(len(latencies) / wall, 1),
            "cpu_s": round(cpu, 2), "cpu_ms_per_call": round(1000 * cpu / len(latencies), 3),
            "calls_per_cpu_s": round(len(latencies) / cpu, 1), "latencies": latencies}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=10_000)
    ap.add_argument("--in-flight", type=int, default=256)
    ap.add_argument("--latency", type=float, default=0.5)
    ap.add_argument("--seconds", type=float, default=5.0, help="how long the mock's capacity is measured")
    args = ap.parse_args()
    report: dict = {"args": vars(args)}
    with tempfile.TemporaryDirectory() as tmp:
        with mock_server_process("--reply", "choice") as mock:
            capacity = asyncio.run(mock_capacity(mock.base_url, args.in_flight, args.seconds))
            print(f"mock alone: {capacity:.0f} requests/s at {args.in_flight} in flight, latency 0", flush=True)
            fast = event_loop.run(through_runner(mock.base_url, args.calls, args.in_flight, Path(tmp) / "fast.db", "f"))
        fast.pop("latencies")
        report["mock_capacity_per_s"] = round(capacity, 1)
        report["latency_0"] = fast | {"share_of_mock_capacity": round(fast["calls_per_s"] / capacity, 3)}
        print(f"medpanel, latency 0: {fast['calls']} calls in {fast['wall_s']} s = {fast['calls_per_s']} calls/s "
              f"({fast['calls_per_s'] / capacity:.0%} of the mock alone); {fast['cpu_ms_per_call']} ms of client CPU a call "
              f"= {fast['calls_per_cpu_s']} calls/s per core", flush=True)
        with mock_server_process("--reply", "choice", "--latency", str(args.latency)) as mock:
            for phase in ("cold", "warm"):  # one process, one mock: the warm run finds the gate the cold one left
                slow = event_loop.run(through_runner(mock.base_url, args.calls, args.in_flight, Path(tmp) / f"slow-{phase}.db", f"s{phase}"))
                added = [max(0.0, x - args.latency) for x in slow.pop("latencies")]
                peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                r = report[f"latency_{args.latency:g}_{phase}"] = slow | {
                    "added_ms_p50": round(1000 * statistics.median(added), 2),
                    "added_ms_p99": round(1000 * added[min(len(added) - 1, int(0.99 * len(added)))], 2),
                    "peak_rss_mb": round(peak_mb, 1)}
                print(f"medpanel, latency {args.latency:g} s, {phase}: {slow['calls']} calls in {slow['wall_s']} s = {slow['calls_per_s']} calls/s; "
                      f"added latency per call p50 {r['added_ms_p50']} ms, p99 {r['added_ms_p99']} ms; peak memory {peak_mb:.0f} MB", flush=True)
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "client.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
