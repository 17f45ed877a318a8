"""Board Simulation: one model writes a whole tumor-board meeting from a case summary and slides.

The written meeting is parsed leniently into a Transcript (one turn per speaker line) plus the
board's conclusion, so the same scorers apply to it as to a live board.
"""

from __future__ import annotations

import re

from typing import Literal

from pydantic import BaseModel, Field

from medpanel.cases.model import Case
from medpanel.models.messages import Message
from medpanel.protocols.base import Outcome, Panel, ProtocolSpec
from medpanel.transcript import Transcript

SYSTEM = (
    "You write the record of a multidisciplinary tumor board meeting. From the case summary and the "
    "slides, write the discussion as it would unfold: the Moderator opens and presents the case, then "
    "each specialist the case needs speaks in turn, and the board agrees on a plan. Use exactly this "
    "format:\n<discussion>\n<turn 1> Moderator: ...\n<turn 2> Radiologist: ...\n...\n</discussion>\n"
    "<conclusion>Two to four sentences stating the agreed plan.</conclusion>"
)

_TURN = re.compile(r"<turn\s*(\d+)>\s*([^:\n<]{1,80}):\s*(.*?)(?=<turn\s*\d+>|</discussion>|<conclusion>|\Z)", re.S | re.I)
_CONCLUSION = re.compile(r"<conclusion>\s*(.*?)\s*(?:</conclusion>|\Z)", re.S | re.I)
_THINK = re.compile(r"^\s*<think>.*?</think>", re.S)


class BoardSettings(BaseModel):
    temperature: float = 0.0
    max_tokens: int = 600
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
    return f"CASE SUMMARY:\n{case.summary}\n\nSLIDE DESCRIPTIONS:\n{case.slide_text()}"


def parse_meeting(text: str) -> tuple[list[tuple[int, str, str]], str | None, str]:
    """(turns as (number, role, text), conclusion or None, parse status) from a written meeting."""
    body = _THINK.sub("", text).strip()
    body = re.sub(r"^```\w*\s*|\s*```$", "", body)
    turns = [(int(n), role.strip(), " ".join(t.split())) for n, role, t in _TURN.findall(body)]
    match = _CONCLUSION.search(body)
    conclusion = " ".join(match.group(1).split()) if match and match.group(1).strip() else None
    if not turns and conclusion is None:
        return [], None, "raw_fallback"
    numbered = [n for n, _, _ in turns] == list(range(1, len(turns) + 1))
    closed = "</discussion>" in body.lower() and (match is not None and "</conclusion>" in body.lower())
    status = "parsed" if turns and conclusion and numbered and closed else "parsed_with_warnings"
    return turns, conclusion, status


async def run(case: Case, panel: Panel, settings: BoardSettings) -> Outcome:
    case.require("summary", protocol="board")
    seat, model = panel.first()
    user = Message(role="user", content=board_prompt(case), images=case.images() if model.supports_vision else [])
    structured = settings.structured == "always" or (settings.structured == "auto" and model.provider == "local")
    options = {"temperature": settings.temperature, "max_tokens": settings.max_tokens}
    if settings.frequency_penalty is not None:
        options["frequency_penalty"] = settings.frequency_penalty
    if structured:
        reply = await model.complete([Message(role="system", content=SYSTEM + "\n\n" + STRUCTURED_HINT), user], schema=WrittenMeeting, **options)
        written = reply.text
        reply.text = reply.parsed.as_tagged_text()  # one format downstream, whichever way it was written
    else:
        reply = await model.complete([Message(role="system", content=SYSTEM), user], **options)
    turns, conclusion, status = parse_meeting(reply.text)
    transcript = Transcript()
    transcript.add_reply(reply, speaker=seat, role="board writer", phase="simulation",
                         data={"parse_status": status, "structured": structured} | ({"json": written} if structured else {}))
    for number, role, text in turns:
        transcript.add("turn", text, speaker=role, role=role, model=reply.model, round=number, phase="discussion")
    if conclusion:
        transcript.add("decision", conclusion, speaker="Board", phase="conclusion")
    return Outcome(answer=conclusion, transcript=transcript, data={"parse_status": status, "turns": len(turns), "raw": reply.text})


def score(case: Case, outcome: Outcome) -> dict[str, float | None]:
    # Placeholder until the OpenTumorBoard scorers land: whether the meeting parsed with a conclusion.
    return {"has_conclusion": 1.0 if outcome.answer else 0.0, "turns": float(outcome.data.get("turns", 0))}


SPEC = ProtocolSpec(name="board", run=run, settings=BoardSettings, score=score, description="one model writes a tumor-board meeting and its conclusion")
