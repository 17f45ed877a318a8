"""Single model, multiple choice: the baseline every panel has to beat."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from medpanel.cases.model import Case
from medpanel.protocols.base import Outcome, Panel, ProtocolSpec, Settings
from medpanel.scoring.exact import exact_match, read_choice
from medpanel.transcript import Transcript

SYSTEM = (
    "You are a physician answering a multiple-choice exam question. Think briefly, then finish "
    "with a line of the form 'Answer: X', where X is the letter of the single best option."
)


# max_tokens when not set: (a small model such as the embedded one, any other); the debate and vote use the
# same, so their round 0 and this protocol share the cache. Reasoning models get REASONING_ALLOWANCE more.
ANSWER_BUDGET = (512, 2048)


class SingleSettings(Settings):
    budgets: ClassVar[dict[str, tuple[int, int]]] = {"max_tokens": ANSWER_BUDGET}

    temperature: float = 0.0
    max_tokens: int | None = Field(default=None, ge=16)  # None: fit the seat


def question_prompt(case: Case) -> str:
    return f"{case.question}\n\nOptions:\n{case.options_text()}"


async def run(case: Case, panel: Panel, settings: SingleSettings) -> Outcome:
    case.require("question", "options", protocol="single")
    seat, model = panel.first()
    reply = await model.complete(
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question_prompt(case)}],
        temperature=settings.temperature,
        max_tokens=settings.tokens_for(model),
    )
    read = read_choice(reply.text, case.options)  # with option texts, as the debate and vote read it
    transcript = Transcript()
    transcript.add_reply(reply, speaker=seat, role="answerer", phase="answer", data=read.as_data())
    transcript.add("decision", read.choice or "", data=read.as_data())
    return Outcome(answer=read.choice, transcript=transcript, data={"parsed": read.parsed, "answer_status": read.status})


def score(case: Case, outcome: Outcome) -> dict[str, float | None]:
    return {"accuracy": exact_match(outcome.answer, case.reference.answer), "parsed": 1.0 if outcome.answer else 0.0}


SPEC = ProtocolSpec(name="single", run=run, settings=SingleSettings, score=score, needs=("question", "options"), description="one model answers a multiple-choice question")
