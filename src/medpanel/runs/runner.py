"""The benchmark runner: dataset x protocol x panel x repeats, run concurrently, written item by item.

Each item's outcome, transcript and scores are committed the moment it finishes, so Ctrl-C, a crash
or a SIGKILL loses only the items in flight; `resume` runs exactly the items not yet done, and the
model calls those in-flight items had finished are served from the cache.

A run ends `done` when every item finished, `done_with_failures` when any item failed (all of them
included: the run itself worked, its items did not; the CLI exits ITEMS_FAILED_EXIT), `stopped` at a
budget cap, `interrupted`, or `failed` when the run itself broke (the store, a hook). A failed item
keeps the transcript it had when it failed, ending in an `error` event.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol

from pydantic import BaseModel, Field, model_validator

from medpanel.cases import Case, load_dataset
from medpanel.redact import redact
from medpanel.errors import BudgetExceeded, MedpanelError, UsageError
from medpanel.context import Cancelled, RunContext, quiet
from medpanel.models import Runtime
from medpanel.models.runtime import call_scope
from medpanel.protocols import Panel, ProtocolSpec, get_protocol
from medpanel.runs import store as store_module
from medpanel.runs.panel import build_panel, build_roles, migrate_config, resolve_roles, run_roles  # noqa: F401 (run_roles: re-exported)
from medpanel.runs.pool import drain
from medpanel.runs.scoring import score_outcome
from medpanel.runs.store import Store, StoreError
from medpanel.transcript import Event, item_transcripts

# Exit status of a command whose run had failed items (1 is any error, 2 bad input, 3 a budget cap).
ITEMS_FAILED_EXIT = 4


class RunConfig(BaseModel):
    """Everything that defines a run; stored with it so `--resume RUN_ID` needs nothing else."""

    dataset: str
    protocol: str
    models: list[str]
    repeats: int = Field(default=1, ge=1)
    limit: int | None = Field(default=None, ge=1)
    # Items in flight at once; None: `items_in_flight` picks (many when every model paces itself).
    concurrency: int | None = Field(default=None, ge=1, le=1024)
    settings: dict[str, Any] = Field(default_factory=dict)  # the protocol's own settings
    # The panel beyond the seats: role -> model spec (judge, patient, moderator, a seat title); see runs/panel.py.
    roles: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _roles_apart(cls, values: Any) -> Any:
        return migrate_config(values) if isinstance(values, dict) else values


@dataclass
class Progress:
    total: int
    done: int = 0
    failed: int = 0
    skipped: int = 0  # already finished before a resume
    started: float = field(default_factory=time.perf_counter)

    @property
    def rate(self) -> float:
        elapsed = time.perf_counter() - self.started
        return (self.done + self.failed) / elapsed if elapsed > 0 else 0.0


@dataclass
class RunResult:
    run_id: str
    status: str
    progress: Progress
    spent: dict
    wall_s: float
    error: MedpanelError | None = None
    took_over: str | None = None  # why a resume took over a stale writer's lease (the run was marked interrupted)


ProgressHook = Callable[[Progress, Runtime], None]


class Heartbeat(threading.Thread):
    """Refreshes the run's lease every `interval` seconds, in a thread so a busy event loop cannot starve it;
    stopped (and joined, bounded) at the end of the run. `lost` turns True if another writer took the lease."""

    def __init__(self, store: Store, run_id: str, token: str, interval: float) -> None:
        super().__init__(name=f"medpanel-lease-{run_id}", daemon=True)
        self.store, self.run_id, self.token, self.interval = store, run_id, token, interval
        self.stopping = threading.Event()
        self.lost = False

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            try:
                if not self.store.heartbeat(self.run_id, self.token):
                    self.lost = True
                    return
            except MedpanelError:
                continue  # a store problem: the run's own writes report it

    def stop(self) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join(timeout=self.interval + 35)  # a heartbeat waits at most 30 s for the store's lock


# Items in flight without --concurrency: many when every model of the panel paces its own calls (servers
# behind adaptive gates, models/adaptive.py: they hold back what the server cannot take), else a few (the
# embedded model answers one call at a time; scripted and human seats gain nothing from more).
AUTO_PACED_ITEMS = 256
AUTO_ITEMS = 8

# The first items of a run start ITEM_START_GAP_S apart (runs/pool.py: items started in one instant move in step,
# and each round's answers of the whole wave queue in the event loop): about what the client spends on one
# item's round of three calls, so each item's answers are taken as they come; the ramp takes ITEM_RAMP_MAX_S
# at most (closer starts above 500 items in flight). The ramp delays the last first-wave item, and so the end
# of a run, by up to its length: a quarter of a second at 256 in flight, which the lockstep cost more than
# (bench/bench_orchestration.py, docs/scale.md).
# Not for an executor's items: they are computed elsewhere (Ray workers), whose loops this one does not serve.
ITEM_START_GAP_S = 0.001
ITEM_RAMP_MAX_S = 0.5


def item_start_gap(in_flight: int) -> float:
    return min(ITEM_START_GAP_S, ITEM_RAMP_MAX_S / max(1, in_flight))


def items_in_flight(config: RunConfig, panel: Panel, executor: bool = False) -> int:
    if config.concurrency is not None:
        return config.concurrency
    if executor:  # every worker paces its own calls: no one gate sees the whole load
        return AUTO_ITEMS
    models = panel.models()
    return AUTO_PACED_ITEMS if models and all(getattr(m, "paced", False) for m in models) else AUTO_ITEMS


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def protocol_settings(spec: ProtocolSpec, values: dict[str, Any]) -> BaseModel:
    """The protocol's settings from plain values (--set, a stored run), or a UsageError naming each bad one
    (an unknown key included: every protocol's, whatever its settings class allows)."""
    from medpanel.protocols.base import build_settings

    return build_settings(spec.settings, values, spec.name)


def check_needs(spec: ProtocolSpec, cases: list[Case]) -> None:
    """Refuse, before any call, a dataset whose items lack the fields the protocol reads."""
    lacking = [(case.id, case.missing(*spec.needs)) for case in cases]  # "a|b": either will do
    lacking = [(case_id, missing) for case_id, missing in lacking if missing]
    if lacking:
        shown = "; ".join(f"{case_id}: no {', '.join(missing)}" for case_id, missing in lacking[:5])
        more = f" (and {len(lacking) - 5} more)" if len(lacking) > 5 else ""
        raise UsageError(f"{len(lacking)} of {len(cases)} items cannot run the {spec.name} protocol: {shown}{more}.",
                         f"The {spec.name} protocol needs {', '.join(n.replace('|', ' or ') for n in spec.needs)} on every case; "
                         "pick a dataset or protocol that fit.")


def expand_items(spec: ProtocolSpec, cases: list[Case]) -> list[Case]:
    """The run's items: each case, or what the protocol expands it into (one per specialist question)."""
    return cases if spec.expand is None else [item for case in cases for item in spec.expand(case)]


def partial_events(transcripts: list, exc: BaseException, error: str, kind: str) -> list[dict]:
    """What a failed item had said: the events of every transcript it built, in order (an event shared by
    two transcripts once), then an `error` event saying why it stopped."""
    seen: set[int] = set()
    events = []
    for transcript in transcripts:
        for event in transcript.events:
            if id(event) not in seen:
                seen.add(id(event))
                events.append(event.model_dump(mode="json"))
    events.append(Event(kind="error", text=error.partition("\n")[0], speaker="runner", phase="failed",
                        data={"error_kind": kind, "exception": type(exc).__name__}).model_dump(mode="json"))
    return events


def failed_record(events: list[dict], error: str, kind: str, started_at: float) -> dict:
    """A failed item's record for store.write_item: what it had of its transcript, and why it failed."""
    return dict(status="failed", outcome=None, events=events, scores={}, error=error, error_kind=kind, started_at=started_at)


async def compute_item(spec: ProtocolSpec, case: Case, repeat: int, panel: Panel, settings: BaseModel, context: RunContext,
                       run_id: str) -> dict:
    """Run one item (the protocol, then its scorers) and return its record, the keyword arguments of
    store.write_item after the key: a finished item, or a failed one with the transcript it had. A budget
    cap, a store problem or a cancellation is not the item's fault: it is raised, and the item left
    unrecorded so a resume runs it. The same function runs in-process and in a Ray worker."""
    token = call_scope.set((run_id, case.id, repeat))
    transcripts: list = []
    collecting = item_transcripts.set(transcripts)
    started = time.time()

    def failure(exc: BaseException, error: str, kind: str) -> dict:
        return failed_record(partial_events(transcripts, exc, error, kind), error, kind, started)

    try:
        outcome = await spec.run(case, panel, settings, context)
        scores = await score_outcome(spec, case, outcome, panel.roles, settings, context)
        return dict(status="done", outcome=outcome.model_dump(mode="json", exclude={"transcript"}),
                    events=[e.model_dump(mode="json") for e in outcome.transcript], scores=scores,
                    started_at=started, totals=outcome.transcript.totals())
    except (BudgetExceeded, StoreError, Cancelled):
        raise  # not the item's fault (a cap, a full disk, a stop button): leave it unrecorded so a resume runs it
    except MedpanelError as exc:
        # A failed item is recorded as failed, never scored as wrong and never dropped.
        return failure(exc, str(exc), getattr(exc, "kind", type(exc).__name__))
    except Exception as exc:  # a bug in a protocol or scorer: record it with where it happened, carry on
        return failure(exc, redact(f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-3)}"), "bug")
    finally:
        item_transcripts.reset(collecting)
        call_scope.reset(token)


# One item (case, repeat) -> its record for store.write_item (see compute_item).
ItemRun = Callable[[Case, int], Awaitable[dict]]


@dataclass
class ExecutorPlan:
    """What an executor is handed once the run holds its lease: enough to rebuild the panel elsewhere."""

    run_id: str
    config: RunConfig  # its roles resolved
    settings: BaseModel
    runtime: Runtime
    store: Store


class ItemExecutor(Protocol):
    """Computes a run's items somewhere else (runs/ray_executor.py); the runner still owns the lease, the
    bounded loop (--concurrency), progress, and every write of an item."""

    def check(self, seats: list[str], roles: dict[str, str], *, panel_given: bool, context: RunContext) -> None:
        """Refuse, before the run is created, what cannot run there (a person's seat, a prebuilt panel)."""

    async def open(self, plan: ExecutorPlan) -> ItemRun: ...

    async def close(self) -> None: ...


async def run_benchmark(
    store: Store,
    config: RunConfig,
    runtime: Runtime,
    *,
    run_id: str | None = None,
    resume: bool = False,
    protocol: ProtocolSpec | None = None,
    panel: Panel | None = None,
    cases: list[Case] | None = None,
    on_progress: ProgressHook | None = None,
    settings: BaseModel | None = None,
    context: RunContext | None = None,
    executor: ItemExecutor | None = None,
) -> RunResult:
    """Start (or resume) a run and drive it to the end, a budget stop, or an interruption.

    `settings`, when given, is the protocol's settings object as built by the caller; otherwise it is
    validated from `config.settings`. `context` carries what is live (event listener, a person's seat,
    cancellation); the runner builds every model of the panel (seats and roles) unless `panel` is given.
    `executor`, when given, computes the items elsewhere (Ray); they are written here all the same.
    """
    spec = protocol or get_protocol(config.protocol)
    context = quiet(context)
    settings = settings if settings is not None else protocol_settings(spec, config.settings)
    cases = expand_items(spec, cases if cases is not None else load_dataset(config.dataset, config.limit))
    check_needs(spec, cases)
    roles = resolve_roles(spec, config.models, config.roles)
    if executor is not None:
        executor.check(config.models, roles, panel_given=panel is not None, context=context)
    if panel is None:
        panel = build_panel(config.models, runtime, roles, context)
    else:  # a caller's own seats (tests, a prebuilt panel): the roles it lacks are built here all the same
        build_roles(panel, roles, runtime, context)
        roles |= {role: model.id for role, model in panel.roles.items() if role not in roles}
    # A dollar cap needs the price of every model the run may call (roles included), before any call.
    runtime.check_prices(panel.models())
    if len(panel) < spec.min_models:
        raise UsageError(f"The {spec.name} protocol needs at least {spec.min_models} models; got {len(panel)}.", "Add models with --models.")
    # One writer per run: the lease is taken with the run (create_run) or before resuming it; a live holder
    # refuses this writer with its pid, a stale one is taken over (the run marked interrupted, with why).
    token, pid, host = secrets.token_hex(8), os.getpid(), socket.gethostname()
    took_over = None
    if resume:
        if run_id is None or store.get_run(run_id) is None:
            raise UsageError(f"Cannot resume run '{run_id}': it is not in {store.path}.", "List runs with `medpanel runs`.")
        took_over = store.acquire_lease(run_id, token, pid=pid, host=host)
        store.set_run_status(run_id, "running", took_over)
    else:
        run_id = run_id or new_run_id()
        config = config.model_copy(update={"roles": roles})
        store.create_run(run_id, dataset=config.dataset, protocol=spec.name, models=config.models,
                         settings=config.model_dump(mode="json"), lease=(token, pid, host))
    beat = Heartbeat(store, run_id, token, store_module.LEASE_HEARTBEAT_S)
    beat.start()

    def end_lease() -> None:
        beat.stop()
        if not beat.lost:
            store.release_lease(run_id, token)

    try:
        finished = store.finished_items(run_id)
    except BaseException:
        end_lease()
        raise
    todo = [(c, r) for r in range(config.repeats) for c in cases if (c.id, r) not in finished]
    progress = Progress(total=len(cases) * config.repeats, skipped=len(cases) * config.repeats - len(todo))

    # Where items are computed: here, in this event loop (the default), or by an executor elsewhere (Ray);
    # either way each finished item comes back as its record and is written here, by the lease holder.
    def compute_here(case: Case, repeat: int) -> Awaitable[dict]:
        return compute_item(spec, case, repeat, panel, settings, context, run_id)

    execute: ItemRun = compute_here

    async def run_item(case: Case, repeat: int) -> None:
        try:
            record = await execute(case, repeat)
            # Committed by the store's writer after every call record queued before it (so its spend counts
            # them, its sibling seats' answered calls too), while this loop goes on serving other items' calls.
            try:
                await store.write_item_async(run_id, case.id, repeat, **record)
            except StoreError:
                raise
            except Exception as exc:  # what the item made cannot be stored (a scorer's odd value): the item's bug
                error = redact(f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-3)}")
                record = failed_record(record.get("events", []), error, "bug", record.get("started_at", time.time()))
                await store.write_item_async(run_id, case.id, repeat, **record)
            if record["status"] == "done":
                progress.done += 1
            else:
                progress.failed += 1
        finally:
            if on_progress:
                on_progress(progress, runtime)

    # The cap that tripped, if one did: no new item starts, but the items in flight run on (their calls
    # already sent finish and are logged and cached, so a resume does not pay for them again).
    capped: list[BudgetExceeded] = []

    async def work(item: tuple[Case, int]) -> None:
        try:
            await run_item(*item)
        except BudgetExceeded as exc:
            capped.append(exc)

    started = time.perf_counter()
    status, error = "done", None
    raising = False
    try:
        if executor is not None:
            execute = await executor.open(ExecutorPlan(run_id, config.model_copy(update={"roles": roles}), settings, runtime, store))
        in_flight = items_in_flight(config, panel, executor is not None)
        await drain(todo, work, in_flight, keep_going=lambda: not capped and not beat.lost and not context.cancelled,
                    start_gap_s=0.0 if executor is not None else item_start_gap(in_flight))
        if beat.lost:
            holder = store.lease(run_id) or {}
            raise UsageError(f"Run {run_id} was taken over by another writer (pid {holder.get('pid')} on {holder.get('host')}) "
                             f"after this one went {store_module.LEASE_STALE_S:.0f} s without a heartbeat; it stopped.",
                             "Let the other writer finish the run; finished items are saved.")
        if capped:
            raise capped[0]
        context.check()  # cancelled: no new item started, and the run is not done
        digest = failure_digest(store.items(run_id))  # the whole run's items: a resume re-runs the failed ones
        if digest["failed"]:
            status = "done_with_failures"
            error = ItemsFailed(digest, run_id)
    except BudgetExceeded as exc:
        exc.fix = exc.fix.replace("RUN_ID", run_id)  # the command to copy names this run
        exc.args = (f"{exc.problem} {exc.fix}",)
        status, error = "stopped", exc
    except Cancelled as exc:  # the items in flight were stopped between turns; a resume runs them
        status, error = "interrupted", exc
    except (asyncio.CancelledError, KeyboardInterrupt):
        status, raising = "interrupted", True
        raise
    except Exception as exc:  # the store or a hook broke: the run is not done, say so and why
        status, error, raising = "failed", exc, True
        raise
    finally:
        try:
            if not beat.lost:  # a taken-over run's status belongs to its new writer
                store.set_run_status(run_id, status, str(error) if error else None)
        except StoreError:
            if not raising:  # else the first error (e.g. the full disk itself) is the one to report
                raise
        finally:
            try:
                end_lease()
            except StoreError:
                if not raising:
                    raise
            for model in panel.models():
                await model.aclose()
            if executor is not None:
                await executor.close()
    return RunResult(run_id=run_id, status=status, progress=progress, spent=runtime.budget.spent(),
                     wall_s=time.perf_counter() - started, error=error, took_over=took_over)


class ItemsFailed(MedpanelError):
    """Not raised: the run's result when items failed, so callers print it and exit ITEMS_FAILED_EXIT."""

    exit_code = ITEMS_FAILED_EXIT

    def __init__(self, digest: dict, run_id: str) -> None:
        self.digest = digest
        super().__init__(failure_line(digest), f"See them with `medpanel show {run_id}`; rerun them with `medpanel bench --resume {run_id}`.")


def failure_digest(items: list[dict]) -> dict:
    """How many items failed, and the commonest error kind with one of its messages (first line)."""
    failed = [i for i in items if i["status"] == "failed"]
    kinds = Counter(i["error_kind"] or "error" for i in failed)
    if not kinds:
        return {"failed": 0, "of": len(items), "commonest_kind": None, "commonest_count": 0, "message": None}
    kind, count = kinds.most_common(1)[0]
    messages = Counter((i["error"] or "").partition("\n")[0] for i in failed if (i["error_kind"] or "error") == kind)
    return {"failed": len(failed), "of": len(items), "commonest_kind": kind, "commonest_count": count,
            "message": messages.most_common(1)[0][0]}


def failure_line(digest: dict) -> str:
    return (f"{digest['failed']} of {digest['of']} items failed; commonest error: {digest['commonest_kind']} "
            f"({digest['commonest_count']}x): {digest['message']}")


def config_for_resume(store: Store, run_id: str) -> RunConfig:
    run = store.get_run(run_id)
    if run is None:
        raise UsageError(f"No run '{run_id}' in {store.path}.", "List runs with `medpanel runs`.")
    return RunConfig.model_validate(run["settings"])
