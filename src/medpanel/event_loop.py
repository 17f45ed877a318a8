"""The event loop `medpanel bench` runs on: uvloop where it is installed (a dependency on Linux and macOS),
else asyncio's own.

At hundreds of calls in flight the client's own time per call is what bounds a run (docs/scale.md), and
much of it is the loop's: sockets, timers, callbacks. uvloop does that work in C, about a tenth of the
HTTP path's time per call (bench/bench_orchestration.py). It runs the same coroutines with asyncio's
semantics (asyncio.Runner with uvloop's loop: Ctrl-C and SIGTERM stop a run as they always did).
`MEDPANEL_EVENT_LOOP=asyncio` picks asyncio's loop, e.g. to rule uvloop out when chasing a problem.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Coroutine, TypeVar

from medpanel.errors import UsageError

T = TypeVar("T")
CHOICES = ("auto", "uvloop", "asyncio")


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


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main), on uvloop where it is installed and not turned off."""
    factory = loop_factory()
    if factory is None:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
