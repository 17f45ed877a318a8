"""Orchestration overhead: how close the runner gets to the critical-path ideal, and a rerun from cache.

N items x a protocol of S sequential stages of W parallel calls, against the mock OpenAI server in its
own process at a fixed latency L. With concurrency C the ideal wall time is ceil(N / C) * S * L;
efficiency = ideal / measured. Each repeat runs three times on new items:
- cold: the endpoint's gate forgotten first, as in a new `medpanel bench` process: the window starts at 4
  and slow-starts, which costs a few round trips;
- warm: the gate as the cold run left it (a second run in one process, or a long run past its start):
  what the orchestration itself costs;
- restart: a new process's gate on the store the cold run used, which starts from what the cold run kept
  there (models/gate_memory.py): what a user's second and later runs against an endpoint pay to start.
Then the warm run again on the same store: every call should come from the cache (goal: 0 requests reach
the server).

Two yardsticks beside the ideal say where the rest of the time goes:
- raw: the same workload (N items, C in flight, S stages of W calls each) sent by the leanest client there is
  here, bare POSTs through medpanel's HTTP transport (models/chat_http.py, models/http1.py) with no protocol, gate, cache or
  store, on a fresh event loop with new connections of its own as a new process has, all its items started
  at once (on 2026-12-07 that was faster for it than the runner's ramp: 0.957 against 0.949 of the ideal at
  256). It never holds a call back (no gate), and its prompts lack the earlier stages' text that the
  harness's carry (a few dozen bytes). Its shortfall from the ideal is what the mock server and this machine
  cost so lean a client; medpanel's efficiency over raw's is what the harness costs.
- waves: with N = C x batches the items run in `batches` waves. The first wave starts over the runner's ramp
  (a millisecond an item, runs/pool.py) on new connections; later items start as earlier ones end. The warm
  run's first-wave and later-wave item times (median, from the store's started_at and finished_at) tell the
  start from the steady state a long run lives in.
Client CPU per call is the process's CPU time (every thread) over the calls made; the mock server's CPU per
call is read the same way from its process, since the two share this machine's cores.

    .venv/bin/python bench/bench_orchestration.py [--latency 0.5] [--stages 3] [--width 3] [--repeats 3] [--no-cache] [--fixed] [--no-ramp]

--no-cache runs without the call cache and spend ledger (items are still stored), to show what that path
costs the client; the cached rerun is then skipped, and the figures go to bench/results/orchestration-no-cache.json.
--fixed turns the endpoint's gate off (`?adaptive=0`: every call goes at once, as before the gate existed), so
cold and warm differ only by what a first run in a process costs besides the slow start; the figures go to
bench/results/orchestration-fixed.json.
--no-ramp starts every item of the first wave at once (the runner's ITEM_START_GAP_S set to 0), as the
runner did before its ramp; the figures go to bench/results/orchestration-no-ramp.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

from medpanel import event_loop
from medpanel.cases import Case
from medpanel.models import Runtime
from medpanel.models.adaptive import reset_gates
from medpanel.models.endpoints import reset_pools
from medpanel.models.chat_http import ChatTransport
from medpanel.runs import runner
from medpanel.runs.runner import RunConfig, build_panel, run_benchmark
from medpanel.runs.store import Store
from medpanel.testing.process import mock_server_process
from medpanel.testing.workloads import STAGED


async def one_run(store: Store, base_url: str, cases: list[Case], width: int, stages: int, concurrency: int, run_id: str,
                  cache: bool = True, fixed: bool = False) -> float:
    runtime = Runtime(cache=store if cache else None, timeout_s=60)
    specs = [f"openai:mock-model@{base_url}" + ("?adaptive=0" if fixed else "")] * width
    config = RunConfig(dataset="synthetic", protocol="staged", models=specs, concurrency=concurrency, settings={"stages": stages})
    panel = build_panel(specs, runtime)
    started = time.perf_counter()
    result = await run_benchmark(store, config, runtime, run_id=run_id, protocol=STAGED, panel=panel, cases=cases)
    wall = time.perf_counter() - started
    assert result.progress.done == len(cases), result
    return wall


async def raw_run(base_url: str, n: int, width: int, stages: int, concurrency: int, tag: str) -> float:
    """The workload with no harness: C workers, each taking the next item and sending its stages of W bare POSTs
    (ChatTransport.post: the request encoded, sent and its answer decoded, an HTTP error raised; nothing else)."""
    transport = ChatTransport(base_url, "not-needed")
    pending = iter(range(n))

    async def post(item: int, stage: int, seat: int) -> None:
        await transport.post({"model": "mock-model", "max_tokens": 16, "temperature": 0.0,
                              "messages": [{"role": "user", "content": f"item {item} {tag}\nstage {stage} seat {seat}"}]})

    async def worker() -> None:
        for item in pending:
            for stage in range(stages):
                await asyncio.gather(*(post(item, stage, seat) for seat in range(width)))

    started = time.perf_counter()
    workers = [asyncio.ensure_future(worker()) for _ in range(concurrency)]  # all at once: its per-call cost is too small to need a ramp
    try:
        await asyncio.gather(*workers)
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        await transport.close()
    return time.perf_counter() - started


def wave_medians(store: Store, run_id: str, concurrency: int) -> tuple[float, float | None]:
    """Median item time (s) of the first wave (the C items the runner starts first) and of the items after it
    (None when there are none: one wave)."""
    items = sorted(store.items(run_id), key=lambda i: i["started_at"])
    took = [i["finished_at"] - i["started_at"] for i in items]
    return statistics.median(took[:concurrency]), statistics.median(took[concurrency:]) if took[concurrency:] else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--latency", type=float, default=2.0, help="seconds per call at the mock server (LLM calls take seconds)")
    ap.add_argument("--stages", type=int, default=3)
    ap.add_argument("--width", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--batches", type=int, default=4, help="items per concurrency slot (N = C x batches)")
    ap.add_argument("--no-cache", action="store_true", help="no call cache or ledger: what that path costs the client")
    ap.add_argument("--fixed", action="store_true", help="the endpoint's gate off (?adaptive=0): no slow start")
    ap.add_argument("--no-ramp", action="store_true", help="the first wave's items all started at once (no start ramp)")
    args = ap.parse_args()
    if args.no_ramp:
        runner.ITEM_START_GAP_S = 0.0

    rows = []
    with mock_server_process("--latency", str(args.latency), "--reply", "choice") as mock, tempfile.TemporaryDirectory() as tmp:
        for c in args.concurrency:
            n = c * args.batches
            ideal = math.ceil(n / c) * args.stages * args.latency
            calls = n * args.stages * args.width
            cold, warm, restart, cpu_ms, server_ms, cache_walls, cache_requests = [], [], [], [], [], [], []
            raw, first_wave, later_waves = [], [], []
            for rep in range(args.repeats):
                reset_gates()
                reset_pools()
                # No restart without the store's memory (--no-cache) or the gate (--fixed): it would be the cold run again.
                phases = (("cold", cold), ("warm", warm)) + ((("restart", restart),) if not (args.no_cache or args.fixed) else ())
                for phase, walls in phases:
                    if phase == "restart":  # a new process's gates, on the store the cold run used and left its memory in
                        reset_gates()
                        reset_pools()
                    store = Store(Path(tmp) / f"c{c}-r{rep}-{'cold' if phase == 'restart' else phase}.db")
                    cases = [Case(id=f"i{i}", question=f"item {i} rep {rep} {phase}") for i in range(n)]
                    cpu, server_cpu = time.process_time(), mock.cpu_s()
                    walls.append(event_loop.run(one_run(store, mock.base_url, cases, args.width, args.stages, c, phase, not args.no_cache, args.fixed)))
                    if phase == "warm":
                        first, later = wave_medians(store, phase, c)
                        first_wave.append(first)
                        if later is not None:
                            later_waves.append(later)
                        cpu_ms.append((time.process_time() - cpu) / calls * 1000)
                        if server_cpu is not None:
                            server_ms.append((mock.cpu_s() - server_cpu) / calls * 1000)
                        if not args.no_cache:
                            before = mock.stats()["requests"]
                            cache_walls.append(event_loop.run(one_run(store, mock.base_url, cases, args.width, args.stages, c, "rerun", True, args.fixed)))
                            cache_requests.append(mock.stats()["requests"] - before)
                    store.close()
                raw.append(event_loop.run(raw_run(mock.base_url, n, args.width, args.stages, c, f"rep {rep} raw")))
            raw_median = statistics.median(raw)
            item_ideal = args.stages * args.latency
            cold_median, warm_median = statistics.median(cold), statistics.median(warm)
            rows.append({"concurrency": c, "items": n, "calls_per_run": calls, "ideal_s": ideal,
                         "cold_median_wall_s": round(cold_median, 3), "cold_walls_s": [round(w, 3) for w in cold],
                         "cold_efficiency": round(ideal / cold_median, 3),
                         "warm_median_wall_s": round(warm_median, 3), "warm_walls_s": [round(w, 3) for w in warm],
                         "warm_efficiency": round(ideal / warm_median, 3),
                         "restart_median_wall_s": round(statistics.median(restart), 3) if restart else None,
                         "restart_walls_s": [round(w, 3) for w in restart],
                         "restart_efficiency": round(ideal / statistics.median(restart), 3) if restart else None,
                         "raw_median_wall_s": round(raw_median, 3), "raw_walls_s": [round(w, 3) for w in raw],
                         "raw_efficiency": round(ideal / raw_median, 3),
                         "warm_over_raw": round(raw_median / warm_median, 3),
                         "warm_first_wave_item_s": round(statistics.median(first_wave), 3),
                         "warm_later_waves_item_s": round(statistics.median(later_waves), 3) if later_waves else None,
                         "warm_later_waves_item_efficiency": round(item_ideal / statistics.median(later_waves), 3) if later_waves else None,
                         "client_cpu_ms_per_call": round(statistics.median(cpu_ms), 3),
                         "client_calls_per_s_per_core": round(1000 / statistics.median(cpu_ms)),
                         "server_cpu_ms_per_call": round(statistics.median(server_ms), 3) if server_ms else None,
                         "cached_rerun_median_s": round(statistics.median(cache_walls), 3) if cache_walls else None,
                         "cached_rerun_requests": cache_requests})
            rerun = f"cached rerun {statistics.median(cache_walls):5.2f}s with {max(cache_requests)} server requests" if cache_walls else "no cache"
            print(f"C={c:>3} N={n:>4} ideal {ideal:6.2f}s  cold {cold_median:6.2f}s (efficiency {ideal / cold_median:5.3f})  "
                  f"warm {warm_median:6.2f}s (efficiency {ideal / warm_median:5.3f})  "
                  + (f"restart {statistics.median(restart):6.2f}s (efficiency {ideal / statistics.median(restart):5.3f})  " if restart else "")
                  + f"raw client {raw_median:6.2f}s (efficiency {ideal / raw_median:5.3f}; warm/raw {raw_median / warm_median:5.3f})  "
                  f"warm item {statistics.median(first_wave):5.3f}s first wave, "
                  + (f"{statistics.median(later_waves):5.3f}s later " if later_waves else "")
                  + f"(ideal {item_ideal:g}s)  "
                  f"client {statistics.median(cpu_ms):.3f} ms CPU/call  "
                  f"mock server {statistics.median(server_ms) if server_ms else float('nan'):.3f} ms CPU/call  "
                  f"{rerun}", flush=True)
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    name = "orchestration" + ("-no-cache" if args.no_cache else "") + ("-fixed" if args.fixed else "") + ("-no-ramp" if args.no_ramp else "")
    (out / f"{name}.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
