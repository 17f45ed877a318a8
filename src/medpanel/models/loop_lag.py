"""How late this process's event loop runs what is due: the client's own backlog, told apart from the server's.

A response that arrives while the loop is busy waits its turn, several times over (bytes, then the
future, then the task), so the latency a gate measures rises with the client's backlog as with the
server's queue. The CPU share shows one cause of a backlog (this process using its core); the lag shows
every cause, including a machine whose other processes leave this one too little CPU, or a blocking call
on the loop. A probe is a timer that re-arms itself every TICK_S and notes how late it fired; it stops
once nobody has asked for IDLE_S, so an idle loop is left alone.
"""

from __future__ import annotations

import asyncio
import weakref

TICK_S = 0.05
IDLE_S = 5.0
SMOOTHING = 0.2  # each tick's weight: the lag is averaged over about a quarter of a second
MAX_TICK_LAG_S = 1.0


class LagProbe:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # Weakly: the probe is the value of a weak-keyed table whose key is this loop, and a strong reference
        # would keep every loop ever probed (one per asyncio.run) alive for good.
        self._loop = weakref.ref(loop)
        self.lag = 0.0
        self.asked = loop.time()
        self.due = 0.0
        self.armed = False

    def read(self, loop: asyncio.AbstractEventLoop) -> float:
        self.asked = loop.time()
        if not self.armed:
            self._arm(loop)
        return self.lag

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        self.armed = True
        self.due = loop.time() + TICK_S
        loop.call_at(self.due, self._tick)

    def _tick(self) -> None:
        loop = self._loop()
        if loop is None:
            return
        now = loop.time()
        # One tick counts at most MAX_TICK_LAG_S: a loop stopped and run again later was not late meanwhile.
        self.lag += SMOOTHING * (min(MAX_TICK_LAG_S, max(0.0, now - self.due)) - self.lag)
        if now - self.asked > IDLE_S:
            self.armed, self.lag = False, 0.0  # idle: stop, and start afresh when asked again
            return
        self._arm(loop)


_PROBES: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LagProbe]" = weakref.WeakKeyDictionary()


def loop_lag() -> float:
    """Seconds the running loop lags behind its timers, averaged (0 outside a loop, and until measured)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return 0.0
    probe = _PROBES.get(loop)
    if probe is None:
        probe = _PROBES[loop] = LagProbe(loop)
    return probe.read(loop)
