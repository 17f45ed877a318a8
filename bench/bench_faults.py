"""Robustness: a run under 20% injected faults (500, 429 with Retry-After, timeouts, malformed bodies,
invalid JSON content) must finish every item with the same outcome as a fault-free run.

    .venv/bin/python bench/bench_faults.py [--items 100] [--fault-rate 0.2] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from medpanel.testing.fault_check import compare_under_faults


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=100)
    ap.add_argument("--fault-rate", type=float, default=0.2)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    report = compare_under_faults(items=args.items, concurrency=args.concurrency, fault_rate=args.fault_rate, seed=args.seed)
    print(json.dumps(report, indent=2))
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "faults.json").write_text(json.dumps(report, indent=2))
    if not (report["all_done"] and report["identical_outcomes"]):
        raise SystemExit("FAIL: outcomes under faults differ from the fault-free run")


if __name__ == "__main__":
    main()
