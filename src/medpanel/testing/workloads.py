"""Synthetic protocols for benchmarks and robustness tests of the orchestration itself.

They have the shapes real protocols have (rounds of parallel calls; a free-text answer followed by a
structured extraction) without any clinical logic, so a measurement isolates the machinery.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from medpanel.cases import Case
from medpanel.protocols.base import Outcome, Panel, ProtocolSpec
from medpanel.scoring.exact import parse_choice
from medpanel.transcript import Transcript


class StagedSettings(BaseModel):
    stages: int = 3
    max_tokens: int = 16


async def staged(case: Case, panel: Panel, settings: StagedSettings) -> Outcome:
    """Each stage asks every seat at once and waits for all of them: the shape of a debate round."""
    transcript, previous = Transcript(), ""
    for stage in range(settings.stages):
        calls = [model.complete(f"{case.question}\nstage {stage} seat {seat}\n{previous}", max_tokens=settings.max_tokens)
                 for seat, model in panel.seats.items()]
        replies = await asyncio.gather(*calls)
        for (seat, _), reply in zip(panel.seats.items(), replies):
            transcript.add_reply(reply, speaker=seat, round=stage)
        previous = " | ".join(r.text[-20:] for r in replies)
    return Outcome(answer=previous, transcript=transcript)


STAGED = ProtocolSpec(name="staged", run=staged, settings=StagedSettings, score=lambda case, outcome: {},
                      description="synthetic: sequential stages of parallel calls")


class Extracted(BaseModel):
    choice: str
    rationale: str


class ExtractSettings(BaseModel):
    max_tokens: int = 64


async def answer_then_extract(case: Case, panel: Panel, settings: ExtractSettings) -> Outcome:
    """A free-text answer, then the same question again as structured output: both kinds of call."""
    seat, model = panel.first()
    prompt = f"{case.question}\n\nOptions:\n{case.options_text()}"
    text = await model.complete(prompt, max_tokens=settings.max_tokens)
    structured = await model.complete(prompt + "\n\nReply as JSON.", schema=Extracted, max_tokens=settings.max_tokens)
    transcript = Transcript()
    transcript.add_reply(text, speaker=seat, phase="answer")
    transcript.add_reply(structured, speaker=seat, phase="extract", data=structured.parsed.model_dump())
    choice = parse_choice(text.text, list(case.options) or "ABCDE")
    return Outcome(answer=choice, transcript=transcript, data={"extracted": structured.parsed.model_dump()})


ANSWER_THEN_EXTRACT = ProtocolSpec(name="answer-then-extract", run=answer_then_extract, settings=ExtractSettings,
                                   score=lambda case, outcome: {}, description="synthetic: a text call then a structured call")
