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
the server). Client CPU per call is the process's CPU time (every thread) over the calls made; the mock
server's CPU per call is read the same way from its process, since the two share this machine's cores.

    .venv/bin/python bench/bench_orchestration.py [--latency 0.5] [--stages 3] [--width 3] [--repeats 3] [--no-cache] [--fixed]

--no-cache runs without the call cache and spend ledger (items are still stored), to show what that path
costs the client; the cached rerun is then skipped, and the figures go to bench/results/orchestration-no-cache.json.
--fixed turns the endpoint's gate off (`?adaptive=0`: every call goes at once, as before the gate existed), so
cold and warm differ only by what a first run in a process costs besides the slow start; the figures go to
bench/results/orchestration-fixed.json.
"""

from __future__ import annotations

import argparse
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
    args = ap.parse_args()

    rows = []
    with mock_server_process("--latency", str(args.latency), "--reply", "choice") as mock, tempfile.TemporaryDirectory() as tmp:
        for c in args.concurrency:
            n = c * args.batches
            ideal = math.ceil(n / c) * args.stages * args.latency
            calls = n * args.stages * args.width
            cold, warm, restart, cpu_ms, server_ms, cache_walls, cache_requests = [], [], [], [], [], [], []
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
                        cpu_ms.append((time.process_time() - cpu) / calls * 1000)
                        if server_cpu is not None:
                            server_ms.append((mock.cpu_s() - server_cpu) / calls * 1000)
                        if not args.no_cache:
                            before = mock.stats()["requests"]
                            cache_walls.append(event_loop.run(one_run(store, mock.base_url, cases, args.width, args.stages, c, "rerun", True, args.fixed)))
                            cache_requests.append(mock.stats()["requests"] - before)
                    store.close()
            cold_median, warm_median = statistics.median(cold), statistics.median(warm)
            rows.append({"concurrency": c, "items": n, "calls_per_run": calls, "ideal_s": ideal,
                         "cold_median_wall_s": round(cold_median, 3), "cold_walls_s": [round(w, 3) for w in cold],
                         "cold_efficiency": round(ideal / cold_median, 3),
                         "warm_median_wall_s": round(warm_median, 3), "warm_walls_s": [round(w, 3) for w in warm],
                         "warm_efficiency": round(ideal / warm_median, 3),
                         "restart_median_wall_s": round(statistics.median(restart), 3) if restart else None,
                         "restart_walls_s": [round(w, 3) for w in restart],
                         "restart_efficiency": round(ideal / statistics.median(restart), 3) if restart else None,
                         "client_cpu_ms_per_call": round(statistics.median(cpu_ms), 3),
                         "client_calls_per_s_per_core": round(1000 / statistics.median(cpu_ms)),
                         "server_cpu_ms_per_call": round(statistics.median(server_ms), 3) if server_ms else None,
                         "cached_rerun_median_s": round(statistics.median(cache_walls), 3) if cache_walls else None,
                         "cached_rerun_requests": cache_requests})
            rerun = f"cached rerun {statistics.median(cache_walls):5.2f}s with {max(cache_requests)} server requests" if cache_walls else "no cache"
            print(f"C={c:>3} N={n:>4} ideal {ideal:6.2f}s  cold {cold_median:6.2f}s (efficiency {ideal / cold_median:5.3f})  "
                  f"warm {warm_median:6.2f}s (efficiency {ideal / warm_median:5.3f})  "
                  + (f"restart {statistics.median(restart):6.2f}s (efficiency {ideal / statistics.median(restart):5.3f})  " if restart else "")
                  + f"client {statistics.median(cpu_ms):.3f} ms CPU/call  "
                  f"mock server {statistics.median(server_ms) if server_ms else float('nan'):.3f} ms CPU/call  "
                  f"{rerun}", flush=True)
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    name = "orchestration" + ("-no-cache" if args.no_cache else "") + ("-fixed" if args.fixed else "")
    (out / f"{name}.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
