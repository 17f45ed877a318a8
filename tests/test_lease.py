"""One writer per run (a lease in the store), migrations and run creation in one transaction, and store
problems (full disk, read-only, corrupted, missing folder) as one clear message with nothing committed lost."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import threading
import time

import pytest

from conftest import MEDPANEL, ROOT
from medpanel.cases import Case, Reference
from medpanel.errors import UsageError
from medpanel.models import Runtime
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Panel
from medpanel.runs.runner import RunConfig, run_benchmark
from medpanel.runs.store import Store, StoreError
from medpanel.testing.process import mock_server_process

HOST = socket.gethostname()


def mcq(n: int) -> list[Case]:
    return [Case(id=f"q{i}", question=f"Question {i}?", options={"A": "yes", "B": "no"}, reference=Reference(answer="A")) for i in range(n)]


def config(**kw) -> RunConfig:
    return RunConfig(dataset="inline", protocol="single", models=["scripted:x"], **kw)


def make_run(store: Store, run_id: str = "r1") -> None:
    store.create_run(run_id, dataset="d", protocol="single", models=["m"], settings={})


def count_done(db_path, run_id) -> int:
    try:
        with sqlite3.connect(db_path, timeout=5) as db:
            return db.execute("SELECT COUNT(*) FROM items WHERE run_id = ? AND status = 'done'", (run_id,)).fetchone()[0]
    except sqlite3.OperationalError:
        return 0


# ---------------------------------------------------------------- the lease, in the store


def test_a_live_holder_refuses_a_second_writer_naming_its_pid(store):
    make_run(store)
    assert store.acquire_lease("r1", "tok-a", pid=os.getpid(), host=HOST) is None
    with pytest.raises(UsageError, match=f"pid {os.getpid()} on {HOST}") as info:
        store.acquire_lease("r1", "tok-b", pid=os.getpid(), host=HOST)
    assert f"kill {os.getpid()}" in info.value.fix
    assert store.get_run("r1")["status"] == "running"
    assert store.acquire_lease("r1", "tok-a", pid=os.getpid(), host=HOST) is None  # the holder itself may renew


def test_a_dead_pid_on_this_host_is_taken_over_and_the_run_marked_interrupted(store):
    make_run(store)
    dead = subprocess.Popen(["true"])
    dead.wait()
    store.acquire_lease("r1", "old", pid=dead.pid, host=HOST)
    reason = store.acquire_lease("r1", "new", pid=os.getpid(), host=HOST)
    assert reason and f"pid {dead.pid}" in reason and "no longer running" in reason
    run = store.get_run("r1")
    assert run["status"] == "interrupted" and run["message"] == reason
    assert store.lease("r1")["token"] == "new"
    assert store.heartbeat("r1", "old") is False  # the old holder learns it lost the lease
    assert store.heartbeat("r1", "new") is True


def test_an_old_heartbeat_from_another_host_is_stale_a_fresh_one_is_not(store):
    make_run(store)
    store.acquire_lease("r1", "far", pid=1, host="elsewhere")
    with pytest.raises(UsageError, match="pid 1 on elsewhere"):
        store.acquire_lease("r1", "near", pid=os.getpid(), host=HOST, stale_after_s=60)
    store._write([("UPDATE leases SET heartbeat_at = heartbeat_at - 120 WHERE run_id = 'r1'", ())])
    reason = store.acquire_lease("r1", "near", pid=os.getpid(), host=HOST, stale_after_s=60)
    assert "elsewhere" in reason and "s ago" in reason


async def test_the_runner_holds_the_lease_while_running_and_releases_it(store):
    runtime = Runtime(cache=store)
    seen = []

    def respond(request):
        seen.append(store.lease(next(iter(store.list_runs(1)))["id"]))
        return "Answer: A"

    result = await run_benchmark(store, config(concurrency=1), runtime, panel=Panel.of([ScriptedModel(responder=respond, runtime=runtime)]),
                                 cases=mcq(2), run_id="held")
    assert result.status == "done"
    assert seen and all(lease and lease["pid"] == os.getpid() and lease["host"] == HOST for lease in seen)
    assert store.lease("held") is None


async def test_a_resume_while_another_writer_holds_the_run_is_refused_and_changes_nothing(store):
    make_run(store, "busy")
    store.acquire_lease("busy", "other", pid=os.getpid(), host=HOST)
    runtime = Runtime(cache=store)
    model = ScriptedModel(responder=lambda request: "Answer: A", runtime=runtime)
    with pytest.raises(UsageError, match="being written by another process"):
        await run_benchmark(store, config(), runtime, run_id="busy", resume=True, panel=Panel.of([model]), cases=mcq(2))
    assert store.items("busy") == [] and store.lease("busy")["token"] == "other"


# ---------------------------------------------------------------- two real processes


def test_a_second_resume_is_refused_while_the_first_runs_and_requests_are_made_once(cli_env, shared_data):
    db_path = cli_env["MEDPANEL_STORE"]
    items = 16
    with mock_server_process("--latency", "0.8", "--reply", "choice") as mock:  # the first run lasts ~13 s
        first = subprocess.Popen([MEDPANEL, "bench", "medqa", "-m", f"openai:mock-model@{mock.base_url}", "--limit", str(items), "-c", "1",
                                  "--run-id", "twice"], env=cli_env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while count_done(db_path, "twice") < 2 and time.time() < deadline:
            time.sleep(0.05)
        second = subprocess.run([MEDPANEL, "bench", "--resume", "twice"], env=cli_env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert count_done(db_path, "twice") < items, "the first run should still be going"
        first_err = first.communicate(timeout=120)[1]
        stats = mock.stats()
    assert second.returncode == 2, second.stderr
    assert f"pid {first.pid}" in second.stderr and f"kill {first.pid}" in second.stderr
    assert "Traceback" not in second.stderr
    assert first.returncode == 0, first_err
    assert len(stats["by_hash"]) == items and set(stats["by_hash"].values()) == {1}  # each request once: nobody paid twice
    with sqlite3.connect(db_path) as db:
        assert db.execute("SELECT status FROM runs WHERE id = 'twice'").fetchone()[0] == "done"
        assert db.execute("SELECT COUNT(*) FROM leases").fetchone()[0] == 0


def test_a_sigkilled_writers_lease_is_taken_over_by_a_later_resume(cli_env, shared_data):
    db_path = cli_env["MEDPANEL_STORE"]
    items = 12
    with mock_server_process("--latency", "0.2", "--reply", "choice") as mock:
        proc = subprocess.Popen([MEDPANEL, "bench", "medqa", "-m", f"openai:mock-model@{mock.base_url}", "--limit", str(items), "-c", "2",
                                 "--run-id", "killed"], env=cli_env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while count_done(db_path, "killed") < 3 and time.time() < deadline:
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        with sqlite3.connect(db_path) as db:
            assert db.execute("SELECT pid FROM leases WHERE run_id = 'killed'").fetchone()[0] == proc.pid
        listed = json.loads(subprocess.run([MEDPANEL, "runs", "--json"], env=cli_env, cwd=ROOT, capture_output=True, text=True, timeout=60).stdout)
        assert listed[0]["status"] == "interrupted" and "no longer running" in listed[0]["stale"]  # not `running` forever
        resumed = subprocess.run([MEDPANEL, "bench", "--resume", "killed", "--json"], env=cli_env, cwd=ROOT, capture_output=True, text=True, timeout=120)
        stats = mock.stats()
    assert resumed.returncode == 0, resumed.stderr
    assert "marked interrupted" in resumed.stderr and f"pid {proc.pid}" in resumed.stderr and "no longer running" in resumed.stderr
    assert len(stats["by_hash"]) == items
    assert sum(stats["by_hash"].values()) - items <= 2  # only the calls in flight at the kill were sent again
    with sqlite3.connect(db_path) as db:
        assert db.execute("SELECT status FROM runs WHERE id = 'killed'").fetchone()[0] == "done"
        assert db.execute("SELECT COUNT(*) FROM items WHERE run_id = 'killed' AND status = 'done'").fetchone()[0] == items


# ---------------------------------------------------------------- migrations and create_run in one transaction


def test_processes_opening_a_new_store_at_once_migrate_it_once(tmp_path):
    code = ("import sys, time; from medpanel.runs.store import Store; t = float(sys.argv[2]);\n"
            "time.sleep(max(0, t - time.time())); Store(sys.argv[1]).close()")
    for attempt in range(3):
        path = tmp_path / f"race{attempt}.db"
        start = time.time() + 1.5
        procs = [subprocess.Popen([os.sys.executable, "-c", code, str(path), str(start)], stderr=subprocess.PIPE, text=True) for _ in range(6)]
        errors = [p.communicate(timeout=60)[1] for p in procs]
        assert all(p.returncode == 0 for p in procs), "\n".join(errors)
        with sqlite3.connect(path) as db:
            names = [r[0] for r in db.execute("SELECT name FROM _migrations")]
        assert len(names) == len(set(names))


def test_threads_creating_one_run_id_get_one_run_and_usage_errors(tmp_path):
    path = tmp_path / "s.db"
    Store(path).close()
    stores = [Store(path) for _ in range(8)]
    barrier = threading.Barrier(len(stores))
    outcomes: list = []

    def create(store: Store) -> None:
        barrier.wait()
        try:
            make_run(store, "same")
            outcomes.append("created")
        except Exception as exc:  # noqa: BLE001  (the test looks at which kind)
            outcomes.append(exc)

    threads = [threading.Thread(target=create, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("created") == 1
    assert all(isinstance(o, UsageError) for o in outcomes if o != "created"), outcomes


# ---------------------------------------------------------------- store problems


async def test_a_full_disk_stops_the_run_with_one_line_and_loses_nothing_committed(tmp_path):
    path = tmp_path / "full.db"
    store = Store(path)
    runtime = Runtime(cache=store)

    def fill_up(progress, runtime) -> None:
        if progress.done == 3:  # from now on no page can be added: SQLITE_FULL on the next write
            pages = store._db.execute("PRAGMA page_count").fetchone()[0]
            store._db.execute(f"PRAGMA max_page_count = {pages}")

    long = "x" * 20000  # each call record needs new pages
    model = ScriptedModel(responder=lambda request: f"{long}\nAnswer: A", runtime=runtime)
    with pytest.raises(StoreError) as info:
        await run_benchmark(store, config(concurrency=1), runtime, panel=Panel.of([model]), cases=mcq(8), run_id="full", on_progress=fill_up)
    message = str(info.value)
    assert "\n" not in message and "disk holding the store" in message and "full" in message and "--resume" in message
    assert "cannot rollback" not in message
    store.close()
    again = Store(path)
    items = again.items("full")
    assert len([i for i in items if i["status"] == "done"]) == 3
    assert not [i for i in items if i["error_kind"] == "bug"]


def test_a_read_only_store_is_one_clear_error(tmp_path):
    path = tmp_path / "ro.db"
    Store(path).close()
    store = Store(path)
    store._db.close()
    store._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
    with pytest.raises(StoreError, match="read-only") as info:
        make_run(store)
    assert "chmod" in info.value.fix


def test_a_corrupted_store_file_exits_2_and_is_left_as_it_was(cli_env, tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not sqlite at all\n" * 200)
    before = bad.read_bytes()
    for args in (["show", "last"], ["runs"], ["bench", "medqa", "-m", "scripted:echo", "--limit", "1"]):
        proc = subprocess.run([MEDPANEL, *args, "--store", str(bad)], env=cli_env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "not a readable SQLite database" in proc.stderr and "Traceback" not in proc.stderr
    assert bad.read_bytes() == before


def test_a_store_in_a_missing_folder_is_refused_not_created(cli_env, tmp_path):
    typo = tmp_path / "no-such-folder" / "s.db"
    proc = subprocess.run([MEDPANEL, "chat", "scripted:echo", "hello", "--store", str(typo)],
                          env=cli_env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "does not exist" in proc.stderr and "mkdir -p" in proc.stderr and "Traceback" not in proc.stderr
    assert not typo.parent.exists()
