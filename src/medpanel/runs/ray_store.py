"""The run's ledger on a Ray cluster: one actor that owns the store connection for model calls, and the run's budget.

Workers never open the store. Each worker's Runtime gets a `ForwardingCache` (the model layer's CallCache)
and a `RemoteBudget`, which send every cache lookup, finished call, logged call and budget reservation to
the one `RunLedger` actor, placed on the driver's node beside the SQLite file. Calls are forwarded
synchronously, so a call is in the ledger before the model layer goes on: a worker killed afterwards
loses nothing it had finished, and the cache is shared by every worker (no duplicate rows: a call is
keyed by its request hash). The actor answers one request at a time on its event loop, so it is the one
connection writing calls; the driver writes items, the lease and the run's status through its own.
SQLite serialises the two writers (BEGIN IMMEDIATE, a 30 s busy timeout), and each transaction is small.

The budget's caps hold across workers because there is one Budget, in the actor: each call reserves its
worst case there before it is sent, exactly as in one process. A reservation is tagged with the attempt
(one try of one item on one worker) that holds it; when a worker dies, the driver `abandon`s its attempt:
the reservations are released and each call it had in flight is logged as sent, its cost unknown.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from medpanel.errors import BudgetExceeded, MedpanelError
from medpanel.models.budget import Budget, Reservation
from medpanel.models.runtime import call_scope
from medpanel.runs.store import Store, StoreError

# How long a worker waits on the ledger for one cache or log request: far longer than a store write
# takes (SQLite's busy timeout is 30 s), so only a ledger that is gone or hung trips it.
LEDGER_TIMEOUT_S = 90.0

LOST_IN_FLIGHT = "the Ray worker died with this call in flight; what the server billed is unknown"


def _answer(method):
    """Actor methods answer ("ok", value) or ("error", problem, fix): a store problem crosses the process
    boundary as plain data and is raised again in the worker as a StoreError (the run stops; not the item's fault)."""
    async def wrapped(self, *args: Any) -> tuple:
        try:
            return ("ok", await method(self, *args))
        except MedpanelError as exc:
            return ("error", exc.problem, exc.fix)
    wrapped.__name__ = method.__name__
    return wrapped


class RunLedger:
    """The Ray actor (made with ray.remote by the executor). Every method is async so all run on one event
    loop, one at a time: one store connection, used by one request at a time."""

    def __init__(self, store_path: str, caps: tuple[int | None, int | None, float | None]) -> None:
        self.store = Store(store_path, create=False)
        self.budget = Budget(*caps)
        self.open: dict[int, tuple[str, tuple | None, Reservation]] = {}  # reservation id -> (attempt, scope, reservation)
        self.next_id = 0

    @_answer
    async def get_call(self, key: str) -> dict | None:
        return self.store.get_call(key)

    @_answer
    async def put_call(self, key: str, record: dict, scope: tuple | None) -> None:
        await self.store.put_call_async(key, record, scope)  # committed in a group with other workers' calls

    @_answer
    async def log_call(self, key: str, model: str, cached: bool, scope: tuple | None, error: str | None, usage: tuple,
                       served_model: str | None, truncated: bool | None) -> None:
        await self.store.log_call_async(key, model, cached, scope, error=error, usage=usage, served_model=served_model, truncated=truncated)
        if cached:
            self.budget.cached_calls += 1

    @_answer
    async def server_capability(self, base_url: str, model: str, name: str) -> Any:
        return self.store.server_capability(base_url, model, name)

    @_answer
    async def remember_server_capability(self, base_url: str, model: str, name: str, value: Any) -> None:
        self.store.remember_server_capability(base_url, model, name, value)

    async def reserve(self, attempt: str, scope: tuple | None, tokens: int, dollars: float) -> tuple:
        """("ok", reservation id), or ("tripped", cap, limit, spent) when a cap refuses the call."""
        try:
            reservation = await self.budget.reserve(tokens, dollars)
        except BudgetExceeded as exc:
            return ("tripped", exc.cap, exc.limit, exc.spent)
        self.next_id += 1
        self.open[self.next_id] = (attempt, scope, reservation)
        return ("ok", self.next_id)

    async def settle(self, rid: int, input_tokens: int, output_tokens: int, dollars: float) -> None:
        held = self.open.pop(rid, None)
        if held is not None:
            self.budget.settle(held[2], input_tokens, output_tokens, dollars)

    async def release(self, rid: int) -> None:
        held = self.open.pop(rid, None)
        if held is not None:
            self.budget.release(held[2])

    @_answer
    async def abandon(self, attempt: str) -> int:
        """A worker died: log each call its attempt had in flight (sent, cost unknown) and count it against the
        caps at its worst case (it may well have been billed), so a cap stays hard however many workers die."""
        lost = [(rid, held) for rid, held in self.open.items() if held[0] == attempt]
        for rid, (_, scope, reservation) in lost:
            self.store.log_call(f"in-flight:{attempt}:{rid}", "unknown", False, scope, error=LOST_IN_FLIGHT)
            del self.open[rid]
            self.budget.settle(reservation, reservation.tokens, 0, reservation.dollars)
        return len(lost)

    async def spent(self) -> dict:
        b = self.budget
        return {"calls": b.calls, "cached_calls": b.cached_calls, "input_tokens": b.input_tokens, "output_tokens": b.output_tokens,
                "dollars": b.dollars, "in_flight": b.in_flight}


def raise_answer(answer: tuple) -> Any:
    """The value of an ("ok", value) answer, or its store problem raised again."""
    if answer[0] == "ok":
        return answer[1]
    raise StoreError(answer[1], answer[2])


def ledger_gone(exc: BaseException) -> StoreError:
    """The ledger actor died or hung: calls can no longer be recorded, so the run must stop (not the item's fault)."""
    return StoreError(f"The run's ledger (the Ray actor recording model calls) did not answer: {type(exc).__name__}: {exc}",
                      "The driver's Ray node may have died or run out of memory; resume the run with --resume.")


class ForwardingCache:
    """The CallCache of a worker's Runtime: every request goes to the RunLedger actor and is waited for."""

    def __init__(self, ledger: Any) -> None:
        self.ledger = ledger

    def _ask(self, method: str, *args: Any) -> Any:
        import ray

        try:
            answer = ray.get(getattr(self.ledger, method).remote(*args), timeout=LEDGER_TIMEOUT_S)
        except (ray.exceptions.RayError, TimeoutError) as exc:  # GetTimeoutError is a TimeoutError too
            raise ledger_gone(exc) from None
        return raise_answer(answer)

    def get_call(self, key: str) -> dict[str, Any] | None:
        return self._ask("get_call", key)

    def put_call(self, key: str, record: dict[str, Any], scope: tuple[str, str, int] | None = None) -> None:
        self._ask("put_call", key, record, scope)

    def log_call(self, key: str, model: str, cached: bool, scope: tuple[str, str, int] | None, error: str | None = None,
                 usage: tuple[int, int, float] = (0, 0, 0.0), served_model: str | None = None, truncated: bool | None = None) -> None:
        self._ask("log_call", key, model, cached, scope, error, tuple(usage), served_model, truncated)

    async def _ask_async(self, method: str, *args: Any) -> Any:
        import ray

        try:
            ref = getattr(self.ledger, method).remote(*args)
            answer = await asyncio.wait_for(asyncio.wrap_future(ref.future()), LEDGER_TIMEOUT_S)
        except (ray.exceptions.RayError, asyncio.TimeoutError) as exc:
            raise ledger_gone(exc) from None
        return raise_answer(answer)

    async def put_call_async(self, key: str, record: dict[str, Any], scope: tuple[str, str, int] | None = None) -> None:
        await self._ask_async("put_call", key, record, scope)

    async def log_call_async(self, key: str, model: str, cached: bool, scope: tuple[str, str, int] | None, error: str | None = None,
                             usage: tuple[int, int, float] = (0, 0, 0.0), served_model: str | None = None,
                             truncated: bool | None = None) -> None:
        await self._ask_async("log_call", key, model, cached, scope, error, tuple(usage), served_model, truncated)

    def server_capability(self, base_url: str, model: str, name: str) -> Any:
        return self._ask("server_capability", base_url, model, name)

    def remember_server_capability(self, base_url: str, model: str, name: str, value: Any) -> None:
        self._ask("remember_server_capability", base_url, model, name, value)


@dataclass
class RemoteReservation(Reservation):
    rid: int = 0


class RemoteBudget(Budget):
    """The Budget of a worker's Runtime: reservations are made in the RunLedger, which holds the run's caps.
    `attempt` names the item attempt running in this worker (set by the task before each item)."""

    def __init__(self, ledger: Any, wait_s: float) -> None:
        super().__init__()
        self.ledger = ledger
        self.wait_s = wait_s  # bounded: in-flight calls settle within the runtime's worst call
        self.attempt = ""

    async def reserve(self, tokens: int, dollars: float) -> Reservation:
        import ray

        try:
            answer = await asyncio.wait_for(asyncio.wrap_future(
                self.ledger.reserve.remote(self.attempt, call_scope.get(), tokens, dollars).future()), self.wait_s)
        except (ray.exceptions.RayError, asyncio.TimeoutError) as exc:
            raise ledger_gone(exc) from None
        if answer[0] == "tripped":
            _, cap, limit, spent = answer
            raise BudgetExceeded(cap, limit, spent)
        self.calls += 1  # this worker's own view; the run's totals are the ledger's
        return RemoteReservation(tokens, dollars, rid=answer[1])

    def settle(self, reservation: Reservation, input_tokens: int, output_tokens: int, dollars: float) -> None:
        # Not waited for: the put_call or log_call that follows goes to the same actor after it, in order.
        if reservation.open:
            reservation.open = False
            self.ledger.settle.remote(reservation.rid, input_tokens, output_tokens, dollars)
            self.input_tokens, self.output_tokens, self.dollars = (self.input_tokens + input_tokens,
                                                                   self.output_tokens + output_tokens, self.dollars + dollars)

    def release(self, reservation: Reservation) -> None:
        if reservation.open:
            reservation.open = False
            self.ledger.release.remote(reservation.rid)
