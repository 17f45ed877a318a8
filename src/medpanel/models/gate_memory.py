"""What an endpoint's gate learned, kept in the store for the next process (models/adaptive.py).

A new process used to meet every endpoint as a stranger: a window of 4, tripling each round trip, so a run of
256 items in flight at 0.5 s spent about 3 s of a 6 s ideal slow-starting (bench/bench_orchestration.py), and
a rate-limited API was offered a first burst before its 429s taught the pace again.

- **Kept:** the window, the learned pace and the pace last refused, and when. Written (through the store's writer thread, never
  waited for) at once when the gate has learned something is too much: a smaller window or pace, a new refused
  pace, the end of slow start; growth by a quarter or more at most once every `SAVE_EVERY_S`, and any growth
  when the gate falls idle (the end of a run); and what has not changed again after `REFRESH_S`, so steady
  memory does not expire.
- **Used** by a gate that has sent nothing yet in this process, when what is kept is younger than `MEMORY_S`:
  the window starts there (at least the usual 4, at most the spec's endpoint_concurrency) and slow-starts from
  it, as a stranger's does from 4; the pace starts where it was (at most the spec's rpm). The latency baseline
  is measured afresh, and slow start is resumed even if the last process had left it: the server may have got
  slower or faster since, and a window a last burst of errors cut to 2 must not grow by one a round trip for
  ever after: a restart starts no lower than a first run and grows as fast. Older memory is ignored.
- Only a store in this process keeps it (`keeps_gate_memory`). A Ray worker's forwarding cache does not: N
  workers each starting at the whole endpoint's pace would offer it N times that, and their writes would
  overwrite each other's shares. A gate with `?adaptive=0` neither reads nor writes it.
- A gate is shared by every spec of its model and URL in the process; it recalls from the first store one of
  them calls with, and keeps what it learns in each store it is used with.
"""

from __future__ import annotations

import math
import time
from typing import Any

from medpanel.models.adaptive import INITIAL_WINDOW, MAX_WINDOW, PACE_FLOOR, Bucket, EndpointGate

NAME = "gate"
MEMORY_S = 24 * 3600.0  # what a gate learned this long ago is ignored
REFRESH_S = 3600.0  # unchanged memory is written again after this long, so it stays within MEMORY_S
SAVE_EVERY_S = 1.0  # growth is written at most this often per gate and store
GROWTH = 1.25  # a window or pace this many times what is kept is news worth a write
IDLE_SAVE_S = 0.1  # any growth is written when the gate falls idle, at most this often


def keeps_memory(cache: Any) -> bool:
    return getattr(cache, "keeps_gate_memory", False) is True


def state(gate: EndpointGate) -> dict[str, Any]:
    return {"window": gate.window(), "slow_start": gate.slow_start,
            "pace_per_s": gate.pace.per_s if gate.pace is not None else None, "refused_at": gate.refused_at,
            "at": time.time()}


def recall(gate: EndpointGate, cache: Any, model: str) -> None:
    """Start `gate` from what the store kept for it: once, and only if it has sent nothing yet."""
    if gate.recalled or not gate.adaptive or not keeps_memory(cache):
        return
    gate.recalled = True
    kept = cache.server_capability(gate.url, model, NAME)
    if not usable(kept):
        return
    with gate.lock:
        if gate.sent:
            return  # another thread's first request went meanwhile: what the gate learns now is newer
        top = float(gate.cap or MAX_WINDOW)
        gate.limit = max(float(min(INITIAL_WINDOW, top)), min(top, float(kept["window"])))
        gate.slow_start = True  # from the kept window, as from 4: a changed server is found again in a round trip or two
        pace = _positive(kept.get("pace_per_s"))
        if pace is not None:
            top_rate = gate.requests.per_s if gate.requests is not None else None
            pace = max(PACE_FLOOR, pace)
            gate.pace = Bucket(min(pace, top_rate) if top_rate else pace, 1.0)
            gate.cut_at = gate.grown_at = time.monotonic()
            gate.refused_at = _positive(kept.get("refused_at"))


def remember(gate: EndpointGate, cache: Any, model: str) -> None:
    """Keep what `gate` has learned in `cache` when it is news (see the module's docstring); cheap when not."""
    if not gate.adaptive or not keeps_memory(cache):
        return
    where = getattr(cache, "path", None) or id(cache)  # per store file: a new Store on it shares what was written
    held = gate.kept.get(where)
    kept, written = held if held is not None else (None, float("-inf"))
    clock = time.monotonic()
    with gate.lock:
        news = _news(gate, kept)
        # Growth waits its turn, except when the gate falls idle (the end of a run, or of a burst): what it
        # reached is kept then, so a run shorter than SAVE_EVERY_S leaves its memory too.
        # (Idle: nothing in flight and nobody waiting, so not the gaps between paced requests.)
        idle = gate.in_flight == 0 and not gate.line
        due = (news == URGENT or (news == GREW_MUCH and clock - written >= SAVE_EVERY_S)
               or (news != NOTHING and idle and clock - written >= IDLE_SAVE_S))
        if not due:
            return
        now = state(gate)
    cache.remember_server_capability_soon(gate.url, model, NAME, now)
    with gate.lock:  # only once handed over: a store that refused it is tried again on the next answer
        gate.kept[where] = (now, clock)


def usable(kept: Any) -> bool:
    return (isinstance(kept, dict) and _positive(kept.get("window")) is not None
            and _positive(kept.get("at")) is not None and 0 <= time.time() - kept["at"] <= MEMORY_S)


NOTHING, GREW, GREW_MUCH, URGENT = range(4)  # what the gate knows that the store lacks, by how soon it is written


def _news(gate: EndpointGate, kept: dict | None) -> int:
    """URGENT: nothing kept yet, anything smaller or newly refused (the next process must not start above it),
    the end of slow start, or memory due for a refresh. GREW_MUCH: a window or pace GROWTH times the kept one.
    GREW: any growth. (`kept` is what this process wrote, so every field is there.)"""
    if kept is None or time.time() - kept["at"] >= REFRESH_S or kept["slow_start"] != gate.slow_start \
            or kept["refused_at"] != gate.refused_at:
        return URGENT
    window, pace, old_pace = gate.window(), gate.pace.per_s if gate.pace is not None else None, kept["pace_per_s"]
    if (pace is None) != (old_pace is None) or window < kept["window"] or (pace is not None and pace < old_pace):
        return URGENT
    if window >= GROWTH * kept["window"] or (pace is not None and pace >= GROWTH * old_pace):
        return GREW_MUCH
    return GREW if window > kept["window"] or (pace is not None and pace > old_pace) else NOTHING


def _positive(value: Any) -> float | None:
    """A finite number above 0 (not a bool), else None: what the store holds may come from anywhere."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)
