"""The one worker pool: run `work` over items with at most `concurrency` at a time, in one event loop.

Used by the runner (items of a run) and by judging a stored run afterwards. A worker takes the next item
while `keep_going()` holds; the first exception a worker lets through stops the pool (the others are
cancelled, and awaited, so nothing is left running or spending) and is raised.

With `start_gap_s`, worker k starts `k * start_gap_s` after the first (a ramp) instead of all at once. Items
that start in the same instant move in step: their calls reach the server together, come back together, and
the answers of a whole wave queue behind one another in this process's event loop, round after round.
Started a little apart, each item's answers arrive as the loop can take them. The starts keep to that
schedule, not to sleeps chained one after another: uvloop rounds a sleep to whole milliseconds and a busy
loop fires timers late, and either would stretch the ramp beyond (workers - 1) x gap.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Awaitable, Callable, Iterable, TypeVar

T = TypeVar("T")


async def drain(items: Iterable[T], work: Callable[[T], Awaitable[None]], concurrency: int,
                keep_going: Callable[[], bool] = lambda: True, start_gap_s: float = 0.0) -> None:
    queue = deque(items)
    loop = asyncio.get_running_loop()
    failed = loop.create_future()  # done once a worker lets an exception through: nothing more is taken or started

    async def worker() -> None:
        try:
            while queue and not failed.done() and keep_going():
                await work(queue.popleft())
        except BaseException:
            if not failed.done():
                failed.set_result(None)  # wakes the ramp below at once, not at its next start
            raise

    first = loop.time()
    workers: list[asyncio.Task] = []
    try:
        for started in range(max(1, min(concurrency, len(queue)))):
            if started and start_gap_s > 0:
                due = first + started * start_gap_s - loop.time()
                if due > 0:
                    await asyncio.wait([failed], timeout=due)
                if failed.done() or not queue or not keep_going():
                    break  # the workers already started take what is left, or stop as they would have
            workers.append(asyncio.create_task(worker()))
        await asyncio.gather(*workers)
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
