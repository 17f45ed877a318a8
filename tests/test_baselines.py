"""The vote and self-consistency baselines, and the plurality vote they share with the debate."""

from __future__ import annotations

import pytest

from medpanel.cases import Case, Reference
from medpanel.errors import ModelCallError, UsageError
from medpanel.models import Runtime
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Panel, get_protocol
from medpanel.protocols.baselines import SelfConsistencySettings, VoteSettings
from medpanel.protocols.debate import DebateSettings, majority_vote
from medpanel.runs.scoring import score_outcome

VOTE = get_protocol("vote")
SC = get_protocol("self-consistency")
CASE = Case(id="q1", question="Which drug?", options={"A": "alpha", "B": "beta", "C": "gamma", "D": "delta"}, reference=Reference(answer="B"))


async def score(spec, out) -> dict:
    """A baseline's scores, as the runner gives them (its scorers need no model)."""
    return await score_outcome(spec, CASE, out, {}, spec.settings())


def constant(name: str, text: str) -> ScriptedModel:
    return ScriptedModel(responder=lambda r, t=text: t, name=name)


@pytest.mark.parametrize("choices, policy, answer, method, tied", [
    (["B", "B", "B"], "abstain", "B", "unanimous", []),
    (["B", "C", "B"], "abstain", "B", "majority", []),
    (["B", None, "B"], "abstain", "B", "majority", []),        # a missing answer casts no vote, and spoils unanimity
    (["B", "C", None], "abstain", None, "tie", ["B", "C"]),    # 1 : 1
    (["B", "C", None], "first-model", "B", "tie-broken", ["B", "C"]),
    ([None, "C", "B"], "first-model", "C", "tie-broken", ["B", "C"]),  # the first voter who cast a vote among the tied
    (["D", "B", "B", "C", "C"], "first-model", "B", "tie-broken", ["B", "C"]),  # D was first but is not tied
    ([None, None], "abstain", None, "no-votes", []),
])
def test_majority_vote(choices, policy, answer, method, tied):
    result = majority_vote(choices, policy)
    assert (result.answer, result.method, result.tied) == (answer, method, tied)


def test_random_tie_break_is_seeded():
    draws = {majority_vote(["A", "B", "C"], "random-seeded", seed=1, key=f"case{i}").answer for i in range(20)}
    assert draws == {"A", "B", "C"}  # twenty cases: every tied letter is drawn somewhere
    first = majority_vote(["A", "B", "C"], "random-seeded", seed=1, key="case3").answer
    assert all(majority_vote(["A", "B", "C"], "random-seeded", seed=1, key="case3").answer == first for _ in range(5))


async def test_vote_over_first_answers():
    p = Panel.of([constant("x", "Answer: B"), constant("y", "Answer: C"), constant("z", "Answer: B")], names=["x", "y", "z"])
    out = await VOTE.run(CASE, p, VoteSettings())
    assert out.answer == "B"
    assert out.data["decision"]["votes"] == {"B": 2, "C": 1} and out.data["decision"]["method"] == "majority"
    assert [len(m.history) for m in p.seats.values()] == [1, 1, 1]
    assert [e.kind for e in out.transcript] == ["turn", "turn", "turn", "vote", "vote", "vote", "decision"]
    scores = await score(VOTE, out)
    assert scores == {"accuracy": 1.0, "parsed": 1.0, "unanimous": 0.0, "tie": 0.0, "accuracy_tie_half": 1.0,
                      "initial_accuracy.x": 1.0, "initial_accuracy.y": 0.0, "initial_accuracy.z": 1.0}


async def test_vote_tie_with_abstain_counts_half_in_mcc_credit():
    p = Panel.of([constant("x", "Answer: B"), constant("y", "Answer: C"), constant("z", "Answer: D")], names=["x", "y", "z"])
    out = await VOTE.run(CASE, p, VoteSettings(tie_policy="abstain"))
    assert out.answer is None
    scores = await score(VOTE, out)
    assert scores["accuracy"] == 0.0 and scores["tie"] == 1.0 and scores["accuracy_tie_half"] == 0.5


async def test_vote_makes_the_same_calls_as_the_debates_first_round():
    vote_panel = Panel.of([constant("x", "Answer: B"), constant("y", "Answer: C")])
    debate_panel = Panel.of([constant("x", "Answer: B"), constant("y", "Answer: C")])
    await VOTE.run(CASE, vote_panel, VoteSettings())
    await get_protocol("debate").run(CASE, debate_panel, DebateSettings(max_rounds=0))
    for a, b in zip(vote_panel.seats.values(), debate_panel.seats.values(), strict=True):
        assert a.history[0] == b.history[0]  # same messages and options: one cache entry serves both


async def test_vote_seat_error_fails_the_item():
    p = Panel.of([constant("x", "Answer: B"), ScriptedModel([ModelCallError("quota exhausted", kind="rate_limited")], name="y")])
    with pytest.raises(ModelCallError, match="Seat 'scripted:y'"):
        await VOTE.run(CASE, p, VoteSettings())


async def test_self_consistency_draws_k_distinct_samples(store):
    # five sampled answers B C B D B -> B by 3 of 5
    runtime = Runtime(cache=store)
    answers = iter(["B", "C", "B", "D", "B"])
    model = ScriptedModel(responder=lambda r: f"Answer: {next(answers)}", name="sampler", cacheable=True, runtime=runtime)
    out = await SC.run(CASE, Panel.of([model]), SelfConsistencySettings(k=5, temperature=0.7))
    assert out.answer == "B" and out.data["samples"] == ["B", "C", "B", "D", "B"]
    assert len(model.history) == 5 and all(r.temperature == 0.7 for r in model.history)
    keys = [row["key"] for row in store.call_log()]
    assert len(keys) == 5 and len(set(keys)) == 5  # distinct sample indexes: five cache entries, not one
    assert [e.data["sample_index"] for e in out.transcript.turns()] == [0, 1, 2, 3, 4]
    scores = await score(SC, out)
    # B right in 3 of 5 draws -> sample accuracy 0.6; agreement = top votes / k = 3/5
    assert scores["accuracy"] == 1.0 and scores["sample_accuracy"] == pytest.approx(0.6) and scores["agreement"] == pytest.approx(0.6)


async def test_self_consistency_seeds_and_settings():
    model = constant("s", "Answer: C")
    out = await SC.run(CASE, Panel.of([model]), SelfConsistencySettings(k=3, seeds=[5, 6, 7]))
    assert [r.seed for r in model.history] == [5, 6, 7] and out.answer == "C"
    with pytest.raises(ValueError):
        SelfConsistencySettings(temperature=0.0)  # greedy draws would all agree: rejected
    with pytest.raises(UsageError, match="seeds has 2 entries; 3 are needed"):
        await SC.run(CASE, Panel.of([constant("s", "Answer: C")]), SelfConsistencySettings(k=3, seeds=[1, 2]))


async def test_self_consistency_failed_draw_fails_the_item():
    model = ScriptedModel(["Answer: B", ModelCallError("context too long", kind="context_length"), "Answer: B"], name="s")
    with pytest.raises(ModelCallError, match="Sample 1 of scripted:s failed: context too long"):
        await SC.run(CASE, Panel.of([model]), SelfConsistencySettings(k=3))
