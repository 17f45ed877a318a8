"""Debate for multiple choice (MCC): answer alone, debate only where answers differ, vote where debate fails.

    1. every seat answers the question on its own, all at once
    2. every answer parsed and all the same letter -> consensus, stop (no debate)
    3. up to `max_rounds` debate rounds: each seat sees its own previous answer and its peers',
       critiques theirs, reflects on its own, and gives a final choice; consensus stops the debate
         order="simultaneous": everyone answers at once and sees only the previous round (the paper's rounds)
         order="sequential":   seats speak in turn, each seeing what peers just said in this round, and
                               consensus is checked after every single answer (MCC's released code)
    4. no consensus after the last round -> plurality vote over the final choices; a tie is settled by
       `tie_policy` ("abstain": no answer; "first-model": the earliest seat among the tied; "random-seeded")

Consensus means every seat gave a parseable choice and all are the same: an unparsed answer never agrees.

A seat whose model fails for good (a ModelCallError after the model layer's capped retries) fails the
whole item: the runner records it as failed with the seat, phase and round in the message. It is never
counted as a wrong answer, and the debate never continues one seat short, which would change the panel.

Replicas of one model (`--models local,local,local`) give identical answers at temperature 0; to make
them differ, use temperature > 0 (each seat's call carries its own sample index, so the cache keeps the
draws apart) and, for providers that honour it, one seed per seat (`seeds`).

`max_tokens` unset fits the seat: 512 per answer on a small model (the embedded one), 2048 on others,
plus REASONING_ALLOWANCE where hidden reasoning counts (see Model.token_budget); the same budgets as the
single protocol, so its calls and the debate's round 0 share the cache.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from medpanel.cases.model import Case
from medpanel.errors import UsageError
from medpanel.models.base import Model, Reply
from medpanel.protocols.base import Outcome, Panel, ProtocolSpec, Settings, gather_seats
from medpanel.protocols.single import ANSWER_BUDGET
from medpanel.protocols.single import SYSTEM as ANSWER_SYSTEM
from medpanel.protocols.single import question_prompt
# the settling rules live in settle.py, shared with replays; VoteResult and majority_vote are re-exported for callers
from medpanel.protocols.settle import Response, TiePolicy, VoteResult, agreed_choice, majority_vote, settle  # noqa: F401
from medpanel.scoring.exact import exact_match, read_choice
from medpanel.transcript import Event, Transcript

DEBATE_INSTRUCTIONS = (
    "You are {label} on a panel of clinicians answering the question above. Your own previous answer is "
    "the message before this one. Here are your colleagues' latest answers:\n\n{peers}\n\n"
    "Now, in this round of the discussion:\n"
    "1. Critique each colleague's reasoning: what holds up, and what is wrong, missing or overstated.\n"
    "2. Reflect on your own previous answer in the light of theirs.\n"
    "3. Decide. Change your answer only if an argument convinces you on clinical grounds, not because "
    "you are outnumbered.\n"
    "Finish with a final line of the form 'Answer: X', where X is the letter of the single best option."
)
# One header per peer; the choice is stated in it so a reader (or a scripted model) can find it.
PEER_HEADER = "--- {label} (round {round}) answered {choice} ---"
PEER_CHOICE = re.compile(r"^--- Panelist \d+ \(round \d+\) answered ([A-J])\b", re.MULTILINE)
NO_CHOICE = "with no clear choice"


class PanelSettings(Settings):
    """What every panel protocol over multiple choice shares: how seats are asked and how ties are settled."""

    budgets: ClassVar[dict[str, tuple[int, int]]] = {"max_tokens": ANSWER_BUDGET}

    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int | None = Field(default=None, ge=16)  # per answer; None: fit the seat (ANSWER_BUDGET)
    seeds: list[int] | None = None  # one per seat, sent as the request seed (honoured by local and OpenAI-style servers)
    tie_policy: TiePolicy = "abstain"
    tie_seed: int = 0  # for random-seeded: the draw is a function of this seed and the case id
    on_event: Callable[[Event], Any] | None = Field(default=None, exclude=True)  # streaming hook, e.g. the CLI printer

    def emit(self, event: Event) -> None:
        if self.on_event is not None:
            self.on_event(event)


class DebateSettings(PanelSettings):
    max_rounds: int = Field(default=3, ge=0, le=10)
    order: Literal["simultaneous", "sequential"] = "simultaneous"
    peer_context: Literal["full", "choice"] = "full"  # peers' whole answers, or only their choices
    peer_max_chars: int | None = Field(default=None, ge=200)  # keep only the end of long peer answers (small contexts)


# ---------------------------------------------------------------- asking the seats


@dataclass
class Stance:
    choice: str | None
    text: str
    round: int


def seat_options(settings: PanelSettings, index: int, panel_size: int, model: Model) -> dict[str, Any]:
    """Call options for one seat: its own sample index keeps replicas' sampled calls apart in the cache,
    and its token budget fits the seat's model unless max_tokens is set."""
    options: dict[str, Any] = {"temperature": settings.temperature, "max_tokens": settings.tokens_for(model), "sample_index": index}
    if settings.seeds is not None:
        if len(settings.seeds) != panel_size:
            raise UsageError(f"seeds has {len(settings.seeds)} entries; {panel_size} are needed.",
                             "Give one seed per seat (per draw for self-consistency), e.g. --set seeds=[1,2,3].")
        options["seed"] = settings.seeds[index]
    return options


def answer_messages(case: Case) -> list[dict[str, str]]:
    return [{"role": "system", "content": ANSWER_SYSTEM}, {"role": "user", "content": question_prompt(case)}]


def _peer_block(label: str, stance: Stance, case: Case, settings: DebateSettings) -> str:
    shown = f"{stance.choice} ({case.options.get(stance.choice, '')})" if stance.choice else NO_CHOICE
    header = PEER_HEADER.format(label=label, round=stance.round, choice=shown)
    if settings.peer_context == "choice":
        return header
    text = stance.text.strip()
    if settings.peer_max_chars is not None and len(text) > settings.peer_max_chars:
        text = "[...] " + text[-settings.peer_max_chars:]
    return f"{header}\n{text}"


def debate_messages(case: Case, seat: str, labels: dict[str, str], latest: dict[str, Stance], settings: DebateSettings) -> list[dict[str, str]]:
    peers = "\n\n".join(_peer_block(labels[s], st, case, settings) for s, st in latest.items() if s != seat)
    return [
        *answer_messages(case),
        {"role": "assistant", "content": latest[seat].text},
        {"role": "user", "content": DEBATE_INSTRUCTIONS.format(label=labels[seat], peers=peers)},
    ]


async def ask_seats(
    calls: dict[str, Callable[[], Awaitable[Reply]]],
    settings: PanelSettings,
    make_event: Callable[[str, Reply], Event],
    *,
    where: str,
    models: dict[str, Model],
) -> dict[str, tuple[Reply, Event]]:
    """Run the calls at once; each finished turn is streamed as it lands and returned in seat order.

    If any seat fails, every call is still awaited (nothing is left running), then the first failure in
    seat order is raised naming the seat. A budget stop passes through unchanged for the runner.
    """

    async def one(seat: str) -> tuple[Reply, Event]:
        reply = await calls[seat]()
        event = make_event(seat, reply)
        settings.emit(event)
        return reply, event

    results = await gather_seats([one(s) for s in calls], list(calls), where, models)
    return dict(zip(calls, results, strict=True))


async def initial_answers(case: Case, panel: Panel, settings: PanelSettings, transcript: Transcript) -> dict[str, Stance]:
    """Round 0: every seat answers alone, in parallel. The same calls as the vote baseline and `single`."""
    seats = list(panel.seats)

    def call(index: int, model: Model) -> Callable[[], Awaitable[Reply]]:
        return lambda: model.complete(answer_messages(case), **seat_options(settings, index, len(seats), model))

    def make_event(seat: str, reply: Reply) -> Event:
        # answer_status says why a choice is missing: "unclosed_reasoning" (cut off while thinking) vs "no_choice_found"
        return _turn_event(reply, seat, round=0, phase="initial", data=read_choice(reply.text, case.options).as_data())

    done = await ask_seats({s: call(i, panel.seats[s]) for i, s in enumerate(seats)}, settings, make_event,
                           where="giving its initial answer", models=panel.seats)
    stances = {}
    for seat, (reply, event) in done.items():
        transcript.events.append(event)
        stances[seat] = Stance(event.data["choice"], reply.text, 0)
    return stances


def _turn_event(reply: Reply, seat: str, *, round: int, phase: str, data: dict) -> Event:
    """A seat's turn, built as it lands and appended to the transcript later in seat order."""
    if reply.truncated:  # cut by its token budget ("length", "max_tokens"): the reader cannot tell from the text
        data = {**data, "truncated": True}
    return Event(kind="turn", text=reply.text, speaker=seat, role="panelist", model=reply.model, round=round, phase=phase,
                 data=data, input_tokens=reply.usage.input_tokens, output_tokens=reply.usage.output_tokens,
                 latency_s=reply.latency_s, cost_usd=reply.cost_usd, cached=reply.cached)


def consensus_choice(stances: dict[str, Stance]) -> str | None:
    """The settle module's consensus test on the seats' latest stances (when to stop asking)."""
    return agreed_choice({s: st.choice for s, st in stances.items()}, list(stances))


# ---------------------------------------------------------------- the debate


class _Debate:
    """The state of one debate: every seat's latest stance, the transcript and the per-round record."""

    def __init__(self, case: Case, panel: Panel, settings: DebateSettings) -> None:
        self.case, self.panel, self.settings = case, panel, settings
        self.seats = list(panel.seats)
        self.labels = {s: f"Panelist {i + 1}" for i, s in enumerate(self.seats)}
        self.transcript = Transcript()
        self.latest: dict[str, Stance] = {}
        self.rounds: list[dict[str, Any]] = []
        self.shifts: list[dict[str, Any]] = []

    def snapshot(self, round: int, after_seat: str | None = None) -> str | None:
        agreed = consensus_choice(self.latest)
        self.rounds.append({"round": round, "choices": {s: st.choice for s, st in self.latest.items()},
                            "consensus": agreed is not None, "consensus_choice": agreed, "after_seat": after_seat})
        return agreed

    def call(self, seat: str, view: dict[str, Stance]) -> Callable[[], Awaitable[Reply]]:
        index = self.seats.index(seat)
        messages = debate_messages(self.case, seat, self.labels, view, self.settings)
        options = seat_options(self.settings, index, len(self.seats), self.panel.seats[seat])
        return lambda: self.panel.seats[seat].complete(messages, **options)

    def turn_event(self, seat: str, reply: Reply, round: int, view: dict[str, Stance]) -> Event:
        read = read_choice(reply.text, self.case.options)
        before = self.latest[seat].choice
        return _turn_event(reply, seat, round=round, phase="debate", data={
            **read.as_data(), "previous_choice": before, "changed": read.choice != before,
            "saw": {self.labels[s]: st.round for s, st in view.items() if s != seat},
        })

    def record(self, seat: str, reply: Reply, event: Event, round: int) -> None:
        self.transcript.events.append(event)
        before, after = self.latest[seat].choice, event.data["choice"]
        self.latest[seat] = Stance(after, reply.text, round)
        if after != before:
            shift = {"seat": seat, "model": self.panel.seats[seat].id, "round": round, "from": before, "to": after}
            self.shifts.append(shift)
            note = self.transcript.add("note", f"{seat} changed its answer from {before or 'none'} to {after or 'none'}",
                                       speaker=seat, round=round, phase="debate", data={"shift": shift})
            self.settings.emit(note)

    async def simultaneous_round(self, round: int) -> str | None:
        view = dict(self.latest)
        calls = {s: self.call(s, view) for s in self.seats}
        done = await ask_seats(calls, self.settings, lambda s, r: self.turn_event(s, r, round, view),
                               where=f"in debate round {round}", models=self.panel.seats)
        for seat, (reply, event) in done.items():
            self.record(seat, reply, event, round)
        return self.snapshot(round)

    async def sequential_round(self, round: int) -> str | None:
        for seat in self.seats:
            view = dict(self.latest)  # peers earlier in this round show this round's answers
            done = await ask_seats({seat: self.call(seat, view)}, self.settings, lambda s, r, view=view: self.turn_event(s, r, round, view),
                                   where=f"in debate round {round}", models=self.panel.seats)
            reply, event = done[seat]
            self.record(seat, reply, event, round)
            if consensus_choice(self.latest) is not None:
                return self.snapshot(round, after_seat=seat)
        return self.snapshot(round)


async def run(case: Case, panel: Panel, settings: DebateSettings) -> Outcome:
    case.require("question", "options", protocol="debate")
    if len(panel) < 2:
        raise UsageError(f"A debate needs at least two seats; got {len(panel)}.", "Give several models, e.g. --models a,b,c (the same one repeated makes replicas).")
    debate = _Debate(case, panel, settings)
    debate.latest = await initial_answers(case, panel, settings, debate.transcript)
    initial = {s: st.choice for s, st in debate.latest.items()}
    agreed = debate.snapshot(0)
    for round in range(1, settings.max_rounds + 1):  # ask until the seats agree; `settle` then decides from what they said
        if agreed is not None:
            break
        step = debate.sequential_round if settings.order == "sequential" else debate.simultaneous_round
        agreed = await step(round)

    responses = [Response(e.speaker, e.round, e.data["choice"]) for e in debate.transcript.turns() if e.phase == "debate"]
    settled = settle(initial, responses, debate.seats, order=settings.order, tie_policy=settings.tie_policy,
                     tie_seed=settings.tie_seed, key=case.id)
    final = settled.standing
    rounds_used = settled.rounds_held
    if not settled.consensus:
        for seat in debate.seats:
            debate.transcript.add("vote", final[seat] or "", speaker=seat, round=rounds_used, phase="vote", data={"choice": final[seat]})
    decision = settled.decision(settings.tie_policy)
    answer = decision["answer"]
    consensus_round = settled.consensus_round
    event = debate.transcript.add("decision", answer or "", speaker="Panel", round=decision["round"], phase="decision",
                                  data={"choice": answer, **decision})
    settings.emit(event)
    initial_vote = majority_vote(list(initial.values()), settings.tie_policy, seed=settings.tie_seed, key=case.id).as_dict(settings.tie_policy)
    data = {
        "seats": debate.seats,
        "models": {s: m.id for s, m in panel.seats.items()},
        "order": settings.order,
        "peer_context": settings.peer_context,
        "initial_choices": initial,
        "final_choices": final,
        "rounds": debate.rounds,
        "consensus": settled.consensus,
        "consensus_round": consensus_round,
        "rounds_used": rounds_used,
        "shifts": debate.shifts,
        "decision": decision,
        "initial_vote": initial_vote,
        "parsed": answer is not None,
    }
    return Outcome(answer=answer, transcript=debate.transcript, data=data)


# ---------------------------------------------------------------- scoring and flows


def tie_half_credit(answer: str | None, decision: dict, gold: str | None) -> float | None:
    """MCC's conservative count for ties: a tie that includes the right answer is worth 0.5, whatever the tie policy picked."""
    if gold is None:
        return None
    if decision.get("method") in ("tie", "tie-broken"):
        return 0.5 if gold in decision.get("tied", []) else 0.0
    return exact_match(answer, gold)


def score(case: Case, outcome: Outcome) -> dict[str, float | None]:
    gold = case.reference.answer
    data = outcome.data
    decision = data["decision"]
    scores: dict[str, float | None] = {
        "accuracy": exact_match(outcome.answer, gold),
        "parsed": 1.0 if outcome.answer else 0.0,
        "rounds_used": float(data["rounds_used"]),
        "initial_consensus": 1.0 if data["consensus_round"] == 0 else 0.0,
        "consensus": 1.0 if data["consensus"] else 0.0,
        "tie": 1.0 if decision["method"] in ("tie", "tie-broken") else 0.0,
        "accuracy_tie_half": tie_half_credit(outcome.answer, decision, gold),
        "stance_shifts": float(len(data["shifts"])),
        "initial_vote_accuracy": exact_match(data["initial_vote"]["answer"], gold),
    }
    for seat, choice in data["initial_choices"].items():
        scores[f"initial_accuracy.{seat}"] = exact_match(choice, gold)
    return scores


def flow_counts(items: list[tuple[dict, str | None]]) -> dict[str, Any]:
    """The paper's Figure 2 flows from debate outcomes: (outcome data, gold letter) per item ->
    consensus reached at each round, split correct / incorrect, and how the rest were decided."""
    stages: dict[str, Counter] = {}
    for data, gold in items:
        decision = data["decision"]
        stage = f"consensus_round_{data['consensus_round']}" if data["consensus"] else f"vote_{decision['method']}"
        correct = "no_answer" if decision["answer"] is None else ("correct" if decision["answer"] == gold else "incorrect")
        stages.setdefault(stage, Counter())[correct] += 1
    shifts = Counter()
    for data, gold in items:
        for shift in data["shifts"]:
            kind = ("wrong_to_right" if shift["to"] == gold and shift["from"] != gold else
                    "right_to_wrong" if shift["from"] == gold and shift["to"] != gold else "wrong_to_wrong")
            shifts[kind] += 1
    return {"stages": {k: dict(v) for k, v in sorted(stages.items())}, "shifts": dict(shifts), "items": len(items)}


SPEC = ProtocolSpec(name="debate", run=run, settings=DebateSettings, score=score, min_models=2, needs=("question", "options"),
                    description="MCC debate: independent answers, debate rounds where they differ, a vote where debate fails")
