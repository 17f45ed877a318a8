"""`medpanel bench --executor ray`: a run's items computed on a Ray cluster, written by the driver alone.

The driver (the `medpanel bench` process) keeps everything the in-process runner does: the run's lease,
the bounded loop over items (--concurrency items in flight), progress, and every write of an item. Only
`compute_item` (the protocol, then its scorers) moves: each item is one Ray task, which rebuilds the panel
from the run's model specs once per worker process, runs the item exactly as runs/runner.py does, and
returns its record (JSON-able data) for the driver to write. The worker's model calls go to the run's
ledger actor (runs/ray_store.py), so they reach the call log and the shared cache as they finish, and
count against the run's one budget.

Faults: a worker killed mid-item (kill -9, out of memory, its node lost) is seen by the driver, which
gives back what that attempt held in the budget, logs its calls in flight, and submits the item again
(MAX_ATTEMPTS tries in all, then the item is recorded as failed, kind `worker_lost`); the new attempt is
served its finished calls from the cache. Ray's own task retries are off, so only the driver resubmits
and an item is written once. A driver killed outright leaves the run with a stale lease: `--resume RUN
--executor ray` takes it over and runs the items not done.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from medpanel.cases import Case
from medpanel.context import RunContext
from medpanel.errors import BudgetExceeded, MedpanelError, UsageError
from medpanel.models.runtime import Runtime
from medpanel.ray_cluster import MAX_ATTEMPTS, connect, disconnect, first_line, import_ray, lost_worker_errors, require_cpu
from medpanel.runs.ray_store import LEDGER_TIMEOUT_S, ForwardingCache, RemoteBudget, RunLedger, ledger_gone, raise_answer
from medpanel.runs.store import StoreError



# ---------------------------------------------------------------- the driver side

# Why a Ray Client (ray://) address is refused, and the fix: each caller names its own reason and command.
BENCH_CLIENT_REFUSAL = ("a Ray Client address cannot be used; the run's ledger must share a node with the store.",
                        "Run `medpanel bench` on a node of the cluster, with the head's HOST:PORT (e.g. --address 10.0.0.5:6379).")


def _provider(spec: str) -> str:
    from medpanel.models.registry import parse_spec

    try:
        return parse_spec(spec).provider
    except UsageError:
        return spec.strip().split(":")[0].split("?")[0].strip().lower()


@dataclass(frozen=True)
class RunSetup:
    """What every item task of a run shares, put in the object store once: enough to rebuild the panel."""

    key: str  # this executor's token: a worker keeps one panel per key
    run_id: str
    config: dict  # RunConfig, roles resolved
    settings: dict
    use_cache: bool
    prices: Any
    retry: Any
    max_reasks: int
    timeout_s: float
    budget_wait_s: float


@dataclass
class ExecutorStats:
    items: int = 0  # items computed (returned a record)
    workers_lost: int = 0  # attempts whose worker died
    resubmitted: int = 0  # items submitted again after a lost worker
    calls_in_flight_lost: int = 0  # calls a dead worker had sent and not finished (logged, cost unknown)
    pids: set = field(default_factory=set)


class RayExecutor:
    """runs/runner.ItemExecutor on Ray. `check` connects (before the run is created), `open` starts the
    run's ledger actor on the driver's node, `close` stops it, `shutdown` ends a connection it started."""

    def __init__(self, address: str | None = None, *, num_cpus: int | None = None) -> None:
        self.ray = import_ray()
        self.address, self.num_cpus = address, num_cpus
        self.owned = False
        self.ledger = None
        self.stats = ExecutorStats()

    def check(self, seats: list[str], roles: dict[str, str], *, panel_given: bool, context: RunContext) -> None:
        people = [spec for spec in [*seats, *roles.values()] if _provider(spec) == "human"]
        limited = [spec for spec in [*seats, *roles.values()] if any(f"{k}=" in spec for k in ("rpm", "tpm", "endpoint_concurrency"))]
        if limited:  # each worker paces its own calls: N workers would send N times the limit
            raise UsageError(f"--executor ray cannot hold {limited[0]}'s rpm, tpm or endpoint_concurrency: every worker paces its own "
                             "calls, so the cluster would send that many times the limit.", "Drop the limit from the spec, or run in-process.")
        if people:
            raise UsageError(f"--executor ray cannot seat a person ({people[0]}): a Ray worker has no terminal or page to ask them on.",
                             "Run a panel with people in-process: drop --executor ray.")
        if context.human_seat is not None or context.on_event is not None:
            raise UsageError("--executor ray runs items quietly on workers; a live deliberation (events streamed to a page, a seat for a person) cannot.",
                             "Run live deliberations in-process.")
        if panel_given:
            raise UsageError("--executor ray rebuilds the panel on every worker from the run's model specs; a prebuilt panel cannot be sent.",
                             "Name the models in the run's config (--models, roles) instead of passing a panel.")
        self.owned = connect(self.address, BENCH_CLIENT_REFUSAL, self.num_cpus) or self.owned

    async def open(self, plan):
        ray = self.ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        require_cpu(ray)
        runtime: Runtime = plan.runtime
        budget = runtime.budget
        here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
        # The ledger lives beside the SQLite file (the driver's node) and takes no CPU from the items.
        self.ledger = ray.remote(RunLedger).options(num_cpus=0, scheduling_strategy=here).remote(
            str(plan.store.path.resolve()), (budget.max_calls, budget.max_tokens, budget.max_dollars))
        self.runtime = runtime
        self.run_id = plan.run_id
        self.token = secrets.token_hex(4)
        setup = RunSetup(key=f"{plan.run_id}:{self.token}", run_id=plan.run_id, config=plan.config.model_dump(mode="json"),
                         settings=plan.settings.model_dump(mode="json"), use_cache=runtime.use_cache, prices=runtime.prices,
                         retry=runtime.retry, max_reasks=runtime.max_reasks, timeout_s=runtime.timeout_s,
                         budget_wait_s=runtime.worst_call_s() + LEDGER_TIMEOUT_S)
        self.setup_ref = ray.put(setup)
        # Ray's own retries off: only the driver resubmits an item, after giving back what the dead attempt held.
        self.task = ray.remote(run_item_task).options(num_cpus=1, max_retries=0, scheduling_strategy="SPREAD")
        await self._ledger(self.ledger.spent.remote())  # the actor is up (its store opened) before any item goes out
        return self.run_item

    async def run_item(self, case: Case, repeat: int) -> dict:
        ray = self.ray
        lost = lost_worker_errors(ray)
        started = time.time()
        why = ""
        for attempt in range(1, MAX_ATTEMPTS + 1):
            attempt_id = f"{self.token}:{case.id}:{repeat}:{attempt}"
            ref = self.task.remote(self.setup_ref, self.ledger, case, repeat, attempt_id)
            try:
                answer = await ref
            except asyncio.CancelledError:
                ray.cancel(ref)  # the pool stopped: stop spending (the model layer logs the calls it cancels)
                raise
            except lost as exc:  # the worker died: give back what it held, then try the item again
                self.stats.workers_lost += 1
                await self._abandon(attempt_id)
                why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                if attempt < MAX_ATTEMPTS:
                    self.stats.resubmitted += 1
                continue
            except ray.exceptions.RayTaskError as exc:  # the task itself broke outside the item (medpanel not importable there)
                await self._abandon(attempt_id)
                return _failed(started, f"The Ray task failed outside the item: {first_line(exc)}", "worker_error")
            except ray.exceptions.RayError as exc:  # the cluster cannot run tasks at all: the run stops, finished items kept
                raise MedpanelError(f"The Ray cluster could not run item {case.id}: {first_line(exc)}",
                                    "Check the cluster with `ray status`, then finish the run with `medpanel bench --resume RUN --executor ray`.") from None
            await self._sync_spend()
            return self._unpack(answer)
        return _failed(started, f"Its Ray worker died {MAX_ATTEMPTS} times ({why}).", "worker_lost")

    def _unpack(self, answer: dict) -> dict:
        if "record" in answer:
            self.stats.items += 1
            self.stats.pids.add(answer["pid"])
            return answer["record"]
        if "budget" in answer:
            raise BudgetExceeded(*answer["budget"])
        name, problem, fix = answer["error"]  # the store, or building the panel on that worker
        raise (StoreError if name == "StoreError" else UsageError)(problem, fix)

    async def _ledger(self, ref) -> Any:
        try:
            return await asyncio.wait_for(asyncio.wrap_future(ref.future()), LEDGER_TIMEOUT_S)
        except (self.ray.exceptions.RayError, asyncio.TimeoutError) as exc:
            raise ledger_gone(exc) from None

    async def _abandon(self, attempt_id: str) -> None:
        self.stats.calls_in_flight_lost += raise_answer(await self._ledger(self.ledger.abandon.remote(attempt_id)))

    async def _sync_spend(self) -> None:
        """The driver's budget shows the run's spend (progress line, result): copied from the ledger's."""
        spent = await self._ledger(self.ledger.spent.remote())
        budget = self.runtime.budget
        budget.calls, budget.cached_calls = spent["calls"], spent["cached_calls"]
        budget.input_tokens, budget.output_tokens, budget.dollars = spent["input_tokens"], spent["output_tokens"], spent["dollars"]

    async def close(self) -> None:
        if self.ledger is None:
            return
        try:
            await self._sync_spend()
        except StoreError:
            pass  # the ledger is already gone: the run's own writes said so
        self.ledger.__ray_terminate__.remote()  # after the requests already queued (a cancelled task's last logs)
        self.ledger = None

    def shutdown(self) -> None:
        self.owned = disconnect(self.ray, self.owned)


def _failed(started: float, error: str, kind: str) -> dict:
    from medpanel.runs.runner import failed_record, partial_events

    return failed_record(partial_events([], RuntimeError(error), error, kind), error, kind, started)


# ---------------------------------------------------------------- the worker side

@dataclass
class WorkerPanel:
    """One run's panel in one worker process, built on its first item: models keep their connections and
    loaded weights across items, on one event loop that lives as long as the panel."""

    key: str
    loop: asyncio.AbstractEventLoop
    runtime: Runtime
    spec: Any
    panel: Any
    settings: Any
    context: RunContext


_PANEL: list[WorkerPanel] = []  # at most one: a worker serves one driver's run at a time


def _worker_panel(setup: RunSetup, ledger: Any) -> WorkerPanel:
    if _PANEL and _PANEL[0].key == setup.key:
        return _PANEL[0]
    from medpanel.protocols import get_protocol
    from medpanel.runs.panel import build_panel
    from medpanel.runs.runner import RunConfig, protocol_settings

    while _PANEL:  # a previous run's panel: close its models on its own loop
        old = _PANEL.pop()
        for model in old.panel.models():
            try:
                old.loop.run_until_complete(model.aclose())
            except Exception:
                pass
        old.loop.close()
    config = RunConfig.model_validate(setup.config)
    runtime = Runtime(cache=ForwardingCache(ledger), use_cache=setup.use_cache, budget=RemoteBudget(ledger, setup.budget_wait_s),
                      prices=setup.prices, retry=setup.retry, max_reasks=setup.max_reasks, timeout_s=setup.timeout_s)
    spec = get_protocol(config.protocol)
    loop = asyncio.new_event_loop()
    context = RunContext()
    panel = build_panel(config.models, runtime, config.roles, context)
    _PANEL.append(WorkerPanel(setup.key, loop, runtime, spec, panel, protocol_settings(spec, setup.settings), context))
    return _PANEL[0]


def run_item_task(setup: RunSetup, ledger: Any, case: Case, repeat: int, attempt: str) -> dict:
    """One Ray task: one item, exactly as the in-process runner computes it. Answers {"record": ...} for the
    driver to write, {"budget": ...} at a cap, or {"error": ...} for a problem that is not the item's."""
    from medpanel.runs.runner import compute_item

    try:
        worker = _worker_panel(setup, ledger)
        worker.runtime.budget.attempt = attempt
        record = worker.loop.run_until_complete(
            compute_item(worker.spec, case, repeat, worker.panel, worker.settings, worker.context, setup.run_id))
        return {"record": record, "pid": os.getpid()}
    except BudgetExceeded as exc:
        return {"budget": [exc.cap, exc.limit, exc.spent]}
    except MedpanelError as exc:  # a store problem, or this node cannot build the panel (a missing extra)
        return {"error": [type(exc).__name__, exc.problem, exc.fix]}
