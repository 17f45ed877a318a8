"""How fast one endpoint may be called: a window of requests in flight and a pace, both learned from the
server's answers, so a default run approaches the server's capacity without a 429 storm. One gate per
model and endpoint URL in a process (shared by every spec of it, like endpoint pools: models/endpoints.py).

- **Window (AIMD).** Starts at `INITIAL_WINDOW` requests in flight. Until the first sign of congestion it
  grows by `SLOW_START_GROWTH` per success (it triples each round trip: slow start); after, by one per window's worth of
  successes. Congestion cuts it: an overload answer (a 5xx or a timeout) to `DECREASE` of itself, a
  short-term latency above `LATENCY_RISE` times its baseline to where a queue at the server would bring
  it back to that line (at most by half); at most once per round trip, since only a request sent after
  the last cut can cause another. A latency rise is not held against the server while this process uses
  most of a core (`CLIENT_BUSY`) or its event loop runs late (`CLIENT_LAG`, e.g. on a machine whose other
  processes leave it too little CPU): then the client's own delays are what rose. It grows only while used (a success with fewer
  than half the window in flight adds nothing), and stays within [1, endpoint_concurrency or 1024].
  Latency is compared per output token (plus a fixed share for the prompt), as servers take longer for
  longer answers.
- **Pace, learned from 429s (AIMD on the rate).** Unpaced until the first 429; then requests go at most at
  `PACE_CUT` of the higher of the rate the server admitted until it said no and the rate its sub-second
  Retry-After implies (the time to its next free request), so one passing 429 costs little. Each later 429 of a request sent after the last cut sets the pace to `PACE_CUT` of the pace it
  was refused at, or of what it admitted meanwhile if it kept refusing while offered clearly more. Between
  cuts the pace grows by `PACE_GROWTH` of itself per second, that growth doubling every `PACE_DOUBLING_S`
  without a 429 (a passing 429 is forgotten in about a minute; a raised limit is found again), ten times
  slower until it passes the pace last refused (the limit is just below it: probing slowly keeps 429s
  rare), and never above twice what the endpoint admitted lately. A 429 does not narrow the
  window: under a rate limit, the rate is the limit.
- **Retry-After.** After a 429 nothing goes to the endpoint until its Retry-After has passed (1 s without
  one, at most 60 s).
- **Configured limits** (`?rpm=`, `?tpm=` in the spec): token buckets of one second's worth; a request
  waits for its share. Tokens are counted when it is sent (the prompt's estimate plus max_tokens) and
  settled to the usage the server reports. The learned pace never exceeds the rpm.
- `?adaptive=0` turns the learning off: a fixed window of endpoint_concurrency (or 1024), no learned pace;
  the configured limits and Retry-After still hold.

The bookkeeping is synchronous (no await between reading and changing counts), so a cancelled request
never leaks a slot; a release wakes one waiter, which wakes the next if room is left (no stampede of
hundreds of waiters on every answer).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from medpanel.errors import UsageError
from medpanel.models.loop_lag import loop_lag

INITIAL_WINDOW = 4  # a first burst an API's rate limit can take
# Slow start adds this per success, tripling the window each round trip: a model's round trip takes seconds,
# so doubling (TCP's) would take a minute-long run a tenth of its time to reach 256 in flight. Its first 429
# (a rate limit) comes in the first round trip whatever the growth; a queue's latency rise cuts it a round later.
SLOW_START_GROWTH = 2.0
MAX_WINDOW = 1024
DECREASE = 0.8
LATENCY_RISE = 2.0  # short-term latency this many times the baseline is congestion
BASE_DRIFT_S = 60.0  # a latency that lasts this long becomes the baseline
CLIENT_BUSY = 0.85  # of a core: a client this busy delays its own answers, so their latency says nothing of the server
CLIENT_LAG = 0.1  # of a request's latency: an event loop this late (models/loop_lag.py) delays answers several times over
PROMPT_SHARE_TOKENS = 20  # a request's fixed cost (the first token's wait), counted as this many output tokens
PROMPT_TOKEN_SHARE = 0.05  # and each prompt token as this share of an output token
PACE_CUT = 0.9  # a 429 sets the pace to this share of the rate it was refused at
PACE_GROWTH = 0.003  # of the pace, per second of successes at it
PACE_DOUBLING_S = 10.0  # the pace's growth doubles every this many seconds without a 429
NEAR_LIMIT, NEAR_LIMIT_SLOWDOWN = 0.9, 0.1  # below the pace last refused (from its cut on), it grows ten times slower
PACE_FLOOR = 1 / 60  # requests per second: a pace never falls below one a minute
ADMITTED_SPAN_S = 10.0  # how far back the admitted rate is measured
RETRY_AFTER_S = (1.0, 60.0)  # without a Retry-After; the most one is honoured


class Waiter:
    """One request's place in a gate's line. Only the first in line watches the clock (the pace, a
    Retry-After); the others sleep until they are first, so an answer or a tick wakes one task, not all."""

    __slots__ = ("loop", "future", "queued")

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.future: asyncio.Future = self.loop.create_future()
        self.queued = True

    def renew(self) -> asyncio.Future:
        if self.future.done():
            self.future = self.loop.create_future()
        return self.future

    def wake(self) -> None:
        """Wake it from any thread (models are shared across event loops: the web app, judges)."""
        future = self.future
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if self.loop is running:
            if not future.done():
                future.set_result(None)
        elif not self.loop.is_closed():
            self.loop.call_soon_threadsafe(lambda: future.done() or future.set_result(None))


class Line:
    """Requests waiting their turn, first come first served, one of them awake at a time."""

    def __init__(self) -> None:
        self.waiters: deque[Waiter] = deque()

    def __len__(self) -> int:
        return len(self.waiters)

    def join(self) -> Waiter:
        me = Waiter()
        self.waiters.append(me)
        return me

    def first(self, me: Waiter) -> bool:
        return bool(self.waiters) and self.waiters[0] is me

    def leave(self, me: Waiter) -> None:
        """Out of the line (its turn came, or it gave up); the new first wakes to try."""
        if not me.queued:
            return
        me.queued = False
        if self.waiters[0] is me:
            self.waiters.popleft()
            self.wake_first()
        else:
            self.waiters.remove(me)  # only a request that gave up waits anywhere but first

    def wake_first(self) -> None:
        if self.waiters:
            self.waiters[0].wake()


GIVE_UP = -1.0  # what an attempt returns as its wait when waiting cannot help


async def take_in_turn(line: Line, lock: threading.RLock, attempt: Callable[[float], tuple[Any, float | None]],
                       deadline: float | None) -> Any:
    """Wait in `line` for `attempt(now)` to give a result: (result, _) when the request may go now, else
    (None, wait) with the seconds until time may let it (None: only an answer can; GIVE_UP: nothing can).
    Returns the result, or None at the deadline or on giving up. Only the first in line tries."""
    with lock:
        if not line:
            result, wait = attempt(time.monotonic())
            if result is not None or wait == GIVE_UP:
                return result
        me = line.join()
    try:
        while True:
            with lock:
                now = time.monotonic()
                wait = None
                if line.first(me):
                    result, wait = attempt(now)
                    if result is not None:
                        line.leave(me)  # the next in line may go too, or watch the clock
                        return result
                    if wait == GIVE_UP:
                        return None
                future = me.renew()
            left = None if deadline is None else deadline - now
            if left is not None and left <= 0:
                return None
            timeout = min(x for x in (left, wait) if x is not None) if (left is not None or wait is not None) else None
            try:
                async with asyncio.timeout(timeout):
                    await future
            except TimeoutError:
                pass
    finally:
        with lock:
            line.leave(me)  # gave up (deadline, cancelled): out of the line, the next one first


class Bucket:
    """A token bucket: `per_s` refill, `capacity` at most; a take may go into debt (a large request)."""

    def __init__(self, per_s: float, capacity: float) -> None:
        self.per_s, self.capacity = per_s, max(1.0, capacity)
        self.level, self.at = self.capacity, time.monotonic()

    def _refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.at) * self.per_s)
        self.at = now

    def wait(self, amount: float, now: float) -> float:
        """Seconds until `amount` (at most a full bucket) is there."""
        self._refill(now)
        need = min(amount, self.capacity) - self.level
        return 0.0 if need <= 0 else need / self.per_s

    def take(self, amount: float, now: float) -> None:
        self._refill(now)
        self.level -= amount

    def give(self, amount: float) -> None:
        self.level = min(self.capacity, self.level + amount)


@dataclass(frozen=True)
class Ticket:
    """One request's slot: when it was sent, the window and pace epochs it was sent in, its tokens held, and
    the requests in flight once it was (itself included)."""

    started: float
    epoch: int
    pace_epoch: int
    tokens: int
    load: int = 0


class EndpointGate:
    def __init__(self, url: str, *, cap: int | None = None, rpm: float | None = None, tpm: float | None = None,
                 adaptive: bool = True) -> None:
        self.url, self.cap, self.adaptive = url, cap, adaptive
        self.rpm, self.tpm = rpm, tpm
        top = cap or MAX_WINDOW
        self.limit = float(min(INITIAL_WINDOW, top)) if adaptive else float(top)
        self.slow_start = True
        self.in_flight = 0
        self.peak = 0
        self.epoch = 0  # bumped by each cut of the window
        self.fast: float | None = None  # short-term latency per token (EWMA)
        self.base: float | None = None  # its baseline: the lowest it has been, drifting up slowly
        self.based_at = time.monotonic()
        self.latency_s: float | None = None  # a request's seconds, averaged
        # This process's CPU seconds, every thread's (a test gives it a clock of its own to play a busy client).
        self.cpu_clock: Callable[[], float] = time.process_time
        self.cpu_at, self.cpu_used, self.client_busy = time.monotonic(), self.cpu_clock(), False
        self.pace: Bucket | None = None  # the learned pace, after the first 429
        self.pace_epoch = 0
        self.cut_at = 0.0  # when the pace was last set
        self.grown_at = 0.0  # when it last grew
        self.refused_at: float | None = None  # the pace the last 429 came at: the limit is just below it
        self.sent_at_cut = 0  # requests sent by then
        self.admitted: deque[float] = deque()  # when recent successes came back
        self.limited_until = 0.0
        self.requests = Bucket(rpm / 60, rpm / 60) if rpm else None
        self.tokens = Bucket(tpm / 60, tpm / 60) if tpm else None
        self.sent = self.ok = self.rejected = self.overloaded = 0
        self.line = Line()
        # What the store kept of it for the next process (models/gate_memory.py): read once, before the first send.
        self.recalled = False
        self.kept: dict[Any, tuple[dict, float]] = {}  # per store file: what was last written there, and when
        self.listeners: list = []  # pools on this endpoint: told when an answer may have made room
        # Models are shared across threads (the web app, judges): the counts change under a lock, never
        # across an await.
        self.lock = threading.RLock()

    # ------------------------------------------------------------------ may a request go now

    def window(self) -> int:
        return max(1, int(self.limit))

    def ready_in(self, now: float, tokens: int = 0) -> float | None:
        """0 when a request may go now; else the seconds until the pace or a limit lets it (None: the
        window is full, so only an answer can make room)."""
        if self.in_flight >= self.window():
            return None
        wait = self.limited_until - now
        for bucket, amount in ((self.pace, 1), (self.requests, 1), (self.tokens, tokens)):
            if bucket is not None:
                wait = max(wait, bucket.wait(amount, now))
        return max(0.0, wait)

    def take(self, now: float, tokens: int = 0) -> Ticket:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self.sent += 1
        for bucket, amount in ((self.pace, 1), (self.requests, 1), (self.tokens, tokens)):
            if bucket is not None:
                bucket.take(amount, now)
        return Ticket(now, self.epoch, self.pace_epoch, tokens, self.in_flight)

    async def acquire(self, deadline: float | None, tokens: int = 0) -> Ticket | None:
        """A slot for one request, first come first served, waiting until the deadline (None if none came).
        Without a deadline the wait still ends: each turn is an answer to a request ahead of it (each bounded
        by its own deadline) or a tick of the pace (at least one a minute)."""
        def attempt(now: float) -> tuple[Ticket | None, float | None]:
            wait = self.ready_in(now, tokens)
            return (self.take(now, tokens), None) if wait == 0 else (None, wait)

        return await take_in_turn(self.line, self.lock, attempt, deadline)

    # ------------------------------------------------------------------ what the server said

    def release(self, ticket: Ticket, outcome: str, *, retry_after: float | None = None, output_tokens: int | None = None,
                used_tokens: int | None = None, input_tokens: int | None = None) -> None:
        """`outcome`: ok, limited (a 429), overloaded (5xx, timeout) or neutral (cancelled, refused for the
        request's own sake, unreachable: the pool's health handles that)."""
        with self.lock:
            now = time.monotonic()
            used_before = self.in_flight
            self.in_flight -= 1
            if self.tokens is not None:  # held the worst case: settle to the use (none for a refused request)
                self.tokens.give(max(0, ticket.tokens - (used_tokens or 0)) if outcome == "ok" else ticket.tokens)
            if outcome == "ok":
                self.ok += 1
                self._succeeded(ticket, now, used_before, output_tokens, input_tokens)
            elif outcome == "limited":
                self.rejected += 1
                self._limited(ticket, now, retry_after)
            elif outcome == "overloaded":
                self.overloaded += 1
                self._congested(ticket, used_before)
            self.line.wake_first()
        for listener in self.listeners:
            listener()

    def _succeeded(self, ticket: Ticket, now: float, in_flight: int, output_tokens: int | None, input_tokens: int | None) -> None:
        self.admitted.append(now)
        while self.admitted and self.admitted[0] < now - ADMITTED_SPAN_S:
            self.admitted.popleft()
        if not self.adaptive:
            return
        # Read once per answer (it also keeps this loop's probe running while answers come; it stops when idle).
        late = loop_lag() >= max(0.005, CLIENT_LAG * (self.latency_s or 0.0))
        if self.pace is not None:
            top = self.requests.per_s if self.requests is not None else None
            near = self.refused_at is not None and NEAR_LIMIT * self.refused_at <= self.pace.per_s < self.refused_at
            # Growth per second, doubling every PACE_DOUBLING_S without a 429: a passing 429 is forgotten in about
            # a minute, a real limit is probed again slowly.
            rate = PACE_GROWTH * 2 ** (min(now - self.cut_at, 120.0) / PACE_DOUBLING_S) * (NEAR_LIMIT_SLOWDOWN if near else 1.0)
            # Never far above what it really sends: a pace grown while idle would take many 429s to come down.
            ceiling = max(self.pace.per_s, 2 * len(self.admitted) / ADMITTED_SPAN_S)
            grown = min(self.pace.per_s * (1 + rate * min(1.0, now - self.grown_at)), ceiling)
            self.grown_at = now
            self.pace.per_s = min(grown, top) if top else grown
        took = now - ticket.started
        self.latency_s = took if self.latency_s is None else self.latency_s + 0.1 * (took - self.latency_s)
        # A prompt token costs the server a small share of an answer's (prefill runs in parallel).
        work = (output_tokens or 0) + PROMPT_TOKEN_SHARE * (input_tokens or 0) + PROMPT_SHARE_TOKENS
        per_token = took / work
        # Averaged over about half a window of answers: one slow answer among many is not congestion.
        self.fast = per_token if self.fast is None else self.fast + min(0.2, 2 / self.window()) * (per_token - self.fast)
        if self.base is None or self.fast < self.base:
            self.base = self.fast
        else:  # a lasting change becomes the new normal in about BASE_DRIFT_S
            self.base += (self.fast - self.base) * min(1.0, (now - self.based_at) / BASE_DRIFT_S)
        self.based_at = now
        if now - self.cpu_at >= 0.5:  # is this process itself the bottleneck? (then latency measures it, not the server)
            cpu = self.cpu_clock()
            self.client_busy = (cpu - self.cpu_used) / (now - self.cpu_at) >= CLIENT_BUSY or late
            self.cpu_at, self.cpu_used = now, cpu
        if self.fast > LATENCY_RISE * self.base:
            # The lag as of this answer: a loop that has just started running late must not wait for the next check.
            if self.client_busy or late:
                return  # the client's own backlog may be what rose: no cut, and no growth that would add to it
            # A queue at the server grows its latency with the load: cut to where it would be at the line.
            self._congested(ticket, in_flight, LATENCY_RISE * self.base / self.fast)
            return
        # Only a window in use grows: one at least half full when this request went, or now (answers that come
        # back together each see fewer still in flight, which must not stop slow start after the first few).
        if max(in_flight, ticket.load) * 2 >= self.window():
            self.limit = min(float(self.cap or MAX_WINDOW), self.limit + (SLOW_START_GROWTH if self.slow_start else 1.0 / self.limit))

    def _congested(self, ticket: Ticket, in_flight: int, ratio: float = DECREASE) -> None:
        if not self.adaptive or ticket.epoch != self.epoch:
            return  # sent before the last cut: that cut already answered this congestion
        self.epoch += 1
        self.slow_start = False
        # From what was in flight: a window larger than the load it carried says nothing.
        self.limit = max(1.0, min(self.limit, float(in_flight)) * min(DECREASE, max(0.5, ratio)))

    def _limited(self, ticket: Ticket, now: float, retry_after: float | None) -> None:
        wait = RETRY_AFTER_S[0] if retry_after is None or retry_after < 0 else min(retry_after, RETRY_AFTER_S[1])
        if not self.adaptive or ticket.pace_epoch == self.pace_epoch:  # a 429 sent before the last cut holds nothing new
            self.limited_until = max(self.limited_until, now + wait)
        if not self.adaptive or ticket.pace_epoch != self.pace_epoch:
            return  # sent before the last cut of the pace: that cut already answered this limit
        admitted_rate = len(self.admitted) / max(0.5, now - self.admitted[0]) if self.admitted else None
        if self.pace is None:
            # The first 429: what it admitted until it said no, or the pace its sub-second Retry-After implies
            # (the time to its next free request), whichever is higher, so one passing 429 costs little.
            guesses = [g for g in (admitted_rate, 1 / retry_after if retry_after is not None and 0 < retry_after < 1 else None) if g]
            if not guesses:
                return  # nothing to learn a pace from: the Retry-After alone
            rate = max(guesses)
        else:
            rate = self.pace.per_s  # refused at this pace: the limit is below it
            self.refused_at = rate
            # If it kept refusing while we offered clearly more than it took, what it took is its limit.
            # (Counted from when the first answer to a request sent after the cut could be back.)
            since = max(self.cut_at + (self.latency_s or 0.0), now - ADMITTED_SPAN_S)
            took = sum(1 for t in self.admitted if t >= since)
            if now - since >= 0.5 and took >= 3 and self.sent - self.sent_at_cut >= 1.2 * took:
                rate = min(rate, took / (now - since))
        self.pace_epoch += 1
        self.cut_at, self.sent_at_cut, self.grown_at = now, self.sent, now
        top = self.requests.per_s if self.requests is not None else None
        rate = max(PACE_FLOOR, PACE_CUT * rate)
        rate = min(rate, top) if top else rate
        if self.pace is None:
            self.pace = Bucket(rate, 1.0)
            self.pace.level = 0.0  # the server has just said no: the next request waits its turn
        else:
            self.pace.per_s = rate

    def snapshot(self) -> dict:
        return {"url": self.url, "window": self.window(), "in_flight": self.in_flight, "peak": self.peak, "sent": self.sent,
                "ok": self.ok, "rejected": self.rejected, "overloaded": self.overloaded,
                "pace_per_s": round(self.pace.per_s, 3) if self.pace else None}


def positive(value: str, name: str, model: str, example: str) -> float:
    try:
        number = float(value)
        if number > 0:
            return number
    except ValueError:
        pass
    raise UsageError(f"{name}={value!r} in the spec of {model} is not a number above 0.", f"Give it as e.g. ?{name}={example}.")


_GATES: dict[tuple[str, str], EndpointGate] = {}


def shared_gate(url: str, model: str, *, cap: int | None = None, rpm: float | None = None, tpm: float | None = None,
                adaptive: bool | None = None) -> EndpointGate:
    """The process's gate for this model at this endpoint (an API's limits are per model; a server serving
    one model is the same thing): every spec on it shares what it learned and its limits. A limit one spec
    leaves out is the one another gave; two specs giving different ones are refused."""
    key = (url, model)
    gate = _GATES.get(key)
    if gate is None:
        gate = _GATES[key] = EndpointGate(url, cap=cap, rpm=rpm, tpm=tpm, adaptive=adaptive is not False)
        return gate
    given = {"endpoint_concurrency": (cap, gate.cap), "rpm": (rpm, gate.rpm), "tpm": (tpm, gate.tpm),
             "adaptive": (None if adaptive is None else int(adaptive), int(gate.adaptive))}
    clash = [f"{name}={new} (already {old})" for name, (new, old) in given.items() if new is not None and new != old]
    if clash:
        raise UsageError(f"{model} at {url} is already in use in this process with other limits: {', '.join(clash)}.",
                         "Give every spec of one model on one endpoint the same endpoint_concurrency, rpm, tpm and adaptive (or leave them out).")
    return gate


def reset_gates() -> None:
    """Forget every gate (what it learned): for tests, and a process that starts over."""
    _GATES.clear()
