"""Orchestration overhead: how close the runner gets to the critical-path ideal, and a rerun from cache.

N items x a protocol of S sequential stages of W parallel calls, against the mock OpenAI server in its
own process at a fixed latency L. With concurrency C the ideal wall time is ceil(N / C) * S * L;
efficiency = ideal / measured (goal >= 0.90 at C = 64). Then the same run again on the same store:
every call should come from the cache (goal: 0 requests reach the server).

    .venv/bin/python bench/bench_orchestration.py [--latency 0.5] [--stages 3] [--width 3] [--repeats 3]
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

from medpanel.cases import Case
from medpanel.models import Runtime
from medpanel.runs.runner import RunConfig, build_panel, run_benchmark
from medpanel.runs.store import Store
from medpanel.testing.process import mock_server_process
from medpanel.testing.workloads import STAGED


async def one_run(store: Store, base_url: str, cases: list[Case], width: int, stages: int, concurrency: int, run_id: str) -> float:
    runtime = Runtime(cache=store, timeout_s=60)
    specs = [f"openai:mock-model@{base_url}"] * width
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
    args = ap.parse_args()

    rows = []
    with mock_server_process("--latency", str(args.latency), "--reply", "choice") as mock, tempfile.TemporaryDirectory() as tmp:
        for c in args.concurrency:
            n = c * args.batches
            ideal = math.ceil(n / c) * args.stages * args.latency
            walls, cache_walls, cache_requests = [], [], []
            for rep in range(args.repeats):
                store = Store(Path(tmp) / f"c{c}-r{rep}.db")
                cases = [Case(id=f"i{i}", question=f"item {i} rep {rep}") for i in range(n)]
                walls.append(asyncio.run(one_run(store, mock.base_url, cases, args.width, args.stages, c, "first")))
                before = mock.stats()["requests"]
                cache_walls.append(asyncio.run(one_run(store, mock.base_url, cases, args.width, args.stages, c, "rerun")))
                cache_requests.append(mock.stats()["requests"] - before)
                store.close()
            median = statistics.median(walls)
            rows.append({"concurrency": c, "items": n, "calls_per_run": n * args.stages * args.width, "ideal_s": ideal,
                         "median_wall_s": round(median, 3), "walls_s": [round(w, 3) for w in walls],
                         "efficiency": round(ideal / median, 3), "cached_rerun_median_s": round(statistics.median(cache_walls), 3),
                         "cached_rerun_requests": cache_requests})
            print(f"C={c:>3} N={n:>4} ideal {ideal:6.2f}s  median {median:6.2f}s  efficiency {ideal / median:5.3f}  "
                  f"cached rerun {statistics.median(cache_walls):5.2f}s with {max(cache_requests)} server requests", flush=True)
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "orchestration.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
