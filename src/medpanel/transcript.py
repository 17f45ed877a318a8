"""The record of a deliberation: ordered, append-only events. Every output medpanel shows derives from it."""

from __future__ import annotations

import json
import time
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Callable, Iterator, Literal

from pydantic import BaseModel, Field, PrivateAttr

EventKind = Literal["turn", "vote", "score", "decision", "note", "error"]


class Event(BaseModel):
    kind: EventKind
    text: str = ""
    speaker: str = ""  # who spoke: an agent's seat name ("Moderator", "GPT", "Physician")
    role: str = ""  # the clinical role or function ("Radiation Oncologist", "assistant")
    model: str = ""  # model id behind the speaker, or "human"
    round: int = 0
    phase: str = ""  # protocol stage: "initial", "debate", "conclusion", ...
    data: dict[str, Any] = Field(default_factory=dict)  # structured payload: parsed choice, scores, codes
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0
    cost_usd: float = 0.0
    cached: bool = False
    at: float = Field(default_factory=time.time)


# While the runner runs an item, every Transcript built for it is listed here, so an item that fails
# midway is stored with what was said before the failure (medpanel.runs.runner).
item_transcripts: ContextVar[list["Transcript"] | None] = ContextVar("item_transcripts", default=None)


class Transcript(BaseModel):
    events: list[Event] = Field(default_factory=list)
    _listener: Callable[[Event], Any] | None = PrivateAttr(default=None)

    def model_post_init(self, __context: Any) -> None:
        collected = item_transcripts.get()
        if collected is not None:
            collected.append(self)

    def listen(self, listener: Callable[[Event], Any] | None) -> "Transcript":
        """Hand every event recorded from now on to `listener` (the run context's, see medpanel.context)."""
        self._listener = listener
        return self

    def record(self, kind: EventKind, text: str | None = None, *, reply: Any = None, **fields: Any) -> Event:
        """Append one event and hand it to the listener: the one recorder every protocol and scorer uses.

        With `reply` (a model Reply) the event carries its model, usage, latency, cost and cache flag, its
        text defaults to the reply's, and a reply cut by its token budget gets `truncated: true` in its data
        (the text alone does not say so)."""
        if reply is not None:
            if getattr(reply, "truncated", False) or getattr(reply, "finish_reason", None) == "length":
                fields["data"] = {**(fields.get("data") or {}), "truncated": True}
            usage = reply.usage
            fields = {"model": reply.model, "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                      "latency_s": reply.latency_s, "cost_usd": reply.cost_usd, "cached": reply.cached, **fields}
            text = reply.text if text is None else text
        if fields.get("data") is None:
            fields.pop("data", None)
        event = Event(kind=kind, text=text or "", **fields)
        self.events.append(event)
        if self._listener is not None:
            self._listener(event)
        return event

    def __iter__(self) -> Iterator[Event]:  # type: ignore[override]
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)

    def turns(self, speaker: str | None = None) -> list[Event]:
        return [e for e in self.events if e.kind == "turn" and (speaker is None or e.speaker == speaker)]

    def totals(self) -> dict[str, float]:
        return {
            "input_tokens": sum(e.input_tokens for e in self.events),
            "output_tokens": sum(e.output_tokens for e in self.events),
            "cost_usd": round(sum(e.cost_usd for e in self.events), 8),
            "model_seconds": round(sum(e.latency_s for e in self.events), 4),
        }

    def to_jsonl(self, path: str | Path) -> None:
        Path(path).write_text("".join(e.model_dump_json() + "\n" for e in self.events))

    @classmethod
    def from_jsonl(cls, path: str | Path) -> "Transcript":
        lines = Path(path).read_text().splitlines()
        return cls(events=[Event.model_validate(json.loads(line)) for line in lines if line.strip()])
