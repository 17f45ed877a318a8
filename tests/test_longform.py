"""Long-form debate (MCC): scored cross-review, the consensus score by hand, the revision loop and its bounds,
the moderator's attributed consolidation; and the debate summaries built on any transcript."""

from __future__ import annotations

import math
import re

import pytest
from pydantic import ValidationError

from medpanel.cases import Case
from medpanel.errors import UsageError
from medpanel.models import Runtime
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Panel, get_protocol
from medpanel.protocols.longform import (
    AnswerReview,
    LongformSettings,
    attributions,
    moderator_seat,
)
from medpanel.protocols.summary import outline_debate, summarize_debate
from medpanel.runs.scoring import score_outcome
from medpanel.transcript import Transcript

SEATS = ["GPT", "Qwen", "DeepSeek"]
# What the prompts call them: seats are anonymised, by position (the transcript keeps the names).
LABEL = {name: f"Panelist {i}" for i, name in enumerate(SEATS, 1)}
NAME = {label: name for name, label in LABEL.items()}
QUESTION = Case(id="balance", question="What is losing balance a symptom of?")

# The scores of MCC's logged long-form run (Table S14), reviewer -> target -> (accuracy, completeness, safety).
# Round 2's DeepSeek->GPT was written 9.5 / 8.5 and read as 9 / 8 by the released parser: whole numbers here.
LOGGED = [
    {"GPT": {"Qwen": (9, 8, 10), "DeepSeek": (9, 9, 10)}, "Qwen": {"GPT": (10, 9, 10), "DeepSeek": (10, 9, 10)},
     "DeepSeek": {"GPT": (9, 8, 10), "Qwen": (9, 8, 9)}},
    {"GPT": {"Qwen": (9, 9, 10), "DeepSeek": (10, 9, 10)}, "Qwen": {"GPT": (10, 9, 10), "DeepSeek": (10, 10, 10)},
     "DeepSeek": {"GPT": (9, 8, 10), "Qwen": (9, 9, 10)}},
]
# Round 1 by hand (population SD over the six scores of each dimension, A_d = 1 - sd/4):
#   accuracy     9,9,10,10,9,9: mean 28/3, squared deviations 4x(1/9) + 2x(4/9) = 12/9, /6 = 2/9, sd = sqrt(2)/3 -> A = 1 - sqrt(2)/12
#   completeness 8,9,9,9,8,8:   mean 8.5, every deviation 0.5, sd = 0.5                         -> A = 0.875
#   safety       10,10,10,10,10,9: mean 59/6, squares 5x(1/36) + 25/36 = 30/36, /6 = 5/36, sd = sqrt(5)/6 -> A = 1 - sqrt(5)/24
ROUND1 = (1 - math.sqrt(2) / 12 + 0.875 + 1 - math.sqrt(5) / 24) / 3  # 0.88799 (the log prints 0.89)
# Round 2: accuracy 9,10,10,10,9,9 -> sd 0.5 -> 0.875; completeness 9,9,9,10,8,9 -> mean 9, squares 0,0,0,1,1,0 -> sd sqrt(1/3)
#   -> 1 - sqrt(3)/12; safety all 10 -> 1
ROUND2 = (0.875 + 1 - math.sqrt(3) / 12 + 1.0) / 3  # 0.91022 (the log prints 0.91)


def review(accuracy: int, completeness: int, safety: int, note: str = "fine") -> dict:
    scores = {"factual_accuracy": accuracy, "completeness": completeness, "safety": safety}
    body = {f"{d}_score": v for d, v in scores.items()}
    for d in scores:
        body[f"{d}_reason"] = f"{d} {note}"
        body[f"{d}_suggestion"] = f"improve {d}"
    return body


CONSOLIDATED = ("Inner-ear disorders such as BPPV [Panelist 1, Panelist 2, Panelist 3]. Acoustic neuroma [Panelist 2, Panelist 3]. "
                "Vestibular migraine [Panelist 2]. See [the guideline](https://example.org). Some add [Gemini, Panelist 1].")


def seat(name: str, rounds: list[dict], *, revised: str | None = None) -> ScriptedModel:
    """A scripted panelist: answers, reviews with the scores of `rounds` (one dict per round), revises, consolidates."""
    reviewed: dict[str, int] = {}

    def respond(request):
        user = request.messages[-1].content
        if request.schema_name == "AnswerReview":
            target = NAME[re.search(r"ANSWER BY (Panelist \d+) TO REVIEW", user)[1]]
            rnd = reviewed.get(target, 0)
            reviewed[target] = rnd + 1
            return review(*rounds[min(rnd, len(rounds) - 1)][name][target])
        if request.schema_name == "RevisedAnswer":
            return {"critique_summary": f"{name} accepts the completeness points", "answer": revised or f"{name} revised answer"}
        if "moderate a panel" in request.messages[0].content:
            return CONSOLIDATED
        return f"{name} first answer"

    return ScriptedModel(name=name, responder=respond, runtime=Runtime())


def panel(rounds: list[dict], moderator: str | None = None) -> tuple[Panel, dict[str, ScriptedModel]]:
    """The three seats; `moderator` names the seat whose model takes the moderator role (default: none given)."""
    models = {n: seat(n, rounds) for n in SEATS}
    roles = {"moderator": models[moderator]} if moderator else {}
    return Panel.of(list(models.values()), SEATS, roles=roles), models


async def score(outcome) -> dict:
    """The long form's scores, as the runner gives them (its scorer needs no model)."""
    return await score_outcome(get_protocol("longform"), QUESTION, outcome, {}, LongformSettings())


def phases(outcome, phase: str):
    return [e for e in outcome.transcript if e.phase == phase]


async def test_paper_settings_stop_after_a_round_at_0_89():
    pan, models = panel(LOGGED)
    outcome = await get_protocol("longform").run(QUESTION, pan, LongformSettings())
    assert outcome.data["consensus_by_round"] == pytest.approx([ROUND1])
    assert outcome.data["stopped_by"] == "consensus" and outcome.data["reached_consensus"] is True
    assert not phases(outcome, "revision")  # 0.888 >= 0.8 in round 1: no revision
    # each seat: one answer, two reviews; GPT (the default moderator) also consolidates
    assert [len(models[n].history) for n in SEATS] == [4, 3, 3]
    reviews = phases(outcome, "review")
    assert len(reviews) == 6 and {(e.speaker, e.data["target"]) for e in reviews} == {(r, t) for r in SEATS for t in SEATS if r != t}
    qwen_by_deepseek = next(e for e in reviews if e.speaker == "DeepSeek" and e.data["target"] == "Qwen")
    assert qwen_by_deepseek.data["scores"] == {"factual_accuracy": 9, "completeness": 8, "safety": 9}
    [score] = [e for e in outcome.transcript if e.kind == "score"]
    assert score.data["consensus"] == pytest.approx(ROUND1) and score.text == "0.89"
    assert score.data["by_dimension"] == pytest.approx({"factual_accuracy": 1 - math.sqrt(2) / 12, "completeness": 0.875,
                                                        "safety": 1 - math.sqrt(5) / 24})


async def test_released_code_settings_go_on_past_0_89_and_stop_at_0_91():
    pan, models = panel(LOGGED)
    outcome = await get_protocol("longform").run(QUESTION, pan, LongformSettings(min_rounds=2))
    assert outcome.data["consensus_by_round"] == pytest.approx([ROUND1, ROUND2])
    assert [e.text for e in outcome.transcript if e.kind == "score"] == ["0.89", "0.91"]
    revisions = phases(outcome, "revision")
    assert [(e.speaker, e.round) for e in revisions] == [(n, 1) for n in SEATS]  # one revision, after round 1 only
    # Qwen's revision prompt carries the reviews it received, with their scores and suggestions.
    revise_request = next(r for r in models["Qwen"].history if r.schema_name == "RevisedAnswer")
    prompt = revise_request.messages[-1].content
    assert "YOUR CURRENT ANSWER:\nQwen first answer" in prompt
    assert "From Panelist 1:\n- factual_accuracy 9/10" in prompt and "From Panelist 3:\n- factual_accuracy 9/10" in prompt
    assert "- safety 9/10. Reason: safety fine Suggestion: improve safety" in prompt
    # round 2 reviews the revised answers, and the moderator merges the revised answers
    round2 = [r for r in models["GPT"].history if r.schema_name == "AnswerReview"][2:]
    assert all("Qwen revised answer" in r.messages[-1].content or "DeepSeek revised answer" in r.messages[-1].content for r in round2)
    consolidation_prompt = models["GPT"].history[-1].messages[-1].content
    assert all(f"ANSWER FROM {LABEL[n]}:\n{n} revised answer" in consolidation_prompt for n in SEATS)


async def test_a_higher_threshold_also_reproduces_the_logged_run():
    pan, _ = panel(LOGGED)
    outcome = await get_protocol("longform").run(QUESTION, pan, LongformSettings(threshold=0.9))
    # 0.888 < 0.9 -> revise; 0.910 >= 0.9 -> stop
    assert outcome.data["consensus_by_round"] == pytest.approx([ROUND1, ROUND2]) and outcome.data["stopped_by"] == "consensus"


async def test_the_revision_loop_is_bounded_by_max_rounds():
    # GPT and DeepSeek score 10s, Qwen scores 1s, every round:
    #   each dimension: four 10s and two 1s: mean 7, squares 4x9 + 2x36 = 108, /6 = 18, sd = 4.243 > 4 -> A = 0 -> score 0
    apart = {"GPT": {"Qwen": (10, 10, 10), "DeepSeek": (10, 10, 10)}, "Qwen": {"GPT": (1, 1, 1), "DeepSeek": (1, 1, 1)},
             "DeepSeek": {"GPT": (10, 10, 10), "Qwen": (10, 10, 10)}}
    pan, models = panel([apart])
    outcome = await get_protocol("longform").run(QUESTION, pan, LongformSettings(max_rounds=2))
    assert outcome.data["consensus_by_round"] == [0.0, 0.0]
    assert outcome.data["stopped_by"] == "max_rounds" and outcome.data["reached_consensus"] is False
    assert [e.round for e in phases(outcome, "revision")] == [1, 1, 1, 2, 2, 2]  # as MCC's code: the last round revises too
    assert sum(r.schema_name == "AnswerReview" for r in models["Qwen"].history) == 4  # two targets x two rounds
    assert await score(outcome) == {"consensus": 0.0, "reached_consensus": 0.0, "seats_credited": 1.0}


async def test_min_rounds_forces_a_revision_even_when_scores_agree():
    same = {r: {t: (9, 9, 9) for t in SEATS if t != r} for r in SEATS}  # identical scores: sd 0 -> 1.0
    pan, _ = panel([same])
    outcome = await get_protocol("longform").run(QUESTION, pan, LongformSettings(min_rounds=3, max_rounds=3))
    assert outcome.data["consensus_by_round"] == [1.0, 1.0, 1.0]
    assert [e.round for e in phases(outcome, "revision")] == [1, 1, 1, 2, 2, 2]  # round 3 may stop: no third revision
    with pytest.raises(ValidationError, match="min_rounds"):
        LongformSettings(min_rounds=4, max_rounds=3)


async def test_moderator_consolidates_with_seat_attributions():
    pan, models = panel(LOGGED, moderator="Qwen")  # the moderator role is Qwen's model
    outcome = await get_protocol("longform").run(QUESTION, pan, LongformSettings())
    request = models["Qwen"].history[-1]
    system = request.messages[0].content
    assert "using exactly these names: Panelist 1, Panelist 2, Panelist 3" in system and "[Panelist 1, Panelist 2]" in system
    assert [len(models[n].history) for n in SEATS] == [3, 4, 3]  # answer + two reviews each; Qwen also consolidates
    [consolidation] = phases(outcome, "consolidation")
    assert consolidation.speaker == "Qwen" and outcome.answer == CONSOLIDATED
    # tags by hand: [1, 2, 3], [2, 3], [2], [Gemini, 1]; the markdown link is no tag; credits are kept by seat name
    assert consolidation.data["attributions"] == {"GPT": 2, "Qwen": 3, "DeepSeek": 2}
    assert consolidation.data["unknown_sources"] == ["Gemini"]
    assert outcome.data["labels"] == LABEL
    decision = outcome.transcript.events[-1]
    assert decision.kind == "decision" and decision.data["rounds"] == 1


def test_attribution_parser_and_moderator_choice():
    counts, unknown = attributions("A [x]. B [GPT]. C [Qwen,GPT]. D [the 2019 guideline]. [GPT](http://a)", ["GPT", "Qwen"])
    assert counts == {"GPT": 2, "Qwen": 1} and unknown == []
    gpt, qwen, claude = ScriptedModel(["a"]), ScriptedModel(["b"]), ScriptedModel(["c"])
    pan = Panel.of([gpt, qwen], ["GPT", "Qwen"])
    # No moderator role: the first seat; the role holding a seat's model: that seat; another model: "Moderator"
    assert moderator_seat(pan)[0] == "GPT" and moderator_seat(Panel(pan.seats, {"moderator": qwen}))[0] == "Qwen"
    assert moderator_seat(Panel(pan.seats, {"moderator": claude})) == ("Moderator", claude)
    with pytest.raises(UsageError, match="The panel is empty"):
        moderator_seat(Panel())


async def test_one_seat_answers_without_review():
    solo = ScriptedModel(["A single answer."], runtime=Runtime())
    outcome = await get_protocol("longform").run(QUESTION, Panel.of([solo], ["GPT"]), LongformSettings())
    assert outcome.answer == "A single answer." and len(solo.history) == 1
    assert (await score(outcome))["consensus"] is None
    with pytest.raises(UsageError, match="has no question"):
        await get_protocol("longform").run(Case(id="x"), Panel.of([solo]), LongformSettings())


def test_review_schema_is_flat_with_scores_first():
    assert list(AnswerReview.model_json_schema()["properties"])[:3] == ["factual_accuracy_score", "completeness_score", "safety_score"]
    with pytest.raises(ValidationError):
        AnswerReview.model_validate(review(11, 9, 9))  # scores are 1-10


# ---------------------------------------------------------------- debate summaries


def mc_debate() -> Transcript:
    t = Transcript()
    t.record("turn", "I pick A.", speaker="GPT", phase="initial", data={"choice": "A"})
    t.record("turn", "I pick B.", speaker="Qwen", phase="initial", data={"choice": "B"})
    t.record("turn", "Qwen's argument on renal function convinces me: B.", speaker="GPT", phase="debate", round=1, data={"choice": "B"})
    t.record("turn", "Still B.", speaker="Qwen", phase="debate", round=1, data={"choice": "B"})
    t.record("decision", "B", speaker="Panel", phase="decision", round=1, data={"choice": "B", "method": "consensus"})
    return t


def test_outline_lists_rounds_choices_and_shifts():
    assert outline_debate(mc_debate()).splitlines() == [
        "initial (round 0): GPT: A; Qwen: B",
        "debate (round 1): GPT: B; Qwen: B",
        "Stance shifts: GPT: A → B (round 1)",
        "Decision (Panel): B [method consensus]",
    ]


async def test_outline_of_a_longform_run_shows_scores_and_consensus():
    pan, _ = panel(LOGGED)
    outcome = await get_protocol("longform").run(QUESTION, pan, LongformSettings(min_rounds=2))
    lines = outline_debate(outcome.transcript).splitlines()
    assert lines[0] == "initial (round 0): GPT: GPT first answer; Qwen: Qwen first answer; DeepSeek: DeepSeek first answer"
    assert lines[1].startswith("review (round 1): GPT→Qwen 9/8/10; GPT→DeepSeek 9/9/10; Qwen→GPT 10/9/10")
    assert lines[2] == "consensus (round 1): consensus score 0.89 (threshold reached)"
    assert "consensus (round 2): consensus score 0.91 (threshold reached)" in lines
    assert lines[-2] == "Stance shifts: none"
    assert lines[-1].startswith("Decision (GPT): Inner-ear disorders") and lines[-1].endswith("[consensus 0.91, rounds 2, stopped_by consensus]")


async def test_summarize_debate_prompts_with_outline_and_excerpts():
    writer = ScriptedModel(["Key reasoning: renal function. Stance shifts: GPT moved from A to B. Evidence: eGFR. Consensus: B."])
    summary = await summarize_debate(mc_debate(), writer, max_tokens=200)
    assert summary.startswith("Key reasoning: renal function.")
    request = writer.history[0]
    assert request.max_tokens == 200 and "Stance shifts" in request.messages[0].content
    user = request.messages[1].content
    assert "Stance shifts: GPT: A → B (round 1)" in user
    assert "[debate r1] GPT: Qwen's argument on renal function convinces me: B." in user


async def test_a_failing_seat_is_named_and_its_siblings_are_awaited():
    import asyncio

    from medpanel.errors import ModelCallError
    from medpanel.protocols.base import gather_seats

    finished = []

    async def slow_ok():
        await asyncio.sleep(0.01)
        finished.append("ok")
        return "fine"

    async def broken():
        raise ModelCallError("server said no", kind="bad_request")

    with pytest.raises(ModelCallError, match="Seat 'B' failed answering: server said no") as info:
        await gather_seats([slow_ok(), broken()], ["A", "B"], "answering")
    assert finished == ["ok"] and info.value.kind == "bad_request"  # A was not left running
