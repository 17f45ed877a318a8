"""The benchmark runner: dataset x protocol x panel x repeats, run concurrently, written item by item.

Each item's outcome, transcript and scores are committed the moment it finishes, so Ctrl-C, a crash
or a SIGKILL loses only the items in flight; `resume` runs exactly the items not yet done, and the
model calls those in-flight items had finished are served from the cache.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import BaseModel, Field, ValidationError

from medpanel.cases import Case, load_dataset
from medpanel.errors import BudgetExceeded, MedpanelError, UsageError
from medpanel.models import Runtime, build_model
from medpanel.models.runtime import call_scope
from medpanel.protocols import Panel, ProtocolSpec, get_protocol
from medpanel.runs.store import Store


class RunConfig(BaseModel):
    """Everything that defines a run; stored with it so `--resume RUN_ID` needs nothing else."""

    dataset: str
    protocol: str
    models: list[str]
    repeats: int = Field(default=1, ge=1)
    limit: int | None = Field(default=None, ge=1)
    concurrency: int = Field(default=8, ge=1, le=1024)
    settings: dict[str, Any] = Field(default_factory=dict)  # the protocol's own settings


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


ProgressHook = Callable[[Progress, Runtime], None]


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def protocol_settings(spec: ProtocolSpec, values: dict[str, Any]) -> BaseModel:
    """The protocol's settings from plain values (--set, a stored run), or a UsageError naming each bad one."""
    try:
        return spec.settings.model_validate(values)
    except ValidationError as exc:
        known = ", ".join(name for name, field in spec.settings.model_fields.items() if not field.exclude)
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors()[:5])
        raise UsageError(f"Invalid settings for the {spec.name} protocol: {problems}.", f"Its settings are: {known}.") from None


def expand_items(spec: ProtocolSpec, cases: list[Case]) -> list[Case]:
    """The run's items: each case, or what the protocol expands it into (one per specialist question)."""
    return cases if spec.expand is None else [item for case in cases for item in spec.expand(case)]


def build_panel(specs: list[str], runtime: Runtime) -> Panel:
    if not specs:
        raise UsageError("No models given.", "Pass --models, e.g. --models local or --models openai:gpt-4o-mini.")
    return Panel.of([build_model(s, runtime) for s in specs], names=specs)


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
) -> RunResult:
    """Start (or resume) a run and drive it to the end, a budget stop, or an interruption.

    `settings`, when given, is the protocol's settings object as built by the caller (it may carry
    callbacks such as a streaming `on_event`); otherwise it is validated from `config.settings`.
    """
    spec = protocol or get_protocol(config.protocol)
    settings = settings if settings is not None else protocol_settings(spec, config.settings)
    cases = expand_items(spec, cases if cases is not None else load_dataset(config.dataset, config.limit))
    panel = panel or build_panel(config.models, runtime)
    if len(panel) < spec.min_models:
        raise UsageError(f"The {spec.name} protocol needs at least {spec.min_models} models; got {len(panel)}.", "Add models with --models.")
    if resume:
        if run_id is None or store.get_run(run_id) is None:
            raise UsageError(f"Cannot resume run '{run_id}': it is not in {store.path}.", "List runs with `medpanel runs`.")
        store.set_run_status(run_id, "running")
    else:
        run_id = run_id or new_run_id()
        store.create_run(run_id, dataset=config.dataset, protocol=spec.name, models=config.models,
                         settings=config.model_dump(mode="json"))

    finished = store.finished_items(run_id)
    todo = [(c, r) for r in range(config.repeats) for c in cases if (c.id, r) not in finished]
    progress = Progress(total=len(cases) * config.repeats, skipped=len(cases) * config.repeats - len(todo))
    queue: asyncio.Queue[tuple[Case, int]] = asyncio.Queue()
    for item in todo:
        queue.put_nowait(item)

    async def run_item(case: Case, repeat: int) -> None:
        token = call_scope.set((run_id, case.id, repeat))
        started = time.time()
        try:
            outcome = await spec.run(case, panel, settings)
            scores = spec.score(case, outcome)
            store.write_item(run_id, case.id, repeat, status="done", outcome=outcome.model_dump(mode="json", exclude={"transcript"}),
                             events=[e.model_dump(mode="json") for e in outcome.transcript], scores=scores,
                             started_at=started, totals=outcome.transcript.totals())
            progress.done += 1
        except BudgetExceeded:
            raise  # not the item's fault: leave it unrecorded so a resume runs it
        except MedpanelError as exc:
            # A failed item is recorded as failed, never scored as wrong and never dropped.
            store.write_item(run_id, case.id, repeat, status="failed", outcome=None, events=[], scores={},
                             error=str(exc), error_kind=getattr(exc, "kind", type(exc).__name__), started_at=started)
            progress.failed += 1
        except Exception as exc:  # a bug in a protocol or scorer: record it with where it happened, carry on
            where = traceback.format_exc(limit=-3)
            store.write_item(run_id, case.id, repeat, status="failed", outcome=None, events=[], scores={},
                             error=f"{type(exc).__name__}: {exc}\n{where}", error_kind="bug", started_at=started)
            progress.failed += 1
        finally:
            call_scope.reset(token)
            if on_progress:
                on_progress(progress, runtime)

    async def worker() -> None:
        while True:
            try:
                case, repeat = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            await run_item(case, repeat)

    started = time.perf_counter()
    workers = [asyncio.create_task(worker()) for _ in range(min(config.concurrency, len(todo)))]
    status, error = "done", None
    try:
        await asyncio.gather(*workers)
    except BudgetExceeded as exc:
        status, error = "stopped", exc
    except (asyncio.CancelledError, KeyboardInterrupt):
        status = "interrupted"
        raise
    except Exception as exc:  # the store or a hook broke: the run is not done, say so and why
        status, error = "failed", exc
        raise
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        store.set_run_status(run_id, status, str(error) if error else None)
        for model in set(panel.seats.values()):
            await model.aclose()
    return RunResult(run_id=run_id, status=status, progress=progress, spent=runtime.budget.spent(),
                     wall_s=time.perf_counter() - started, error=error)


def config_for_resume(store: Store, run_id: str) -> RunConfig:
    run = store.get_run(run_id)
    if run is None:
        raise UsageError(f"No run '{run_id}' in {store.path}.", "List runs with `medpanel runs`.")
    return RunConfig.model_validate(run["settings"])
