"""What a model call needs besides its provider: cache, budget, prices, retry policy.

A `Runtime` is passed explicitly when models are built (no hidden globals), so one process can hold
several runs with different caps and stores.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any, Protocol

from medpanel.models.budget import Budget
from medpanel.models.pricing import PriceTable
from medpanel.models.retry import RetryPolicy


class CallCache(Protocol):
    """Where finished model calls are kept, keyed by a hash of the request. The run store implements it."""

    def get_call(self, key: str) -> dict[str, Any] | None: ...

    def put_call(self, key: str, record: dict[str, Any], scope: tuple[str, str, int] | None = None) -> None:
        """Store a finished call and log it as made (not cached) for `scope`."""

    def log_call(self, key: str, model: str, cached: bool, scope: tuple[str, str, int] | None, error: str | None = None,
                 usage: tuple[int, int, float] = (0, 0, 0.0)) -> None: ...


# The (run, item, repeat) a call belongs to, set by the runner around each item. It attributes calls in
# the log, and keys sampled calls of different repeats apart in the cache; it never changes a request.
call_scope: contextvars.ContextVar[tuple[str, str, int] | None] = contextvars.ContextVar("call_scope", default=None)


@dataclass
class Runtime:
    cache: CallCache | None = None
    use_cache: bool = True
    budget: Budget = field(default_factory=Budget)
    prices: PriceTable = field(default_factory=PriceTable.default)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    max_reasks: int = 2
    timeout_s: float = 120.0
