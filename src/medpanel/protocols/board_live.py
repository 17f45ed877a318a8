"""The live tumor board: every specialist is its own agent, and a moderator runs the meeting.

What no paper has: instead of one model writing the whole meeting, a moderator agent presents the
case, picks the specialists this case needs, gives the floor turn by turn, and closes with the
board's conclusion. Each specialist has its own role prompt and may have its own model: the panel's
titled seats (its roles named by a specialty) say who sits where, the `moderator` role chairs (the
first seat by default), and the first seat takes every other specialty. A person can take any seat
(a titled seat whose model is a person's answers through the same `complete` call as any model); the
runner builds every model, this protocol none. The result is the same transcript and the same tagged
meeting text as Board Simulation (`render_board`), so every scorer applies.

    opening (moderator: presents, names the specialists)
    up to max_turns times: moderator gives the floor (or closes early) -> that specialist speaks
    closing (moderator: the conclusion in two to four sentences)

A small moderator (`model.small`: the embedded one, or one marked small) cannot choose speakers or hold
the meeting's form reliably, so with one code does what can be decided (protocols/board_small.py): the
case's specialists are seated, the opening says what is to be decided, the floor goes to the next
unheard specialist (never the same twice in a row) with a short question for that specialty, and the
meeting closes once all are heard; the moderator's model states the plan in two or three sentences,
the first naming a management option. A small specialist answers in one or two bounded sentences under
a schema, from a prompt whose case prefix is the same for every call (so its KV state is reused).

Prompts name the seats by their roles only, never by the model behind them. Token budgets when not set
(small model such as the embedded one / any other; a reasoning model gets REASONING_ALLOWANCE more):
`turn_tokens` 160 / 1024 per turn and per floor decision (a small moderator makes none), twice that for
the opening (a small moderator's is code's); `conclusion_tokens` 200 / 1024. Each seat's budget fits its
own model. A reply cut by its budget is marked truncated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, create_model

from medpanel.cases.model import Case
from medpanel.context import RunContext, quiet
from medpanel.models.base import Model
from medpanel.models.messages import Message
from medpanel.protocols.base import Outcome, Panel, ProtocolSpec
from medpanel.protocols.board import MEETING_SCORERS, MeetingScoring, board_prompt, record_replies
from medpanel.protocols.board_small import SmallMeeting, board_roles, next_speaker, opening_text, question_for
from medpanel.scoring.board_format import parse_board_response, render_board
from medpanel.scoring.sentences import first_sentences
from medpanel.transcript import Transcript

MODERATOR = "Moderator"
CLOSE = "close the discussion"

# The specialists a moderator can call on. The panel's titled seats (a role given its own model or a
# person, e.g. "Radiologist") are added to these.
CATALOGUE = [
    "Radiologist", "Pathologist", "Medical Oncologist", "Radiation Oncologist", "Surgical Oncologist",
    "Urologist", "Thoracic Surgeon", "Pulmonologist", "Gastroenterologist", "Nuclear Medicine Physician",
    "Geriatrician", "Palliative Care Physician", "Genetic Counselor", "Oncology Nurse Navigator",
]

MODERATOR_SYSTEM = (
    "You chair a multidisciplinary tumor board. You present the case, decide which specialists must "
    "speak, give each the floor with a focused question, keep the discussion on the decision at hand, "
    "and state the board's plan at the end. Be brief and clinical."
)
SPECIALIST_SYSTEM = (
    "You are the {role} at a multidisciplinary tumor board. Speak only from your specialty, about this "
    "patient, in one to three sentences: what the findings mean from your side and what you recommend. "
    "Say so when the information you need is missing."
)


class LiveBoardSettings(MeetingScoring):
    """Plain data. Who sits where is the panel's: its `moderator` role (default: the first seat), its
    titled seats (a specialist with their own model, or a person), and the first seat for the rest."""

    budgets: ClassVar[dict[str, tuple[int, int]]] = {"turn_tokens": (160, 1024), "conclusion_tokens": (200, 1024)}

    max_turns: int = Field(default=6, ge=1, le=40)  # specialist turns, the bound on the whole meeting
    max_specialists: int = Field(default=4, ge=1, le=len(CATALOGUE))
    # Specialists who must be seated, whatever the moderator says (the panel's titled seats always are).
    roles: list[str] = Field(default_factory=list)
    turn_tokens: int | None = Field(default=None, ge=16)  # None: fit the seat
    conclusion_tokens: int | None = Field(default=None, ge=32)
    temperature: float = 0.0


# No field descriptions: small models copy them into their answers. The prompts say what each field is.
class Opening(BaseModel):
    presentation: str = Field(max_length=800)
    specialists: list[str] = Field(min_length=1, max_length=6)


class Closing(BaseModel):
    conclusion: str = Field(max_length=800)


def _floor_schema(roles: list[str]) -> type[BaseModel]:
    """The moderator's choice of next speaker, limited to the seated roles or closing."""
    Speaker = Literal[tuple(roles + [CLOSE])]  # type: ignore[valid-type]
    return create_model("Floor", next_speaker=(Speaker, ...), question=(str, Field(default="", max_length=300)))


@dataclass
class Table:
    """Who sits where at one meeting, and the calls to them. Every model comes from the panel."""

    case: Case
    settings: LiveBoardSettings
    moderator: Model
    titled: dict[str, Model]  # the panel's titled seats: role -> model (a person's has provider "human")
    default: Model  # everyone else: the first seat
    used: dict[str, Model] = field(default_factory=dict)  # role -> the model that spoke for it

    @classmethod
    def of(cls, case: Case, panel: Panel, settings: LiveBoardSettings) -> "Table":
        _, first = panel.first()
        return cls(case, settings, panel.role("moderator", first), panel.titled_seats(), first)

    def required(self) -> list[str]:
        """Specialists who are seated whatever the moderator picks: the settings' roles, then the titled seats."""
        return list(dict.fromkeys([*self.settings.roles, *(r for r in self.titled if r != MODERATOR)]))

    def model_for(self, role: str) -> Model:
        model = self.moderator if role == MODERATOR else self.titled.get(role, self.default)
        self.used.setdefault(role, model)
        return model

    async def ask(self, role: str, system: str, extra: str, *, schema: Any = None, budget: str = "turn_tokens", times: int = 1) -> Any:
        """One call to the seat of `role`; `budget` names the token setting it spends, fitted to that seat's model."""
        model = self.model_for(role)
        images = self.case.images() if model.supports_vision else []
        user = Message(role="user", content=f"{board_prompt(self.case)}\n\n{extra}", images=images)
        return await model.complete([Message(role="system", content=system), user], schema=schema,
                                    temperature=self.settings.temperature, max_tokens=self.settings.tokens_for(model, budget, times))


def discussion_so_far(transcript: Transcript) -> str:
    spoken = transcript.turns()
    if not spoken:
        return "Nobody has spoken yet."
    return "\n".join(f"{e.speaker}: {e.text}" for e in spoken)


def _pick_roles(proposed: list[str], required: list[str], settings: LiveBoardSettings) -> list[str]:
    """Seat the required roles, then the moderator's picks that we know (matched loosely), within the cap."""
    by_lower = {r.lower(): r for r in CATALOGUE + required}
    chosen: list[str] = []
    for name in [*required, *proposed]:
        role = by_lower.get(name.strip().lower())
        if role and role != MODERATOR and role not in chosen:
            chosen.append(role)
    return chosen[: max(settings.max_specialists, len(required))]


async def run(case: Case, panel: Panel, settings: LiveBoardSettings, context: RunContext | None = None) -> Outcome:
    context = quiet(context)
    case.require("summary", protocol="board-live")
    table = Table.of(case, panel, settings)
    transcript = context.transcript()
    chair = Chair(table, transcript) if not table.moderator.small else SmallChair(table, transcript)

    roles = await chair.open()
    last_speaker = MODERATOR
    for turn in range(settings.max_turns):
        context.check()
        speaker, question = await chair.floor(roles, last_speaker, turn + 2)
        if speaker == CLOSE:
            break
        context.check()
        await chair.hear(speaker, question, turn + 2)
        last_speaker = speaker
    else:
        if not chair.all_heard(roles):
            transcript.record("note", f"turn bound of {settings.max_turns} reached", speaker=MODERATOR, phase="bound")

    context.check()
    spoken = [(e.speaker, e.text) for e in transcript.turns()]
    conclusion = await chair.close(len(spoken) + 1)
    transcript.record("decision", conclusion, speaker="Board", phase="conclusion")

    text = render_board(spoken, conclusion)
    parsed = parse_board_response(text)
    humans = [role for role, model in table.titled.items() if model.provider == "human"]
    return Outcome(answer=parsed.conclusion, transcript=transcript,
                   data={"raw": text, "parse_status": parsed.status, "turns": len(parsed.turns), "roles": roles,
                         "humans": humans, "seats": {r: m.id for r, m in table.used.items()}})


@dataclass
class Chair:
    """The moderator's part: the model chairs (today's flow, for every model that is not small)."""

    table: Table
    transcript: Transcript
    meeting: SmallMeeting = field(init=False)  # the prompts of small specialists' turns

    def __post_init__(self) -> None:
        self.meeting = SmallMeeting(self.table.case, self.table.settings.temperature)

    async def open(self) -> list[str]:
        """Present the case and choose who speaks."""
        table, required = self.table, self.table.required()
        catalogue = ", ".join(dict.fromkeys(CATALOGUE + required))
        opening = await table.ask(MODERATOR, MODERATOR_SYSTEM, f"Open the meeting: present the case briefly and name the specialists "
                                  f"who must speak, chosen from: {catalogue}.", schema=Opening, times=2)
        roles = _pick_roles(opening.parsed.specialists, required, table.settings) or ["Medical Oncologist"]
        self.transcript.record("turn", opening.parsed.presentation, reply=opening, speaker=MODERATOR, role=MODERATOR, round=1,
                               phase="opening", data={"specialists": roles})
        return roles

    def all_heard(self, roles: list[str]) -> bool:
        """Whether the meeting has nobody left to hear (the model's to judge: never, for code)."""
        return False

    async def floor(self, roles: list[str], last_speaker: str, round_: int) -> tuple[str, str]:
        """Who speaks next and the question, or CLOSE."""
        heard = {e.speaker for e in self.transcript.turns()}
        unheard = [r for r in roles if r not in heard]
        # Everyone seated is heard once before anyone speaks twice, and nobody twice in a row: the
        # moderator's choice is constrained to those roles (and closing), whatever model sits there.
        offered = unheard or [r for r in roles if r != last_speaker] or roles
        decision = await self.table.ask(MODERATOR, MODERATOR_SYSTEM,
                                        f"Discussion so far:\n{discussion_so_far(self.transcript)}\n\nSeated specialists: {', '.join(roles)}. "
                                        f"Not yet heard: {', '.join(unheard) or 'none'}. Give the floor to one of {', '.join(offered)} with a "
                                        f"focused question, or choose '{CLOSE}' when the board can decide.",
                                        schema=_floor_schema(offered))
        speaker, question = decision.parsed.next_speaker, decision.parsed.question.strip()
        self.transcript.record("note", question, speaker=MODERATOR, role=MODERATOR, model=decision.model, round=round_, phase="floor",
                               data={"next_speaker": speaker} | ({"truncated": True} if decision.truncated else {}))
        return speaker, question

    async def hear(self, speaker: str, question: str, round_: int) -> None:
        """The specialist's turn: a small model's through SmallMeeting, anyone else's (a person's too) as free text."""
        table = self.table
        model = table.model_for(speaker)
        if model.small:
            said = [(e.speaker, e.text) for e in self.transcript.turns() if e.speaker != MODERATOR]
            text, replies, dropped = await self.meeting.speak(model, speaker, said, table.settings.tokens_for(model, "turn_tokens"), question)
            record_replies(self.transcript, replies, "turn" if text else "note", text or "(repeated the meeting; not recorded as a turn)",
                           speaker=speaker, role=speaker, round=round_, phase="discussion" if text else "repeated",
                           **({"data": {"dropped": dropped}} if dropped else {}))
            return
        reply = await table.ask(speaker, SPECIALIST_SYSTEM.format(role=speaker),
                                f"Discussion so far:\n{discussion_so_far(self.transcript)}\n\nThe moderator asks you: "
                                f"{question or 'What is your view?'}")
        said, trimmed = first_sentences(" ".join(reply.text.split()), 3)
        self.transcript.record("turn", said, reply=reply, speaker=speaker, role=speaker, round=round_, phase="discussion",
                               data={"trimmed": trimmed})

    async def close(self, round_: int) -> str:
        """The conclusion, recorded as the moderator's last turn."""
        closing = await self.table.ask(MODERATOR, MODERATOR_SYSTEM, f"Discussion:\n{discussion_so_far(self.transcript)}\n\nClose the meeting: "
                                       "state the board's plan in two to four sentences.", schema=Closing, budget="conclusion_tokens")
        conclusion, trimmed = first_sentences(" ".join(closing.parsed.conclusion.split()), 4)
        self.transcript.record("turn", conclusion, reply=closing, speaker=MODERATOR, role=MODERATOR, round=round_, phase="conclusion",
                               data={"trimmed": trimmed})
        return conclusion


class SmallChair(Chair):
    """A small moderator: code seats the specialists, opens and gives the floor; the model states the plan."""

    async def open(self) -> list[str]:
        table = self.table
        required = table.required()
        roles = board_roles(table.case, table.settings.max_specialists, required=required, known=CATALOGUE)
        self.transcript.record("turn", opening_text(table.case, roles), speaker=MODERATOR, role=MODERATOR, round=1, phase="opening",
                               data={"specialists": roles, "by": "code"})
        table.model_for(MODERATOR)
        return roles

    def given(self) -> list[str]:
        """Who has had the floor: heard, or left out for repeating the meeting."""
        return [e.data.get("next_speaker") for e in self.transcript if e.phase == "floor"]

    def all_heard(self, roles: list[str]) -> bool:
        return next_speaker(roles, self.given()) is None

    async def floor(self, roles: list[str], last_speaker: str, round_: int) -> tuple[str, str]:
        speaker = next_speaker(roles, self.given())
        if speaker is None:  # everyone has been heard: the board can decide
            self.transcript.record("note", "", speaker=MODERATOR, role=MODERATOR, round=round_, phase="floor",
                                   data={"next_speaker": CLOSE, "by": "code"})
            return CLOSE, ""
        question = question_for(speaker)
        self.transcript.record("note", question, speaker=MODERATOR, role=MODERATOR, round=round_, phase="floor",
                               data={"next_speaker": speaker, "by": "code"})
        return speaker, question

    async def close(self, round_: int) -> str:
        table = self.table
        said = [(e.speaker, e.text) for e in self.transcript.turns() if e.speaker != MODERATOR]
        model = table.model_for(MODERATOR)
        conclusion, replies = await self.meeting.conclude(model, said, table.settings.tokens_for(model, "conclusion_tokens"))
        record_replies(self.transcript, replies, "turn", conclusion, speaker=MODERATOR, role=MODERATOR, round=round_, phase="conclusion")
        return conclusion


SPEC = ProtocolSpec(name="board-live", run=run, settings=LiveBoardSettings, scorers=MEETING_SCORERS, needs=("summary",),
                    role_defaults={"moderator": "@seat"},
                    description="a moderator and specialist agents hold the tumor board turn by turn")
