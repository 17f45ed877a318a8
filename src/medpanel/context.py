"""The run context: everything live that a protocol or a scorer is handed beside its plain settings.

Settings are data: stored with the run, compared on resume, never holding a callable. What is live
travels here instead: who listens to events as they happen (the CLI printer, the web page), how the
seat of a person is built (the terminal by default, the web app its own), caches shared by every item
of a run (the judges' scope book), and cancellation. The CLI, the web app and the runner each make one
and pass it to the same protocol functions, so nothing re-implements a protocol for a second front end.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from medpanel.errors import MedpanelError
from medpanel.transcript import Event, Transcript

if TYPE_CHECKING:
    from medpanel.models.base import Model
    from medpanel.models.runtime import Runtime

T = TypeVar("T")
EventListener = Callable[[Event], Any]
HumanSeat = Callable[[str, "Runtime"], "Model"]


class Cancelled(MedpanelError):
    """The run was cancelled from outside (the web page's stop button): no failure of the item's."""

    kind = "cancelled"


@dataclass
class RunContext:
    """What a run shares beyond its settings. Every field has a default: `RunContext()` is a quiet run."""

    # Called with every event the moment it is recorded (by Transcript.record on a transcript from here).
    on_event: EventListener | None = None
    # Builds the seat of a person: (role, runtime) -> Model. None: the terminal (models.human.HumanModel).
    human_seat: HumanSeat | None = None
    # Objects every item of the run shares, by name (see `shared`); made on first use.
    caches: dict[str, Any] = field(default_factory=dict)
    cancel_event: asyncio.Event | None = None

    def emit(self, event: Event) -> None:
        if self.on_event is not None:
            self.on_event(event)

    def transcript(self) -> Transcript:
        """A new transcript whose every recorded event reaches this context's listener."""
        transcript = Transcript()
        transcript.listen(self.emit if self.on_event is not None else None)
        return transcript

    def shared(self, name: str, make: Callable[[], T]) -> T:
        """The run-wide object called `name`, made by `make()` the first time (e.g. one scope book per run)."""
        if name not in self.caches:
            self.caches[name] = make()
        return self.caches[name]

    def cancel(self) -> None:
        if self.cancel_event is None:
            self.cancel_event = asyncio.Event()
        self.cancel_event.set()

    @property
    def cancelled(self) -> bool:
        return self.cancel_event is not None and self.cancel_event.is_set()

    def check(self) -> None:
        """Raise Cancelled when the run was cancelled; protocols call it between turns (every loop is bounded too)."""
        if self.cancelled:
            raise Cancelled("The run was cancelled.", "Resume it to finish the items left.")


def quiet(context: RunContext | None) -> RunContext:
    """`context`, or a fresh quiet one for a protocol called without (tests, a notebook)."""
    return context if context is not None else RunContext()
