"""Bounded, classified retries. Only transient failures (429, 5xx, timeouts, broken bodies) are retried."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Awaitable, Callable, TypeVar

from medpanel.errors import ModelCallError, TransientModelError

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 6  # first try included
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0  # also caps a server's Retry-After

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, self.max_delay_s)
        backoff = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        return backoff * random.uniform(0.5, 1.0)  # jitter spreads a burst of retries apart


async def with_retries(call: Callable[[], Awaitable[T]], policy: RetryPolicy, on_retry: Callable[[TransientModelError, int], None] | None = None) -> tuple[T, int]:
    """Run `call`, retrying transient errors with backoff. Returns (result, attempts used)."""
    for attempt in range(1, policy.max_attempts + 1):
        try:
            return await call(), attempt
        except TransientModelError as exc:
            if attempt == policy.max_attempts:
                raise ModelCallError(
                    f"{exc.problem} (gave up after {attempt} attempts)",
                    "The server kept failing; check it is healthy, or raise the retry cap.",
                    kind=exc.kind,
                    model=exc.model,
                ) from exc
            if on_retry:
                on_retry(exc, attempt)
            await asyncio.sleep(policy.delay(attempt, exc.retry_after))
    raise AssertionError("unreachable")  # the loop always returns or raises
