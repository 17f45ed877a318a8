"""What a model call needs besides its provider: cache, budget, prices, retry policy.

A `Runtime` is passed explicitly when models are built (no hidden globals), so one process can hold
several runs with different caps and stores.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol

from medpanel.errors import UsageError
from medpanel.models.budget import Budget
from medpanel.models.pricing import PriceTable
from medpanel.models.retry import RetryPolicy


class CallCache(Protocol):
    """Where finished model calls are kept, keyed by a hash of the request. The run store implements it."""

    def get_call(self, key: str) -> dict[str, Any] | None: ...

    def put_call(self, key: str, record: dict[str, Any], scope: tuple[str, str, int] | None = None) -> None:
        """Store a finished call and log it as made (not cached) for `scope`."""

    def log_call(self, key: str, model: str, cached: bool, scope: tuple[str, str, int] | None, error: str | None = None,
                 usage: tuple[int, int, float] = (0, 0, 0.0), served_model: str | None = None, truncated: bool | None = None) -> None: ...

    # A cache may also have the same two as coroutines, `put_call_async` and `log_call_async`, awaited by a
    # model call on its event loop: they return once the rows are committed, and may commit them in a group
    # with other calls' (the store does: runs/call_writer.py). A cache without them is called directly
    # (cache_put, cache_log below). A cache with `check_usable()` is asked before each call is sent, so one
    # that cannot take the call's record (the store in a forked child) refuses before anything is billed.


async def cache_put(cache: CallCache, key: str, record: dict[str, Any], scope: tuple[str, str, int] | None) -> None:
    """Store a finished call: through the cache's coroutine where it has one, else its plain method."""
    put = getattr(cache, "put_call_async", None)
    if put is None:
        cache.put_call(key, record, scope)
    else:
        await put(key, record, scope)


async def cache_log(cache: CallCache, key: str, model: str, cached: bool, scope: tuple[str, str, int] | None, **details: Any) -> None:
    """Log a call (details: error, usage, served_model, truncated), as cache_put does."""
    log = getattr(cache, "log_call_async", None)
    if log is None:
        cache.log_call(key, model, cached, scope, **details)
    else:
        await log(key, model, cached, scope, **details)


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
    timeout_s: float = 120.0  # a total deadline per attempt, body included (not an idle timeout)

    def worst_call_s(self) -> float:
        """The longest one request can take: every attempt runs to its deadline, and every wait between
        attempts is the longest the retry policy allows (a server's Retry-After is capped at max_delay_s).
        Each structured-output re-ask is a further request with the same bound."""
        return self.retry.max_attempts * self.timeout_s + (self.retry.max_attempts - 1) * self.retry.max_delay_s

    def worst_call_text(self) -> str:
        attempts = self.retry.max_attempts
        return f"≤{self.worst_call_s():g}s/call ({attempts}×{self.timeout_s:g}s + {attempts - 1}×{self.retry.max_delay_s:g}s)"

    def check_prices(self, models: Iterable[Any]) -> None:
        """Refuse a dollar cap that could never trip: every billed model (or spec) must have a price.

        Models that cost nothing to call (the embedded local model, scripted fakes, replays, people)
        pass; so does anything when no --max-dollars is set."""
        if self.budget.max_dollars is None:
            return
        for model in models:
            name, server, billed, priced_in_spec = _pricing_identity(model)
            if billed and not priced_in_spec and self.prices.lookup(name, server) is None:
                from medpanel.models.pricing import price_key

                raise UsageError(
                    f"--max-dollars {self.budget.max_dollars:g} is set, but the price of {name!r}"
                    f"{f' at {server}' if server else ''} is unknown, so its calls would cost $0 and the cap would never trip.",
                    f"Give its price in USD per 1K tokens: a --prices file (MEDPANEL_PRICES) with the entry "
                    f"'{price_key(name, server)}: {{input: 0.0005, output: 0.0015}}', or add ?price_in=..&price_out=.. to the "
                    f"model spec (price_in=0&price_out=0 for a free server).",
                )


def _pricing_identity(model: Any) -> tuple[str, str | None, bool, bool]:
    """(name, server, billed, priced in the spec) of a ready Model or of a spec string."""
    if isinstance(model, str):
        from medpanel.models.registry import parse_spec, provider_class

        try:
            spec = parse_spec(model)
        except UsageError:  # not a spec (a setting such as judge="off"): building it would say so, not this check
            return model, None, False, False
        billed = bool(getattr(provider_class(spec.provider), "billed", False))
        return spec.name, spec.base_url, billed, "price_in" in spec.params or "price_out" in spec.params
    return str(getattr(model, "name", "")), getattr(model, "base_url", None), bool(getattr(model, "billed", False)), False
