"""An endpoint pool that loses a server mid-run (issue 15, acceptance 4).

A debate benchmark of N items (three seats, the same model) runs against one model served by three mock
servers, each in its own process (`openai:mock@URL1|URL2|URL3`). Once a share of the expected calls has
been made, one server is killed with SIGKILL. Reported: items done, failed and lost (expected minus
stored), calls each server answered, the pool's own count of requests sent to and failed by each endpoint (a failed one went to another at once),
the calls that failed for good, the wall time, and the same run with all three servers alive (whose final
answers must be the same).

    .venv/bin/python bench/bench_pool.py [--items 200] [--latency 0.2] [--kill-at 0.4]

Writes bench/results/pool.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from medpanel.cases.model import Case, Reference
from medpanel.models import Runtime
from medpanel.models.endpoints import shared_pool
from medpanel.runs.runner import RunConfig, run_benchmark
from medpanel.runs.store import Store
from medpanel.testing.process import mock_server_process

ROOT = Path(__file__).resolve().parents[1]


async def one_run(store: Store, urls: list[str], cases: list[Case], concurrency: int, victim=None, kill_after: int | None = None) -> dict:
    runtime = Runtime(cache=store, timeout_s=30)
    spec = "openai:mock@" + "|".join(urls)
    killed_at = None

    async def kill_when_due():
        nonlocal killed_at
        while victim is not None:
            made = len(store.call_log())
            if made >= kill_after:
                victim.proc.send_signal(signal.SIGKILL)
                killed_at = made
                return
            await asyncio.sleep(0.02)

    killer = asyncio.create_task(kill_when_due())
    started = time.perf_counter()
    result = await run_benchmark(store, RunConfig(dataset="synthetic", protocol="debate", models=[spec] * 3, concurrency=concurrency),
                                 runtime, cases=cases)
    wall = time.perf_counter() - started
    killer.cancel()
    items = store.items(result.run_id)
    statuses = [i["status"] for i in items]
    calls = store.call_log(result.run_id)
    answers = {i["item_id"]: (i["outcome"] or {}).get("answer") for i in items}
    return {"answers": answers, "wall_s": round(wall, 2), "items": len(cases), "done": statuses.count("done"), "failed": statuses.count("failed"),
            "lost": len(cases) - len(items), "calls": len(calls), "calls_failed": sum(1 for c in calls if c["error"]),
            "killed_after_calls": killed_at,
            # the pool's own counts: requests sent to each endpoint, and those the endpoint failed (then sent elsewhere)
            "pool": shared_pool(sorted(u.rstrip("/") for u in urls), None, model="mock").snapshot()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=200)
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--kill-at", type=float, default=0.4, help="share of the run's calls (3 a round) made before the kill")
    args = ap.parse_args()
    cases = [Case(id=f"q{i}", question=f"Question {i}?", options={"A": "yes", "B": "no", "C": "maybe"}, reference=Reference(answer="A"))
             for i in range(args.items)]
    report: dict = {"settings": vars(args)}
    with tempfile.TemporaryDirectory() as tmp:
        for name, kill in (("all_alive", False), ("one_killed", True)):
            with ExitStack() as stack:
                mocks = [stack.enter_context(mock_server_process("--latency", str(args.latency), "--reply", "choice")) for _ in range(3)]
                store = Store(Path(tmp) / f"{name}.db")
                expected = 3 * args.items  # at least the initial round
                row = asyncio.run(one_run(store, [m.base_url for m in mocks], cases, args.concurrency,
                                          victim=mocks[0] if kill else None, kill_after=int(args.kill_at * expected)))
                row["answered_by_server"] = [m.stats()["successes"] if m.proc.poll() is None else "killed" for m in mocks]
                report[name] = row
    # The same items with and without the kill: the same final answers (the pool changes where, never what).
    report["same_outcomes"] = report["all_alive"].pop("answers") == report["one_killed"].pop("answers")
    out = ROOT / "bench" / "results" / "pool.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
