"""Hard caps on a run's model calls, tokens and dollars, shared by every model in the run.

Caps are enforced with reservations, so many calls in flight at once cannot overshoot them. Before a
call is sent it reserves its worst case (one call; its prompt's estimated tokens plus max_tokens; the
dollar price of that). When the reply comes the reservation is settled to what was really used; on a
failure its tokens and dollars are released (the call itself still counts: it was sent).

A call whose worst case no longer fits beside what was already spent trips the cap: it is not sent, and
neither is any later call. A call that does not fit only because of reservations still in flight waits
for them to settle (in arrival order), since they usually settle well below their worst case.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from dataclasses import dataclass, field

from medpanel.errors import BudgetExceeded


@dataclass
class Reservation:
    """What one sent call holds against the caps until it is settled or released."""

    tokens: int
    dollars: float
    open: bool = True


@dataclass
class Budget:
    max_calls: int | None = None
    max_tokens: int | None = None
    max_dollars: float | None = None
    calls: int = 0  # calls sent (uncached), counted the moment they are let through
    cached_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    dollars: float = 0.0
    reserved_tokens: int = 0  # held by calls in flight
    reserved_dollars: float = 0.0
    in_flight: int = 0
    _tripped: BudgetExceeded | None = field(default=None, repr=False)
    _queue: deque = field(default_factory=deque, repr=False)  # tickets of calls waiting to be let through
    _sleepers: list = field(default_factory=list, repr=False)  # futures woken when room may have appeared

    def spent(self) -> dict:
        return {
            "calls": self.calls,
            "cached_calls": self.cached_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "dollars": round(self.dollars, 6),
        }

    @property
    def exceeded(self) -> BudgetExceeded | None:
        return self._tripped

    async def reserve(self, tokens: int, dollars: float) -> Reservation:
        """Let one call through, holding `tokens` and `dollars` (its worst case), or raise BudgetExceeded.

        Waits while the call would fit once the calls in flight settle but does not fit beside their
        reservations now. Waiters are served first come, first served, so each waits at most for the
        calls in flight and in line when it arrived: every wake-up is one of those settling or leaving."""
        ticket = object()
        self._queue.append(ticket)
        try:
            for _ in range(self.in_flight + 2 * len(self._queue) + 2):
                if self._tripped is not None:
                    raise self._stop()
                if self._queue[0] is ticket:
                    granted = self._admit(tokens, dollars)
                    if granted is not None:
                        return granted
                await self._wait()
            # Not reached while the accounting holds; if it ever is, stopping at the cap is the safe failure.
            raise self._trip("tokens" if self.max_tokens is not None else "dollars")
        finally:
            head = self._queue[0] is ticket
            self._queue.remove(ticket)
            if head:  # the next in line may now go; one leaving from further back changes nothing for others
                self._wake()

    def _admit(self, tokens: int, dollars: float) -> Reservation | None:
        if self.max_calls is not None and self.calls + 1 > self.max_calls:
            raise self._trip("calls")  # calls never settle below one each: no point waiting
        checks = (("tokens", self.max_tokens, self.input_tokens + self.output_tokens, self.reserved_tokens, tokens),
                  ("dollars", self.max_dollars, self.dollars, self.reserved_dollars, dollars))
        for cap, limit, used, held, need in checks:
            if limit is None:
                continue
            if used + need > limit:
                raise self._trip(cap, need)  # would not fit even if everything in flight settled at zero
            if used + held + need > limit:
                return None  # may fit once calls in flight settle below their worst case
        self.calls += 1
        self.in_flight += 1
        self.reserved_tokens += tokens
        self.reserved_dollars += dollars
        return Reservation(tokens, dollars)

    def settle(self, reservation: Reservation, input_tokens: int, output_tokens: int, dollars: float) -> None:
        """The call's reply came: replace its reservation with what it really used."""
        self._close(reservation)
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.dollars += dollars

    def release(self, reservation: Reservation) -> None:
        """The call failed or was cancelled with no usage reported: free its tokens and dollars."""
        self._close(reservation)

    def _close(self, reservation: Reservation) -> None:
        if not reservation.open:
            return  # settling twice would free room that other calls hold
        reservation.open = False
        self.in_flight -= 1
        self.reserved_tokens -= reservation.tokens
        self.reserved_dollars = max(0.0, self.reserved_dollars - reservation.dollars)
        self._wake()

    def _trip(self, cap: str, need: float | None = None) -> BudgetExceeded:
        limit = {"calls": self.max_calls, "tokens": self.max_tokens, "dollars": self.max_dollars}[cap]
        if self._tripped is None:
            # Say what the refused call could have used, so a cap below one call's worst case is plain.
            extra = {"next_call_worst_case": round(need, 6)} if need is not None else {}
            self._tripped = BudgetExceeded(cap, limit, self.spent() | extra)
            return self._tripped
        self._wake()
        return self._stop()

    def _stop(self) -> BudgetExceeded:
        assert self._tripped is not None
        return BudgetExceeded(self._tripped.cap, self._tripped.limit, self.spent())

    async def _wait(self) -> None:
        future = asyncio.get_running_loop().create_future()
        self._sleepers.append(future)
        try:
            await future
        finally:
            if future in self._sleepers:
                self._sleepers.remove(future)

    def _wake(self) -> None:
        sleepers, self._sleepers = self._sleepers, []
        for future in sleepers:
            if not future.done():
                future.set_result(None)


# Reservation estimates of a prompt's tokens, before the server counts them. They err high: a high
# estimate only holds room a little longer, a low one lets concurrent calls overshoot a cap.
CHARS_PER_TOKEN = 3  # English runs near 4 characters a token; JSON, numbers and other scripts fewer
TOKENS_PER_MESSAGE = 4  # role markers and separators
TOKENS_PER_IMAGE = 1_500  # a high-detail image is ~1,100 tokens with OpenAI's models; others differ


def prompt_tokens_estimate(messages: list, schema: dict | None = None) -> int:
    """A generous estimate of a request's prompt tokens (the schema is sent too, as a note or format)."""
    chars = sum(len(m.content) for m in messages) + (len(json.dumps(schema)) if schema is not None else 0)
    images = sum(len(getattr(m, "images", ()) or ()) for m in messages)
    return -(-chars // CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE * len(messages) + TOKENS_PER_IMAGE * images
