"""Board Simulation: one model writes a whole tumor-board meeting from a case summary and slides.

The written meeting is parsed leniently into a Transcript (one turn per speaker line) plus the
board's conclusion, so the same scorers apply to it as to a live board.

`max_tokens` unset fits the writer: 600 for the whole meeting on a small model (the embedded one), 4096
on others, plus REASONING_ALLOWANCE where hidden reasoning counts (see Model.token_budget). A meeting
cut by the budget is recorded as truncated (and the format score treats it so).
"""

from __future__ import annotations

import asyncio
from typing import ClassVar, Literal

from pydantic import BaseModel, Field, PrivateAttr

from medpanel.cases.model import Case
from medpanel.models import build_model
from medpanel.models.messages import Message
from medpanel.protocols.base import Outcome, Panel, ProtocolSpec, Settings
from medpanel.scoring import judges
from medpanel.scoring.board_format import parse_board_response, score_format
from medpanel.scoring.text import bertscore, rouge_l
from medpanel.transcript import Transcript

SYSTEM = (
    "You write the record of a multidisciplinary tumor board meeting. From the case summary and the "
    "slides, write the discussion as it would unfold: the Moderator opens and presents the case, then "
    "each specialist the case needs speaks in turn, and the board agrees on a plan. Use exactly this "
    "format:\n<discussion>\n<turn 1> Moderator: ...\n<turn 2> Radiologist: ...\n...\n</discussion>\n"
    "<conclusion>Two to four sentences stating the agreed plan.</conclusion>"
)

class MeetingScoring(Settings):
    """What to score a meeting with beyond its format and ROUGE-L: both board protocols take these."""

    judge: str | None = None  # model spec of the judge: conclusion alignment, four decisions, consistency
    judge_prompt_files: dict[str, str] = Field(default_factory=dict)  # rubric -> the paper's own prompt file
    judge_mode: Literal["medpanel", "released"] = "medpanel"  # released: the benchmark's own evaluation (docs/judges.md)
    bertscore: bool = False  # BERTScore of the conclusion with the bundled MiniLM (the text-metrics extra)
    _scopes: judges.ScopeBook = PrivateAttr(default_factory=judges.ScopeBook)  # decision scopes, frozen per reference for the run


async def judge_meeting(case: Case, outcome: Outcome, settings: MeetingScoring, runtime) -> None:
    """Run the requested judges and BERTScore on a finished meeting; results go into outcome.data and the transcript."""
    if settings.judge:
        judge = build_model(settings.judge, runtime)
        try:
            results = await judges.judge_board(judge, case, outcome.data.get("raw", ""), scopes=settings._scopes,
                                               prompt_files=settings.judge_prompt_files or None, mode=settings.judge_mode)
        finally:
            await judge.aclose()
        for result in results.values():
            judges.record(outcome.transcript, result)
        outcome.data["judges"] = {name: r.model_dump(mode="json") for name, r in results.items()}
    if settings.bertscore and case.reference.conclusion:
        result = await asyncio.to_thread(bertscore, [outcome.answer or ""], [case.reference.conclusion])
        outcome.data["bertscore_f1"] = result.f1[0]
        outcome.data["bertscore_note"] = result.note


class BoardSettings(MeetingScoring):
    budgets: ClassVar[dict[str, tuple[int, int]]] = {"max_tokens": (600, 4096)}

    temperature: float = 0.0
    max_tokens: int | None = Field(default=None, ge=16)  # the whole meeting; None: fit the writer
    # "auto": small embedded models write the meeting as schema-constrained JSON (they cannot hold the
    # tag format on their own), rendered back into the tag format; every other model writes the tags.
    structured: Literal["auto", "always", "never"] = "auto"
    frequency_penalty: float | None = None  # None: the model's default (0)


class WrittenTurn(BaseModel):
    role: str = Field(description="the speaker's specialty, e.g. Radiologist", max_length=40)
    text: str = Field(description="what they say", max_length=400)


class WrittenMeeting(BaseModel):
    turns: list[WrittenTurn] = Field(min_length=3, max_length=7)
    conclusion: str = Field(description="two to four sentences stating the agreed plan", max_length=600)

    def as_tagged_text(self) -> str:
        lines = [f"<turn {i}> {t.role}: {t.text}" for i, t in enumerate(self.turns, 1)]
        return "<discussion>\n" + "\n".join(lines) + "\n</discussion>\n<conclusion>" + self.conclusion + "</conclusion>"


STRUCTURED_HINT = (
    "Write the meeting as JSON: 'turns' is the list of speakers in order, the Moderator first, each with "
    "'role' and 'text'; 'conclusion' is the agreed plan in two to four sentences."
)


def board_prompt(case: Case) -> str:
    """The benchmark's user text; OpenTumorBoard records keep their own slide lines and are rebuilt byte for byte."""
    if case.metadata.get("sharegpt_user"):
        return case.metadata["sharegpt_user"]
    slides = case.metadata.get("slides_text") if case.metadata.get("otb_task") else None
    return f"CASE SUMMARY:\n{case.summary}\n\nSLIDE DESCRIPTIONS:\n{slides or case.slide_text()}"


async def run(case: Case, panel: Panel, settings: BoardSettings) -> Outcome:
    case.require("summary", protocol="board")
    seat, model = panel.first()
    user = Message(role="user", content=board_prompt(case), images=case.images() if model.supports_vision else [])
    structured = settings.structured == "always" or (settings.structured == "auto" and model.provider == "local")
    options = {"temperature": settings.temperature, "max_tokens": settings.tokens_for(model)}
    if settings.frequency_penalty is not None:
        options["frequency_penalty"] = settings.frequency_penalty
    if structured:
        reply = await model.complete([Message(role="system", content=SYSTEM + "\n\n" + STRUCTURED_HINT), user], schema=WrittenMeeting, **options)
        written = reply.text
        reply.text = reply.parsed.as_tagged_text()  # one format downstream, whichever way it was written
    else:
        reply = await model.complete([Message(role="system", content=SYSTEM), user], **options)
    parsed = parse_board_response(reply.text)
    transcript = Transcript()
    transcript.add_reply(reply, speaker=seat, role="board writer", phase="simulation",
                         data={"parse_status": parsed.status, "structured": structured} | ({"json": written} if structured else {}))
    for turn in parsed.turns:
        transcript.add("turn", turn.text, speaker=turn.role, role=turn.role, model=reply.model, round=turn.number, phase="discussion")
    if parsed.conclusion:
        transcript.add("decision", parsed.conclusion, speaker="Board", phase="conclusion")
    outcome = Outcome(answer=parsed.conclusion, transcript=transcript,
                      data={"parse_status": parsed.status, "warnings": parsed.warnings, "turns": len(parsed.turns), "raw": reply.text,
                            "output_tokens": reply.usage.output_tokens, "truncated": reply.truncated})
    await judge_meeting(case, outcome, settings, model.runtime)
    return outcome


def score(case: Case, outcome: Outcome) -> dict[str, float | None]:
    """Judge-free scores of a written or live meeting: its format (the released reward's format term)
    and ROUGE-L of its conclusion against the real board's. Judge and BERTScore results, when the
    run asked for them, are read from the outcome's data."""
    data = outcome.data
    fmt = score_format(data.get("raw", ""), response_tokens=data.get("output_tokens") or None, truncated=bool(data.get("truncated")))
    scores: dict[str, float | None] = {"format": fmt.score, "format_exact": 1.0 if fmt.exact else 0.0,
                                       "has_conclusion": 1.0 if outcome.answer else 0.0, "turns": float(data.get("turns", 0))}
    reference = case.reference.conclusion
    if reference:
        # No conclusion is a format failure scored at the floor, never dropped.
        scores["rouge_l"] = rouge_l(outcome.answer, reference).f1 if outcome.answer else 0.0
    if data.get("bertscore_f1") is not None:
        scores["bertscore_f1"] = float(data["bertscore_f1"])
    if data.get("judges"):
        scores |= judges.merged_scores([judges.JudgeResult.model_validate(r) for r in data["judges"].values()])
    return scores


SPEC = ProtocolSpec(name="board", run=run, settings=BoardSettings, score=score, needs=("summary",), description="one model writes a tumor-board meeting and its conclusion")
