"""Live deliberations: started from the page, run by the runner in the server's event loop, streamed to
every open page as server-sent events, with people in seats answering from the page.

A deliberation is one single-case run (`run_benchmark` with a `RunContext` whose listener is the page and
whose `human_seat` is a `WebSeat`), so it is stored, scored and resumable like any run: the page is one
more listener, a person one more seat.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import AsyncIterator

from medpanel.cases.model import Case
from medpanel.context import Cancelled, RunContext
from medpanel.errors import MedpanelError, UsageError
from medpanel.models.runtime import Runtime
from medpanel.runs.runner import RunConfig, new_run_id, run_benchmark
from medpanel.runs.store import Store
from medpanel.transcript import Event
from medpanel.web.config import WebConfig
from medpanel.web.seat import PASSED, Question, WebSeat
from medpanel.web.templating import fragment

FINISHED = ("done", "failed", "stopped")
STOP_GRACE_S = 2.0  # after the stop button, how long a model call in flight may finish before it is abandoned
KEPT_FINISHED = 50  # finished deliberations kept in memory (all are stored as runs)
KEEPALIVE_S = 15.0  # an SSE comment this often keeps proxies from closing an idle stream


@dataclass
class Message:
    seq: int
    type: str  # event | ask | status
    html: str


@dataclass
class Plan:
    """What the start form asked for, as the runner takes it."""

    case: Case
    protocol: str
    models: list[str]
    roles: dict[str, str]
    settings: dict
    seat: str | None  # the seat the person who started it takes (None: only models)
    dataset: str  # how the case was named (stored with the run)
    people: dict[str, str] = field(default_factory=dict)  # seat title -> the user in it (the starter's own seat included)


@dataclass
class Deliberation:
    id: str
    plan: Plan
    started_by: str
    config: WebConfig
    status: str = "starting"  # starting | running | waiting | done | failed | stopped
    detail: str = ""  # why it stopped or failed; the conclusion when done
    run_id: str | None = None
    messages: list[Message] = field(default_factory=list)
    questions: dict[int, Question] = field(default_factory=dict)  # question id -> an open question to a person
    created_at: float = field(default_factory=time.time)
    context: RunContext = field(default_factory=RunContext)
    task: asyncio.Task | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _loop: asyncio.AbstractEventLoop | None = None
    _loop_thread: int | None = None
    stopped_by: str | None = None
    _seq: itertools.count = field(default_factory=itertools.count)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def title(self) -> str:
        return f"{self.plan.protocol} on {self.plan.case.id}"

    # ---------------------------------------------------------------- what the page receives

    def publish(self, kind: str, html: str) -> None:
        """Add a message for every page (from the loop's thread only; see on_event)."""
        self.messages.append(Message(next(self._seq), kind, html))
        self._changed.set()
        self._changed = asyncio.Event()

    def on_event(self, event: Event) -> None:
        """The run context's listener: each recorded event becomes a turn on the page, in order."""
        html = fragment("live/event.html", e=event)
        if self._loop is not None and threading.get_ident() != self._loop_thread:  # a scorer in a worker thread
            self._loop.call_soon_threadsafe(self.publish, "event", html)
        else:
            self.publish("event", html)

    def set_status(self, status: str, detail: str = "") -> None:
        self.status, self.detail = status, detail
        self.publish("status", fragment("live/status.html", d=self))

    async def stream(self, after: int = -1) -> AsyncIterator[Message | None]:
        """Every message after `after`, then each new one as it comes, until the deliberation ends (None: a keepalive)."""
        while True:
            changed = self._changed
            for message in [m for m in self.messages if m.seq > after]:
                yield message
                after = message.seq
            if self.finished and (not self.messages or after >= self.messages[-1].seq):
                return  # everything said, and nothing more will be
            try:
                await asyncio.wait_for(changed.wait(), KEEPALIVE_S)
            except asyncio.TimeoutError:
                yield None

    # ---------------------------------------------------------------- a person's seat

    async def ask(self, seat: WebSeat, prompt: str, brief: str, fields, schema, slides) -> str:
        """Wait for the person in `seat` to answer from the page, within the timeout; then the policy applies."""
        self.context.check()
        ask = prompt.strip().rsplit("\n\n", 1)[-1] if prompt.strip() else ""
        question = Question(next(self._seq), seat.name, seat.person, prompt, ask, brief, fields, schema, slides,
                            self.config.seat_timeout_s, time.monotonic() + self.config.seat_timeout_s,
                            asyncio.get_running_loop().create_future())
        self.questions[question.id] = question
        self.set_status("waiting", f"waiting for {seat.person} as {seat.name}")
        self.publish("ask", "")
        try:
            return await asyncio.wait_for(asyncio.shield(question.answer), self.config.seat_timeout_s)
        except asyncio.TimeoutError:
            if self.config.on_timeout == "pass" and schema is None:
                return PASSED.format(seat=seat.name)
            self.context.cancel()
            raise Cancelled(f"{seat.person} did not answer as {seat.name} within {self.config.seat_timeout_s:g} s.",
                            "Resume the run to carry on from the last finished item.") from None
        finally:
            self.questions.pop(question.id, None)
            if not self.finished and not self.questions:
                self.set_status("running", self.detail if self.context.cancelled else "")
            self.publish("ask", "")

    def answer(self, question_id: int, person: str, text: str) -> str:
        """Hand the person's answer to the question waiting for it; returns the seat it answered for."""
        question = self.questions.get(question_id)
        if question is None or question.answer.done():
            raise UsageError("That question is not open any more (it was answered, withdrawn or timed out).",
                             "The page shows what you are asked now.")
        if person != question.person:
            raise UsageError(f"The {question.seat}'s seat was taken by {question.person}, not {person}.", "Only the person in a seat answers for it.")
        if not text.strip():
            raise UsageError("The answer is empty.", "Type your answer, then send it.")
        question.answer.set_result(text)
        return question.seat

    def stop(self, by: str) -> None:
        """The stop button: no new turn starts, an open question is withdrawn, and a model call in flight is
        abandoned after a short grace (the run is stored as interrupted; a resume finishes it)."""
        if self.finished:
            return
        self.context.cancel()
        for question in self.questions.values():
            if not question.answer.done():
                question.answer.set_exception(Cancelled(f"Stopped by {by}.", "Resume the run to carry on."))
        self.set_status(self.status, f"stopping (asked by {by})")
        self.stopped_by = by
        if self.task is not None and self._loop is not None:
            self._loop.call_later(STOP_GRACE_S, lambda: None if self.task.done() else self.task.cancel())

    # ---------------------------------------------------------------- the run itself

    async def run(self, store: Store) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        plan = self.plan
        self.context.on_event = self.on_event
        self.context.human_seat = lambda title, runtime: WebSeat(title, self, plan.people.get(title, self.started_by), runtime)
        self.context.cancel_event = asyncio.Event()
        runtime = Runtime(cache=store, timeout_s=self.config.timeout_s)
        config = RunConfig(dataset=plan.dataset, protocol=plan.protocol, models=plan.models, settings=plan.settings, roles=plan.roles)
        self.run_id = new_run_id()
        self.set_status("running")
        try:
            result = await run_benchmark(store, config, runtime, run_id=self.run_id, cases=[plan.case], context=self.context)
        except MedpanelError as exc:
            self.set_status("failed", f"{exc.problem} {exc.fix}".strip())
            return
        except asyncio.CancelledError:  # the stop button's grace ran out, or the server is shutting down
            self.set_status("stopped", f"Stopped by {self.stopped_by}." if self.stopped_by else "The server shut down.")
            if self.stopped_by:
                return
            raise
        except Exception as exc:  # a bug: say so on the page rather than hang it
            self.set_status("failed", f"{type(exc).__name__}: {exc}")
            return
        items = store.items(result.run_id)
        item = items[0] if items else None
        if result.status == "interrupted":
            self.set_status("stopped", str(result.error or "stopped"))
        elif item is None or item["status"] != "done":
            self.set_status("failed", item["error"] if item else str(result.error or "no result"))
        else:
            outcome = item["outcome"] or {}
            self.set_status("done", str(outcome.get("answer") or ""))


class Deliberations:
    """The deliberations this server runs, by id (they are also stored as runs, so they outlive it)."""

    def __init__(self, config: WebConfig, store: Store) -> None:
        self.config, self.store = config, store
        self.all: dict[str, Deliberation] = {}

    def running(self) -> list[Deliberation]:
        return [d for d in self.all.values() if not d.finished]

    def start(self, plan: Plan, user: str) -> Deliberation:
        if len(self.running()) >= self.config.max_live:
            raise UsageError(f"{self.config.max_live} deliberations are running already on this server.",
                             "Wait for one to end, or stop one from its page.")
        deliberation = Deliberation(secrets.token_hex(4), plan, user, self.config)
        self.all[deliberation.id] = deliberation
        finished = [d for d in self.all.values() if d.finished]
        for old in finished[: max(0, len(finished) - KEPT_FINISHED)]:  # the oldest first (dicts keep their order)
            del self.all[old.id]
        deliberation.task = asyncio.get_running_loop().create_task(deliberation.run(self.store))
        return deliberation

    def get(self, deliberation_id: str) -> Deliberation:
        found = self.all.get(deliberation_id)
        if found is None:
            raise UsageError(f"There is no deliberation '{deliberation_id}' on this server.",
                             "Deliberations of an earlier server are stored as runs: see /runs.")
        return found

    async def shutdown(self) -> None:
        tasks = [d.task for d in self.all.values() if d.task is not None and not d.task.done()]
        for d in self.running():
            d.stop("the server shutting down")
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
