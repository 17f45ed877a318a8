"""One model served by several base URLs (`openai:m@http://a/v1|http://b/v1|...`): which endpoint takes the
next request, and what a failing one costs. Every endpoint must serve the same model the same way: a
request the server rejects (4xx) fails as it would on one server, with no failover.

- **Balancing:** the request goes to the usable endpoint with the fewest requests in flight (ties: the one
  that took a request longest ago), so a slow server gets less work without anyone measuring it.
- **Per-endpoint concurrency:** `?endpoint_concurrency=N` caps the requests in flight at each endpoint; a
  request waits for a free slot, within its attempt's deadline.
- **Health, passively:** there is no separate health probe. A connection failure, a timeout, a broken body
  or a 5xx marks the endpoint down for a cooldown (1 s, doubling with each failure in a row, at most 60 s).
  Requests already in flight when it failed count once, as one outage. After the cooldown, one live
  request probes it (half-open): its success makes the endpoint healthy again, its failure doubles the
  cooldown. A success of a request that started before the failure heals nothing.
- **A 429** keeps the endpoint out for its Retry-After (1 s without one, at most 60 s), whatever other
  requests on it do meanwhile; it is not counted as a failure.
- **Failover:** a request an endpoint failed for one of those reasons goes at once to another, at most once
  to each, all within the one attempt's `timeout_s`; when every endpoint has failed it, the last error goes
  to the model layer's retry policy, which backs off and tries the pool again (bounded as for any model).

The bookkeeping is synchronous (no await between reading and writing an endpoint's counts), so a cancelled
request can never leak a slot. One pool per set of endpoints in a process, shared by every model built on
them, so a run's seats and judges see the same load and health.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Literal

from medpanel.errors import UsageError

SEPARATOR = "|"
COOLDOWN_S = (1.0, 60.0)  # the first cooldown after a failure, and the most it doubles to
MAX_DOUBLINGS = 6  # 1 s * 2**6 = 64 s, clamped to 60 s
# TransientModelError kinds that are the endpoint's fault: the request fails over to another.
ENDPOINT_ERRORS = {"connection", "timeout", "server_error", "malformed_response", "rate_limit"}
Outcome = Literal["ok", "failed", "limited", "neutral"]


@dataclass
class Endpoint:
    url: str
    in_flight: int = 0
    peak: int = 0  # the most requests it ever had in flight at once
    epoch: int = 0  # bumped by each recorded failure: a request remembers the epoch it started in
    failures: int = 0  # recorded failures in a row
    down_until: float = 0.0  # cooling down after a failure
    limited_until: float = 0.0  # out for a 429's Retry-After
    probing: bool = False  # the half-open probe is in flight
    last_used: float = 0.0
    sent: int = 0
    failed: int = 0  # requests it failed (each went to another endpoint or to the retry policy)

    def usable(self, now: float, cap: int | None) -> bool:
        if cap is not None and self.in_flight >= cap:
            return False
        if self.down_until > now or self.limited_until > now:
            return False
        return not (self.failures and self.probing)  # after a failure, one probe at a time

    def ready_at(self) -> float:
        return max(self.down_until, self.limited_until)


@dataclass(frozen=True)
class Lease:
    """One request's slot at an endpoint: whether it is the half-open probe, and the epoch it started in."""

    endpoint: Endpoint
    probe: bool
    epoch: int


def normal_url(url: str) -> str:
    return url.strip().rstrip("/")


def pool_urls(base_url: str | None) -> list[str] | None:
    """The endpoints of a pooled base URL (normalised, sorted: their order and spelling do not make another
    model), or None for a single one. Each must be http(s), none empty or repeated."""
    if not base_url or SEPARATOR not in base_url:
        return None
    urls = [normal_url(u) for u in base_url.split(SEPARATOR)]
    problem = ("has an empty entry" if any(not u for u in urls) else
               "has an entry that is not an http(s) URL" if any(not u.startswith(("http://", "https://")) for u in urls) else
               "names an endpoint twice" if len(set(urls)) != len(urls) else None)
    if problem:
        raise UsageError(f"The endpoint pool '{base_url}' {problem}.",
                         "Write it as 'openai:MODEL@http://HOST1:PORT/v1|http://HOST2:PORT/v1' (each endpoint once, quoted for the shell).")
    return sorted(urls)


@dataclass
class EndpointPool:
    urls: list[str]
    cap: int | None = None  # requests in flight per endpoint
    endpoints: list[Endpoint] = field(init=False)

    def __post_init__(self) -> None:
        self.endpoints = [Endpoint(u) for u in self.urls]
        self._waiters: list[asyncio.Future] = []

    # ------------------------------------------------------------------ choosing

    def _pick(self, exclude: set[str], now: float) -> Endpoint | None:
        usable = [e for e in self.endpoints if e.url not in exclude and e.usable(now, self.cap)]
        return min(usable, key=lambda e: (e.in_flight, e.last_used)) if usable else None

    def _take(self, endpoint: Endpoint, now: float) -> Lease:
        endpoint.in_flight += 1
        endpoint.peak = max(endpoint.peak, endpoint.in_flight)
        endpoint.sent += 1
        endpoint.last_used = now
        probe = endpoint.failures > 0
        if probe:
            endpoint.probing = True
        return Lease(endpoint, probe, endpoint.epoch)

    def next_ready(self, exclude: set[str] = frozenset()) -> float | None:
        """Seconds until the nearest cooling endpoint not in `exclude` is usable again (None: none is cooling)."""
        now = time.monotonic()
        waits = [e.ready_at() - now for e in self.endpoints if e.url not in exclude and e.ready_at() > now]
        return max(0.0, min(waits)) if waits else None

    async def acquire(self, exclude: set[str], deadline: float) -> Lease | None:
        """A slot at the endpoint for the next request; None when no endpoint outside `exclude` can take it
        before the deadline."""
        while True:
            now = time.monotonic()
            chosen = self._pick(exclude, now)
            if chosen is not None:
                return self._take(chosen, now)
            left = deadline - now
            candidates = [e for e in self.endpoints if e.url not in exclude]
            ready = self.next_ready(exclude)
            busy = any(e.in_flight for e in candidates)  # a release may free a slot (or end a probe) before then
            if not candidates or left <= 0 or (not busy and (ready is None or ready > left)):
                return None
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout(min(left, ready) if ready is not None else left):
                    await waiter
            except TimeoutError:
                pass
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    # ------------------------------------------------------------------ what became of a request

    def release(self, lease: Lease, outcome: Outcome = "ok", retry_after: float | None = None) -> None:
        """Give the slot back and record the outcome: `ok`, `failed` (the endpoint's fault), `limited` (a 429),
        or `neutral` (cancelled, or refused by the server for the request's own sake). Synchronous on purpose."""
        e, now = lease.endpoint, time.monotonic()
        e.in_flight -= 1
        if lease.probe:
            e.probing = False
        if outcome == "ok" and lease.epoch == e.epoch:  # no failure since it started: the endpoint works
            e.failures, e.down_until = 0, 0.0
        elif outcome == "failed":
            e.failed += 1
            if lease.epoch == e.epoch:  # the first failure of this outage (others in flight count once)
                e.epoch += 1
                e.failures += 1
                e.down_until = now + min(COOLDOWN_S[1], COOLDOWN_S[0] * 2 ** min(e.failures - 1, MAX_DOUBLINGS))
        elif outcome == "limited":
            wait = COOLDOWN_S[0] if retry_after is None or retry_after < 0 else min(retry_after, COOLDOWN_S[1])
            e.limited_until = max(e.limited_until, now + wait)
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if waiter.done():
                continue
            loop = waiter.get_loop()
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if loop is running:
                waiter.set_result(None)
            elif not loop.is_closed():  # a waiter of another event loop (another thread)
                loop.call_soon_threadsafe(lambda w=waiter: w.done() or w.set_result(None))

    def snapshot(self) -> list[dict]:
        now = time.monotonic()
        return [{"url": e.url, "in_flight": e.in_flight, "peak": e.peak, "sent": e.sent, "failed": e.failed,
                 "usable": e.ready_at() <= now} for e in self.endpoints]


_POOLS: dict[str, EndpointPool] = {}


def shared_pool(urls: list[str], cap: int | None) -> EndpointPool:
    """The process's pool for these endpoints: every model on them shares its load, caps and health."""
    key = SEPARATOR.join(urls)
    pool = _POOLS.get(key)
    if pool is None:
        pool = _POOLS[key] = EndpointPool(list(urls), cap)
    elif pool.cap != cap:
        raise UsageError(f"The endpoints {key} are already in use with endpoint_concurrency={pool.cap} in this process, "
                         f"not {cap}.", "Give every spec on these endpoints the same endpoint_concurrency (or none).")
    return pool


def reset_pools() -> None:
    """Forget every pool (their load and health): for tests, and a process that starts over."""
    _POOLS.clear()
