"""`medpanel bench --executor ray` (issue 15, acceptance 5): items computed on a real local Ray cluster, written
by the driver alone. Outcomes equal the in-process run's; a worker killed mid-item, or the driver killed
mid-run and resumed, loses no item and writes none twice; the budget's caps hold across workers; bad
input (no ray, a bad address, a person's seat) is refused with exit 2 and no traceback."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import time
from contextlib import closing

import pytest

from conftest import MEDPANEL, ROOT, count_done
from medpanel.cases import Case, Reference
from medpanel.errors import UsageError
from medpanel.models import Runtime
from medpanel.models.budget import Budget
from medpanel.runs.runner import RunConfig, run_benchmark
from medpanel.runs.store import Store
from medpanel.testing.process import mock_server_process

ray = pytest.importorskip("ray")
from medpanel.runs.ray_executor import RayExecutor  # noqa: E402

ITEMS = 30


def mcq(n: int) -> list[Case]:
    return [Case(id=f"q{i:02d}", question=f"Question {i}: which option fits best?", options={k: f"option {k}" for k in "ABCDE"},
                 reference=Reference(answer="ABCDE"[i % 5])) for i in range(n)]



@pytest.fixture(scope="module")
def mock():
    # Three seats whose letters differ (the mock's letter depends on the model name): most items debate.
    with mock_server_process("--latency", "0.02", "--reply", "choice") as server:
        yield server


def debate_config(mock, **kw) -> RunConfig:
    return RunConfig(dataset="inline", protocol="debate", models=[f"openai:seat-{k}@{mock.base_url}" for k in "abc"], **kw)


def outcomes(db_path, run_id: str) -> dict[str, tuple]:
    with closing(Store(db_path)) as store:
        scores: dict[str, dict] = {}
        for row in store.scores(run_id):
            scores.setdefault(row["item_id"], {})[row["name"]] = row["value"]
        return {i["item_id"]: (i["status"], i["outcome"], scores.get(i["item_id"])) for i in store.items(run_id)}


@pytest.fixture(scope="module")
def reference(mock, tmp_path_factory):
    """The in-process run every Ray run is compared with."""
    path = tmp_path_factory.mktemp("reference") / "ref.db"
    store = Store(path)
    result = asyncio.run(run_benchmark(store, debate_config(mock, concurrency=8), Runtime(cache=store), cases=mcq(ITEMS)))
    store.close()
    assert result.status == "done"
    return outcomes(path, result.run_id)


async def test_a_debate_on_ray_gives_the_in_process_outcomes(cluster, mock, reference, tmp_path):
    store = Store(tmp_path / "ray.db")
    executor = RayExecutor()
    seen = []
    result = await run_benchmark(store, debate_config(mock, concurrency=8), Runtime(cache=store), cases=mcq(ITEMS), executor=executor,
                                 on_progress=lambda progress, runtime: seen.append((progress.done, runtime.budget.calls)))
    assert result.status == "done" and result.progress.done == ITEMS
    assert outcomes(tmp_path / "ray.db", result.run_id) == reference
    assert len(executor.stats.pids) >= 2  # spread over several worker processes, none of them this one
    assert os.getpid() not in executor.stats.pids
    # Every call the workers made is in this store's ledger, and the driver's budget shows it (progress, result).
    logged = store.call_counts(result.run_id)
    assert logged["calls"] == result.spent["calls"] > 0
    assert seen[-1] == (ITEMS, result.spent["calls"])
    assert sum(i["calls"] for i in store.items(result.run_id)) == logged["calls"]  # each item's spend read from the ledger


async def test_a_worker_killed_mid_item_is_resubmitted_and_every_item_is_written_once(cluster, mock, reference, tmp_path):
    store = Store(tmp_path / "ray.db")
    executor = RayExecutor()
    killed: list[int] = []

    async def kill_a_busy_worker() -> None:
        deadline = time.monotonic() + 60
        while not killed and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            if count_done(tmp_path / "ray.db") < 5:
                continue
            for pid in sorted(executor.stats.pids):  # workers of this run only, never another process's
                try:
                    with open(f"/proc/{pid}/cmdline") as fh:
                        busy = "run_item_task" in fh.read()
                except OSError:
                    continue
                if busy:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    break

    killer = asyncio.create_task(kill_a_busy_worker())
    result = await run_benchmark(store, debate_config(mock, concurrency=6), Runtime(cache=store), cases=mcq(ITEMS), executor=executor)
    await killer
    assert killed, "no worker was found busy to kill"
    assert executor.stats.workers_lost >= 1 and executor.stats.resubmitted >= 1
    assert result.status == "done" and result.progress.done == ITEMS
    assert outcomes(tmp_path / "ray.db", result.run_id) == reference  # each item once, as in-process
    # (Whether the dead attempt had finished a call the new one replays from the cache depends on when it died.)


def run_cli(args, env, timeout=120):
    return subprocess.run([MEDPANEL, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def write_cases(path, n: int) -> str:
    path.write_text("".join(case.model_dump_json() + "\n" for case in mcq(n)))
    return str(path)


def test_a_driver_killed_mid_run_is_resumed_on_ray_losing_and_repeating_nothing(cluster, mock, reference, cli_env, tmp_path):
    db_path = cli_env["MEDPANEL_STORE"]
    dataset = write_cases(tmp_path / "cases.jsonl", ITEMS)
    models = ",".join(f"openai:seat-{k}@{mock.base_url}" for k in "abc")
    args = ["bench", dataset, "-p", "debate", "-m", models, "-c", "4", "--executor", "ray", "--address", cluster]
    driver = subprocess.Popen([MEDPANEL, *args, "--run-id", "killed"], env=cli_env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 180  # a cold driver imports Ray and starts its workers first: slow on a busy machine
    while count_done(db_path) < 8 and time.time() < deadline and driver.poll() is None:
        time.sleep(0.05)
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    killed_at = time.time()
    with sqlite3.connect(db_path) as db:
        before = dict(db.execute("SELECT item_id, finished_at FROM items WHERE run_id = 'killed'").fetchall())
    assert 8 <= len(before) < ITEMS, "the kill should land part way through"

    resumed = run_cli(["bench", "--resume", "killed", "--executor", "ray", "--address", cluster, "--json"], cli_env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "taken over" in resumed.stderr  # the dead driver's lease was taken over, and said so
    with sqlite3.connect(db_path) as db:
        rows = db.execute("SELECT item_id, finished_at FROM items WHERE run_id = 'killed'").fetchall()
        assert len(rows) == ITEMS == len({item for item, _ in rows})  # items lost 0
        assert {item: at for item, at in rows if item in before} == before  # repeated 0: none written again
        placeholders = ",".join("?" * len(before))
        repeated_calls = db.execute(f"SELECT COUNT(*) FROM call_log WHERE run_id = 'killed' AND cached = 0 AND at > ? "
                                    f"AND item_id IN ({placeholders})", (killed_at, *before)).fetchone()[0]
        assert repeated_calls == 0  # no finished item's call was paid for again
        assert db.execute("SELECT status FROM runs WHERE id = 'killed'").fetchone()[0] == "done"
    assert outcomes(db_path, "killed") == reference
    assert json.loads(resumed.stdout)["items"]["done"] == ITEMS


async def test_a_call_cap_holds_across_workers(cluster, mock, tmp_path):
    store = Store(tmp_path / "cap.db")
    runtime = Runtime(cache=store, budget=Budget(max_calls=60))
    result = await run_benchmark(store, debate_config(mock, concurrency=4), runtime, cases=mcq(ITEMS), executor=RayExecutor())
    assert result.status == "stopped" and result.error.cap == "calls"
    sent = store.call_counts(result.run_id)["calls"]
    assert sent <= 60 and result.spent["calls"] == sent  # four workers, one budget: never past the cap
    assert 1 <= result.progress.done < ITEMS  # some items fit under the cap; those in flight at it are left for a resume
    assert len(store.items(result.run_id)) == result.progress.done


async def test_scripted_seats_run_in_workers(cluster, tmp_path):
    store = Store(tmp_path / "scripted.db")
    config = RunConfig(dataset="inline", protocol="single", models=["scripted:Reasoning.\nAnswer: C"], concurrency=4)
    result = await run_benchmark(store, config, Runtime(cache=store), cases=mcq(8), executor=RayExecutor())
    assert result.status == "done"
    scores = {row["item_id"]: row["value"] for row in store.scores(result.run_id) if row["name"] == "accuracy"}
    assert scores == {case.id: float(case.reference.answer == "C") for case in mcq(8)}
    assert store.call_counts(result.run_id)["calls"] == 8  # a scripted model's calls are logged, not cached


async def test_a_person_cannot_take_a_seat_on_ray(cluster, tmp_path):
    store = Store(tmp_path / "people.db")
    config = RunConfig(dataset="inline", protocol="single", models=["human:Surgeon"], concurrency=1)
    with pytest.raises(UsageError, match="cannot seat a person"):
        await run_benchmark(store, config, Runtime(cache=store), cases=mcq(1), executor=RayExecutor())
    assert store.list_runs() == []  # refused before the run was created


def test_bench_without_ray_names_the_extra(cli_env, tmp_path):
    hidden = tmp_path / "no_ray"
    (hidden / "ray").mkdir(parents=True)
    (hidden / "ray" / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
    env = cli_env | {"PYTHONPATH": str(hidden)}
    proc = run_cli(["bench", write_cases(tmp_path / "c.jsonl", 2), "-m", "scripted:Answer: A", "-c", "1", "--executor", "ray"], env)
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'medpanel[ray]'" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2


@pytest.mark.parametrize("address, says", [("127.0.0.1:1", "No Ray cluster answers"), ("not-an-address", "is not HOST:PORT")])
def test_a_bad_address_is_refused_before_the_run(cli_env, tmp_path, address, says):
    proc = run_cli(["bench", write_cases(tmp_path / "c.jsonl", 2), "-m", "scripted:Answer: A", "-c", "1", "--executor", "ray",
                    "--address", address, "--run-id", "never"], cli_env, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and "Traceback" not in proc.stderr
    with sqlite3.connect(cli_env["MEDPANEL_STORE"]) as db:
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0


async def test_a_spec_with_its_own_rate_limit_is_refused_on_ray(cluster, mock, tmp_path):
    store = Store(tmp_path / "limited.db")
    config = RunConfig(dataset="inline", protocol="single", models=[f"openai:seat-a@{mock.base_url}?rpm=60"], concurrency=2)
    with pytest.raises(UsageError, match="rpm, tpm or endpoint_concurrency"):
        await run_benchmark(store, config, Runtime(cache=store), cases=mcq(2), executor=RayExecutor())
    assert store.list_runs() == []  # refused before a run was created
