"""The embedded model when several processes share the cores (test workers, a bench beside a board, Ray).

K processes at once each load the embedded model with one decode thread (MEDPANEL_LOCAL_THREADS=1, as a
test worker or a Ray task gets its share), wait until all have loaded, then answer the same prompts
greedily, every other one as a JSON object (so grammar-forced runs are batches too). Two settings of the
threads llama.cpp gives batch work (the prompt, and the runs a JSON grammar forces):

  own     as many as decode threads: what medpanel's loader sets for a process given its share (models/local.py)
  all     one per core: llama-cpp-python's default when n_threads_batch is not given

llama.cpp's threads spin-wait at each step, so batch threads beyond a process's share fight the other
processes' threads for the cores. Reported per K and setting, as medians over the repeats: the wall time of
the slowest of the K processes (from the common start to its last reply, prompts included), and the
throughput of all K (output tokens over that wall time).

    .venv/bin/python bench/bench_local_contention.py [--processes 1 2 3] [--prompts 4] [--max-tokens 96] [--repeats 3]

Writes JSON to bench/results/local_contention.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROMPTS = [
    "List three causes of chest pain in a 55-year-old smoker, one line each.",
    "What does a PSA of 9.4 ng/mL suggest, and what is the next step?",
    "Name the first test for a 3 cm spiculated lung nodule, and why.",
    "Summarise the treatment options for Grade Group 2 prostate cancer.",
    "Give two red flags in a patient with new back pain.",
    "What is the role of an MRI before a prostate biopsy?",
]


def worker(batch: str, prompts: int, max_tokens: int) -> None:
    """One process: load, answer, print a JSON line with what it took."""
    import asyncio

    import llama_cpp
    from pydantic import BaseModel

    from medpanel.models.local import LocalModel

    model = LocalModel()
    loaded = model.loaded
    if batch == "all":  # put back llama-cpp-python's default: a batch thread per core
        llama_cpp.llama_set_n_threads(loaded.llama.ctx, loaded.llama.n_threads, os.cpu_count() or 1)

    class Note(BaseModel):
        answer: str
        urgent: bool

    async def answer_all() -> int:
        replies = [await model.complete(prompt, schema=Note if i % 2 else None, max_tokens=max_tokens, temperature=0.0)
                   for i, prompt in enumerate(PROMPTS[:prompts])]
        return sum(r.usage.output_tokens for r in replies)

    print("ready", flush=True)
    sys.stdin.readline()  # every process has loaded: start together
    started = time.perf_counter()
    tokens = asyncio.run(answer_all())
    print(json.dumps({"seconds": time.perf_counter() - started, "tokens": tokens}), flush=True)


def run_once(k: int, batch: str, args: argparse.Namespace) -> dict:
    env = dict(os.environ, MEDPANEL_LOCAL_THREADS="1")
    argv = [sys.executable, __file__, "--worker", batch, "--prompts", str(args.prompts), "--max-tokens", str(args.max_tokens)]
    procs = [subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(k)]
    try:
        for proc in procs:
            if proc.stdout.readline().strip() != "ready":
                raise SystemExit(f"a worker failed to load the model (exit {proc.wait()})")
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        rows = []
        for proc in procs:
            out, _ = proc.communicate(timeout=1800)
            if proc.returncode != 0:
                raise SystemExit(f"a worker exited with {proc.returncode}")
            rows.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    wall = max(r["seconds"] for r in rows)
    return {"wall_s": wall, "tokens_per_s": sum(r["tokens"] for r in rows) / wall}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--worker", choices=["own", "all"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.prompts, args.max_tokens)
        return

    rows = []
    print(f"{os.cpu_count()} cores; each process decodes with 1 thread, {args.prompts} prompts (every other as JSON) x {args.max_tokens} tokens, greedy")
    for k in args.processes:
        for batch in ("own", "all"):
            runs = [run_once(k, batch, args) for _ in range(args.repeats)]
            wall = statistics.median(r["wall_s"] for r in runs)
            rate = statistics.median(r["tokens_per_s"] for r in runs)
            rows.append({"processes": k, "batch_threads": batch, "median_wall_s": round(wall, 2), "walls_s": [round(r["wall_s"], 2) for r in runs],
                         "median_tokens_per_s": round(rate, 1)})
            print(f"K={k} batch threads {batch:>3}: median wall {wall:6.2f} s (slowest process), {rate:6.1f} tokens/s in all", flush=True)
    for k in args.processes:
        own, every = (next(r for r in rows if r["processes"] == k and r["batch_threads"] == b) for b in ("own", "all"))
        print(f"K={k}: 'all' takes {every['median_wall_s'] / own['median_wall_s']:.2f}x the wall time of 'own'")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "local_contention.json").write_text(json.dumps({"args": vars(args), "cores": os.cpu_count(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
