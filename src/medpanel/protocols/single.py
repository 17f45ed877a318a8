"""Single model, multiple choice: the baseline every panel has to beat."""

from __future__ import annotations

from pydantic import BaseModel

from medpanel.cases.model import Case
from medpanel.protocols.base import Outcome, Panel, ProtocolSpec
from medpanel.scoring.exact import exact_match, parse_choice
from medpanel.transcript import Transcript

SYSTEM = (
    "You are a physician answering a multiple-choice exam question. Think briefly, then finish "
    "with a line of the form 'Answer: X', where X is the letter of the single best option."
)


class SingleSettings(BaseModel):
    temperature: float = 0.0
    max_tokens: int = 512


def question_prompt(case: Case) -> str:
    return f"{case.question}\n\nOptions:\n{case.options_text()}"


async def run(case: Case, panel: Panel, settings: SingleSettings) -> Outcome:
    case.require("question", "options", protocol="single")
    seat, model = panel.first()
    reply = await model.complete(
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question_prompt(case)}],
        temperature=settings.temperature,
        max_tokens=settings.max_tokens,
    )
    choice = parse_choice(reply.text, case.options)  # with option texts, as the debate and vote read it
    transcript = Transcript()
    transcript.add_reply(reply, speaker=seat, role="answerer", phase="answer", data={"choice": choice})
    transcript.add("decision", choice or "", data={"choice": choice, "parsed": choice is not None})
    return Outcome(answer=choice, transcript=transcript, data={"parsed": choice is not None})


def score(case: Case, outcome: Outcome) -> dict[str, float | None]:
    return {"accuracy": exact_match(outcome.answer, case.reference.answer), "parsed": 1.0 if outcome.answer else 0.0}


SPEC = ProtocolSpec(name="single", run=run, settings=SingleSettings, score=score, description="one model answers a multiple-choice question")
