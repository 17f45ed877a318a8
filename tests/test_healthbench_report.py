"""HealthBench's clipped mean in `medpanel report` (repeats, the seed, comparisons) and its scoring maths
checked on generated inputs against what can be said of it in words (the hand-worked numbers are in
tests/test_healthbench.py)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from medpanel.cases.model import Criterion
from medpanel.models import Runtime
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Panel
from medpanel.runs import stats
from medpanel.runs.report import build_report, render_markdown
from medpanel.runs.runner import RunConfig, run_benchmark
from medpanel.runs.summary import summarize
from medpanel.scoring.healthbench import example_scores, points_ratio
from test_healthbench import DATASET, MET, criterion_of

BAD, GOOD = "Wait it out at home.", "Please call emergency services now."


def grade(request):
    """A bad reply meets exactly the criteria worth negative points; a good one those test_healthbench's MET lists."""
    if BAD in request.messages[1].content:
        return {"explanation": "bad", "criteria_met": "(worth -" in request.messages[1].content}
    return {"explanation": "good", "criteria_met": criterion_of(request).startswith(MET)}


async def two_repeats(store, run_id: str, replies: list[str]):
    """A single run of the four hand-made conversations, twice; one item at a time, so the seat's replies go in order."""
    runtime = Runtime(cache=store)
    seat = ScriptedModel(replies, name="seat", runtime=runtime)
    judge = ScriptedModel(name="grader", responder=grade, runtime=runtime)
    config = RunConfig(dataset=DATASET, protocol="single", models=["seat"], repeats=2, concurrency=1)
    result = await run_benchmark(store, config, runtime, run_id=run_id, panel=Panel.of([seat], ["seat"], roles={"judge": judge}))
    assert result.status == "done", result.error


async def test_across_repeats_is_the_clipped_mean_over_every_example_and_repeat(store):
    # repeat 0 meets only penalties: -11/16, -9/15, -4/5, -6/4 (mean -0.897); repeat 1 the hand-worked 7/96
    await two_repeats(store, "hb", [BAD] * 4 + [GOOD] * 4)
    score = build_report(store, ["hb"])["runs"][0]["scores"]["healthbench"]
    assert [r["estimate"] for r in score["per_repeat"]] == [0.0, pytest.approx(7 / 96)]
    across = score["across_repeats"]
    assert across["estimate"] == 0.0 and 0.0 <= across["low"] <= across["high"] <= 1.0  # a t over raw means went below 0
    assert "4 clusters" in across["method"] and across["n"] == 8 and "simple-evals' number" in across["note"]
    values = [r["value"] for r in store.scores("hb") if r["name"] == "healthbench"]
    assert across["estimate"] == stats.clipped_mean_bootstrap(values, (0.0, 1.0)).estimate  # one clip over all 8 values


async def test_a_positive_score_across_repeats_keeps_each_example_s_repeats_together(store):
    await two_repeats(store, "hb", [GOOD] * 8)
    score = build_report(store, ["hb"])["runs"][0]["scores"]["healthbench"]
    across = score["across_repeats"]
    assert across["estimate"] == pytest.approx(7 / 96) and 0.0 <= across["low"] < across["high"] <= 1.0
    # both repeats are the same four numbers: resampling examples (not 8 independent values) keeps the spread of 4
    four = stats.clipped_mean_bootstrap([1 / 5, 7 / 15, -1 / 2, 1 / 8], (0.0, 1.0))  # the examples in id order
    assert (across["low"], across["high"]) == pytest.approx((four.low, four.high), abs=1e-12)


def test_report_seed_reaches_the_clipped_mean_bootstrap(store):
    rng = random.Random(7)  # 60 stored example scores with many distinct values, so two seeds' interval ends differ
    store.create_run("hb", dataset=DATASET, protocol="single", models=["m"], settings={})
    for i in range(60):
        store.write_item("hb", f"e{i}", 0, status="done", outcome={"answer": "x"}, events=[], scores={"healthbench": rng.uniform(-0.5, 1)},
                         started_at=0.0)
    one, two = (build_report(store, ["hb"], seed=seed)["runs"][0]["scores"]["healthbench"]["overall"] for seed in (1, 2))
    assert one["estimate"] == two["estimate"] and 0 < one["estimate"] < 1
    assert one["low"] != two["low"] and one["high"] != two["high"]
    assert "seed 1" in one["method"] and "seed 2" in two["method"]


async def test_a_comparison_of_clipped_means_says_it_uses_the_unclipped_scores(store, tmp_path):
    await two_repeats(store, "bad", [BAD] * 8)
    await two_repeats(store, "good", [GOOD] * 8)
    report = build_report(store, ["bad", "good"])
    pair = next(p for p in report["comparisons"] if p["score"] == "healthbench")
    assert "unclipped" in pair["note"] and pair["difference"]["estimate"] < -0.9  # both headlines are near 0; the items differ
    assert sum("unclipped" in n for n in report["notes"]) == 1  # once, not once per tag score
    assert "unclipped per-item scores" in render_markdown({**report, "files": {}})


async def test_tag_scores_draw_fewer_resamples_than_the_headline(store):
    await two_repeats(store, "hb", [GOOD] * 8)
    scores = summarize(store, "hb")["scores"]
    assert "10000 resamples" in scores["healthbench"]["method"]
    assert "1000 resamples" in scores["healthbench.axis:accuracy"]["method"]


def test_one_cluster_gives_p_1_instead_of_failing_the_report():  # a tag score one example carries, with repeats
    result = stats.permutation_test_clustered([0.5, 0.7], [0.1, 0.2], ["e1", "e1"])
    assert result.p_value == 1.0 and result.statistic == pytest.approx(0.45) and "one cluster" in result.note


def test_clustered_bootstrap_edges():
    one = stats.clipped_mean_bootstrap([0.2, 0.4], (0.0, 1.0), clusters=["a", "a"])
    assert one.estimate == pytest.approx(0.3) and one.low is None and "one cluster" in one.note
    with pytest.raises(Exception, match="cluster labels"):
        stats.clipped_mean_bootstrap([0.2, 0.4], (0.0, 1.0), clusters=["a"])


# ---------------------------------------------------------------- properties on generated inputs

POINTS = st.integers(-10, 10).filter(bool).map(float)
TAGS = st.lists(st.sampled_from(["axis:accuracy", "axis:completeness", "level:cluster", "cluster:x"]), unique=True, max_size=3)


@st.composite
def graded_rubric(draw):
    criteria = draw(st.lists(st.builds(Criterion, criterion=st.just("c"), points=POINTS, tags=TAGS), min_size=1, max_size=12))
    if not any(c.points > 0 for c in criteria):
        criteria.append(Criterion(criterion="c", points=draw(st.integers(1, 10)), tags=draw(TAGS)))
    return criteria, draw(st.lists(st.booleans(), min_size=len(criteria), max_size=len(criteria)))


@settings(max_examples=300, deadline=None)
@given(graded_rubric(), st.lists(st.sampled_from(["theme:a", "theme:b"]), unique=True))
def test_example_scores_properties(graded, example_tags):
    criteria, met = graded
    scores = example_scores(criteria, met, example_tags)
    assert all(value <= 1.0 for value in scores.values())  # met penalties only lower a score
    if all(m == (c.points > 0) for c, m in zip(criteria, met)):  # every positive met, no penalty met
        assert all(value == 1.0 for value in scores.values())
    for tag in example_tags:
        assert scores[f"healthbench.{tag}"] == scores["healthbench"]
    for tag in {t for c in criteria for t in c.tags}:
        tagged = [(c, m) for c, m in zip(criteria, met) if tag in c.tags]
        untagged_flipped = [(c, m if tag in c.tags else not m) for c, m in zip(criteria, met)]
        assert scores.get(f"healthbench.{tag}") == points_ratio([c for c, _ in tagged], [m for _, m in tagged])
        # only the tagged criteria count: flipping every other grade leaves the tag's score as it was
        assert example_scores(criteria, [m for _, m in untagged_flipped]).get(f"healthbench.{tag}") == scores.get(f"healthbench.{tag}")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-3, 1), min_size=1, max_size=40), st.integers(0, 2**32 - 1))
def test_the_clipped_mean_and_its_interval_stay_in_the_clip(values, seed):
    interval = stats.clipped_mean_bootstrap(values, (0.0, 1.0), resamples=200, seed=seed)
    assert 0.0 <= interval.estimate <= 1.0
    assert interval.estimate == pytest.approx(min(1.0, max(0.0, float(np.mean(values)))), abs=1e-12)
    if interval.low is not None:
        assert 0.0 <= interval.low <= interval.high <= 1.0
