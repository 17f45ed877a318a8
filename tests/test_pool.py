"""The worker pool's start ramp (runs/pool.py): the first workers start a gap apart, a later item takes the slot
of one that ended at once, and a failure or a stop during the ramp starts no more workers. Each check is an
order or a lower bound on time (a loaded machine only makes things later), never an upper one."""

from __future__ import annotations

import asyncio

import pytest

from medpanel.cases import Case
from medpanel.models import Runtime
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Panel
from medpanel.runs.pool import drain
from medpanel.runs.runner import ITEM_START_GAP_S, RunConfig, item_start_gap, run_benchmark


async def _until(condition, what: str) -> None:
    for _ in range(2000):  # bounded: 10 s at most
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


async def test_the_first_workers_start_a_gap_apart_and_a_later_item_takes_an_ended_ones_slot_at_once():
    loop = asyncio.get_running_loop()
    release = {i: asyncio.Event() for i in range(8)}
    started: dict[int, float] = {}

    async def work(item: int) -> None:
        started[item] = loop.time()
        await release[item].wait()

    before = loop.time()
    pool = asyncio.create_task(drain(range(8), work, 4, start_gap_s=0.02))
    await _until(lambda: len(started) == 4, "the first four items")
    assert sorted(started) == [0, 1, 2, 3]
    assert all(started[k] >= before + k * 0.02 for k in range(4))  # the ramp: worker k no sooner than k gaps in
    await asyncio.sleep(0.05)
    assert 4 not in started  # at most four at a time, whatever the wait

    release[0].set()
    for _ in range(10):  # a few passes of the loop, no timer: the freed worker takes the next item without a gap
        await asyncio.sleep(0)
    assert 4 in started and 5 not in started
    for event in release.values():
        event.set()
    await pool
    assert sorted(started) == list(range(8))


async def test_a_failure_during_the_ramp_starts_no_more_workers_and_is_raised():
    taken: list[int] = []

    async def work(item: int) -> None:
        taken.append(item)
        if item == 0:
            raise RuntimeError("the first item broke")
        await asyncio.sleep(1)

    # The next worker is due 10 s in: the failure ends the ramp's wait at once, not at that start.
    with pytest.raises(RuntimeError, match="first item broke"):
        await asyncio.wait_for(drain(range(10), work, 10, start_gap_s=10), 5)
    assert taken == [0]


async def test_a_stop_during_the_ramp_starts_no_more_workers():
    taken: list[int] = []
    asked = 0

    def keep_going() -> bool:
        nonlocal asked
        asked += 1
        return not taken

    async def work(item: int) -> None:
        taken.append(item)
        await asyncio.sleep(0.05)

    await drain(range(10), work, 10, keep_going=keep_going, start_gap_s=0.2)
    assert taken == [0]
    # The one worker asks twice (before and after its item) and the ramp once; nine more workers would ask nine times more.
    assert asked <= 3


def test_the_ramp_is_a_millisecond_an_item_and_half_a_second_at_most():
    assert item_start_gap(8) == ITEM_START_GAP_S == 0.001
    assert item_start_gap(256) * 255 == pytest.approx(0.255)
    assert item_start_gap(1024) * 1024 == pytest.approx(0.5)


async def test_a_run_starts_its_first_items_a_gap_apart(store, monkeypatch):
    from medpanel.runs import runner

    # A wider gap than the runner's, so the bound below is far above what a run takes to set itself up.
    monkeypatch.setattr(runner, "ITEM_START_GAP_S", 0.02)
    class Slow(ScriptedModel):  # slower than the ramp: no worker frees up and takes a later item before it ends
        async def generate(self, request):
            await asyncio.sleep(0.4)
            return await super().generate(request)

    runtime = Runtime(cache=store)
    panel = Panel.of([Slow(responder=lambda r: "Answer: A", runtime=runtime)])
    items = 10
    cases = [Case(id=f"q{i}", question=f"Question {i}?", options={"A": "yes", "B": "no"}) for i in range(items)]
    config = RunConfig(dataset="inline", protocol="single", models=["scripted:x"], concurrency=items)
    result = await run_benchmark(store, config, runtime, panel=panel, cases=cases, run_id="ramp")
    assert result.progress.done == items
    created = store.get_run("ramp")["created_at"]
    last = max(item["started_at"] for item in store.items("ramp"))
    # The last of the first wave starts no sooner than nine gaps (0.18 s) after the run was created; all at once,
    # it took a few milliseconds.
    assert last - created >= (items - 1) * 0.02
