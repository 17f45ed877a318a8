"""One model served by several base URLs (`openai:m@http://a/v1|http://b/v1|...`): which endpoint takes the
next request, and what a failing one costs. Every endpoint must serve the same model the same way: a
request the server rejects (4xx) fails as it would on one server, with no failover.

- **Balancing:** the request goes to the usable endpoint with the fewest requests in flight (ties: the one
  that took a request longest ago), so a slow server gets less work without anyone measuring it.
- **Per-endpoint pace:** each endpoint has its own gate (models/adaptive.py): an adaptive window of requests
  in flight (at most `?endpoint_concurrency=N`), a pace learned from its 429s, and the spec's `rpm`/`tpm`;
  a request waits for room at some endpoint, within its attempt's deadline.
- **Health, passively:** there is no separate health probe. A connection failure, a timeout, a broken body
  or a 5xx marks the endpoint down for a cooldown (1 s, doubling with each failure in a row, at most 60 s).
  Requests already in flight when it failed count once, as one outage. After the cooldown, one live
  request probes it (half-open): its success makes the endpoint healthy again, its failure doubles the
  cooldown. A success of a request that started before the failure heals nothing.
- **A 429** keeps the endpoint out for its Retry-After (1 s without one, at most 60 s), whatever other
  requests on it do meanwhile (its gate holds that); it is not counted as a failure.
- **Failover:** a request an endpoint failed for one of those reasons goes at once to another, at most once
  to each, all within the one attempt's `timeout_s`; when every endpoint has failed it, the last error goes
  to the model layer's retry policy, which backs off and tries the pool again (bounded as for any model).

The bookkeeping is synchronous (no await between reading and writing an endpoint's counts), so a cancelled
request can never leak a slot; an answer wakes one waiting request, which wakes the next while room is left.
One pool per model and set of endpoints in a process, shared by every spec of that model on them, so a
run's seats and judges see the same load and health.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Literal

from medpanel.errors import UsageError
from medpanel.models.adaptive import GIVE_UP, EndpointGate, Line, Ticket, take_in_turn

SEPARATOR = "|"
COOLDOWN_S = (1.0, 60.0)  # the first cooldown after a failure, and the most it doubles to
MAX_DOUBLINGS = 6  # 1 s * 2**6 = 64 s, clamped to 60 s
# TransientModelError kinds that are the endpoint's fault: the request fails over to another.
ENDPOINT_ERRORS = {"connection", "timeout", "server_error", "malformed_response", "rate_limit"}
# Those that say the endpoint is overloaded: its gate narrows its window.
OVERLOAD_ERRORS = {"timeout", "server_error"}
Outcome = Literal["ok", "failed", "limited", "neutral"]


@dataclass
class Endpoint:
    url: str
    gate: EndpointGate  # its window, pace and limits (shared with single-URL models on the same URL)
    in_flight: int = 0
    peak: int = 0  # the most requests it ever had in flight at once
    epoch: int = 0  # bumped by each recorded failure: a request remembers the epoch it started in
    failures: int = 0  # recorded failures in a row
    down_until: float = 0.0  # cooling down after a failure
    probing: bool = False  # the half-open probe is in flight
    last_used: float = 0.0
    sent: int = 0
    failed: int = 0  # requests it failed (each went to another endpoint or to the retry policy)

    def wait(self, now: float, tokens: int = 0) -> float | None:
        """0 when it can take a request now; else seconds until it may (None: only an answer makes room)."""
        if self.failures and self.probing:  # after a failure, one probe at a time
            return None
        with self.gate.lock:
            gate = self.gate.ready_in(now, tokens)
        cooling = max(0.0, self.down_until - now)
        return None if gate is None else max(gate, cooling)


@dataclass(frozen=True)
class Lease:
    """One request's slot at an endpoint: whether it is the half-open probe, the epoch it started in, and
    its ticket at the endpoint's gate."""

    endpoint: Endpoint
    probe: bool
    epoch: int
    ticket: Ticket


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
    gates: list[EndpointGate] | None = None  # one per URL (default: private ones)
    endpoints: list[Endpoint] = field(init=False)

    def __post_init__(self) -> None:
        gates = self.gates or [EndpointGate(u, cap=self.cap) for u in self.urls]
        self.endpoints = [Endpoint(u, g) for u, g in zip(self.urls, gates)]
        self.line = Line()
        self.lock = threading.RLock()  # shared across threads, as its gates are
        for gate in gates:  # an answer at an endpoint (from a single-URL model on it, too) may make room here
            gate.listeners.append(self._room)

    def _room(self) -> None:
        with self.lock:
            self.line.wake_first()

    # ------------------------------------------------------------------ choosing

    def _pick(self, exclude: set[str], now: float, tokens: int) -> Endpoint | None:
        usable = [e for e in self.endpoints if e.url not in exclude and e.wait(now, tokens) == 0]
        return min(usable, key=lambda e: (e.in_flight, e.last_used)) if usable else None

    def _take(self, endpoint: Endpoint, now: float, tokens: int) -> Lease:
        endpoint.in_flight += 1
        endpoint.peak = max(endpoint.peak, endpoint.in_flight)
        endpoint.sent += 1
        endpoint.last_used = now
        probe = endpoint.failures > 0
        if probe:
            endpoint.probing = True
        with endpoint.gate.lock:
            return Lease(endpoint, probe, endpoint.epoch, endpoint.gate.take(now, tokens))

    def next_ready(self, exclude: set[str] = frozenset()) -> float | None:
        """Seconds until the nearest endpoint not in `exclude` that is held back only by time (cooling down,
        a Retry-After, its pace) may take a request (None: none is)."""
        now = time.monotonic()
        waits = [w for e in self.endpoints if e.url not in exclude and (w := e.wait(now)) is not None and w > 0]
        return min(waits) if waits else None

    async def acquire(self, exclude: set[str], deadline: float | None, tokens: int = 0) -> Lease | None:
        """A slot at the endpoint for the next request, first come first served; None when no endpoint outside
        `exclude` can take it (before the deadline, if one is given). Without a deadline the wait still ends:
        each turn is an answer at an endpoint or a cooldown, Retry-After or pace running out."""
        def attempt(now: float) -> tuple[Lease | None, float | None]:
            chosen = self._pick(exclude, now, tokens)
            if chosen is not None:
                return self._take(chosen, now, tokens), None
            candidates = [e for e in self.endpoints if e.url not in exclude]
            ready = self.next_ready(exclude)
            busy = any(e.in_flight or e.gate.in_flight for e in candidates)  # an answer may free a slot (or end a probe)
            left = None if deadline is None else deadline - now
            if not candidates or (not busy and (ready is None or (left is not None and ready > left))):
                return None, GIVE_UP
            return None, ready

        return await take_in_turn(self.line, self.lock, attempt, deadline)

    # ------------------------------------------------------------------ what became of a request

    def release(self, lease: Lease, outcome: Outcome = "ok", retry_after: float | None = None, *, overloaded: bool = False,
                output_tokens: int | None = None, used_tokens: int | None = None, input_tokens: int | None = None) -> None:
        """Give the slot back and record the outcome: `ok`, `failed` (the endpoint's fault; `overloaded` when
        a timeout or 5xx says it has too much to do), `limited` (a 429), or `neutral` (cancelled, or refused
        by the server for the request's own sake). Synchronous on purpose."""
        e = lease.endpoint
        with self.lock:
            now = time.monotonic()
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
        gate_outcome = {"ok": "ok", "limited": "limited"}.get(outcome, "overloaded" if overloaded else "neutral")
        # The gate tells its listeners (this pool among them) that room may have appeared.
        e.gate.release(lease.ticket, gate_outcome, retry_after=retry_after, output_tokens=output_tokens, used_tokens=used_tokens,
                       input_tokens=input_tokens)

    def snapshot(self) -> list[dict]:
        now = time.monotonic()
        return [{"url": e.url, "in_flight": e.in_flight, "peak": e.peak, "sent": e.sent, "failed": e.failed,
                 "usable": max(e.down_until, e.gate.limited_until) <= now, "window": e.gate.window()} for e in self.endpoints]


_POOLS: dict[tuple[str, str], EndpointPool] = {}


def shared_pool(urls: list[str], cap: int | None, gates: list[EndpointGate] | None = None, model: str = "") -> EndpointPool:
    """The process's pool of this model on these endpoints: every spec of it shares its load, caps and health."""
    key = SEPARATOR.join(urls)
    pool = _POOLS.get((key, model))
    if pool is None:
        pool = _POOLS[(key, model)] = EndpointPool(list(urls), cap, gates)
    elif pool.cap != cap and cap is not None:
        raise UsageError(f"The endpoints {key} are already in use with endpoint_concurrency={pool.cap} in this process, "
                         f"not {cap}.", "Give every spec on these endpoints the same endpoint_concurrency (or none).")
    return pool


def reset_pools() -> None:
    """Forget every pool (their load and health) and every endpoint's gate: for tests, and a process that
    starts over."""
    from medpanel.models.adaptive import reset_gates

    _POOLS.clear()
    reset_gates()
