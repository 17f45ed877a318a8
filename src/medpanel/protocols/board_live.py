"""The live tumor board: every specialist is its own agent, and a moderator runs the meeting.

What no paper has: instead of one model writing the whole meeting, a moderator agent presents the
case, picks the specialists this case needs, gives the floor turn by turn, and closes with the
board's conclusion. Each specialist has its own role prompt and may have its own model; a person can
take any seat (the human model answers through the same `complete` call as any model). The result
is the same transcript and the same tagged meeting text as Board Simulation, so every scorer applies.

    opening (moderator: presents, names the specialists)
    up to max_turns times: moderator gives the floor (or closes early) -> that specialist speaks
    closing (moderator: the conclusion in two to four sentences)

Prompts name the seats by their roles only, never by the model behind them. Token budgets when not set
(small model such as the embedded one / any other; a reasoning model gets REASONING_ALLOWANCE more):
`turn_tokens` 160 / 1024 per turn and per floor decision, twice that for the opening; `conclusion_tokens`
200 / 1024. Each seat's budget fits its own model. A reply cut by its budget is marked truncated.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Literal

from pydantic import BaseModel, Field, create_model

from medpanel.cases.model import Case
from medpanel.errors import UsageError
from medpanel.models import build_model
from medpanel.models.base import Model
from medpanel.models.human import HumanModel
from medpanel.models.messages import Message
from medpanel.protocols.base import Outcome, Panel, ProtocolSpec
from medpanel.protocols.board import MeetingScoring, board_prompt, judge_meeting
from medpanel.protocols.board import score as board_score
from medpanel.scoring.board_format import parse_board_response
from medpanel.scoring.sentences import first_sentences
from medpanel.transcript import Event, Transcript

MODERATOR = "Moderator"
CLOSE = "close the discussion"

# The specialists a moderator can call on. A case's own seats (--seat, --human) are added to these.
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
    budgets: ClassVar[dict[str, tuple[int, int]]] = {"turn_tokens": (160, 1024), "conclusion_tokens": (200, 1024)}

    max_turns: int = Field(default=6, ge=1, le=40)  # specialist turns, the bound on the whole meeting
    max_specialists: int = Field(default=4, ge=1, le=len(CATALOGUE))
    roles: list[str] = Field(default_factory=list)  # specialists who must be seated, whatever the moderator says
    seats: dict[str, str] = Field(default_factory=dict)  # role -> model spec ("Moderator" included)
    humans: list[str] = Field(default_factory=list)  # roles taken by a person at the terminal
    turn_tokens: int | None = Field(default=None, ge=16)  # None: fit the seat
    conclusion_tokens: int | None = Field(default=None, ge=32)
    temperature: float = 0.0
    # Streams each event as it happens (CLI, web). Not part of the stored settings.
    on_event: Callable[[Event], Any] | None = Field(default=None, exclude=True)
    # Builds the seat of a person (role, runtime) -> Model: the terminal by default; the web app passes its own.
    human_seat: Callable[[str, Any], Model] | None = Field(default=None, exclude=True)


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


class Meeting:
    """The state of one live meeting: who sits where, what has been said, and the transcript."""

    def __init__(self, case: Case, panel: Panel, settings: LiveBoardSettings) -> None:
        self.case, self.settings = case, settings
        self.default_seat, self.default_model = panel.first()
        self.runtime = self.default_model.runtime
        self.models: dict[str, Model] = {}
        self.transcript = Transcript()
        self.spoken: list[tuple[str, str]] = []  # (role, text) in order, the moderator included

    def model_for(self, role: str) -> Model:
        if role not in self.models:
            if role in self.settings.humans:
                make = self.settings.human_seat or (lambda seat, runtime: HumanModel(seat, runtime=runtime))
                self.models[role] = make(role, self.runtime)
            elif role in self.settings.seats:
                self.models[role] = build_model(self.settings.seats[role], self.runtime)
            else:
                self.models[role] = self.default_model
        return self.models[role]

    def emit(self, event: Event) -> None:
        if self.settings.on_event is not None:
            self.settings.on_event(event)

    def record(self, role: str, text: str, reply: Any, phase: str, turn: int, data: dict | None = None) -> None:
        event = self.transcript.add_reply(reply, speaker=role, role=role, round=turn, phase=phase, data=data)
        event.text = text  # the spoken words; structured payloads stay in `data`
        self.spoken.append((role, text))
        self.emit(event)

    def discussion_so_far(self) -> str:
        if not self.spoken:
            return "Nobody has spoken yet."
        return "\n".join(f"{role}: {text}" for role, text in self.spoken)

    def case_message(self, model: Model, extra: str) -> Message:
        images = self.case.images() if model.supports_vision else []
        return Message(role="user", content=f"{board_prompt(self.case)}\n\n{extra}", images=images)

    async def ask(self, role: str, system: str, extra: str, *, schema: Any = None, budget: str = "turn_tokens", times: int = 1) -> Any:
        """One call to the seat of `role`; `budget` names the token setting it spends, fitted to that seat's model."""
        model = self.model_for(role)
        return await model.complete([Message(role="system", content=system), self.case_message(model, extra)], schema=schema,
                                    temperature=self.settings.temperature, max_tokens=self.settings.tokens_for(model, budget, times))


def _pick_roles(proposed: list[str], settings: LiveBoardSettings) -> list[str]:
    """Seat the moderator's picks that we know (matched loosely), then the required roles, within the cap."""
    by_lower = {r.lower(): r for r in CATALOGUE + settings.roles + list(settings.seats) + settings.humans}
    chosen: list[str] = []
    for name in [*settings.roles, *settings.humans, *(r for r in settings.seats if r != MODERATOR), *proposed]:
        role = by_lower.get(name.strip().lower())
        if role and role != MODERATOR and role not in chosen:
            chosen.append(role)
    required = len({*settings.roles, *settings.humans, *(r for r in settings.seats if r != MODERATOR)})
    return chosen[: max(settings.max_specialists, required)]


async def run(case: Case, panel: Panel, settings: LiveBoardSettings) -> Outcome:
    case.require("summary", protocol="board-live")
    unknown_humans = [h for h in settings.humans if h in settings.seats]
    if unknown_humans:
        raise UsageError(f"{', '.join(unknown_humans)} has both a model (--seat) and a person (--human).", "Give each seat one occupant.")
    meeting = Meeting(case, panel, settings)
    try:
        return await _hold(meeting, case, settings)
    finally:  # seats built for this meeting (their own models) hold connections: release them
        for model in set(meeting.models.values()) - set(panel.seats.values()):
            await model.aclose()


async def _hold(meeting: "Meeting", case: Case, settings: LiveBoardSettings) -> Outcome:

    # Opening: present the case and choose who speaks.
    catalogue = ", ".join(dict.fromkeys(CATALOGUE + settings.roles + settings.humans))
    opening = await meeting.ask(MODERATOR, MODERATOR_SYSTEM, f"Open the meeting: present the case briefly and name the specialists "
                                f"who must speak, chosen from: {catalogue}.", schema=Opening, times=2)
    roles = _pick_roles(opening.parsed.specialists, settings) or settings.roles or ["Medical Oncologist"]
    meeting.record(MODERATOR, opening.parsed.presentation, opening, "opening", 1, data={"specialists": roles})

    # Discussion: the moderator gives the floor, bounded by max_turns.
    last_speaker = MODERATOR
    for turn in range(settings.max_turns):
        unheard = [r for r in roles if r not in {who for who, _ in meeting.spoken}]
        # Everyone seated is heard once before anyone speaks twice, and nobody twice in a row: the
        # moderator's choice is constrained to those roles (and closing), whatever model sits there.
        offered = unheard or [r for r in roles if r != last_speaker] or roles
        decision = await meeting.ask(MODERATOR, MODERATOR_SYSTEM,
                                     f"Discussion so far:\n{meeting.discussion_so_far()}\n\nSeated specialists: {', '.join(roles)}. "
                                     f"Not yet heard: {', '.join(unheard) or 'none'}. Give the floor to one of {', '.join(offered)} with a "
                                     f"focused question, or choose '{CLOSE}' when the board can decide.",
                                     schema=_floor_schema(offered))
        speaker, question = decision.parsed.next_speaker, decision.parsed.question.strip()
        meeting.transcript.add("note", question, speaker=MODERATOR, role=MODERATOR, model=decision.model, round=turn + 2, phase="floor",
                               data={"next_speaker": speaker} | ({"truncated": True} if decision.truncated else {}))
        if speaker == CLOSE:
            break
        reply = await meeting.ask(speaker, SPECIALIST_SYSTEM.format(role=speaker),
                                  f"Discussion so far:\n{meeting.discussion_so_far()}\n\nThe moderator asks you: "
                                  f"{question or 'What is your view?'}")
        said, trimmed = first_sentences(" ".join(reply.text.split()), 3)
        meeting.record(speaker, said, reply, "discussion", turn + 2, data={"trimmed": trimmed})
        last_speaker = speaker
    else:
        meeting.transcript.add("note", f"turn bound of {settings.max_turns} reached", speaker=MODERATOR, phase="bound")

    # Closing: the conclusion.
    closing = await meeting.ask(MODERATOR, MODERATOR_SYSTEM, f"Discussion:\n{meeting.discussion_so_far()}\n\nClose the meeting: "
                                "state the board's plan in two to four sentences.", schema=Closing, budget="conclusion_tokens")
    conclusion, trimmed = first_sentences(" ".join(closing.parsed.conclusion.split()), 4)
    meeting.record(MODERATOR, conclusion, closing, "conclusion", len(meeting.spoken) + 1, data={"trimmed": trimmed})
    meeting.transcript.add("decision", conclusion, speaker="Board", phase="conclusion")

    text = render_meeting(meeting.spoken[:-1], conclusion)
    parsed = parse_board_response(text)
    outcome = Outcome(answer=parsed.conclusion, transcript=meeting.transcript,
                      data={"raw": text, "parse_status": parsed.status, "turns": len(parsed.turns), "roles": roles,
                            "humans": settings.humans, "seats": {r: m.id for r, m in meeting.models.items()}})
    await judge_meeting(case, outcome, settings, meeting.runtime)
    return outcome


def render_meeting(spoken: list[tuple[str, str]], conclusion: str) -> str:
    """The meeting in Board Simulation's tagged format, so its scorers apply unchanged."""
    lines = [f"<turn {i}> {role}: {text}" for i, (role, text) in enumerate(spoken, 1)]
    return "<discussion>\n" + "\n".join(lines) + "\n</discussion>\n<conclusion>" + conclusion + "</conclusion>"


SPEC = ProtocolSpec(name="board-live", run=run, settings=LiveBoardSettings, score=board_score, needs=("summary",),
                    description="a moderator and specialist agents hold the tumor board turn by turn")
