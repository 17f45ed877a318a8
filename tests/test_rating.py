"""Blinded human rating (medpanel.rating): the agreement maths on values worked by hand, the rubrics, sessions
(assignment, blinding, recording), the judge-human check, the summary and its HTML fragment, and the CLI.

Rated runs are made by the real runner (specialist protocol, OpenTumorBoard's equivalence judge) with
scripted models whose answers and judge scores we choose, so every number below is worked by hand.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import subprocess

import pytest
from conftest import MEDPANEL

from medpanel.cases import Case, Reference
from medpanel.errors import UsageError
from medpanel.models import Runtime
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Panel
from medpanel.rating import agreement, rubrics, sessions
from medpanel.rating import store as rstore
from medpanel.rating.judge_agreement import JUDGE_LINKS, judge_agreement
from medpanel.rating.report import rating_section_html, rating_summary
from medpanel.runs.runner import RunConfig, run_benchmark

# ---------------------------------------------------------------- runs to rate (shared with test_rating_web.py)

ITEMS = 4
CASES = [Case(id=f"q{n}", summary=f"Patient {n}: a 64-year-old with a 2 cm right upper lobe nodule.", question=f"Question {n}: what should happen next?",
              target_role="Medical Oncologist", reference=Reference(answer=f"Reference answer {n}: biopsy first."))
         for n in range(1, ITEMS + 1)]
ALPHA, BETA, JUDGE = "sys-alpha-v1", "sys-beta-v2", "judge-omega-7"
# The equivalence judge's score (1-5) per (system word, item): mapped 4-5 High, 3 Medium, 1-2 Low.
JUDGE_SCORES = {("Alpha", 1): 5, ("Beta", 1): 3, ("Alpha", 2): 4, ("Beta", 2): 2,
                ("Alpha", 3): 4, ("Beta", 3): 3, ("Alpha", 4): 5, ("Beta", 4): 1}


def which(text: str) -> tuple[str, int]:
    """(system word, item number) of an answer text, as written by the scripted answerers below."""
    m = re.search(r"(Alpha|Beta)\b.*?plan for item (\d+)", text)
    assert m, text
    return m.group(1), int(m.group(2))


def answerer(word: str):
    def respond(request):
        n = int(re.search(r"Question (\d+)", request.messages[-1].content).group(1))
        if word == "Alpha":  # names its own model: the rater's page must mask it
            return {"answer": f"Alpha plan for item {n}: biopsy, then decide (as {ALPHA} sees it)."}
        return {"answer": f"<b>Beta</b> plan for item {n}: surgery at once."}  # markup: must reach the page escaped
    return respond


def judge_reply(scores: dict):
    def respond(request):
        word, n = which(request.messages[-1].content)
        return {"clinical_equivalence_score": scores[(word, n)], "critical_error": False, "unsupported_claim": word == "Beta" and n == 4,
                "rationale": "scripted"}
    return respond


async def specialist_run(store, name: str, word: str, judge: str = JUDGE, scores: dict | None = None, cases=CASES) -> str:
    runtime = Runtime(cache=store)
    panel = Panel.of([ScriptedModel(name=name, responder=answerer(word), runtime=runtime)],
                     roles={"judge": ScriptedModel(name=judge, responder=judge_reply(scores or JUDGE_SCORES), runtime=runtime)})
    result = await run_benchmark(store, RunConfig(dataset="inline", protocol="specialist", models=[f"scripted:{name}"]), runtime,
                                 panel=panel, cases=cases)
    assert result.status == "done"
    return result.run_id


def two_runs(store, **kwargs) -> tuple[str, str]:
    return asyncio.run(specialist_run(store, ALPHA, "Alpha", **kwargs)), asyncio.run(specialist_run(store, BETA, "Beta", **kwargs))


# ---------------------------------------------------------------- agreement maths, by hand

# The 10-item, 3-category example (rows: rater 1's label, columns: rater 2's):
#        L  M  H
#   L  [ 2, 1, 0 ]     row sums 3, 4, 3; column sums 2, 4, 4; 8 of 10 on the diagonal
#   M  [ 0, 3, 1 ]
#   H  [ 0, 0, 3 ]
TEN_A = [1, 1, 1, 2, 2, 2, 2, 3, 3, 3]
TEN_B = [1, 1, 2, 2, 2, 2, 3, 3, 3, 3]


def test_percent_agreement_and_confusion_by_hand():
    assert agreement.percent_agreement(TEN_A, TEN_B).value == 0.8  # 8 of 10
    table = agreement.confusion(TEN_A, TEN_B, [1, 2, 3])
    assert table["counts"] == [[2, 1, 0], [0, 3, 1], [0, 0, 3]] and table["n"] == 10
    # None on either side drops the pair
    assert agreement.percent_agreement([1, None, 2], [1, 2, None]) == agreement.Estimate(1.0, 1)
    assert agreement.percent_agreement([], []).value is None


def test_cohen_kappa_unweighted_linear_quadratic_by_hand():
    # po = 0.8; pe = (3*2 + 4*4 + 3*4)/100 = 0.34; kappa = (0.8 - 0.34)/(1 - 0.34) = 0.46/0.66 = 23/33
    assert agreement.cohen_kappa(TEN_A, TEN_B, [1, 2, 3]).value == pytest.approx(23 / 33)
    # linear: disagreement weight |i-j|/2. Observed (1 + 1)*0.5/10 = 0.1. Expected sum r_i c_j w_ij / 100 =
    # (3*4*.5 + 3*4*1 + 4*2*.5 + 4*4*.5 + 3*2*1 + 3*4*.5)/100 = (6+12+4+8+6+6)/100 = 0.42 -> 1 - 0.1/0.42 = 16/21
    assert agreement.cohen_kappa(TEN_A, TEN_B, [1, 2, 3], "linear").value == pytest.approx(16 / 21)
    # quadratic: weight (i-j)^2/4. Observed 2*.25/10 = 0.05. Expected (3 + 12 + 2 + 4 + 6 + 3)/100 = 0.30 -> 1 - 0.05/0.30 = 5/6
    assert agreement.cohen_kappa(TEN_A, TEN_B, [1, 2, 3], "quadratic").value == pytest.approx(5 / 6)
    # two categories, perfect disagreement: po = 0, pe = (2*2 + 2*2)/16 = 0.5 -> kappa = -1
    assert agreement.cohen_kappa([0, 0, 1, 1], [1, 1, 0, 0]).value == pytest.approx(-1.0)


def test_kappa_is_none_with_a_reason_when_undefined():
    # Both raters gave every item one same label: chance agreement 1, kappa 0/0. Never NaN, never a crash.
    for weights in (None, "linear", "quadratic"):
        est = agreement.cohen_kappa([3, 3, 3], [3, 3, 3], [1, 2, 3], weights)
        assert est.value is None and "same rating" in est.reason and est.n == 3
    assert agreement.cohen_kappa([2, 2], [2, 2]).value is None  # categories read from the data: only one
    assert agreement.cohen_kappa([], [], [1, 2]).reason == "no item was rated by both"
    fleiss = agreement.fleiss_kappa([[1, 1], [1, 1]])
    assert fleiss.value is None and "same" in fleiss.reason
    assert agreement.spearman([1, 1, 1], [1, 2, 3]).value is None
    assert "at least 3" in agreement.spearman([1, 2], [2, 1]).reason
    with pytest.raises(ValueError, match="numeric"):
        agreement.cohen_kappa(["a", "b"], ["b", "a"], weights="linear")


def test_fleiss_kappa_by_hand():
    # Three subjects, three raters each, categories x and y: counts (2,1), (0,3), (3,0).
    # P_i = (sum n_ij^2 - 3)/(3*2): 1/3, 1, 1 -> mean 7/9; p_x = 5/9, p_y = 4/9 -> P_e = 41/81
    # kappa = (7/9 - 41/81)/(1 - 41/81) = (22/81)/(40/81) = 0.55
    est = agreement.fleiss_kappa([["x", "x", "y"], ["y", "y", "y"], ["x", "x", "x"]])
    assert est.value == pytest.approx(0.55) and est.n == 3
    with pytest.raises(ValueError, match="same number"):
        agreement.fleiss_kappa([["x", "y"], ["x"]])


def test_spearman_by_hand():
    # x = 1..5, y = 2,1,4,3,5: d = -1,1,-1,1,0, sum d^2 = 4 -> rho = 1 - 6*4/(5*24) = 0.8
    assert agreement.spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]).value == pytest.approx(0.8)
    # With ties (mean ranks), the judge-human example of test_rating_web.py:
    # judge ranks 7.5,3.5,5.5,2,5.5,3.5,7.5,1; human ranks 7,4.5,7,2,7,2,4.5,2 (means 4.5 each);
    # sum of products of deviations 30, sums of squares 40.5 and 37.5 -> rho = 30/sqrt(40.5*37.5) = 0.769800
    assert agreement.spearman([5, 3, 4, 2, 4, 3, 5, 1], [3, 2, 3, 1, 3, 1, 2, 1]).value == pytest.approx(30 / math.sqrt(40.5 * 37.5))


def test_permutation_test_clustered_by_answer_by_hand():
    # Four items, two ratings per answer. A: [3,3] [3,2] [3,3] [2,2]; B: [2,2] [1,1] [2,1] [1,1].
    # Mean A = 21/8, mean B = 11/8, difference 1.25. Swapping an item's two clusters flips the sign of its
    # contribution d_i/8 with d = (2, 3, 3, 2): |sum of +-d_i| >= 10 only for all + or all - -> p = 2/16.
    clusters = [([3, 3], [2, 2]), ([3, 2], [1, 1]), ([3, 3], [2, 1]), ([2, 2], [1, 1])]
    test = agreement.permutation_test(clusters, max_permutations=10_000, seed=0)
    assert test["difference"] == pytest.approx(1.25) and test["p_value"] == pytest.approx(0.125)
    assert test["exact"] and test["permutations"] == 16 and test["clusters"] == 4
    # Unequal cluster sizes: A [4] vs B [1,1,1] and A [2,2] vs B [2]. Observed: A mean 8/3, B mean 5/4 -> 17/12.
    # Swap item 1 only: A = [1,1,1,2,2] (7/5), B = [4,2] (3) -> -1.6; item 2 only: A = [4,2] (3), B = [1,1,1,2,2] (7/5) -> 1.6;
    # both: A = [1,1,1,2] (5/4), B = [4,2,2] (8/3) -> -17/12. |diff| >= 17/12 in all four patterns -> p = 1.
    uneven = agreement.permutation_test([([4], [1, 1, 1]), ([2, 2], [2])])
    assert uneven["difference"] == pytest.approx(17 / 12) and uneven["p_value"] == 1.0
    # Above the bound: drawn, seeded, p = (1 + hits)/(1 + draws); the same seed gives the same p.
    many = [([3, 3], [2, 2])] * 12 + [([2, 2], [2, 3])] * 12  # 2**24 patterns > 1000
    drawn = agreement.permutation_test(many, max_permutations=1000, seed=5)
    assert not drawn["exact"] and drawn["permutations"] == 1000
    assert drawn == agreement.permutation_test(many, max_permutations=1000, seed=5)
    assert drawn["p_value"] >= 1 / 1001
    assert agreement.permutation_test([([], [1])])["p_value"] is None


def test_holm_keeps_missing_p_values():
    # sorted 0.01, 0.03, 0.04 -> 3*0.01 = 0.03, max(0.03, 2*0.03) = 0.06, max(0.06, 0.04) = 0.06
    assert agreement.holm([0.01, None, 0.04, 0.03]) == pytest.approx([0.03, None, 0.06, 0.06])


# ---------------------------------------------------------------- rubrics as data


def test_rubrics_hold_the_papers_dimensions_and_scales():
    physician = rubrics.get_rubric("mcc-physician")
    assert len(physician.dimensions) == 12
    assert {"correct_comprehension", "correct_retrieval", "correct_reasoning", "incorrect_comprehension", "incorrect_retrieval",
            "incorrect_reasoning", "possible_bias", "scientific_consensus", "harm_extent", "harm_likelihood",
            "inappropriate_content", "missing_content"} == {d.name for d in physician.dimensions}
    assert [d.name for d in rubrics.get_rubric("mcc-layperson").dimensions] == ["helpfulness", "intent"]
    assert [lv.label for lv in rubrics.get_rubric("mcc-layperson").dimension("helpfulness").scale.levels] == \
        ["Not helpful", "Indirectly helpful", "Directly helpful"]
    audit = rubrics.get_rubric("otb-audit")
    assert [d.name for d in audit.dimensions] == ["question_relevance", "response_correctness", "discussion_support",
                                                  "case_coverage", "case_factuality", "consensus_fidelity"]
    assert all([lv.label for lv in d.scale.levels] == ["Low", "Medium", "High"] for d in audit.dimensions)
    best = rubrics.get_rubric("pick-best")
    assert best.kind == rubrics.PICK_BEST and best.min_systems == 2
    for r in rubrics.RUBRICS.values():  # every scale worst first, values rising, labels readable back
        for d in r.dimensions:
            assert d.scale.values == sorted(d.scale.values)
            assert all(d.scale.read(lv.label) == lv.value == d.scale.read(str(lv.value)) for lv in d.scale.levels)
    with pytest.raises(ValueError):
        audit.dimension("case_coverage").scale.read("Excellent")
    with pytest.raises(UsageError, match="Unknown rubric"):
        rubrics.get_rubric("likert")


# ---------------------------------------------------------------- sessions


def test_a_session_is_blinded_and_seeded(store):
    a, b = two_runs(store)
    sid = sessions.create_session(store, [a, b], rubric="otb-audit", raters=["alice", "bob"], adjudicator="carol", seed=11, cases=CASES)
    again = sessions.create_session(store, [a, b], rubric="otb-audit", raters=["alice", "bob"], adjudicator="carol", seed=11, cases=CASES)
    shown = [(x["item"], x["letter"], x["text"]) for x in rstore.session_answers(store, sid)]
    assert shown == [(x["item"], x["letter"], x["text"]) for x in rstore.session_answers(store, again)]  # same seed, same letters
    # Every task a rater gets holds nothing that names a run or a model: the answers are masked, the ids absent.
    words = {which(text)[0] for _, _, text in shown}
    assert words == {"Alpha", "Beta"}
    for name in ("alice", "bob"):
        task = sessions.next_task(store, sid, name)
        blob = json.dumps([task.prompt, [x.text for x in task.answers], task.cells, task.session_id])
        for secret in (a, b, ALPHA, BETA, JUDGE, "scripted", "specialist"):
            assert secret not in blob
        assert sessions.MASK in blob  # Alpha's answer names its model: shown masked
        assert [x.letter for x in task.answers] == ["A", "B"]
    # Letters per item differ somewhere (seed 11): Alpha is Answer A on some items and Answer B on others.
    alpha_letter = {item: letter for item, letter, text in shown if which(text)[0] == "Alpha"}
    assert set(alpha_letter.values()) == {"A", "B"}
    # Each rater's item order is their own, drawn from the seed.
    session = sessions.load(store, sid)
    assert sorted(session.primary_items("alice")) == [1, 2, 3, 4]
    assert session.primary_items("alice") != session.primary_items("bob")
    # The unblinding key is kept apart, and names both runs.
    assert sorted(s["run_id"] for s in rstore.session_systems(store, sid)) == sorted([a, b])
    assert rstore.resolve_session_id(store, sid) == sid and rstore.resolve_session_id(store, "last") in (sid, again)
    with pytest.raises(UsageError, match="matches 2"):
        rstore.resolve_session_id(store, "rate-")


def test_three_raters_two_per_item_the_third_adjudicates(store):
    a, b = two_runs(store)
    sid = sessions.create_session(store, [a, b], rubric="mcc-layperson", raters=["ann", "ben", "cal"], seed=3, cases=CASES)
    session = sessions.load(store, sid)
    for info in session.items.values():
        assert len(set(info["raters"])) == 2 and info["adjudicator"] not in info["raters"] and info["adjudicator"] in ("ann", "ben", "cal")
    counts = {name: len(session.primary_items(name)) for name in ("ann", "ben", "cal")}
    assert sum(counts.values()) == 2 * ITEMS and max(counts.values()) - min(counts.values()) <= 1


def test_recording_checks_every_cell_and_the_adjudicator_sees_only_disagreements(store):
    a, b = two_runs(store)
    sid = sessions.create_session(store, [a, b], rubric="otb-audit", raters=["alice", "bob"], adjudicator="carol", seed=2,
                                  dimensions=["response_correctness"], cases=CASES)
    letters = {(x["item"], which(x["text"])[0]): x["letter"] for x in rstore.session_answers(store, sid)}
    task = sessions.next_task(store, sid, "alice")
    first = task.item
    with pytest.raises(UsageError, match="Not every question"):
        sessions.record(store, sid, "alice", first, {"A:response_correctness": "High"})
    with pytest.raises(UsageError, match="not on the scale"):
        sessions.record(store, sid, "alice", first, {"A:response_correctness": "Superb", "B:response_correctness": "High"})
    with pytest.raises(UsageError, match="not asked"):
        sessions.record(store, sid, "carol", first, {"A:response_correctness": "High", "B:response_correctness": "High"})
    assert sessions.next_task(store, sid, "carol") is None  # nothing to adjudicate before both have rated
    for n in range(1, ITEMS + 1):
        alpha, beta = letters[(n, "Alpha")], letters[(n, "Beta")]
        sessions.record(store, sid, "alice", n, {f"{alpha}:response_correctness": "High", f"{beta}:response_correctness": "Low"})
        bob_beta = "Medium" if n == 3 else "Low"  # bob disagrees on item 3's Beta answer only
        sessions.record(store, sid, "bob", n, {f"{alpha}:response_correctness": "3", f"{beta}:response_correctness": bob_beta})
    with pytest.raises(rstore.AlreadyRated):
        sessions.record(store, sid, "alice", 1, {f"{letters[(1, 'Alpha')]}:response_correctness": "High",
                                                 f"{letters[(1, 'Beta')]}:response_correctness": "Low"})
    task = sessions.next_task(store, sid, "carol")
    assert task.item == 3 and task.role == "adjudicator" and task.cells == {"response_correctness": [letters[(3, "Beta")]]}
    with pytest.raises(UsageError, match="not asked"):  # an agreed cell cannot be overruled
        sessions.record(store, sid, "carol", 3, {f"{letters[(3, 'Alpha')]}:response_correctness": "Low",
                                                 f"{letters[(3, 'Beta')]}:response_correctness": "Medium"})
    sessions.record(store, sid, "carol", 3, {f"{letters[(3, 'Beta')]}:response_correctness": "Medium"})
    assert sessions.next_task(store, sid, "carol") is None
    session = sessions.load(store, sid)
    beta = next(s for s in session.systems(3) if letters[(3, "Beta")] == next(x["letter"] for x in session.answers[3] if x["system"] == s))
    assert session.consensus(3, beta, "response_correctness") == (2, "adjudicated")
    rows = rstore.session_ratings(store, sid)
    assert {r["role"] for r in rows if r["rater"] == "carol"} == {"adjudicator"} and len([r for r in rows if r["rater"] == "carol"]) == 1
    assert sessions.progress(store, sid)["complete"]


def test_without_an_adjudicator_a_disagreement_stays_unresolved(store):
    a, b = two_runs(store)
    sid = sessions.create_session(store, [a, b], rubric="pick-best", raters=["alice", "bob"], seed=4, cases=CASES)
    letters = {(x["item"], which(x["text"])[0]): x["letter"] for x in rstore.session_answers(store, sid)}
    # alice picks Alpha on all four; bob picks Alpha on items 1-3 and Beta on item 4.
    for n in range(1, ITEMS + 1):
        sessions.record(store, sid, "alice", n, {"best": letters[(n, "Alpha")]})
        sessions.record(store, sid, "bob", n, {"best": letters[(n, "Beta" if n == 4 else "Alpha")].lower()})
    summary = rating_summary(store, sid)
    (best,) = summary["dimensions"]
    assert summary["progress"]["items_by_state"] == {"settled": 3, "pending": 0, "awaiting": 0, "unresolved": 1}
    by_run = {x["run_id"]: x for x in best["systems"]}
    # settled picks: Alpha wins 3 of 3 settled items; all first-hand picks: Alpha 7 of 8, Beta 1 of 8
    assert by_run[a]["mean"] == 1.0 and by_run[a]["n"] == 3 and by_run[b]["mean"] == 0.0
    assert by_run[a]["mean_ratings"] == pytest.approx(7 / 8) and by_run[b]["mean_ratings"] == pytest.approx(1 / 8)
    # agreement on the system picked: 3 of 4; table rows alice (Alpha 4), columns bob (Alpha 3, Beta 1):
    # pe = (4*3 + 0*1)/16 = 0.75, po = 0.75 -> kappa = 0
    assert best["agreement"]["percent"]["value"] == 0.75
    assert best["agreement"]["kappa"]["value"] == pytest.approx(0.0)
    assert "kappa_linear" not in best["agreement"]


def test_bad_sessions_are_refused(store):
    a, b = two_runs(store)
    with pytest.raises(UsageError, match="two or more different raters"):
        sessions.create_session(store, [a], rubric="otb-audit", raters=["alice"], cases=CASES)
    with pytest.raises(UsageError, match="also a rater"):
        sessions.create_session(store, [a], rubric="otb-audit", raters=["alice", "bob"], adjudicator="bob", cases=CASES)
    with pytest.raises(UsageError, match="at least 2 runs"):
        sessions.create_session(store, [a], rubric="pick-best", raters=["alice", "bob"], cases=CASES)
    with pytest.raises(UsageError, match="named twice"):
        sessions.create_session(store, [a, a], rubric="otb-audit", raters=["alice", "bob"], cases=CASES)
    with pytest.raises(UsageError, match="no dimension"):
        sessions.create_session(store, [a], rubric="otb-audit", raters=["alice", "bob"], dimensions=["vibes"], cases=CASES)
    with pytest.raises(UsageError, match="No run matches"):
        sessions.create_session(store, ["nope"], rubric="otb-audit", raters=["alice", "bob"])
    with pytest.raises(UsageError, match="not a usable name"):
        sessions.create_session(store, [a], rubric="otb-audit", raters=["alice", "<bob>"])
    other = asyncio.run(specialist_run(store, "sys-gamma-v3", "Alpha", cases=[Case(id="z9", summary="s", question="Question 9?", target_role="R")]))
    with pytest.raises(UsageError, match="no finished item in common"):
        sessions.create_session(store, [a, other], rubric="otb-audit", raters=["alice", "bob"])


def test_items_missing_from_a_run_are_left_out_and_noted(store):
    a = asyncio.run(specialist_run(store, ALPHA, "Alpha"))
    b = asyncio.run(specialist_run(store, BETA, "Beta", cases=CASES[:3]))
    sid = sessions.create_session(store, [a, b], rubric="otb-audit", raters=["alice", "bob"], cases=CASES)
    assert len(sessions.load(store, sid).items) == 3
    assert "1 item(s) left out" in rstore.get_session(store, sid)["note"] and "q4" in rstore.get_session(store, sid)["note"]


def test_answer_text_reads_what_the_user_would_read():
    # A long-form consolidation: the tags crediting panelists are taken out (they would unblind MCC).
    outcome = {"answer": "Rest and fluids [Panelist 1, Panelist 2]. See a doctor if worse [Panelist 3].",
               "data": {"labels": {"openai:gpt-4o": "Panelist 1", "local": "Panelist 2", "x": "Panelist 3"}}}
    assert sessions.answer_text(outcome) == "Rest and fluids. See a doctor if worse."
    assert sessions.answer_text({"answer": "raw [Panelist 1]", "data": {"response": "clean"}}) == "clean"
    assert sessions.answer_text({"answer": None, "data": {}}) is None
    names = sessions.model_names([{"models": ["openai:gpt-4o-mini@http://h:8000/v1", "local"], "protocol": "nope", "settings": {}}])
    assert "gpt-4o-mini" in names and "local" in names and "http://h:8000/v1" in names
    assert sessions.mask_names("As GPT-4o-mini, I think; local care helps.", [n for n in names if n != "local"]) == "As [a model], I think; local care helps."


# ---------------------------------------------------------------- the judge against people


def test_judge_scores_map_onto_the_human_scale():
    links = {link.score: link for link in JUDGE_LINKS}
    eq = links["clinical_equivalence"]
    assert [eq.to_human(v) for v in (1, 2, 3, 4, 5)] == [1, 1, 2, 3, 3]  # Low Low Medium High High
    assert "consistency" not in links  # discussion support has no judge link (test_discussion_support_has_no_judge_link)
    assert [links["unsupported_claim"].to_human(v) for v in (0, 1)] == [3, 1]
    assert eq.to_human(None) is None
    assert eq.describe({1: "Low", 2: "Medium", 3: "High"}) == "clinical_equivalence (1-5) >= 3.5: High; >= 2.5: Medium; lower: Low"


def test_judge_agreement_per_judge_model(store):
    # Two judges: run A judged by judge-one, run B by judge-two. People rate response_correctness, agreeing everywhere:
    # Alpha High on every item, Beta Low on every item. judge-one (Alpha) scores 5,4,3,2 -> High,High,Medium,Low.
    # judge-two (Beta) scores 1 on every item -> Low, Low, Low, Low.
    one = {("Alpha", n): s for n, s in zip(range(1, 5), (5, 4, 3, 2))}
    two = {("Beta", n): 1 for n in range(1, 5)}
    a = asyncio.run(specialist_run(store, ALPHA, "Alpha", judge="judge-one", scores=one))
    b = asyncio.run(specialist_run(store, BETA, "Beta", judge="judge-two", scores=two))
    sid = sessions.create_session(store, [a, b], rubric="otb-audit", raters=["alice", "bob"], seed=1,
                                  dimensions=["response_correctness", "case_factuality"], cases=CASES)
    letters = {(x["item"], which(x["text"])[0]): x["letter"] for x in rstore.session_answers(store, sid)}
    for rater in ("alice", "bob"):
        for n in range(1, ITEMS + 1):
            al, be = letters[(n, "Alpha")], letters[(n, "Beta")]
            sessions.record(store, sid, rater, n, {f"{al}:response_correctness": "High", f"{be}:response_correctness": "Low",
                                                   f"{al}:case_factuality": "High", f"{be}:case_factuality": "High"})
    rows = {(r["dimension"], r["judge"]): r for r in judge_agreement(store, sid)}
    first = rows[("response_correctness", "scripted:judge-one")]
    # judge-one vs people on Alpha: (H,H), (H,H), (M,H), (L,H): agreement 2/4. People all High: chance agreement
    # p_e = P(judge H)*1 = 0.5 -> kappa = (0.5 - 0.5)/(1 - 0.5) = 0; the human side is constant, so rho is undefined.
    assert first["n"] == 4 and first["agreement"]["value"] == 0.5 and first["kappa"]["value"] == pytest.approx(0.0)
    assert first["spearman"]["value"] is None and "constant" in first["spearman"]["reason"]
    assert first["confusion"]["counts"] == [[0, 0, 1], [0, 0, 1], [0, 0, 2]]
    second = rows[("response_correctness", "scripted:judge-two")]
    # judge-two Low everywhere, people Low everywhere: one label throughout, kappa undefined (None, with the reason)
    assert second["agreement"]["value"] == 1.0 and second["kappa"]["value"] is None and "same rating" in second["kappa"]["reason"]
    # case factuality <- unsupported_claim: the scripted judge flags only Beta's item 4 -> Low there, High elsewhere
    fact = rows[("case_factuality", "scripted:judge-two")]
    assert fact["agreement"]["value"] == 0.75 and fact["confusion"]["counts"] == [[0, 0, 1], [0, 0, 0], [0, 0, 3]]
    assert set(rows) == {("response_correctness", "scripted:judge-one"), ("response_correctness", "scripted:judge-two"),
                         ("case_factuality", "scripted:judge-one"), ("case_factuality", "scripted:judge-two")}


# ---------------------------------------------------------------- the HTML fragment


def test_rating_section_html_escapes_and_is_empty_without_a_session(store):
    a = asyncio.run(specialist_run(store, "x<script>alert(1)</script>", "Alpha"))
    assert rating_section_html(store, [a]) == ""
    sid = sessions.create_session(store, [a], rubric="otb-audit", raters=["alice", "bob"], dimensions=["response_correctness"], cases=CASES)
    html = rating_section_html(store, [a, "some-other-run"])
    assert html.startswith('<section class="mp-ratings">') and html.endswith("</section>")
    assert "<script>" not in html and "&lt;script&gt;" in html and sid in html
    assert rating_section_html(store, ["unrelated"]) == ""


# ---------------------------------------------------------------- the store and the CLI


def test_the_rating_migration_is_applied(store):
    from medpanel.runs.migrations import MIGRATIONS

    assert "0008_rating_sessions" in [name for name, _ in MIGRATIONS] and "0008_rating_sessions" in store.migrations()
    tables = {r["name"] for r in store._query("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"rating_sessions", "rating_systems", "rating_items", "rating_answers", "ratings"} <= tables


def _cli(args, env, check=True):
    proc = subprocess.run([MEDPANEL, *args], env=env, capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_cli_new_list_show_and_bad_input(cli_env):
    from medpanel.runs.store import Store

    db = Store(cli_env["MEDPANEL_STORE"])
    a, b = two_runs(db)
    db.close()
    proc = _cli(["rate", "new", a, b, "--rubric", "otb-audit", "--raters", "alice,bob", "--adjudicator", "carol", "--seed", "9",
                 "--dimensions", "response_correctness"], cli_env)
    sid = proc.stdout.strip()
    assert re.fullmatch(r"rate-[0-9a-f]{8}", sid), proc.stdout
    listed = json.loads(_cli(["rate", "list", "--json"], cli_env).stdout)
    assert [r["session_id"] for r in listed] == [sid] and listed[0]["items"] == ITEMS
    shown = json.loads(_cli(["rate", "show", sid, "--json"], cli_env).stdout)
    assert shown["session"]["seed"] == 9 and sorted(x["run_id"] for x in shown["systems"]) == sorted([a, b])
    assert shown["dimensions"][0]["agreement"]["kappa"]["value"] is None  # nothing rated yet: None with the reason
    text = _cli(["rate", "show", sid], cli_env).stdout
    assert "Response correctness" in text and "judge vs people" in text
    assert json.loads(_cli(["rate", "rubrics", "--json"], cli_env).stdout)[0]["name"] == "mcc-physician"
    for bad, says in ((["rate", "new", a, "--rubric", "nope", "--raters", "a,b"], "Unknown rubric"),
                      (["rate", "new", a, "--rubric", "otb-audit", "--raters", "alice"], "two or more"),
                      (["rate", "new", a, "--rubric", "otb-audit", "--raters", "alice,,bob"], "empty name"),
                      (["rate", "new", "nope", "--rubric", "otb-audit", "--raters", "a,b"], "No run matches"),
                      (["rate", "new", a, "--rubric", "pick-best", "--raters", "a,b"], "at least 2 runs"),
                      (["rate", "show", "rate-none"], "No rating session")):
        proc = _cli(bad, cli_env, check=False)
        assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr, (bad, proc.stderr)


# ---------------------------------------------------------------- reviewer's findings (judge orientation, floors, blinding, bad input)


def _rate_as_the_judge(store, sid):
    """Both raters rate case factuality exactly as the scripted judge decided: Beta's item 4 Low, all else High."""
    letters = {(x["item"], which(x["text"])[0]): x["letter"] for x in rstore.session_answers(store, sid)}
    for rater in ("alice", "bob"):
        for n in range(1, ITEMS + 1):
            al, be = letters[(n, "Alpha")], letters[(n, "Beta")]
            sessions.record(store, sid, rater, n, {f"{al}:case_factuality": "High", f"{be}:case_factuality": "Low" if n == 4 else "High"})


def test_spearman_is_oriented_for_a_decreasing_judge_score(store):
    # unsupported_claim: raw 1 is a flaw (Low), raw 0 High; people who rate exactly as the judge decided must give
    # rho +1, not -1 (the raw score runs opposite to the human scale, so it is negated before ranking).
    a, b = two_runs(store)
    sid = sessions.create_session(store, [a, b], rubric="otb-audit", raters=["alice", "bob"], seed=1, dimensions=["case_factuality"], cases=CASES)
    _rate_as_the_judge(store, sid)
    (row,) = judge_agreement(store, sid)
    assert row["n"] == 8 and row["agreement"]["value"] == 1.0 and row["kappa"]["value"] == pytest.approx(1.0)
    assert row["spearman"]["value"] == pytest.approx(1.0)
    links = {link.score: link for link in JUDGE_LINKS}
    assert links["unsupported_claim"].increasing is False and links["clinical_equivalence"].increasing is True


def test_discussion_support_has_no_judge_link():
    # The judge's consistency reads the whole board meeting; raters see only the conclusion: not one thing.
    from medpanel.rating.judge_agreement import links_for

    assert all(link.dimension != "discussion_support" and link.score != "consistency" for link in JUDGE_LINKS)
    dims = [d.name for d in rubrics.get_rubric("otb-audit").dimensions]
    assert {link.dimension for link in links_for("otb-audit", dims)} == {"response_correctness", "consensus_fidelity", "case_factuality"}


def test_judge_floor_scores_of_empty_answers_are_no_verdict(store):
    # Alpha gives no answer on item 2: the judge is never called and the scorer stores floor scores
    # (clinical_equivalence 1, unsupported_claim 0) with status format_failure; they are no verdict and left out.
    def silent_on_two(request):
        n = int(re.search(r"Question (\d+)", request.messages[-1].content).group(1))
        return {"answer": "" if n == 2 else f"Alpha plan for item {n}: biopsy, then decide."}

    async def run_alpha():
        runtime = Runtime(cache=store)
        panel = Panel.of([ScriptedModel(name=ALPHA, responder=silent_on_two, runtime=runtime)],
                         roles={"judge": ScriptedModel(name=JUDGE, responder=judge_reply(JUDGE_SCORES), runtime=runtime)})
        result = await run_benchmark(store, RunConfig(dataset="inline", protocol="specialist", models=[f"scripted:{ALPHA}"]), runtime,
                                     panel=panel, cases=CASES)
        return result.run_id

    a = asyncio.run(run_alpha())
    b = asyncio.run(specialist_run(store, BETA, "Beta"))
    sid = sessions.create_session(store, [a, b], rubric="otb-audit", raters=["alice", "bob"], seed=1,
                                  dimensions=["response_correctness", "case_factuality"], cases=CASES)
    session = sessions.load(store, sid)
    assert session.items[2]["item_id"] == "q2"
    shown = {(x["item"], x["text"] == sessions.NO_ANSWER): x["letter"] for x in rstore.session_answers(store, sid)}
    for rater in ("alice", "bob"):
        for n in range(1, ITEMS + 1):
            form = {}
            for x in session.answers[n]:
                form[f"{x['letter']}:response_correctness"] = "Low"
                form[f"{x['letter']}:case_factuality"] = "High"
            sessions.record(store, sid, rater, n, form)
    rows = {r["dimension"]: r for r in judge_agreement(store, sid)}
    for dim in ("response_correctness", "case_factuality"):
        assert rows[dim]["n"] == 7 and rows[dim]["left_out"]["no_judge_verdict"] == 1, rows[dim]
    # The floor is not counted as the judge's: response_correctness pairs are the 7 judged answers only.
    assert sum(map(sum, rows["response_correctness"]["confusion"]["counts"])) == 7
    assert shown  # the empty answer is shown as NO_ANSWER
    from medpanel.rating.judge_agreement import floor_scores  # read from the item's score events (status format_failure)

    assert {"clinical_equivalence", "unsupported_claim"} <= floor_scores(store, a, "q2", 0)
    assert not floor_scores(store, a, "q1", 0)


def test_unbracketed_and_lower_case_panelist_names_are_masked():
    labels = {"openai:gpt-4o": "Panelist 1", "local": "Panelist 2", "x": "Panelist 3"}
    text = ("As Panelist 2 noted, rest helps [Panelist 2]. Panelist 1 and Panelist 3 agree on fluids [panelist 2]. "
            "Follow up in a week (Panelists 1-3). PANELISTS 1, 2 and 3 concur.")
    shown = sessions.answer_text({"answer": text, "data": {"labels": labels}})
    assert not re.search(r"panelists?\s*\d", shown, re.IGNORECASE), shown
    assert "[" not in shown and "As a panelist noted, rest helps." in shown and "on fluids." in shown
    # A conversation's response is masked too, and a seat label that is not "Panelist N" wherever it appears.
    response = sessions.answer_text({"answer": "x", "data": {"response": "dr. who thinks so [Dr. Who].", "labels": {"m": "Dr. Who"}}})
    assert "who" not in response.lower(), response


def test_model_ids_are_masked_without_their_tag_or_date():
    names = sessions.model_names([{"models": ["ollama:llama3.1:8b", "anthropic:claude-3-5-sonnet-20241022"], "protocol": "nope", "settings": {}}])
    assert "llama3.1" in names and "claude-3-5-sonnet" in names
    text = "I am Llama3.1 (llama3.1:8b); compare claude-3-5-sonnet and claude-3-5-sonnet-20241022 on ollama:llama3.1:8b."
    assert sessions.mask_names(text, names) == "I am [a model] ([a model]); compare [a model] and [a model] on [a model]."


def test_runs_over_different_datasets_are_refused(store):
    a, b = two_runs(store)
    store._write([("UPDATE runs SET dataset = ? WHERE id = ?", ("otb-other", b))])
    with pytest.raises(UsageError, match="different datasets"):
        sessions.create_session(store, [a, b], rubric="otb-audit", raters=["alice", "bob"], cases=CASES)


def test_seed_out_of_range_is_refused(store, cli_env):
    a = asyncio.run(specialist_run(store, ALPHA, "Alpha"))
    for bad in (2 ** 63, -1):
        with pytest.raises(UsageError, match="out of range"):
            sessions.create_session(store, [a], rubric="otb-audit", raters=["alice", "bob"], seed=bad, cases=CASES)
    assert sessions.load(store, sessions.create_session(store, [a], rubric="otb-audit", raters=["alice", "bob"], seed=2 ** 63 - 1,
                                                        cases=CASES)).row["seed"] == 2 ** 63 - 1
    from medpanel.runs.store import Store

    db = Store(cli_env["MEDPANEL_STORE"])
    run = asyncio.run(specialist_run(db, ALPHA, "Alpha"))
    db.close()
    proc = _cli(["rate", "new", run, "--rubric", "otb-audit", "--raters", "alice,bob", "--seed", "9223372036854775808"], cli_env, check=False)
    assert proc.returncode == 2 and "out of range" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
