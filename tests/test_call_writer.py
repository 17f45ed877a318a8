"""Group commit of the call log (runs/call_writer.py): a call's answer is used only once its rows are in the
file, many calls share one transaction, one bad call fails alone, and nothing queued is lost at close or
when its caller is cancelled. Real SQLite files; real HTTP to the mock server for the end-to-end test."""

from __future__ import annotations

import asyncio
import sqlite3
import threading

import pytest

from medpanel.models import build_model
from medpanel.models.runtime import Runtime, call_scope
from medpanel.models.scripted import ScriptedModel
from medpanel.runs.call_writer import CallWriter
from medpanel.runs.store import Store
from medpanel.testing import MockConfig, MockServer


async def test_each_answer_is_in_the_file_before_it_is_used_and_calls_share_commits(tmp_path):
    store = Store(tmp_path / "s.db")
    other = sqlite3.connect(tmp_path / "s.db")  # another connection sees only what was committed
    with MockServer(MockConfig(reply="choice", latency_s=0.05)) as server:
        model = build_model(f"openai:mock@{server.base_url}", Runtime(cache=store))
        missing: list[int] = []

        async def one(i: int) -> None:
            call_scope.set(("run", f"item{i}", 0))
            await model.complete(f"Question {i}?\nA. yes\nB. no", max_tokens=8)
            if not other.execute("SELECT 1 FROM call_log WHERE item_id = ?", (f"item{i}",)).fetchone():
                missing.append(i)

        await asyncio.gather(*(one(i) for i in range(300)))
    assert missing == []
    assert other.execute("SELECT COUNT(*) FROM call_log").fetchone()[0] == 300
    assert other.execute("SELECT COUNT(*) FROM calls").fetchone()[0] == 300
    assert store._writer.commits < 300  # answers that came back together were committed together
    # A rerun is served from the cache, and those calls are logged through the same writer.
    async def again(i: int) -> bool:
        call_scope.set(("run2", f"item{i}", 0))
        return (await model.complete(f"Question {i}?\nA. yes\nB. no", max_tokens=8)).cached

    assert all(await asyncio.gather(*(again(i) for i in range(300))))
    assert other.execute("SELECT COUNT(*) FROM call_log WHERE run_id = 'run2' AND cached = 1").fetchone()[0] == 300
    store.close()


class Recorder:
    """A commit function standing in for the store's: records each group, fails on a poisoned statement."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.groups: list[list] = []
        self.gate = gate

    def __call__(self, statements) -> None:
        if self.gate is not None:
            self.gate.wait(10)
        statements = list(statements)
        if any(sql == "poison" for sql, _ in statements):
            raise sqlite3.IntegrityError("a bad row")
        self.groups.append(statements)


async def test_one_bad_call_fails_alone_and_the_rest_of_its_group_is_committed():
    gate = threading.Event()
    recorder = Recorder(gate)
    writer = CallWriter(recorder, "t")
    futures = [writer.submit([("poison" if i == 3 else "ok", (i,))]) for i in range(8)]
    gate.set()
    outcomes = await asyncio.gather(*futures, return_exceptions=True)
    assert isinstance(outcomes[3], sqlite3.IntegrityError)
    assert [o for i, o in enumerate(outcomes) if i != 3] == [None] * 7
    committed = sorted(args[0] for group in recorder.groups for _, args in group)
    assert committed == [0, 1, 2, 4, 5, 6, 7]
    writer.close()


async def test_one_bad_call_in_a_large_group_costs_a_few_transactions_not_one_per_call():
    gate = threading.Event()
    recorder = Recorder(gate)
    attempts: list[int] = []

    def commit(statements) -> None:
        statements = list(statements)
        attempts.append(len(statements))
        recorder(statements)

    writer = CallWriter(commit, "t")
    gate_future = writer.submit([("ok", ("first",))])  # the thread takes this one (alone, unless it starts late) and waits
    await asyncio.sleep(0.05)
    futures = [writer.submit([("poison" if i == 200 else "ok", (i,))]) for i in range(256)]
    gate.set()
    await gate_future
    outcomes = await asyncio.gather(*futures, return_exceptions=True)
    assert isinstance(outcomes[200], sqlite3.IntegrityError)
    assert sum(o is None for o in outcomes) == 255
    committed = [args[0] for group in recorder.groups for _, args in group][1:]
    assert committed == [i for i in range(256) if i != 200]  # in the order they came
    # The first group, then the rest in one group and two halves per halving down to the bad call: at most
    # 1 + 1 + 2 x 9 (a group of up to 257 halves 9 times), not one a call.
    assert len(attempts) <= 2 + 2 * 9, attempts
    writer.close()


async def test_a_cancelled_caller_s_rows_are_still_written_and_close_flushes_the_queue():
    gate = threading.Event()
    recorder = Recorder(gate)
    writer = CallWriter(recorder, "t")
    waiting = asyncio.ensure_future(writer.submit([("ok", ("cancelled",))]))
    queued = [writer.submit([("ok", (i,))]) for i in range(5)]
    await asyncio.sleep(0.05)
    waiting.cancel()  # its caller gave up (Ctrl-C): the call was answered all the same
    gate.set()
    await asyncio.to_thread(writer.close)  # from another thread, as Store.close may be
    committed = [args[0] for group in recorder.groups for _, args in group]
    assert sorted(map(str, committed)) == sorted(["cancelled", "0", "1", "2", "3", "4"])
    assert all(f.done() for f in queued)
    with pytest.raises(RuntimeError):
        writer.submit([("ok", ("late",))])


async def test_a_closed_store_refuses_cache_lookups_as_before(tmp_path):
    store = Store(tmp_path / "s.db")
    assert store.get_call("nothing") is None
    store.close()
    with pytest.raises(sqlite3.ProgrammingError):
        store.get_call("nothing")


async def test_an_idle_writer_holds_no_thread_and_starts_one_again_for_the_next_call():
    recorder = Recorder()
    writer = CallWriter(recorder, "t")
    await writer.submit([("ok", (1,))])
    for _ in range(100):  # it ends after IDLE_S without work
        if writer._thread is None:
            break
        await asyncio.sleep(0.05)
    assert writer._thread is None
    await asyncio.wait_for(writer.submit([("ok", (2,))]), 5)
    assert [args[0] for group in recorder.groups for _, args in group] == [1, 2]
    writer.close()


async def test_a_store_problem_fails_the_whole_group_at_once_without_a_retry_per_call():
    # A locked or full store fails every row alike (a lock only after its own 30 s wait): retrying each call
    # alone would turn one wait into one per call. A bad row (below) is still told apart.
    from medpanel.runs.store_errors import StoreError

    attempts: list[int] = []
    gate = threading.Event()

    def locked(statements) -> None:
        gate.wait(5)
        attempts.append(len(list(statements)))
        raise StoreError("The store s.db stayed locked by another process for 30 s.", "Wait, or use another --store.")

    writer = CallWriter(locked, "s.db")
    futures = [writer.submit([("INSERT", (i,))]) for i in range(50)]
    gate.set()
    outcomes = await asyncio.gather(*futures, return_exceptions=True)
    assert all(isinstance(o, StoreError) for o in outcomes)
    assert len(attempts) <= 2, attempts  # one commit per group (the first may leave before the rest queue)
    writer.close()


async def test_a_barrier_returns_only_once_every_earlier_call_is_committed():
    committed: list[int] = []
    gate = threading.Event()

    def slow(statements) -> None:
        gate.wait(5)
        committed.extend(args[0] for _, args in statements)

    writer = CallWriter(slow, "s.db")
    queued = [writer.submit([("INSERT", (i,))]) for i in range(20)]
    barrier = asyncio.ensure_future(writer.barrier())
    await asyncio.sleep(0.1)
    assert not barrier.done()  # the rows before it are not committed yet
    gate.set()
    await asyncio.wait_for(barrier, 5)
    assert sorted(committed) == list(range(20))
    await asyncio.gather(*queued)
    writer.close()


def test_the_store_opens_its_cache_lookups_where_it_was_opened_whatever_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    store = Store("s.db")
    store.put_call("k", {"model": "m", "text": "hi"})
    monkeypatch.chdir(tmp_path / "b")  # the lookup connection opens now, on first use
    assert store.get_call("k")["text"] == "hi"
    assert not (tmp_path / "b" / "s.db").exists()
    store.close()


def test_a_store_open_when_the_process_forks_is_refused_in_the_child_at_once_and_the_parent_goes_on(tmp_path):
    # SQLite's connections cannot cross a fork. Before, the child's writer kept the parent's thread object, so a
    # call queued there waited forever for a thread that was not there; through the copied connections (or a
    # new one beside their copied lock state) the child could lose what it wrote. Now every use in the child is
    # refused at once, with what to do; the parent's store is untouched.
    import os
    import time

    from medpanel.runs.store_errors import StoreError

    store = Store(tmp_path / "s.db")

    async def put(key: str) -> None:
        await store.put_call_async(key, {"model": "m", "text": key}, ("run", key, 0))

    asyncio.run(put("parent-before"))  # the parent's writer thread is running when it forks
    pid = os.fork()
    if pid == 0:  # the child: exit with 0 only if every use is refused with the fork named, and nothing hangs
        code = 1
        try:
            refused = 0
            # A model call that would skip the lookup (no cache use) is refused before it is sent, not after it is billed.
            unlooked = ScriptedModel(["paid"], cacheable=True, runtime=Runtime(cache=store, use_cache=False))
            for use in (lambda: asyncio.run(asyncio.wait_for(put("child"), 10)), lambda: store.get_call("parent-before"),
                        lambda: store.list_runs(), lambda: asyncio.run(asyncio.wait_for(unlooked.complete("q"), 10))):
                try:
                    use()
                except StoreError as exc:
                    refused += "forked" in str(exc) and "spawn" in str(exc)
            store.close()
            code = 0 if refused == 4 and not unlooked.history else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung on the store")
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(status) == 0
    asyncio.run(put("parent-after"))
    assert store.get_call("child") is None and store.get_call("parent-before")["text"] == "parent-before"
    logged = sqlite3.connect(tmp_path / "s.db").execute("SELECT item_id FROM call_log ORDER BY item_id").fetchall()
    assert [r[0] for r in logged] == ["parent-after", "parent-before"]
    store.close()
