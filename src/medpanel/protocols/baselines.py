"""The baselines a debate has to beat: a vote of the panel's first answers, and one model's self-consistency.

vote:              every seat answers alone (exactly the calls of the debate's round 0, so after a debate
                   run the vote is served from the cache), then a plurality vote with the debate's tie policy.
self-consistency:  one model answers k times at temperature > 0, each draw with its own sample index
                   (and seed, if given) so the cache keeps them apart; then the same plurality vote.

A single model is the `single` protocol; homogeneous replicas are the debate with one model repeated.
"""

from __future__ import annotations

import asyncio

from pydantic import Field

from medpanel.cases.model import Case
from medpanel.context import RunContext, quiet
from medpanel.errors import BudgetExceeded, ModelCallError
from medpanel.protocols.base import Outcome, Panel, ProtocolSpec
from medpanel.protocols.debate import PanelSettings, initial_answers, majority_vote, seat_options, tie_half_credit
from medpanel.protocols.single import answer, answer_messages
from medpanel.scoring.exact import exact_match, read_choice
from medpanel.scoring.metrics import PROPORTION, UNIT
from medpanel.scoring.scorer import pure
from medpanel.transcript import Transcript


class VoteSettings(PanelSettings):
    """Same fields as the debate's: temperature, max_tokens, seeds, tie_policy, tie_seed."""


class SelfConsistencySettings(PanelSettings):
    k: int = Field(default=5, ge=1, le=64)
    temperature: float = Field(default=0.7, gt=0.0, le=2.0)  # greedy draws would all be the same answer
    # seeds (inherited): one per draw when given, k of them


def _decide(transcript: Transcript, choices: list[str | None], settings: PanelSettings, case: Case) -> dict:
    result = majority_vote(choices, settings.tie_policy, seed=settings.tie_seed, key=case.id).as_dict(settings.tie_policy)
    transcript.record("decision", result["answer"] or "", speaker="Panel", phase="decision", data={"choice": result["answer"], **result})
    return result


async def run_vote(case: Case, panel: Panel, settings: VoteSettings, context: RunContext | None = None) -> Outcome:
    context = quiet(context)
    case.require("question", "options", protocol="vote")
    transcript = context.transcript()
    stances = await initial_answers(case, panel, settings, transcript)
    choices = {seat: st.choice for seat, st in stances.items()}
    for seat, choice in choices.items():
        transcript.record("vote", choice or "", speaker=seat, phase="vote", data={"choice": choice})
    decision = _decide(transcript, list(choices.values()), settings, case)
    return Outcome(answer=decision["answer"], transcript=transcript,
                   data={**case.groups(), "initial_choices": choices, "decision": decision, "parsed": decision["answer"] is not None})


def score_vote(case: Case, outcome: Outcome) -> dict[str, float | None]:
    gold = case.reference.answer
    decision = outcome.data["decision"]
    scores: dict[str, float | None] = {
        "accuracy": exact_match(outcome.answer, gold),
        "parsed": 1.0 if outcome.answer else 0.0,
        "unanimous": 1.0 if decision["method"] == "unanimous" else 0.0,
        "tie": 1.0 if decision["method"] in ("tie", "tie-broken") else 0.0,
        "accuracy_tie_half": tie_half_credit(outcome.answer, decision, gold),
    }
    for seat, choice in outcome.data["initial_choices"].items():
        scores[f"initial_accuracy.{seat}"] = exact_match(choice, gold)
    return scores


async def run_self_consistency(case: Case, panel: Panel, settings: SelfConsistencySettings, context: RunContext | None = None) -> Outcome:
    context = quiet(context)
    case.require("question", "options", protocol="self-consistency")
    seat, model = panel.first()
    messages = answer_messages(case, model.small)

    async def draw(i: int):
        reply = await answer(model, messages, case, **seat_options(settings, i, settings.k, model))
        return reply, read_choice(reply.text, case.options)

    results = await asyncio.gather(*(draw(i) for i in range(settings.k)), return_exceptions=True)
    budget = next((r for r in results if isinstance(r, BudgetExceeded)), None)
    if budget is not None:
        raise budget
    for i, result in enumerate(results):  # one failed draw fails the item (never a silent k-1 vote)
        if isinstance(result, ModelCallError):
            raise ModelCallError(f"Sample {i} of {model.id} failed: {result.problem}", result.fix, kind=result.kind, model=result.model or model.id) from result
        if isinstance(result, BaseException):
            raise result
    transcript = context.transcript()
    choices: list[str | None] = []
    for i, (reply, read) in enumerate(results):  # type: ignore[misc]
        transcript.record("turn", reply=reply, speaker=f"{seat}~{i}", role="sample", round=i, phase="sample",
                          data={**read.as_data(), "sample_index": i})
        choices.append(read.choice)
    decision = _decide(transcript, choices, settings, case)
    return Outcome(answer=decision["answer"], transcript=transcript,
                   data={**case.groups(), "samples": choices, "decision": decision, "parsed": decision["answer"] is not None})


def score_self_consistency(case: Case, outcome: Outcome) -> dict[str, float | None]:
    gold = case.reference.answer
    decision = outcome.data["decision"]
    samples = outcome.data["samples"]
    sample_scores = [exact_match(c, gold) for c in samples]
    return {
        "accuracy": exact_match(outcome.answer, gold),
        "parsed": 1.0 if outcome.answer else 0.0,
        "tie": 1.0 if decision["method"] in ("tie", "tie-broken") else 0.0,
        "accuracy_tie_half": tie_half_credit(outcome.answer, decision, gold),
        # the mean single draw: what one sample at this temperature scores
        "sample_accuracy": None if gold is None else sum(s or 0.0 for s in sample_scores) / len(samples),
        "agreement": max(decision["votes"].values(), default=0) / len(samples),
    }


# Kinds as medpanel.scoring.metrics declares them.
_VOTED = {"accuracy": PROPORTION, "parsed": PROPORTION, "tie": PROPORTION, "accuracy_tie_half": UNIT}
VOTE_METRICS = {**_VOTED, "unanimous": PROPORTION, "initial_accuracy.*": PROPORTION}
SELF_CONSISTENCY_METRICS = {**_VOTED, "sample_accuracy": UNIT, "agreement": UNIT}

VOTE = ProtocolSpec(name="vote", run=run_vote, settings=VoteSettings, scorers=(pure("vote", score_vote, VOTE_METRICS),),
                    min_models=1, needs=("question", "options"), description="majority vote over the panel's independent first answers")
SELF_CONSISTENCY = ProtocolSpec(name="self-consistency", run=run_self_consistency, settings=SelfConsistencySettings,
                                scorers=(pure("self-consistency", score_self_consistency, SELF_CONSISTENCY_METRICS),),
                                needs=("question", "options"), description="k sampled answers of one model, majority vote")
