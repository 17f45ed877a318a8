"""Synthetic protocols for benchmarks and robustness tests of the orchestration itself.

They have the shapes real protocols have (rounds of parallel calls; a free-text answer followed by a
structured extraction) without any clinical logic, so a measurement isolates the machinery.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from medpanel.cases import Case
from medpanel.context import RunContext, quiet
from medpanel.protocols.base import Outcome, Panel, ProtocolSpec
from medpanel.scoring.exact import parse_choice


class StagedSettings(BaseModel):
    stages: int = 3
    max_tokens: int = 16


async def staged(case: Case, panel: Panel, settings: StagedSettings, context: RunContext | None = None) -> Outcome:
    """Each stage asks every seat at once and waits for all of them: the shape of a debate round."""
    context = quiet(context)
    transcript, previous = context.transcript(), ""
    for stage in range(settings.stages):
        context.check()
        calls = [model.complete(f"{case.question}\nstage {stage} seat {seat}\n{previous}", max_tokens=settings.max_tokens)
                 for seat, model in panel.seats.items()]
        replies = await asyncio.gather(*calls)
        for (seat, _), reply in zip(panel.seats.items(), replies):
            transcript.record("turn", reply=reply, speaker=seat, round=stage)
        previous = " | ".join(r.text[-20:] for r in replies)
    return Outcome(answer=previous, transcript=transcript)


# No scorers: these workloads measure the machinery, not answers.
STAGED = ProtocolSpec(name="staged", run=staged, settings=StagedSettings, scorers=(),
                      description="synthetic: sequential stages of parallel calls")


class Extracted(BaseModel):
    choice: str
    rationale: str


class ExtractSettings(BaseModel):
    max_tokens: int = 64


async def answer_then_extract(case: Case, panel: Panel, settings: ExtractSettings, context: RunContext | None = None) -> Outcome:
    """A free-text answer, then the same question again as structured output: both kinds of call."""
    context = quiet(context)
    seat, model = panel.first()
    prompt = f"{case.question}\n\nOptions:\n{case.options_text()}"
    text = await model.complete(prompt, max_tokens=settings.max_tokens)
    structured = await model.complete(prompt + "\n\nReply as JSON.", schema=Extracted, max_tokens=settings.max_tokens)
    transcript = context.transcript()
    transcript.record("turn", reply=text, speaker=seat, phase="answer")
    transcript.record("turn", reply=structured, speaker=seat, phase="extract", data=structured.parsed.model_dump())
    choice = parse_choice(text.text, list(case.options) or "ABCDE")
    return Outcome(answer=choice, transcript=transcript, data={"extracted": structured.parsed.model_dump()})


ANSWER_THEN_EXTRACT = ProtocolSpec(name="answer-then-extract", run=answer_then_extract, settings=ExtractSettings,
                                   scorers=(), description="synthetic: a text call then a structured call")
