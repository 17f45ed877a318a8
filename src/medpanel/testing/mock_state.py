"""The mock server's configuration and the state its handlers share with the controlling thread: the
`MockConfig` (latency, reply mode, fault rates, refused request shapes) and the `ServerState` that
draws faults (injected first, then the seeded rates), walks the reply script and keeps the counters
and recorded requests. They live in their own module because both sides use them, the app's request
handlers and the in-process `MockServer` (and its HTTP control routes), and all of it sits behind one
lock, so what a test configures, injects or reads back never races a request being served.
"""

from __future__ import annotations

import dataclasses
import random
import threading
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable

FAULT_KINDS = ("500", "429", "timeout", "malformed", "invalid_json", "trickle")
REPLY_MODES = ("echo", "choice", "scripted")

Responder = Callable[[dict], str]


@dataclass
class MockConfig:
    latency_s: float = 0.0  # fixed delay before every answer (asyncio.sleep, so it overlaps across requests)
    reply: str | Responder = "echo"  # "echo" | "choice" | "scripted" | callable(request body) -> reply text
    replies: list[Any] = field(default_factory=list)  # the script for reply="scripted"; dicts/lists are sent as JSON
    fault_rates: dict[str, float] = field(default_factory=dict)  # kind -> probability per request
    seed: int = 0  # seeds the fault RNG, so a faulty run is repeatable
    retry_after_s: float = 1.0  # the Retry-After a 429 carries
    hang_s: float = 30.0  # how long a "timeout" fault stalls before answering
    trickle_s: float = 1.0  # seconds between the bytes of a "trickle" fault's body
    models: list[str] = field(default_factory=lambda: ["mock-model"])  # what GET /v1/models lists
    max_recorded: int = 500  # request bodies kept for inspection
    served_model: str | None = None  # the model id replies report (e.g. a dated snapshot); None: the requested one
    cut_at_max_tokens: bool = False  # cut replies to max_tokens words (the mock's tokens), finish_reason "length"
    # Emulate servers that refuse some request shapes, naming the field as llama-cpp-python's server does
    # (HTTP 500, a pydantic error for ('body', 'response_format', 'type')): response_format types refused,
    # and top-level parameters refused (HTTP 400 "Unsupported parameter", with `param` set).
    reject_formats: list[str] = field(default_factory=list)
    reject_params: list[str] = field(default_factory=list)
    # A rate limit like an API's: a token bucket of `rate_burst_s` seconds' worth at `rate_limit_rpm` requests a
    # minute; a request over it is refused at once with 429 and the seconds until the next token (Retry-After).
    rate_limit_rpm: float | None = None
    rate_burst_s: float = 1.0
    # A server whose latency rises with load, like an inference server's batch: `capacity` requests are served
    # at once (latency_s each), the rest queue for a slot; beyond `queue_limit` queued, 503 (overloaded).
    capacity: int | None = None
    queue_limit: int | None = None
    # Opt-in leaky server: answer every chat request with this HTTP status and an error body that echoes
    # the request's Authorization header, as is and URL-encoded (for testing that keys are redacted).
    echo_auth_status: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.reply, str) and self.reply not in REPLY_MODES:
            raise ValueError(f"reply must be one of {REPLY_MODES} or a callable, not {self.reply!r}")
        unknown = set(self.fault_rates) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(FAULT_KINDS)}")
        if sum(self.fault_rates.values()) > 1.0 + 1e-9:
            raise ValueError("fault rates add up to more than 1")
        if (self.rate_limit_rpm is not None and self.rate_limit_rpm <= 0) or self.rate_burst_s <= 0:
            raise ValueError("rate_limit_rpm and rate_burst_s must be above 0")
        if (self.capacity is not None and self.capacity < 1) or (self.queue_limit is not None and self.queue_limit < 0):
            raise ValueError("capacity must be at least 1 and queue_limit at least 0")

    def public(self) -> dict:
        """The config as JSON-safe data (a callable responder is shown by name)."""
        data = dataclasses.asdict(self)
        if callable(self.reply):
            data["reply"] = "callable"
        data["replies"] = len(self.replies)
        return data


class ServerState:
    """Everything the handlers share with the controlling thread; guarded by one lock."""

    def __init__(self, config: MockConfig) -> None:
        self.initial = config
        self.lock = threading.Lock()
        self.closing = False
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.config = dataclasses.replace(self.initial, fault_rates=dict(self.initial.fault_rates), replies=list(self.initial.replies))
            self.rng = random.Random(self.config.seed)
            self.injected: deque[str] = deque()
            self.recorded: deque[dict] = deque(maxlen=self.config.max_recorded)
            self.script_pos = 0
            self.total = 0
            self.successes = 0
            self.faults: Counter[str] = Counter()
            self.errors: Counter[str] = Counter()
            self.by_hash: Counter[str] = Counter()
            self.tokens: float | None = None  # the rate limit's bucket, filled on first use
            self.tokens_at = 0.0
            self.in_flight = self.peak_in_flight = self.active = self.peak_active = self.queued = 0

    def configure(self, changes: dict) -> MockConfig:
        allowed = {f.name for f in dataclasses.fields(MockConfig)} - {"max_recorded"}
        unknown = set(changes) - allowed
        if unknown:
            raise ValueError(f"unknown config fields {sorted(unknown)}; known: {', '.join(sorted(allowed))}")
        with self.lock:
            new = dataclasses.replace(self.config, **changes)  # __post_init__ validates
            if "seed" in changes:
                self.rng = random.Random(new.seed)
            if "replies" in changes:
                self.script_pos = 0
            self.config = new
            return new

    def inject(self, kind: str, count: int = 1) -> None:
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(FAULT_KINDS)}")
        if count < 0:
            raise ValueError("count must be >= 0")
        with self.lock:
            self.injected.extend([kind] * count)

    def draw_fault(self) -> str | None:
        """Injected faults first (deterministic), then the seeded random rates. Caller holds the lock."""
        if self.injected:
            return self.injected.popleft()
        if not self.config.fault_rates:
            return None
        roll, acc = self.rng.random(), 0.0
        for kind, rate in self.config.fault_rates.items():
            acc += rate
            if roll < acc:
                return kind
        return None

    def rate_take(self, now: float) -> float | None:
        """Admit one request under the rate limit (None), or the seconds until it would be. Caller holds the lock."""
        per_s = self.config.rate_limit_rpm / 60
        capacity = max(1.0, per_s * self.config.rate_burst_s)
        self.tokens = capacity if self.tokens is None else min(capacity, self.tokens + (now - self.tokens_at) * per_s)
        self.tokens_at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return None
        return (1.0 - self.tokens) / per_s

    def stats(self) -> dict:
        with self.lock:
            return {
                "requests": self.total,
                "successes": self.successes,
                "faults": dict(self.faults),
                "errors": dict(self.errors),
                "by_hash": dict(self.by_hash),
                "pending_injections": len(self.injected),
                "in_flight": self.in_flight,
                "peak_in_flight": self.peak_in_flight,  # requests open at once (queued for a slot included)
                "peak_active": self.peak_active,  # requests being served at once (at most `capacity`)
            }
