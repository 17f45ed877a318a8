"""Board Simulation: one model writes a whole tumor-board meeting from a case summary and slides.

The written meeting is parsed leniently into a Transcript (one turn per speaker line) plus the
board's conclusion, so the same scorers apply to it as to a live board.

A small model (`model.small`: the embedded one, or one marked small) cannot hold the whole meeting's
form in one reply, so by default it writes the meeting turn by turn under constraints
(protocols/board_small.py: code chooses the case's specialists and gives the floor, the model answers
each question in one or two sentences and states the plan), rendered into the same tagged format.

`max_tokens` unset fits the writer: 600 for the whole meeting on a small model (the embedded one), 4096
on others, plus REASONING_ALLOWANCE where hidden reasoning counts (see Model.token_budget). Turn by turn,
the meeting's budget is shared out: one share per specialist's turn, two for the plan. A meeting cut by
the budget is recorded as truncated (and the format score treats it so).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from medpanel.cases.model import Case
from medpanel.context import RunContext, quiet
from medpanel.models.messages import Message
from medpanel.models.base import Model, Reply
from medpanel.protocols.base import Outcome, Panel, ProtocolSpec, Settings
from medpanel.protocols.board_small import MODERATOR, SmallMeeting, board_roles, opening_text, question_for, reply_sentences
from medpanel.scoring.board_format import parse_board_response, render_board, score_format
from medpanel.scoring.judges import BERTSCORE, BOARD_JUDGE, BOARD_REWARD, DEFAULT_MAX_TOKENS
from medpanel.scoring.metrics import metric_kind
from medpanel.scoring.scorer import pure
from medpanel.scoring.text import rouge_l

SYSTEM = (
    "You write the record of a multidisciplinary tumor board meeting. From the case summary and the "
    "slides, write the discussion as it would unfold: the Moderator opens and presents the case, then "
    "each specialist the case needs speaks in turn, and the board agrees on a plan. Use exactly this "
    "format:\n<discussion>\n<turn 1> Moderator: ...\n<turn 2> Radiologist: ...\n...\n</discussion>\n"
    "<conclusion>Two to four sentences stating the agreed plan.</conclusion>"
)


class MeetingScoring(Settings):
    """How the scorers read a meeting beyond its format and ROUGE-L: both board protocols take these.
    The judge itself is the panel's `judge` role (the run's config), not a setting."""

    judge_prompt_files: dict[str, str] = Field(default_factory=dict)  # rubric -> the paper's own prompt file
    judge_mode: Literal["medpanel", "released"] = "medpanel"  # released: the benchmark's own evaluation (docs/judges.md)
    judge_max_tokens: int = Field(default=DEFAULT_MAX_TOKENS, ge=16)  # medpanel mode; released uses the release's budgets
    bertscore: bool = False  # BERTScore of the conclusion with the bundled MiniLM (the text-metrics extra)
    # The Dr.GRPO training reward with its own judges (scoring/reward.py), as `medpanel train grpo` computes it:
    # "released_code" (OpenTumorBoard's reward code) or "paper" (its appendix E.2); "off" skips it.
    reward: Literal["off", "released_code", "paper"] = "off"


class BoardSettings(MeetingScoring):
    budgets: ClassVar[dict[str, tuple[int, int]]] = {"max_tokens": (600, 4096)}

    temperature: float = 0.0
    max_tokens: int | None = Field(default=None, ge=16)  # the whole meeting; None: fit the writer
    # "auto": a small model (model.small: the embedded one, or one marked small) writes the meeting turn
    # by turn ("turns", see board_small.py); every other model writes the tags ("never"). "always": the
    # whole meeting as one schema-constrained JSON reply, rendered back into the tag format.
    structured: Literal["auto", "always", "never", "turns"] = "auto"
    frequency_penalty: float | None = None  # None: the model's default (0)


class WrittenTurn(BaseModel):
    role: str = Field(description="the speaker's specialty, e.g. Radiologist", max_length=40)
    text: str = Field(description="what they say", max_length=400)


class WrittenMeeting(BaseModel):
    turns: list[WrittenTurn] = Field(min_length=3, max_length=7)
    conclusion: str = Field(description="two to four sentences stating the agreed plan", max_length=600)

    def as_tagged_text(self) -> str:
        return render_board(((t.role, t.text) for t in self.turns), self.conclusion)


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


async def run(case: Case, panel: Panel, settings: BoardSettings, context: RunContext | None = None) -> Outcome:
    context = quiet(context)
    case.require("summary", protocol="board")
    seat, model = panel.first()
    options = {"temperature": settings.temperature, "max_tokens": settings.tokens_for(model)}
    if settings.frequency_penalty is not None:
        options["frequency_penalty"] = settings.frequency_penalty
    if settings.structured == "turns" or (settings.structured == "auto" and model.small):
        return await write_by_turns(case, model, settings, context, options)
    user = Message(role="user", content=board_prompt(case), images=case.images() if model.supports_vision else [])
    structured = settings.structured == "always"
    if structured:
        reply = await model.complete([Message(role="system", content=SYSTEM + "\n\n" + STRUCTURED_HINT), user], schema=WrittenMeeting, **options)
        written = reply.text
        reply.text = reply.parsed.as_tagged_text()  # one format downstream, whichever way it was written
    else:
        reply = await model.complete([Message(role="system", content=SYSTEM), user], **options)
    parsed = parse_board_response(reply.text)
    transcript = context.transcript()
    transcript.record("turn", reply=reply, speaker=seat, role="board writer", phase="simulation",
                      data={"parse_status": parsed.status, "structured": structured} | ({"json": written} if structured else {}))
    for turn in parsed.turns:
        transcript.record("turn", turn.text, speaker=turn.role, role=turn.role, model=reply.model, round=turn.number, phase="discussion")
    if parsed.conclusion:
        transcript.record("decision", parsed.conclusion, speaker="Board", phase="conclusion")
    return Outcome(answer=parsed.conclusion, transcript=transcript,
                   data={"parse_status": parsed.status, "warnings": parsed.warnings, "turns": len(parsed.turns), "raw": reply.text,
                         "output_tokens": reply.usage.output_tokens, "truncated": reply.truncated,
                         "length_limit": options["max_tokens"]})  # the response budget, for the reward's overlength term


def record_replies(transcript, replies: list[Reply], kind: str, text: str, **fields) -> None:
    """A turn that took several calls: each earlier reply as a note (so every call's cost is on record),
    the last one with what was kept of it."""
    for earlier in replies[:-1]:
        said = " ".join(reply_sentences(earlier.parsed)) if isinstance(earlier.parsed, dict) else None
        transcript.record("note", said, reply=earlier, **{**fields, "phase": "asked again", "data": {"for": fields.get("phase")}})
    transcript.record(kind, text, reply=replies[-1], **fields)


async def write_by_turns(case: Case, model: Model, settings: BoardSettings, context: RunContext, options: dict) -> Outcome:
    """The meeting turn by turn on one model (see board_small.py): code's opening and floor, the model's words."""
    transcript = context.transcript()
    roles = board_roles(case)
    meeting = SmallMeeting(case, settings.temperature, {k: v for k, v in options.items() if k == "frequency_penalty"})
    share = max(32, options["max_tokens"] // (len(roles) + 2))  # one share a turn, two for the plan
    opening = opening_text(case, roles)
    transcript.record("turn", opening, speaker=MODERATOR, role=MODERATOR, round=1, phase="discussion",
                      data={"specialists": roles, "by": "code"})
    said: list[tuple[str, str]] = []
    replies: list[Reply] = []
    for role in roles:
        context.check()
        transcript.record("note", question_for(role), speaker=MODERATOR, role=MODERATOR, phase="floor", data={"next_speaker": role})
        text, got, dropped = await meeting.speak(model, role, said, share)
        replies += got
        fields = {"speaker": role, "role": role, "round": len(said) + 2, "phase": "discussion" if text else "repeated"}
        record_replies(transcript, got, "turn" if text else "note", text or "(repeated the meeting; not recorded as a turn)",
                       **fields, **({"data": {"dropped": dropped}} if dropped else {}))
        if text:
            said.append((role, text))
    context.check()
    conclusion, got = await meeting.conclude(model, said, 2 * share)
    replies += got
    record_replies(transcript, got, "decision", conclusion, speaker="Board", phase="conclusion")
    raw = render_board([(MODERATOR, opening), *said], conclusion)
    parsed = parse_board_response(raw)
    return Outcome(answer=parsed.conclusion, transcript=transcript,
                   data={"parse_status": parsed.status, "warnings": parsed.warnings, "turns": len(parsed.turns), "raw": raw,
                         "structured": "turns", "roles": roles, "truncated": any(r.truncated for r in replies)})


# ---------------------------------------------------------------- scorers (a written or live meeting alike)

def format_scores(case: Case, outcome: Outcome) -> dict[str, float | None]:
    """The meeting's format (the released reward's format term), whether it reached a conclusion, its turns."""
    data = outcome.data
    fmt = score_format(data.get("raw", ""), response_tokens=data.get("output_tokens") or None, truncated=bool(data.get("truncated")))
    return {"format": fmt.score, "format_exact": 1.0 if fmt.exact else 0.0,
            "has_conclusion": 1.0 if outcome.answer else 0.0, "turns": float(data.get("turns", 0))}


def rouge_scores(case: Case, outcome: Outcome) -> dict[str, float | None]:
    """ROUGE-L of the conclusion against the real board's, where there is one on file. No conclusion
    is a format failure scored at the floor, never dropped."""
    reference = case.reference.conclusion
    if not reference:
        return {}
    return {"rouge_l": rouge_l(outcome.answer, reference).f1 if outcome.answer else 0.0}


MEETING_SCORERS = (
    pure("format", format_scores, {name: metric_kind(name) for name in ("format", "format_exact", "has_conclusion", "turns")}),
    pure("rouge", rouge_scores, {"rouge_l": metric_kind("rouge_l")}),
    BERTSCORE,
    BOARD_JUDGE,
    BOARD_REWARD,
)

SPEC = ProtocolSpec(name="board", run=run, settings=BoardSettings, scorers=MEETING_SCORERS, needs=("summary",),
                    description="one model writes a tumor-board meeting and its conclusion")
