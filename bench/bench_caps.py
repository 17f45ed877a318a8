"""Budget caps under concurrency: does every request sent reach the spend ledger, and how far past a cap
does a run go? Against the mock OpenAI server in its own process.

For each cap in turn (--max-calls, --max-tokens-total, --max-dollars) a run of two-stage items at
concurrency C is started with that cap and stops at it. Reported per cap: the requests the server saw,
the calls in the ledger (goal: equal), the cap and the spend reached, the overshoot in units of one
call's mean spend (goal: at most 1), and how many of the first run's requests a resume sent again
(goal: 0). Writes bench/results/caps.json.

    .venv/bin/python bench/bench_caps.py [--concurrency 64] [--latency 0.3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from medpanel.cases import Case
from medpanel.models import Runtime
from medpanel.models.budget import Budget
from medpanel.runs.runner import RunConfig, build_panel, run_benchmark
from medpanel.runs.store import Store
from medpanel.testing.process import mock_server_process
from medpanel.testing.workloads import STAGED

PRICE_IN, PRICE_OUT = 0.01, 0.03  # USD per 1K tokens, given in the spec so the dollar cap can trip


async def one_run(store: Store, base_url: str, cases: list[Case], concurrency: int, budget: Budget, run_id: str, resume: bool = False):
    runtime = Runtime(cache=store, budget=budget, timeout_s=60)
    spec = f"openai:mock-model@{base_url}?price_in={PRICE_IN}&price_out={PRICE_OUT}"
    config = RunConfig(dataset="synthetic", protocol="staged", models=[spec], concurrency=concurrency,
                       settings={"stages": 2, "max_tokens": 64})
    started = time.perf_counter()
    result = await run_benchmark(store, config, runtime, run_id=run_id, resume=resume, protocol=STAGED,
                                 panel=build_panel([spec], runtime), cases=cases)
    return result, runtime.budget, time.perf_counter() - started


def spend_of(budget: Budget, cap: str) -> float:
    return {"calls": budget.calls, "tokens": budget.input_tokens + budget.output_tokens, "dollars": budget.dollars}[cap]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--latency", type=float, default=0.3, help="seconds per call at the mock server")
    ap.add_argument("--items", type=int, default=600)
    ap.add_argument("--max-calls", type=int, default=100)
    ap.add_argument("--max-tokens-total", type=int, default=3000)
    ap.add_argument("--max-dollars", type=float, default=0.01)
    args = ap.parse_args()
    caps = {"calls": args.max_calls, "tokens": args.max_tokens_total, "dollars": args.max_dollars}

    rows = []
    with mock_server_process("--latency", str(args.latency), "--reply", "choice") as mock, tempfile.TemporaryDirectory() as tmp:
        for cap, limit in caps.items():
            store = Store(Path(tmp) / f"{cap}.db")
            cases = [Case(id=f"i{i}", question=f"item {i} under the {cap} cap") for i in range(args.items)]
            budget = Budget(**{{"calls": "max_calls", "tokens": "max_tokens", "dollars": "max_dollars"}[cap]: limit})
            mock.reset()
            result, spent, wall = asyncio.run(one_run(store, mock.base_url, cases, args.concurrency, budget, cap))
            seen = mock.stats()
            logged = [r for r in store.call_log(cap) if not r["cached"]]
            reached = spend_of(spent, cap)
            per_call = reached / max(1, spent.calls)
            # The resume: no cap, the same store; a request of the first run sent again would be paid twice.
            first_hashes = seen["by_hash"]
            resumed, _, _ = asyncio.run(one_run(store, mock.base_url, cases, args.concurrency, Budget(), cap, resume=True))
            after = mock.stats()["by_hash"]
            repaid = sum(after.get(h, 0) - n for h, n in first_hashes.items())
            row = {"cap": cap, "limit": limit, "status": result.status, "requests_sent": seen["requests"], "calls_logged": len(logged),
                   "spend_reached": round(reached, 6), "overshoot": round(max(0.0, reached - limit), 6),
                   "overshoot_calls": round(max(0.0, reached - limit) / per_call, 3) if per_call else 0.0,
                   "headroom_left_calls": round(max(0.0, limit - reached) / per_call, 3) if per_call else 0.0,
                   "resume_repaid_requests": repaid, "resume_status": resumed.status, "wall_s": round(wall, 2)}
            rows.append(row)
            store.close()
    print(f"concurrency {args.concurrency}, mock latency {args.latency}s, {args.items} two-call items")
    print(f"{'cap':8} {'limit':>8} {'sent':>6} {'logged':>7} {'reached':>10} {'overshoot':>10} {'over (calls)':>13} {'left (calls)':>13} {'resume repaid':>14}")
    for r in rows:
        print(f"{r['cap']:8} {r['limit']:>8g} {r['requests_sent']:>6} {r['calls_logged']:>7} {r['spend_reached']:>10g} {r['overshoot']:>10g} "
              f"{r['overshoot_calls']:>13} {r['headroom_left_calls']:>13} {r['resume_repaid_requests']:>14}")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "caps.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
