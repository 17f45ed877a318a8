"""Does a run under injected faults end with the same outcomes as a fault-free run?

Shared by bench/bench_faults.py (full size) and the test suite (small size): both run the
answer-then-extract workload on MedQA items against the mock server in its own process, once clean
and once with faults, each on a fresh store (so nothing is served from cache), and compare item by item.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from medpanel.cases import load_dataset
from medpanel.models import Runtime
from medpanel.models.retry import RetryPolicy
from medpanel.runs.panel import build_panel
from medpanel.runs.runner import RunConfig, run_benchmark
from medpanel.runs.store import Store
from medpanel.testing.process import mock_server_process
from medpanel.testing.workloads import ANSWER_THEN_EXTRACT

ALL_FAULTS = "500,429,timeout,malformed,invalid_json"


async def _run(base_url: str, items: int, concurrency: int, db: Path, timeout_s: float) -> tuple[dict, float, dict]:
    store = Store(db)
    runtime = Runtime(cache=store, timeout_s=timeout_s, retry=RetryPolicy(max_attempts=8, base_delay_s=0.05, max_delay_s=1.0), max_reasks=3)
    config = RunConfig(dataset="medqa", protocol="answer-then-extract", models=[f"openai:mock-model@{base_url}"], limit=items, concurrency=concurrency)
    cases = load_dataset("medqa", items)
    started = time.perf_counter()
    result = await run_benchmark(store, config, runtime, protocol=ANSWER_THEN_EXTRACT, panel=build_panel(config.models, runtime), cases=cases)
    wall = time.perf_counter() - started
    outcomes = {i["item_id"]: (i["status"], i["outcome"]["answer"] if i["outcome"] else None,
                               i["outcome"]["data"]["extracted"]["choice"] if i["outcome"] else None) for i in store.items(result.run_id)}
    store.close()
    return outcomes, wall, result.spent


def compare_under_faults(items: int = 100, concurrency: int = 16, fault_rate: float = 0.2, latency_s: float = 0.05,
                         seed: int = 7, faults: str = ALL_FAULTS, timeout_s: float = 1.0) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        with mock_server_process("--latency", str(latency_s), "--reply", "choice") as clean:
            baseline, clean_wall, clean_spent = asyncio.run(_run(clean.base_url, items, concurrency, Path(tmp) / "clean.db", timeout_s))
        with mock_server_process("--latency", str(latency_s), "--reply", "choice", "--fault-rate", str(fault_rate), "--faults", faults,
                                 "--seed", str(seed), "--retry-after", "0.2", "--hang", str(timeout_s * 3)) as faulty:
            faulted, faulty_wall, faulty_spent = asyncio.run(_run(faulty.base_url, items, concurrency, Path(tmp) / "faulty.db", timeout_s))
            stats = faulty.stats()
    differing = sorted(k for k in baseline if baseline[k] != faulted.get(k))
    return {
        "items": items,
        "fault_rate": fault_rate,
        "faults_injected": stats["faults"],
        "server_requests": stats["requests"],
        "clean_calls": clean_spent["calls"],
        "faulty_calls": faulty_spent["calls"],
        "all_done": all(v[0] == "done" for v in faulted.values()) and len(faulted) == items,
        "identical_outcomes": not differing and len(faulted) == len(baseline),
        "differing_items": differing,
        "clean_wall_s": round(clean_wall, 3),
        "faulty_wall_s": round(faulty_wall, 3),
    }
