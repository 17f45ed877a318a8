"""The one worker pool: run `work` over items with at most `concurrency` at a time, in one event loop.

Used by the runner (items of a run) and by judging a stored run afterwards. A worker takes the next item
while `keep_going()` holds; the first exception a worker lets through stops the pool (the others are
cancelled, and awaited, so nothing is left running or spending) and is raised.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Awaitable, Callable, Iterable, TypeVar

T = TypeVar("T")


async def drain(items: Iterable[T], work: Callable[[T], Awaitable[None]], concurrency: int,
                keep_going: Callable[[], bool] = lambda: True) -> None:
    queue = deque(items)

    async def worker() -> None:
        while queue and keep_going():
            await work(queue.popleft())

    workers = [asyncio.create_task(worker()) for _ in range(max(1, min(concurrency, len(queue))))]
    try:
        await asyncio.gather(*workers)
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
