"""Group commit for the call log: a thread of the store's own commits finished calls in groups.

Every answered call is written (cache entry and spend-ledger row) before its answer is used, so a crash
loses no call that anything was built on. Done on the event loop, that was one SQLite transaction per
call, with the loop stalled on each: at hundreds of calls in flight the store was a sixth of the client's
time. Here the loop hands the rows over and awaits the commit; the thread commits everything that has
queued up meanwhile in one transaction (SQLite runs without the GIL, so on another core), then wakes
each waiter on its own loop. The guarantee is unchanged (a caller resumes only once its rows are in the
file); what changes is that many calls share one commit and the loop goes on serving others.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import sys
import threading
import weakref
from collections import deque
from typing import Callable, Iterable

from medpanel.runs.store_errors import StoreError

MAX_GROUP = 1024  # calls per transaction: bounds how long one commit holds the store
JOIN_S = 30.0  # the most close() waits for queued calls to be committed
IDLE_S = 2.0  # a writer thread with nothing to commit for this long ends

Statements = list[tuple[str, tuple]]

_OPEN: "weakref.WeakSet[CallWriter]" = weakref.WeakSet()


@atexit.register
def _flush_at_exit() -> None:
    # A run stopped by Ctrl-C may leave committed-to-be rows queued whose callers were cancelled: they are
    # calls that were answered (and billed), so they reach the ledger before the interpreter drops the thread.
    for writer in list(_OPEN):
        writer.close()


def _after_fork_in_child() -> None:
    # A child made by fork() has none of the parent's threads, and may have been made while one of them held a
    # writer's lock: each writer starts afresh there (its thread, on the next call). What was queued is the
    # parent's, whose own thread commits it; the child committing it too would log those calls twice.
    for writer in list(_OPEN):
        writer._ready = threading.Condition()
        writer._queue.clear()
        writer._thread, writer._closing = None, False


os.register_at_fork(after_in_child=_after_fork_in_child)


class CallWriter:
    def __init__(self, commit: Callable[[Iterable[tuple[str, tuple]]], None], name: str) -> None:
        """`commit(statements)` runs them in one transaction (the store's `_write`)."""
        self._commit = commit
        self._name = name
        self._queue: deque[tuple[Statements, asyncio.AbstractEventLoop, asyncio.Future]] = deque()
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closing = False
        self.commits = 0  # transactions that committed calls (fewer than the calls: that is the point)
        _OPEN.add(self)

    def submit(self, statements: Statements) -> asyncio.Future:
        """A future, on the running loop, done once the statements are committed (or failed with the error)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._ready:
            if self._closing:
                raise RuntimeError("the store is closed")
            self._queue.append((statements, loop, future))
            if self._thread is None:
                # A daemon, so a process that never closes its store still exits; close() is what flushes.
                self._thread = threading.Thread(target=self._run, name=f"medpanel-calls:{self._name}", daemon=True)
                self._thread.start()
            self._ready.notify()
        return future

    async def barrier(self) -> None:
        """Returns once every call submitted before it is committed (or has failed): the queue is first in,
        first out, so an empty entry behind them is settled after them."""
        await self.submit([])

    def close(self) -> None:
        """Commit what is queued, then stop the thread (bounded by JOIN_S)."""
        with self._ready:
            self._closing = True
            self._ready.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(JOIN_S)

    def _run(self) -> None:
        while True:
            with self._ready:
                if not self._queue and not self._closing:
                    self._ready.wait(IDLE_S)
                if not self._queue:
                    # Closing, or idle: the thread ends (the next call starts another), so a store left open
                    # without calls (a web request's, a test's) holds no thread.
                    self._thread = None
                    return
                group = [self._queue.popleft() for _ in range(min(len(self._queue), MAX_GROUP))]
            self._settle(self._write(group))

    def _write(self, group: list) -> list[tuple[asyncio.AbstractEventLoop, asyncio.Future, BaseException | None]]:
        try:
            self._commit([statement for statements, _, _ in group for statement in statements])
            self.commits += 1
            return [(loop, future, None) for _, loop, future in group]
        except StoreError as exc:
            # The file, disk or lock is at fault, not a row: every call would fail alike (a lock, after its own
            # 30 s wait), so the whole group hears this one error at once.
            return [(loop, future, exc) for _, loop, future in group]
        except BaseException as exc:  # noqa: BLE001  (reported to the callers)
            if len(group) == 1:
                return [(group[0][1], group[0][2], exc)]
        # One call's rows may be what failed: each half again, so the good calls are committed in a few
        # transactions (about two per halving) instead of one each, and each caller hears its own outcome.
        # Halves keep the queue's order, so a barrier still settles after every call before it.
        middle = len(group) // 2
        return self._write(group[:middle]) + self._write(group[middle:])

    def _settle(self, outcomes: list) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list] = {}
        for loop, future, error in outcomes:
            by_loop.setdefault(loop, []).append((future, error))
        for loop, done in by_loop.items():
            try:
                loop.call_soon_threadsafe(_wake, done, self._name)  # one hop per loop and group, not one per call
            except RuntimeError:  # that loop is closed: nobody waits any more
                for _, error in done:
                    _unheard(error, self._name)


def _wake(done: list[tuple[asyncio.Future, BaseException | None]], name: str) -> None:
    for future, error in done:
        if future.done():  # its caller was cancelled: the rows were still written, or the failure is said here
            _unheard(error, name)
        elif error is None:
            future.set_result(None)
        else:
            future.set_exception(error)


def _unheard(error: BaseException | None, name: str) -> None:
    """A call's rows that failed with nobody left to tell (its caller cancelled, its loop closed): said on
    stderr, so a billed call missing from the ledger is never silent."""
    if error is not None:
        print(f"medpanel: a model call's record could not be written to the store {name}: {error}", file=sys.stderr)
