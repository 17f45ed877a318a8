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

Every event goes to the transcript from the run context (`context.transcript()`), which hands it to
the context's listener as it is recorded: a simultaneous round's turns once the round is in, in seat
order (so the record does not depend on which server answered first), then its stance shifts.

`max_tokens` unset fits the seat: 512 per answer on a small model (the embedded one), 2048 on others,
plus REASONING_ALLOWANCE where hidden reasoning counts (see Model.token_budget); the same budgets as the
single protocol, so its calls and the debate's round 0 share the cache. A small model answers in one line
of reasoning and then the letter under a grammar (medpanel.protocols.single.answer), so its answer
always parses; others keep the paper's free text ending 'Answer: X'.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Literal

from pydantic import Field

from medpanel.cases.model import Case
from medpanel.context import RunContext, quiet
from medpanel.errors import UsageError
from medpanel.models.base import Model, Reply
from medpanel.protocols.base import Outcome, Panel, ProtocolSpec, Settings, gather_seats
from medpanel.protocols.single import ANSWER_BUDGET, answer, answer_messages
# the settling rules live in settle.py, shared with replays; VoteResult and majority_vote are re-exported for callers
from medpanel.protocols.settle import Response, TiePolicy, VoteResult, agreed_choice, majority_vote, settle  # noqa: F401
from medpanel.scoring.exact import exact_match, read_choice
from medpanel.scoring.metrics import COUNT, PROPORTION, UNIT
from medpanel.scoring.scorer import pure
from medpanel.transcript import Transcript

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
# The small-model profile (see medpanel.protocols.single): a compact round, one line of reasoning, then the letter.
SMALL_DEBATE = "You are {label}. Your colleagues answered:\n\n{peers}\n\nSay in one short sentence which option you now think is best and why."
# One header per peer; the choice is stated in it so a reader (or a scripted model) can find it.
PEER_HEADER = "--- {label} (round {round}) answered {choice} ---"
NO_CHOICE = "with no clear choice"


class PanelSettings(Settings):
    """What every panel protocol over multiple choice shares: how seats are asked and how ties are settled."""

    budgets: ClassVar[dict[str, tuple[int, int]]] = {"max_tokens": ANSWER_BUDGET}

    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int | None = Field(default=None, ge=16)  # per answer; None: fit the seat (ANSWER_BUDGET)
    seeds: list[int] | None = None  # one per seat, sent as the request seed (honoured by local and OpenAI-style servers)
    tie_policy: TiePolicy = "abstain"
    tie_seed: int = 0  # for random-seeded: the draw is a function of this seed and the case id


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


def _peer_block(label: str, stance: Stance, case: Case, settings: DebateSettings) -> str:
    shown = f"{stance.choice} ({case.options.get(stance.choice, '')})" if stance.choice else NO_CHOICE
    header = PEER_HEADER.format(label=label, round=stance.round, choice=shown)
    if settings.peer_context == "choice":
        return header
    text = stance.text.strip()
    if settings.peer_max_chars is not None and len(text) > settings.peer_max_chars:
        text = "[...] " + text[-settings.peer_max_chars:]
    return f"{header}\n{text}"


def debate_messages(case: Case, seat: str, labels: dict[str, str], latest: dict[str, Stance], settings: DebateSettings,
                    small: bool = False) -> list[dict[str, str]]:
    """A seat's debate round: the question, its own last answer, its peers' (on a small model, the compact round)."""
    peers = "\n\n".join(_peer_block(labels[s], st, case, settings) for s, st in latest.items() if s != seat)
    return [
        *answer_messages(case, small),
        {"role": "assistant", "content": latest[seat].text},
        {"role": "user", "content": (SMALL_DEBATE if small else DEBATE_INSTRUCTIONS).format(label=labels[seat], peers=peers)},
    ]


async def ask_seats(calls: dict[str, Callable[[], Awaitable[Reply]]], *, where: str, models: dict[str, Model]) -> dict[str, Reply]:
    """Run the calls at once and return the replies in seat order (the order they are recorded in, so a
    transcript does not depend on which server answered first).

    If any seat fails, every call is still awaited (nothing is left running), then the first failure in
    seat order is raised naming the seat. A budget stop passes through unchanged for the runner.
    """
    results = await gather_seats([call() for call in calls.values()], list(calls), where, models)
    return dict(zip(calls, results, strict=True))


async def initial_answers(case: Case, panel: Panel, settings: PanelSettings, transcript: Transcript) -> dict[str, Stance]:
    """Round 0: every seat answers alone, in parallel. The same calls as the vote baseline and `single`."""
    seats = list(panel.seats)

    def call(index: int, model: Model) -> Callable[[], Awaitable[Reply]]:
        return lambda: answer(model, answer_messages(case, model.small), case, **seat_options(settings, index, len(seats), model))

    replies = await ask_seats({s: call(i, panel.seats[s]) for i, s in enumerate(seats)}, where="giving its initial answer", models=panel.seats)
    stances = {}
    for seat, reply in replies.items():
        # answer_status says why a choice is missing: "unclosed_reasoning" (cut off while thinking) vs "no_choice_found"
        read = read_choice(reply.text, case.options)
        transcript.record("turn", reply=reply, speaker=seat, role="panelist", round=0, phase="initial", data=read.as_data())
        stances[seat] = Stance(read.choice, reply.text, 0)
    return stances


def consensus_choice(stances: dict[str, Stance]) -> str | None:
    """The settle module's consensus test on the seats' latest stances (when to stop asking)."""
    return agreed_choice({s: st.choice for s, st in stances.items()}, list(stances))


# ---------------------------------------------------------------- the debate


class _Debate:
    """The state of one debate: every seat's latest stance, the transcript and the per-round record."""

    def __init__(self, case: Case, panel: Panel, settings: DebateSettings, transcript: Transcript) -> None:
        self.case, self.panel, self.settings = case, panel, settings
        self.seats = list(panel.seats)
        self.labels = {s: f"Panelist {i + 1}" for i, s in enumerate(self.seats)}
        self.transcript = transcript
        self.latest: dict[str, Stance] = {}
        self.rounds: list[dict[str, Any]] = []
        self.shifts: list[dict[str, Any]] = []

    def snapshot(self, round: int, after_seat: str | None = None) -> str | None:
        agreed = consensus_choice(self.latest)
        self.rounds.append({"round": round, "choices": {s: st.choice for s, st in self.latest.items()},
                            "consensus": agreed is not None, "consensus_choice": agreed, "after_seat": after_seat})
        return agreed

    def call(self, seat: str, view: dict[str, Stance]) -> Callable[[], Awaitable[Reply]]:
        index, model = self.seats.index(seat), self.panel.seats[seat]
        messages = debate_messages(self.case, seat, self.labels, view, self.settings, model.small)
        options = seat_options(self.settings, index, len(self.seats), model)
        return lambda: answer(model, messages, self.case, **options)

    def record(self, seat: str, reply: Reply, round: int, view: dict[str, Stance]) -> dict[str, Any] | None:
        """The seat's debate turn; returns its stance shift, if it changed its answer (see `note`)."""
        read = read_choice(reply.text, self.case.options)
        before, after = self.latest[seat].choice, read.choice
        self.transcript.record("turn", reply=reply, speaker=seat, role="panelist", round=round, phase="debate", data={
            **read.as_data(), "previous_choice": before, "changed": after != before,
            "saw": {self.labels[s]: st.round for s, st in view.items() if s != seat},
        })
        self.latest[seat] = Stance(after, reply.text, round)
        if after == before:
            return None
        shift = {"seat": seat, "model": self.panel.seats[seat].id, "round": round, "from": before, "to": after}
        self.shifts.append(shift)
        return shift

    def note(self, shift: dict[str, Any] | None) -> None:
        if shift is not None:
            self.transcript.record("note", f"{shift['seat']} changed its answer from {shift['from'] or 'none'} to {shift['to'] or 'none'}",
                                   speaker=shift["seat"], round=shift["round"], phase="debate", data={"shift": shift})

    async def simultaneous_round(self, round: int) -> str | None:
        view = dict(self.latest)
        replies = await ask_seats({s: self.call(s, view) for s in self.seats}, where=f"in debate round {round}", models=self.panel.seats)
        # The round's turns were given at once: all of them first, then who changed their answer.
        shifts = [self.record(seat, reply, round, view) for seat, reply in replies.items()]
        for shift in shifts:
            self.note(shift)
        return self.snapshot(round)

    async def sequential_round(self, round: int, context: RunContext) -> str | None:
        for seat in self.seats:
            context.check()
            view = dict(self.latest)  # peers earlier in this round show this round's answers
            replies = await ask_seats({seat: self.call(seat, view)}, where=f"in debate round {round}", models=self.panel.seats)
            self.note(self.record(seat, replies[seat], round, view))
            if consensus_choice(self.latest) is not None:
                return self.snapshot(round, after_seat=seat)
        return self.snapshot(round)


async def run(case: Case, panel: Panel, settings: DebateSettings, context: RunContext | None = None) -> Outcome:
    context = quiet(context)
    case.require("question", "options", protocol="debate")
    if len(panel) < 2:
        raise UsageError(f"A debate needs at least two seats; got {len(panel)}.", "Give several models, e.g. --models a,b,c (the same one repeated makes replicas).")
    debate = _Debate(case, panel, settings, context.transcript())
    debate.latest = await initial_answers(case, panel, settings, debate.transcript)
    initial = {s: st.choice for s, st in debate.latest.items()}
    agreed = debate.snapshot(0)
    for round in range(1, settings.max_rounds + 1):  # ask until the seats agree; `settle` then decides from what they said
        if agreed is not None:
            break
        context.check()
        if settings.order == "sequential":
            agreed = await debate.sequential_round(round, context)
        else:
            agreed = await debate.simultaneous_round(round)

    responses = [Response(e.speaker, e.round, e.data["choice"]) for e in debate.transcript.turns() if e.phase == "debate"]
    settled = settle(initial, responses, debate.seats, order=settings.order, tie_policy=settings.tie_policy,
                     tie_seed=settings.tie_seed, key=case.id)
    final = settled.standing
    rounds_used = settled.rounds_held
    if not settled.consensus:
        for seat in debate.seats:
            debate.transcript.record("vote", final[seat] or "", speaker=seat, round=rounds_used, phase="vote", data={"choice": final[seat]})
    decision = settled.decision(settings.tie_policy)
    answer = decision["answer"]
    debate.transcript.record("decision", answer or "", speaker="Panel", round=decision["round"], phase="decision",
                             data={"choice": answer, **decision})
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
        "consensus_round": settled.consensus_round,
        "rounds_used": rounds_used,
        "shifts": debate.shifts,
        "decision": decision,
        "initial_vote": initial_vote,
        "parsed": answer is not None,
    }
    return Outcome(answer=answer, transcript=debate.transcript, data={**case.groups(), **data})  # groups: for show --by and the report


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


# Kinds as medpanel.scoring.metrics declares them: a 0/1 outcome per item is a proportion, a tie's half credit a share.
DEBATE_METRICS = {
    "accuracy": PROPORTION, "parsed": PROPORTION, "rounds_used": COUNT, "initial_consensus": PROPORTION, "consensus": PROPORTION,
    "tie": PROPORTION, "accuracy_tie_half": UNIT, "stance_shifts": COUNT, "initial_vote_accuracy": PROPORTION,
    "initial_accuracy.*": PROPORTION,  # one per seat
}

SPEC = ProtocolSpec(name="debate", run=run, settings=DebateSettings, scorers=(pure("debate", score, DEBATE_METRICS),),
                    min_models=2, needs=("question", "options"),
                    description="MCC debate: independent answers, debate rounds where they differ, a vote where debate fails")
