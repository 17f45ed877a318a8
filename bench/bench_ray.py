"""Ray executor under faults: a 200-item debate (three mock seats) on a local Ray cluster with several
workers; one worker is killed -9 mid-item, then the driver itself is killed -9 mid-run and the run is
resumed with --executor ray. Checks items lost 0, items repeated 0, outcomes equal to a single-process
run, and counts the model calls made again (those in flight at a kill).

    .venv/bin/python bench/bench_ray.py [--items 200] [--workers 4] [--concurrency 8]

Writes bench/results/ray.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import ray

from medpanel.cases import Case, Reference
from medpanel.models import Runtime
from medpanel.runs.runner import RunConfig, run_benchmark
from medpanel.runs.store import Store
from medpanel.testing.process import mock_server_process

MEDPANEL = str(Path(sys.executable).with_name("medpanel"))
RUN = "bench-ray"


def cases(n: int) -> list[Case]:
    return [Case(id=f"q{i:03d}", question=f"Question {i}: which option fits best?", options={k: f"option {k}" for k in "ABCDE"},
                 reference=Reference(answer="ABCDE"[i % 5])) for i in range(n)]


def outcomes(db_path: Path, run_id: str) -> dict[str, list]:
    store = Store(db_path)
    try:
        scores: dict[str, dict] = {}
        for row in store.scores(run_id):
            scores.setdefault(row["item_id"], {})[row["name"]] = row["value"]
        return {i["item_id"]: [i["status"], i["outcome"], scores.get(i["item_id"])] for i in store.items(run_id)}
    finally:
        store.close()


def rows(db_path: Path, sql: str, args: tuple = ()) -> list:
    try:
        with sqlite3.connect(db_path, timeout=10) as db:
            return db.execute(sql, args).fetchall()
    except sqlite3.OperationalError:  # not created yet
        return []


def done_count(db_path: Path) -> int:
    found = rows(db_path, "SELECT COUNT(*) FROM items WHERE run_id = ? AND status = 'done'", (RUN,))
    return found[0][0] if found else 0


def busy_item_workers() -> list[psutil.Process]:
    """Ray workers of this process's own cluster (its raylet's children) executing an item right now."""
    busy = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if "run_item_task" in " ".join(proc.cmdline()):
                busy.append(proc)
        except psutil.Error:
            continue
    return busy


def wait_for(db_path: Path, done: int, driver: subprocess.Popen, timeout_s: float = 300) -> None:
    deadline = time.time() + timeout_s
    while done_count(db_path) < done and driver.poll() is None and time.time() < deadline:
        time.sleep(0.05)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=200)
    ap.add_argument("--workers", type=int, default=4, help="CPUs of the local Ray cluster (one item per CPU at a time)")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--latency", type=float, default=0.02)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_ray_"))
    dataset = work / "cases.jsonl"
    dataset.write_text("".join(c.model_dump_json() + "\n" for c in cases(args.items)))
    report: dict = {"items": args.items, "workers": args.workers, "concurrency": args.concurrency, "mock_latency_s": args.latency}

    with mock_server_process("--latency", str(args.latency), "--reply", "choice") as mock:
        models = [f"openai:seat-{k}@{mock.base_url}" for k in "abc"]

        # 1. The single-process run every Ray run is compared with.
        store = Store(work / "single.db")
        started = time.perf_counter()
        single = asyncio.run(run_benchmark(store, RunConfig(dataset=str(dataset), protocol="debate", models=models,
                                                            concurrency=args.concurrency), Runtime(cache=store)))
        report["single_process_wall_s"] = round(time.perf_counter() - started, 2)
        store.close()
        reference = outcomes(work / "single.db", single.run_id)
        mock.reset()

        ray.init(num_cpus=args.workers, object_store_memory=200 * 1024**2, include_dashboard=False, log_to_driver=False,
                 logging_level="WARNING")
        address = ray.get_runtime_context().gcs_address
        # After ray.init: it turned on token auth (RAY_AUTH_MODE=token) here, and the drivers need it too.
        env = dict(os.environ, MEDPANEL_STORE=str(work / "ray.db"), PYTHONUNBUFFERED="1")
        try:
            cli = [MEDPANEL, "bench", "--executor", "ray", "--address", address, "-c", str(args.concurrency)]
            # 2. A clean Ray run, for the wall time (its own store).
            started = time.perf_counter()
            clean = subprocess.run([*cli, str(dataset), "-p", "debate", "-m", ",".join(models), "--run-id", "clean", "--json"],
                                   env=dict(env, MEDPANEL_STORE=str(work / "clean.db")), capture_output=True, text=True, timeout=900)
            report["ray_clean_wall_s"] = round(time.perf_counter() - started, 2)
            report["ray_clean_exit"] = clean.returncode
            report["ray_clean_outcomes_equal"] = outcomes(work / "clean.db", "clean") == reference
            mock.reset()

            # 3. The faulted run: a worker killed mid-item, then the driver, then a resume.
            started = time.perf_counter()
            driver = subprocess.Popen([*cli, str(dataset), "-p", "debate", "-m", ",".join(models), "--run-id", RUN],
                                      env=env, stdout=subprocess.DEVNULL, stderr=(work / "driver.log").open("w"))
            wait_for(work / "ray.db", args.items // 5, driver)
            victims = busy_item_workers()
            if victims:
                victims[0].send_signal(signal.SIGKILL)
            report["worker_killed_at_done"] = done_count(work / "ray.db")
            report["worker_killed"] = bool(victims)
            wait_for(work / "ray.db", args.items * 3 // 5, driver)
            if driver.poll() is not None:
                raise SystemExit(f"FAIL: the driver ended (exit {driver.returncode}) before it was killed; see {work / 'driver.log'}")
            os.kill(driver.pid, signal.SIGKILL)
            driver.wait()
            killed_at = time.time()
            report["driver_killed_at_done"] = done_count(work / "ray.db")
            before = dict(rows(work / "ray.db", "SELECT item_id, finished_at FROM items WHERE run_id = ?", (RUN,)))
            report["first_part_wall_s"] = round(time.perf_counter() - started, 2)

            started = time.perf_counter()
            resumed = subprocess.run([*cli[:-2], "--resume", RUN, "-c", str(args.concurrency), "--json"], env=env,
                                     capture_output=True, text=True, timeout=900)
            report["resume_wall_s"] = round(time.perf_counter() - started, 2)
            report["resume_exit"] = resumed.returncode
            report["resume_took_over"] = "taken over" in resumed.stderr
            stats = mock.stats()
        finally:
            ray.shutdown()

    db = work / "ray.db"
    written = rows(db, "SELECT item_id, finished_at FROM items WHERE run_id = ?", (RUN,))
    report["items_lost"] = args.items - len({item for item, _ in written})
    # Repeated: a row written twice (its finish time changed across the resume), or two rows for one item.
    report["items_repeated"] = sum(1 for item, at in written if item in before and before[item] != at) + len(written) - len({i for i, _ in written})
    report["outcomes_equal_single_process"] = outcomes(db, RUN) == reference
    calls = rows(db, "SELECT COUNT(*), SUM(cached) FROM call_log WHERE run_id = ?", (RUN,))[0]
    report["model_calls_logged"] = calls[0]
    report["model_calls_served_from_cache"] = calls[1] or 0
    report["model_calls_sent"] = calls[0] - (calls[1] or 0)
    report["model_calls_lost_in_flight_logged"] = rows(db, "SELECT COUNT(*) FROM call_log WHERE run_id = ? AND key LIKE 'in-flight:%'", (RUN,))[0][0]
    # What the server really answered more than once: the calls in flight at a kill, paid twice.
    report["server_requests"] = sum(stats["by_hash"].values())
    report["server_distinct_requests"] = len(stats["by_hash"])
    report["model_calls_repeated"] = report["server_requests"] - report["server_distinct_requests"]
    # Requests the server answered that no ledger row stands for: the calls in flight when the driver died.
    report["model_calls_missing_from_ledger"] = report["server_requests"] - report["model_calls_sent"]
    report["single_process_calls"] = sum(1 for _ in rows(work / "single.db", "SELECT 1 FROM call_log WHERE cached = 0"))
    report["finished_items_with_calls_repeated_after_the_driver_kill"] = rows(
        db, f"SELECT COUNT(DISTINCT item_id) FROM call_log WHERE run_id = ? AND cached = 0 AND at > ? AND item_id IN ({','.join('?' * len(before))})",
        (RUN, killed_at, *before))[0][0] if before else 0
    report["run_status"] = rows(db, "SELECT status FROM runs WHERE id = ?", (RUN,))[0][0]
    print(json.dumps(report, indent=2))
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "ray.json").write_text(json.dumps(report, indent=2))
    ok = (report["items_lost"] == 0 and report["items_repeated"] == 0 and report["outcomes_equal_single_process"]
          and report["resume_exit"] == 0 and report["ray_clean_outcomes_equal"])
    if not ok:
        raise SystemExit("FAIL: see bench/results/ray.json")


if __name__ == "__main__":
    main()
