"""Long-form debate (MCC): open answers, scored cross-review, revision until the scores agree, consolidation.

    1. every seat answers the open question on its own, all at once
    2. review: every seat scores every other seat's answer on factual accuracy, completeness and safety
       (1-10, each with a reason and a suggestion), all at once
    3. consensus score of the round = mean over dimensions d of max(0, 1 - sigma_d / 4), sigma_d the
       population standard deviation of every score given on d (six for three seats)
    4. stop when the score is at least `threshold` and at least `min_rounds` rounds were reviewed;
       otherwise every seat revises its answer from the reviews it received, and the next round
       reviews the revisions; at most `max_rounds` review rounds (the last one is followed by a
       revision when it did not stop, as in MCC's released code)
    5. the moderator consolidates the final answers without adding content, tagging each point
       with the seats it came from, e.g. "[Panelist 1, Panelist 2]"; the moderator is the panel's
       `moderator` role (by default the first seat's model; a seat's model speaks as that seat)

Prompts call the seats "Panelist 1", "Panelist 2"... in seat order, never by their names (a seat's name
is its model spec, server URL included); the transcript keeps the names, and the outcome maps each label
to its seat.

Token budgets when `max_tokens` / `review_max_tokens` are not set (see Model.token_budget): answers,
revisions and the consolidation 1024 on a small model (the embedded one), 2048 on others; a review 512 /
1024; a reasoning model gets REASONING_ALLOWANCE more. A reply cut by its budget is marked truncated.

Settings that reproduce what was published:
    the paper's text:      threshold=0.8, min_rounds=1  (the defaults)
    MCC's released code:   threshold=0.8, min_rounds=2  (it never stops after round 1: its logged run
                           went on past a round scoring 0.89 and stopped at 0.91 in round 2)
Scores are whole numbers, as in the released code (its parser reads "9.5" as 9).

A case with a conversation (HealthBench) is answered as the conversation's next assistant turn: each seat
gets the chat itself after the answer prompt, the reviews and revisions restate it as text, and the panel's
judge grades the consolidation with its attribution tags taken out (`response`: the reply as the user would
read it) against the rubric (scoring/healthbench_grader.py).

The review-and-revise cycle (`critique_cycle`) is shared with the OSCE history taking, which adds a
fourth dimension (readability) and revises question lists instead of answers.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, Field, create_model, model_validator

from medpanel.cases.model import Case
from medpanel.context import RunContext, quiet
from medpanel.errors import UsageError
from medpanel.models.base import Model, Reply
from medpanel.protocols.base import Outcome, Panel, ProtocolSpec, Settings, gather_seats, seat_labels
from medpanel.scoring.consensus import consensus_score, dimension_agreements
from medpanel.scoring.healthbench_grader import HEALTHBENCH_GRADER, GraderSettings
from medpanel.scoring.metrics import PROPORTION, UNIT
from medpanel.scoring.scorer import pure
from medpanel.transcript import Transcript

# What each review dimension asks; the OSCE history taking adds readability (MCC, after ref. 36).
DIMENSIONS = {
    "factual_accuracy": "is the content medically correct?",
    "completeness": "does it include the key, relevant information?",
    "safety": "does it avoid anything that could put the patient at risk?",
    "readability": "is it clear, well organised and easy for an ordinary patient to understand?",
}


class CritiqueSettings(Settings):
    """What every scored-review debate (the long form, the OSCE history taking) shares: when the
    critique cycle stops, and how the seats are asked."""

    budgets: ClassVar[dict[str, tuple[int, int]]] = {"max_tokens": (1024, 2048), "review_max_tokens": (512, 1024)}

    threshold: float = Field(default=0.8, ge=0.0, le=1.0)
    min_rounds: int = Field(default=1, ge=1, le=10)
    max_rounds: int = Field(default=3, ge=1, le=10)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int | None = Field(default=None, ge=16)  # answers, revisions and the consolidation; None: fit the seat
    review_max_tokens: int | None = Field(default=None, ge=16)  # one review: three or four scores with reasons

    @model_validator(mode="after")
    def _rounds_fit(self) -> CritiqueSettings:
        if self.min_rounds > self.max_rounds:
            raise ValueError(f"min_rounds ({self.min_rounds}) cannot exceed max_rounds ({self.max_rounds})")
        return self


class LongformSettings(CritiqueSettings, GraderSettings):
    """The long form's settings: the critique cycle's (who consolidates is the panel's moderator role), and
    the rubric grader's for a HealthBench conversation."""


# ---------------------------------------------------------------- schemas
# No field descriptions: small models copy them into their answers. The prompts say what each field is.


class Review(BaseModel):
    """A scored review, flat and scores first: every score comes before any prose, so a reply cut short
    by its token budget still carries all the scores (small local models need this to close their JSON)."""

    dimension_names: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def dimensions(cls) -> list[str]:
        return list(cls.dimension_names)

    def scores(self) -> dict[str, int]:
        return {d: getattr(self, f"{d}_score") for d in self.dimensions()}

    def critique(self, dimension: str) -> tuple[str, str]:
        """(reason, suggestion) given for one dimension."""
        return getattr(self, f"{dimension}_reason"), getattr(self, f"{dimension}_suggestion")


def review_schema(name: str, dimensions: list[str]) -> type[Review]:
    """A Review class with D_score (1-10) for every dimension D, then D_reason and D_suggestion."""
    unknown = [d for d in dimensions if d not in DIMENSIONS]
    if unknown:
        raise UsageError(f"Unknown review dimension(s): {', '.join(unknown)}.", f"Use some of: {', '.join(DIMENSIONS)}.")
    fields: dict[str, Any] = {f"{d}_score": (int, Field(ge=1, le=10)) for d in dimensions}
    for d in dimensions:
        fields[f"{d}_reason"] = (str, Field(max_length=300))
        fields[f"{d}_suggestion"] = (str, Field(max_length=300))
    schema = create_model(name, __base__=Review, **fields)
    schema.dimension_names = tuple(dimensions)
    return schema


AnswerReview = review_schema("AnswerReview", ["factual_accuracy", "completeness", "safety"])
QuestionsReview = review_schema("QuestionsReview", ["factual_accuracy", "completeness", "safety", "readability"])


class RevisedAnswer(BaseModel):
    critique_summary: str = Field(max_length=800)
    answer: str


# ---------------------------------------------------------------- the review-and-revise cycle


@dataclass(frozen=True)
class Deliberation:
    """What a critique cycle works on: the task every prompt restates, and the shape of drafts."""

    task: str  # the question, or the consultation so far and what to produce
    label: str  # "answer", "list of questions"
    review_schema: type[Review] = AnswerReview
    revision_schema: type[BaseModel] = RevisedAnswer  # has critique_summary and the revised draft
    draft_of: Callable[[Any], str] = lambda parsed: parsed.answer
    data: dict = field(default_factory=dict)  # added to every event (e.g. the OSCE exchange number)


@dataclass
class CycleResult:
    drafts: dict[str, str]  # seat -> final draft
    scores: list[float]  # consensus score of every reviewed round, in order
    reached: bool  # the last reviewed round met the threshold
    stopped_by: str  # "consensus" | "max_rounds" | "single_seat"

    @property
    def rounds(self) -> int:
        return len(self.scores)


REVIEW_SYSTEM = (
    "You are {seat}, a physician reviewing a colleague's {label}. Score it from 1 (poor) to 10 (excellent) "
    "on each dimension, and for each give the reason for the score and one concrete suggestion to improve it. "
    "Dimensions:\n{dimensions}\nJudge the work itself; your own {label} is shown only for comparison."
)

REVISION_SYSTEM = (
    "You are {seat}, a physician on a panel. Colleagues have reviewed your {label}. In 'critique_summary' say "
    "briefly what they criticised and which points you accept or reject, with your reason. Then give your "
    "complete revised {label}: keep what was right, correct what was wrong or unsafe, and add important points "
    "you had missed."
)


def _dimension_lines(schema: type[Review]) -> str:
    return "\n".join(f"- {d}: {DIMENSIONS[d]}" for d in schema.dimensions())


def review_text(target: str, review: Review) -> str:
    """One review as a line a person reads: the scores, then each reason."""
    scores = ", ".join(f"{d} {v}" for d, v in review.scores().items())
    reasons = " ".join(f"{d}: {review.critique(d)[0]}" for d in review.dimensions() if review.critique(d)[0].strip())
    return f"Review of {target}: {scores}." + (f" {reasons}" if reasons else "")


def render_reviews(received: dict[str, Review], labels: dict[str, str]) -> str:
    """The reviews a seat received, as its revision prompt shows them (reviewers by their labels)."""
    blocks = []
    for reviewer, review in received.items():
        lines = [f"From {labels[reviewer]}:"]
        for dim, value in review.scores().items():
            reason, suggestion = review.critique(dim)
            lines.append(f"- {dim} {value}/10. Reason: {reason} Suggestion: {suggestion}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


async def critique_cycle(seats: dict[str, Model], drafts: dict[str, str], work: Deliberation,
                         settings: CritiqueSettings, transcript: Transcript, context: RunContext | None = None) -> CycleResult:
    """Review, score agreement, revise; until the scores agree or the rounds run out (see module doc)."""
    context = quiet(context)
    if len(seats) < 2:
        transcript.record("note", "One seat: nothing to review.", phase="review", data=dict(work.data))
        return CycleResult(dict(drafts), [], False, "single_seat")
    drafts = dict(drafts)
    labels = seat_labels(seats)
    scores: list[float] = []
    pairs = [(r, t) for r in seats for t in seats if r != t]
    for rnd in range(1, settings.max_rounds + 1):
        context.check()
        replies = await gather_seats([_review(seats[r], r, t, drafts, labels, work, settings) for r, t in pairs],
                                     [r for r, _ in pairs], f"reviewing in round {rnd}", seats)
        received: dict[str, dict[str, Review]] = {seat: {} for seat in seats}
        by_dimension: dict[str, list[float]] = {d: [] for d in work.review_schema.dimensions()}
        for (reviewer, target), reply in zip(pairs, replies):
            review: Review = reply.parsed
            received[target][reviewer] = review
            for dim, value in review.scores().items():
                by_dimension[dim].append(value)
            transcript.record("turn", review_text(target, review), reply=reply, speaker=reviewer, role="reviewer", phase="review", round=rnd,
                      data={**work.data, "target": target, "scores": review.scores(), "review": review.model_dump()})
        score = consensus_score(by_dimension)
        scores.append(score)
        reached = score >= settings.threshold
        stop = reached and rnd >= settings.min_rounds
        transcript.record("score", f"{score:.2f}", speaker="Panel", round=rnd, phase="consensus",
                data={**work.data, "consensus": score, "by_dimension": dimension_agreements(by_dimension),
                      "threshold": settings.threshold, "reached": reached, "stop": stop})
        if stop:
            return CycleResult(drafts, scores, True, "consensus")
        revisions = await gather_seats([_revise(seats[s], s, drafts[s], received[s], labels, work, settings) for s in seats],
                                       list(seats), f"revising in round {rnd}", seats)
        for seat, reply in zip(seats, revisions):
            drafts[seat] = work.draft_of(reply.parsed)
            transcript.record("turn", drafts[seat], reply=reply, speaker=seat, role="panelist", phase="revision", round=rnd,
                      data={**work.data, "critique_summary": reply.parsed.critique_summary})
    return CycleResult(drafts, scores, scores[-1] >= settings.threshold, "max_rounds")


async def _review(model: Model, reviewer: str, target: str, drafts: dict[str, str], labels: dict[str, str],
                  work: Deliberation, settings: CritiqueSettings) -> Reply:
    system = REVIEW_SYSTEM.format(seat=labels[reviewer], label=work.label, dimensions=_dimension_lines(work.review_schema))
    user = (f"{work.task}\n\n{work.label.upper()} BY {labels[target]} TO REVIEW:\n{drafts[target]}\n\n"
            f"YOUR OWN {work.label.upper()}, FOR COMPARISON:\n{drafts[reviewer]}")
    return await model.complete([{"role": "system", "content": system}, {"role": "user", "content": user}], schema=work.review_schema,
                                temperature=settings.temperature, max_tokens=settings.tokens_for(model, "review_max_tokens"))


async def _revise(model: Model, seat: str, draft: str, received: dict[str, Review], labels: dict[str, str],
                  work: Deliberation, settings: CritiqueSettings) -> Reply:
    system = REVISION_SYSTEM.format(seat=labels[seat], label=work.label)
    user = f"{work.task}\n\nYOUR CURRENT {work.label.upper()}:\n{draft}\n\nREVIEWS YOU RECEIVED:\n{render_reviews(received, labels)}"
    return await model.complete([{"role": "system", "content": system}, {"role": "user", "content": user}],
                                schema=work.revision_schema, temperature=settings.temperature, max_tokens=settings.tokens_for(model))


# ---------------------------------------------------------------- attribution


def attribution_tag(seats: list[str]) -> str:
    """How the moderator credits a point: "[Panelist 1, Panelist 2]"."""
    return "[" + ", ".join(seats) + "]"


_BRACKETS = re.compile(r"\[([^\[\]\n]{1,200})\](?!\()")  # not a markdown link "[text](url)"


def without_attributions(text: str, seats: list[str]) -> str:
    """`text` with every tag that credits a seat taken out (the same tags `attributions` counts)."""
    def drop(match: re.Match[str]) -> str:
        names = [n.strip() for n in match.group(1).split(",")]
        return "" if any(n in seats for n in names) else match.group(0)

    stripped = _BRACKETS.sub(drop, text)
    return re.sub(r"[ \t]+([.,;:!?])", r"\1", re.sub(r"[ \t]{2,}", " ", stripped)).replace(" \n", "\n").strip()


def attributions(text: str, seats: list[str]) -> tuple[dict[str, int], list[str]]:
    """How many tags credit each seat, and the names in tags that are no seat. A bracket counts as a tag
    when at least one of its comma-separated names is a seat."""
    counts = {seat: 0 for seat in seats}
    unknown: list[str] = []
    for inside in _BRACKETS.findall(text):
        names = [n.strip() for n in inside.split(",") if n.strip()]
        if not any(n in counts for n in names):
            continue
        for name in names:
            if name in counts:
                counts[name] += 1
            elif name not in unknown:
                unknown.append(name)
    return counts, unknown


def moderator_seat(panel: Panel) -> tuple[str, Model]:
    """Who consolidates, and the name it speaks under: the panel's moderator role (the runner defaults it
    to the first seat's model), named after the seat it sits in, or "Moderator" when it holds none; a
    panel built without the role (a test, a notebook) has its first seat moderate."""
    model = panel.role("moderator")
    if model is None:
        return panel.first()
    return next((seat for seat, sitting in panel.seats.items() if sitting is model), "Moderator"), model


# ---------------------------------------------------------------- the protocol

ANSWER_SYSTEM = (
    "You are {seat}, a physician answering a medical question. Give an answer that is correct, covers what "
    "matters (the likely causes or options, what to do, when to seek care) and is careful with diagnostic and "
    "treatment advice. Write clearly for the person who asked."
)

CONSOLIDATION_SYSTEM = (
    "You moderate a panel of physicians who have debated a medical question. Combine their final answers into "
    "one clear, well-organised answer. Use only what at least one of them said: add no facts, advice or claims "
    "of your own. After every point, name in square brackets the panel members it came from, using exactly "
    "these names: {names}. For example: {example}."
)


def question_task(case: Case) -> str:
    if case.conversation:
        return f"CONVERSATION SO FAR:\n{case.conversation_text()}\n\nThe answer is the assistant's next turn in this conversation."
    return f"QUESTION:\n{case.question}"


def answer_messages(case: Case, system: str) -> list[dict[str, str]]:
    """A seat's first call: the answer prompt, then the question, or the conversation as the chat it is. A
    conversation's own system turns join the answer prompt in one system message (several system messages
    are refused or misread by some providers), after it, so the conversation's instructions come last."""
    if not case.conversation:
        return [{"role": "system", "content": system}, {"role": "user", "content": question_task(case)}]
    turns = case.conversation_messages()
    own = [t["content"] for t in turns if t["role"] == "system" and t["content"].strip()]
    merged = system + "".join(f"\n\nInstructions given with this conversation:\n{text}" for text in own)
    return [{"role": "system", "content": merged}, *(t for t in turns if t["role"] != "system")]


async def run(case: Case, panel: Panel, settings: LongformSettings, context: RunContext | None = None) -> Outcome:
    context = quiet(context)
    case.require("question", protocol="longform")
    speaker, moderator = moderator_seat(panel)
    transcript = context.transcript()
    work = Deliberation(task=question_task(case), label="answer")
    seats = dict(panel.seats)
    labels = seat_labels(seats)

    answers = await gather_seats([
        m.complete(answer_messages(case, ANSWER_SYSTEM.format(seat=labels[s])), temperature=settings.temperature, max_tokens=settings.tokens_for(m))
        for s, m in seats.items()], list(seats), "answering", seats)
    drafts = {}
    for seat, reply in zip(seats, answers):
        drafts[seat] = reply.text.strip()
        transcript.record("turn", reply=reply, speaker=seat, role="panelist", phase="initial", round=0)

    cycle = await critique_cycle(seats, drafts, work, settings, transcript, context)

    if len(seats) == 1:  # nothing to consolidate: the one seat's answer is the panel's
        speaker = next(iter(seats))
        final, counts, unknown = cycle.drafts[speaker], {speaker: 0}, []
        response = final
    else:
        names = list(labels.values())
        system = CONSOLIDATION_SYSTEM.format(names=", ".join(names), example=f"'Vestibular migraine can cause imbalance {attribution_tag(names[:2])}'")
        body = "\n\n".join(f"ANSWER FROM {labels[seat]}:\n{text}" for seat, text in cycle.drafts.items())
        reply = await moderator.complete([{"role": "system", "content": system}, {"role": "user", "content": f"{work.task}\n\n{body}"}],
                                         temperature=settings.temperature, max_tokens=settings.tokens_for(moderator))
        final = reply.text.strip()
        by_label, unknown = attributions(final, names)
        response = without_attributions(final, names)
        counts = {seat: by_label[label] for seat, label in labels.items()}  # credits by seat, as the transcript names them
        transcript.record("turn", reply=reply, speaker=speaker, role="moderator", phase="consolidation",
                          data={"attributions": counts, "unknown_sources": unknown})
    transcript.record("decision", final, speaker=speaker, phase="conclusion",
                      data={"consensus": cycle.scores[-1] if cycle.scores else None, "rounds": cycle.rounds, "stopped_by": cycle.stopped_by})
    return Outcome(answer=final, transcript=transcript, data={
        **((case.metadata.get("groups") or {}) if case.conversation else {}),  # e.g. theme, for show --by
        **({"response": response} if case.conversation else {}),  # what the rubric grader grades
        "consensus_by_round": cycle.scores,
        "rounds": cycle.rounds,
        "reached_consensus": cycle.reached,
        "stopped_by": cycle.stopped_by,
        "final_answers": cycle.drafts,
        "attributions": counts,
        "unknown_sources": unknown,
        "labels": labels,  # seat -> the label its prompts and the consolidation's tags use
    })


def score(case: Case, outcome: Outcome) -> dict[str, float | None]:
    rounds = outcome.data.get("consensus_by_round") or []
    seats = outcome.data.get("attributions") or {}
    return {
        "consensus": rounds[-1] if rounds else None,
        "reached_consensus": None if not rounds else float(bool(outcome.data.get("reached_consensus"))),
        # Share of seats the consolidation credits at least once: does it draw on the whole panel?
        "seats_credited": (sum(1 for n in seats.values() if n > 0) / len(seats)) if len(seats) > 1 else None,
    }


# "consensus" here is MCC's agreement score of the last round (a share), not the multiple-choice 0/1 outcome.
LONGFORM_METRICS = {"consensus": UNIT, "reached_consensus": PROPORTION, "seats_credited": UNIT}

SPEC = ProtocolSpec(name="longform", run=run, settings=LongformSettings, scorers=(pure("longform", score, LONGFORM_METRICS), HEALTHBENCH_GRADER),
                    min_models=1, needs=("question",), role_defaults={"moderator": "@seat"},
                    description="MCC long-form debate: open answers, scored cross-review until agreement, attributed consolidation")
