"""The event loop `medpanel bench` runs on: uvloop where it is installed (a dependency on Linux and macOS),
else asyncio's own.

At hundreds of calls in flight the client's own time per call is what bounds a run (docs/scale.md), and
much of it is the loop's: sockets, timers, callbacks. uvloop does that work in C, about a tenth of the
HTTP path's time per call (bench/bench_orchestration.py). It runs the same coroutines with asyncio's
semantics (asyncio.Runner with uvloop's loop: Ctrl-C and SIGTERM stop a run as they always did).
`MEDPANEL_EVENT_LOOP=asyncio` picks asyncio's loop, e.g. to rule uvloop out when chasing a problem.

The cyclic garbage collector is tuned for the run too. With hundreds of calls in flight many objects are
alive at once (tasks, futures, replies), and Python's default (a young collection every 700 new objects,
each walking every live young object) spent a quarter of the loop's time per call, in pauses that hold every
call back; each full collection also walked every module and schema loaded before the run (tens of ms a
time). So what exists when the run starts is frozen out of collection (gc.freeze: it lives as long as the
run anyway) and young collections run every YOUNG_THRESHOLD objects; garbage in cycles is still collected,
only less often. Both are put back when the run ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import threading
from typing import Any, Coroutine, TypeVar

from medpanel.errors import UsageError

T = TypeVar("T")
CHOICES = ("auto", "uvloop", "asyncio")
YOUNG_THRESHOLD = 10_000  # objects between young collections (Python's default: 700)
OLDER_THRESHOLD = 20  # young collections per middle one, and middle ones per full one (default: 10, 10)


def loop_factory():
    choice = os.environ.get("MEDPANEL_EVENT_LOOP", "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        raise UsageError(f"MEDPANEL_EVENT_LOOP={choice!r} is not an event loop medpanel knows.", "Set it to auto, uvloop or asyncio.")
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise UsageError("MEDPANEL_EVENT_LOOP=uvloop, but uvloop is not installed.", "pip install uvloop (not on Windows), or unset it.") from None
        return None
    return uvloop.new_event_loop


_gc_lock = threading.Lock()
_gc_depth = 0  # runs under way in this process (threads may run several at once)
_gc_before: tuple[int, int, int] | None = None  # the thresholds before the first of them began


@contextlib.contextmanager
def run_gc():
    """The collector as a long run of many concurrent calls wants it (see above): tuned when the first run of
    the process begins, restored when the last one still running ends (whichever of them that is)."""
    global _gc_depth, _gc_before
    with _gc_lock:
        if _gc_depth == 0:
            _gc_before = gc.get_threshold()
            gc.collect()  # garbage that exists now is collected, not frozen
            gc.freeze()
            gc.set_threshold(YOUNG_THRESHOLD, OLDER_THRESHOLD, OLDER_THRESHOLD)
        _gc_depth += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0 and _gc_before is not None:
                gc.set_threshold(*_gc_before)
                gc.unfreeze()


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main), on uvloop where it is installed and not turned off, with the collector tuned."""
    factory = loop_factory()
    with run_gc():
        if factory is None:
            return asyncio.run(main)
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(main)
