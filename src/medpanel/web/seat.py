"""A person's seat on the web page: the deliberation asks, the page shows the question, the person answers.

`WebSeat` is a `Model` like any other, so a protocol calls it as it calls a model; its `generate` waits for
the answer posted from the page, up to the server's timeout, then applies the visible policy: `stop` (the
deliberation stops; a resume carries on) or `pass` (the seat passes this turn with a note saying so; a
structured answer cannot be passed, so there it stops).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from medpanel.context import Cancelled
from medpanel.models.base import Generation, Model, Request, Usage
from medpanel.models.human import FormField, form_answers, form_fields

if TYPE_CHECKING:
    from medpanel.web.live import Deliberation

PASSED = "(No answer within the time allowed: the {seat} passes this turn.)"


@dataclass
class Question:
    """What a seat is asked, as the page shows it."""

    id: int
    seat: str
    person: str  # who took the seat (a user name)
    prompt: str  # the whole message the seat's model would read
    ask: str  # its last paragraph: the question itself, shown first
    brief: str  # the seat's instructions and what it holds (the system messages): an OSCE patient's case, say
    fields: list[FormField]  # empty: a free-text answer
    schema: dict | None
    slides: list[str]  # captions of the images attached
    timeout_s: float
    deadline: float  # time.monotonic() after which the timeout policy applies
    answer: asyncio.Future = field(repr=False, default=None)  # type: ignore[assignment]


class WebSeat(Model):
    provider = "human"
    supports_vision = True  # the slides are beside the transcript on the page
    cacheable = False

    def __init__(self, seat: str, deliberation: "Deliberation", person: str, runtime=None) -> None:
        super().__init__(seat, runtime)
        self.deliberation = deliberation
        self.person = person

    @property
    def id(self) -> str:
        return "human"

    async def generate(self, request: Request) -> Generation:
        last_user = next((m for m in reversed(request.messages) if m.role == "user"), None)
        prompt = last_user.content if last_user is not None else ""
        fields = form_fields(request.schema) if request.schema else []
        brief = "\n\n".join(m.content for m in request.messages if m.role == "system")
        earlier = [m for m in request.messages if m.role != "system" and m is not last_user]
        if earlier:  # a conversation so far (a consult, an OSCE): the person reads it as the seat's model would
            brief += ("\n\n" if brief else "") + "\n".join(f"{m.role}: {m.content}" for m in earlier)
        text = await self.deliberation.ask(self, prompt, brief, fields, request.schema,
                                           [img.caption for img in (last_user.images if last_user else [])])
        return Generation(text=text, usage=Usage(output_tokens=len(text.split())), finish_reason="stop", model="human")


def answer_text(question: Question, form: dict[str, str]) -> str:
    """The text a form posts becomes: the free text, or the structured answer as JSON."""
    if question.schema is None:
        return str(form.get("text", "")).strip()
    return json.dumps(form_answers(question.schema, {f.name: form.get(f.name, "") for f in question.fields}))


def seconds_left(question: Question) -> int:
    return max(0, int(question.deadline - time.monotonic()))


__all__ = ["Cancelled", "PASSED", "Question", "WebSeat", "answer_text", "seconds_left"]
