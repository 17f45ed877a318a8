"""Statistics: each function against a value worked by hand (arithmetic in the comments) or against
scipy/statsmodels called directly, plus the degenerate inputs and their documented results."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from medpanel.errors import UsageError
from medpanel.runs.stats import (
    bootstrap_interval,
    clopper_pearson,
    friedman_with_bonferroni,
    mcnemar_exact,
    mean_t_interval,
    paired_t_test,
    permutation_test_clustered,
    wilcoxon_signed_rank,
    wilson,
)
from medpanel.runs.summary import mean_interval

# ---------------------------------------------------------------- proportions


def test_wilson_seven_of_ten_by_hand():
    # z = 1.959964, z² = 3.841459, p̂ = 0.7, n = 10
    # denominator 1 + z²/n = 1.3841459
    # centre (p̂ + z²/2n) / denom = 0.8920730 / 1.3841459 = 0.644493
    # half   z·√(p̂(1-p̂)/n + z²/4n²) / denom = 1.959964·√(0.021 + 0.0096037) / 1.3841459 = 0.247714
    # interval [0.396779, 0.892207]
    iv = wilson(7, 10)
    assert iv.estimate == 0.7 and iv.n == 10 and iv.method == "wilson"
    assert iv.low == pytest.approx(0.396779, abs=2e-6)
    assert iv.high == pytest.approx(0.892207, abs=2e-6)


def test_wilson_stays_inside_zero_one_at_the_edges():
    # k = 0: centre = half, so the lower end is exactly 0; upper = (z²/n)/(1+z²/n) = 0.3841459/1.3841459 = 0.277533
    iv = wilson(0, 10)
    assert iv.low == 0.0 and iv.high == pytest.approx(0.277533, abs=2e-6)
    assert wilson(10, 10).high == 1.0


def test_clopper_pearson_matches_beta_quantiles():
    # low = Beta(α/2; k, n-k+1), high = Beta(1-α/2; k+1, n-k)
    for k, n in [(7, 10), (1, 20), (19, 20), (50, 100)]:
        iv = clopper_pearson(k, n)
        assert iv.low == pytest.approx(sps.beta.ppf(0.025, k, n - k + 1), rel=1e-9)
        assert iv.high == pytest.approx(sps.beta.ppf(0.975, k + 1, n - k), rel=1e-9)
    # k = 0: low is 0 and high = 1 - (α/2)^(1/n) = 1 - 0.025^0.1 = 1 - 0.691503 = 0.308497
    zero = clopper_pearson(0, 10)
    assert zero.low == 0.0 and zero.high == pytest.approx(0.308497, abs=1e-6)
    assert clopper_pearson(10, 10).high == 1.0
    # The exact interval is wider than Wilson's at 7/10: [0.348, 0.933] against [0.397, 0.892].
    assert zero.method == "clopper-pearson" and clopper_pearson(7, 10).low < wilson(7, 10).low


def test_proportions_degenerate_and_bad_counts():
    for fn in (wilson, clopper_pearson):
        empty = fn(0, 0)
        assert (empty.estimate, empty.low, empty.high, empty.n, empty.note) == (None, None, None, 0, "no trials")
        with pytest.raises(UsageError):
            fn(11, 10)
        with pytest.raises(UsageError):
            fn(1.5, 10)


# ---------------------------------------------------------------- means


def test_mean_t_interval_by_hand():
    # 1..5: mean 3, s = √2.5 = 1.581139, s/√5 = 0.707107, t(0.975, 4) = 2.776445
    # half = 2.776445 · 0.707107 = 1.963243 -> [1.036757, 4.963243]
    iv = mean_t_interval([1, 2, 3, 4, 5])
    assert iv.estimate == 3.0 and iv.method == "student-t" and iv.n == 5
    assert iv.low == pytest.approx(1.036757, abs=1e-6) and iv.high == pytest.approx(4.963243, abs=1e-6)
    # A 90% interval is narrower: t(0.95, 4) = 2.131847 -> half 1.507443
    assert mean_t_interval([1, 2, 3, 4, 5], confidence=0.90).high == pytest.approx(3 + 1.507443, abs=1e-6)


def test_mean_t_interval_degenerate():
    empty = mean_t_interval([])
    assert empty.estimate is None and empty.low is None and empty.note == "no values"
    one = mean_t_interval([0.4])
    assert (one.estimate, one.low, one.high, one.n) == (0.4, None, None, 1)
    flat = mean_t_interval([2.0, 2.0, 2.0])
    assert (flat.estimate, flat.low, flat.high) == (2.0, 2.0, 2.0) and "zero spread" in flat.note
    with pytest.raises(UsageError):
        mean_t_interval([1.0, float("nan")])
    with pytest.raises(UsageError):
        mean_t_interval([1.0, 2.0], confidence=95)


def test_summary_mean_interval_keeps_its_shape_and_follows_the_declared_kind():
    # The kind comes from the score's name (medpanel.scoring.metrics), not from its values.
    binary = mean_interval([1.0] * 7 + [0.0] * 3, "accuracy")
    assert set(binary) == {"n", "mean", "low", "high", "method", "kind", "note"}
    assert binary["method"] == "wilson" and binary["kind"] == "proportion" and binary["low"] == pytest.approx(0.396779, abs=2e-6)
    graded = mean_interval([1, 2, 3, 4, 5], "some_unknown_score")
    assert graded["method"] == "t" and graded["high"] == pytest.approx(4.963243, abs=1e-6)
    assert graded["kind"] == "undeclared (mean)" and "undeclared" in graded["note"]
    assert mean_interval([], "accuracy")["n"] == 0 and mean_interval([], "accuracy")["mean"] is None
    one = mean_interval([0.5], "rounds_used")
    assert (one["n"], one["mean"], one["low"], one["high"], one["method"]) == (1, 0.5, None, None, "t")


# ---------------------------------------------------------------- paired tests


def test_mcnemar_exact_b1_c6():
    # b = 1 (only A right), c = 6 (only B right), 3 both right.
    # p = 2·P(X ≤ 1), X ~ Bin(7, ½) = 2·(1 + 7)/128 = 0.125
    a = [1] + [0] * 6 + [1] * 3
    b = [0] + [1] * 6 + [1] * 3
    result = mcnemar_exact(a, b)
    assert result.p_value == pytest.approx(0.125, abs=1e-12)
    assert result.statistic == 1.0 and result.n == 10
    assert result.details == {"both_right": 3, "only_a_right": 1, "only_b_right": 6, "both_wrong": 0}
    assert result.p_value == pytest.approx(sps.binomtest(1, 7, 0.5).pvalue)


def test_mcnemar_exact_no_discordant_pairs_and_bad_input():
    same = mcnemar_exact([1, 0, 1], [1, 0, 1])
    assert (same.statistic, same.p_value) == (0.0, 1.0) and "no discordant" in same.note
    with pytest.raises(UsageError, match="0/1"):
        mcnemar_exact([0.5, 1], [1, 1])
    with pytest.raises(UsageError, match="differ in length"):
        mcnemar_exact([1, 0], [1])


def test_paired_t_test_by_hand_and_against_scipy():
    # d = [2, 1, 2, 1]: mean 1.5, s = √(4·0.25/3) = 0.577350, s/√4 = 0.288675, t = 1.5/0.288675 = 5.196152, df 3
    a, b = [3, 5, 7, 9], [1, 4, 5, 8]
    result = paired_t_test(a, b)
    assert result.statistic == pytest.approx(5.196152, abs=1e-6)
    assert result.p_value == pytest.approx(2 * sps.t.sf(5.196152, 3), rel=1e-5)
    assert result.p_value == pytest.approx(sps.ttest_rel(a, b).pvalue)
    assert result.details["mean_difference"] == 1.5 and result.details["df"] == 3


def test_paired_t_test_degenerate():
    assert paired_t_test([1.0], [0.0]).p_value is None
    zero = paired_t_test([1, 2, 3], [1, 2, 3])
    assert (zero.statistic, zero.p_value) == (0.0, 1.0)
    constant = paired_t_test([2, 3, 4], [1, 2, 3])
    assert constant.statistic is None and constant.p_value is None and "zero variance" in constant.note


def test_wilcoxon_signed_rank_by_hand():
    # d = 1..5, all positive, no ties: W- = 0; of the 2^5 = 32 sign patterns only one has W- = 0 and one W+ = 0,
    # so the exact two-sided p = 2/32 = 0.0625.
    result = wilcoxon_signed_rank([1, 2, 3, 4, 5], [0, 0, 0, 0, 0])
    assert result.statistic == 0.0 and result.p_value == pytest.approx(0.0625)
    assert result.method == "Wilcoxon signed-rank (exact)"
    x, y = [1.2, 3.4, 2.2, 5.0, 4.1, 0.3, 2.8], [1.0, 3.9, 1.5, 4.2, 4.0, 0.9, 2.0]
    assert wilcoxon_signed_rank(x, y).p_value == pytest.approx(sps.wilcoxon(x, y).pvalue)


def test_wilcoxon_zero_differences():
    same = wilcoxon_signed_rank([1, 2], [1, 2])
    assert (same.statistic, same.p_value) == (0.0, 1.0) and same.note == "all differences are zero"
    empty = wilcoxon_signed_rank([], [])
    assert empty.p_value is None and empty.note == "no pairs"


def test_friedman_strictly_ordered_systems_by_hand():
    # Every item ranks a < b < c, so rank sums are 4, 8, 12 over n = 4 items, k = 3 systems:
    # chi² = 12/(n·k·(k+1))·ΣR² − 3n(k+1) = 12/48·(16 + 64 + 144) − 48 = 56 − 48 = 8
    # p = P(chi²₂ ≥ 8) = e^(−8/2) = e^−4 = 0.0183156
    scores = {"a": [1.0, 2.0, 3.0, 4.0], "b": [2.0, 3.5, 4.0, 6.0], "c": [3.0, 5.0, 4.5, 9.0]}
    result = friedman_with_bonferroni(scores)
    assert result.overall.statistic == pytest.approx(8.0)
    assert result.overall.p_value == pytest.approx(math.exp(-4), rel=1e-9)
    assert result.overall.details["mean_ranks"] == [1.0, 2.0, 3.0]
    # Pairwise: each pair's 4 differences share one sign, so only 2 of the 2^4 = 16 sign patterns are as extreme:
    # p = 2/16 = 0.125 (exact, or by enumeration where a - b has tied sizes); Bonferroni ×3 = 0.375.
    assert [(p.a, p.b) for p in result.pairwise] == [("a", "b"), ("a", "c"), ("b", "c")]
    for pair in result.pairwise:
        assert pair.test.p_value == pytest.approx(0.125)
        assert pair.p_adjusted == pytest.approx(0.375)


def test_friedman_degenerate_and_bad_input():
    flat = friedman_with_bonferroni({"a": [1, 0], "b": [1, 0], "c": [1, 0]})
    assert (flat.overall.statistic, flat.overall.p_value) == (0.0, 1.0)
    assert all(p.p_adjusted == 1.0 for p in flat.pairwise)
    with pytest.raises(UsageError, match="at least 3"):
        friedman_with_bonferroni({"a": [1], "b": [2]})
    with pytest.raises(UsageError, match="same items"):
        friedman_with_bonferroni({"a": [1, 2], "b": [2], "c": [3, 4]})


# ---------------------------------------------------------------- resampling


def test_bootstrap_is_seeded_and_close_to_t_on_a_normal_sample():
    sample = np.random.default_rng(7).normal(10.0, 2.0, 200)
    first = bootstrap_interval(sample, seed=3)
    assert first == bootstrap_interval(sample, seed=3)  # same seed, same interval
    assert first != bootstrap_interval(sample, seed=4)
    t = mean_t_interval(sample)
    # s/√n ≈ 2/√200 = 0.14, so the half-width is ≈ 0.28; percentile and t ends agree to a few hundredths.
    assert abs(first.low - t.low) < 0.03 and abs(first.high - t.high) < 0.03
    assert first.estimate == pytest.approx(float(np.mean(sample)))
    assert "percentile" in first.method and "seed 3" in first.method
    # The same resampling done by scipy directly, with the same generator seed.
    direct = sps.bootstrap((sample,), np.mean, n_resamples=10_000, method="percentile", rng=np.random.default_rng(3))
    assert (first.low, first.high) == (direct.confidence_interval.low, direct.confidence_interval.high)


def test_bootstrap_other_statistic_and_degenerate():
    median = bootstrap_interval([1, 2, 3, 4, 100], statistic=np.median, resamples=2000)
    assert median.estimate == 3.0 and median.low >= 1 and median.high <= 100
    assert bootstrap_interval([]).estimate is None
    one = bootstrap_interval([5.0])
    assert (one.estimate, one.low, one.high) == (5.0, None, None)
    flat = bootstrap_interval([2.0, 2.0, 2.0])
    assert (flat.low, flat.high) == (2.0, 2.0) and "all values equal" in flat.note


def test_clustered_permutation_identical_systems_give_p_one():
    a = [1, 0, 1, 1, 0, 1, 0, 0]
    result = permutation_test_clustered(a, a, ["q1", "q1", "q2", "q2", "q3", "q3", "q4", "q4"])
    assert result.p_value == 1.0 and result.statistic == 0.0


def test_clustered_permutation_consistent_shift_exact_p():
    # 12 items x 3 repeats, A = B + 0.5 + noise everywhere. 2^12 = 4096 ≤ 10000 sign patterns are all
    # enumerated; the observed (all clusters positive) is the single largest, so P(T* ≥ T) = 1/4096 and
    # the two-sided p = 2/4096 = 0.000488.
    rng = np.random.default_rng(1)
    b = rng.normal(0, 1, 36)
    a = b + 0.5 + rng.normal(0, 0.05, 36)
    clusters = [f"q{i // 3}" for i in range(36)]
    result = permutation_test_clustered(a, b, clusters)
    assert result.p_value == pytest.approx(2 / 4096)
    assert result.statistic == pytest.approx(float(np.mean(a - b)))
    assert "exact" in result.method and result.details["clusters"] == 12


def test_clustered_permutation_does_not_treat_repeats_as_independent():
    # 3 items, 10 repeats each, A always 1 better. Clustered by item there are only 2^3 = 8 sign
    # patterns and the observed is the largest: p = 2/8 = 0.25. Treating all 30 repeats as separate
    # items would claim p ≈ 2/10001 — the overstatement the clustering prevents.
    a, b = [1.0] * 30, [0.0] * 30
    items = [f"q{i // 10}" for i in range(30)]
    assert permutation_test_clustered(a, b, items).p_value == pytest.approx(0.25)
    naive = permutation_test_clustered(a, b, list(range(30)), seed=5)
    assert naive.p_value == pytest.approx(2 / 10_001)
    assert "seed 5" in naive.method


def test_clustered_permutation_random_mode_is_seeded():
    rng = np.random.default_rng(2)
    a, b = rng.normal(0.1, 1, 60), rng.normal(0, 1, 60)
    clusters = [i // 2 for i in range(60)]  # 30 clusters: 2^30 patterns, so sampled
    one = permutation_test_clustered(a, b, clusters, resamples=2000, seed=11)
    assert one == permutation_test_clustered(a, b, clusters, resamples=2000, seed=11)
    assert 0 < one.p_value <= 1
    with pytest.raises(UsageError, match="cluster labels"):
        permutation_test_clustered([1, 2], [1, 2], ["x"])


def test_results_serialise_to_strict_json():
    results = [wilson(7, 10), mean_t_interval([1.0]), paired_t_test([2, 3, 4], [1, 2, 3]), mcnemar_exact([1, 0], [0, 1]),
               friedman_with_bonferroni({"a": [1, 2], "b": [2, 3], "c": [3, 1]})]
    for r in results:
        text = json.dumps(r.to_dict(), allow_nan=False)
        assert "NaN" not in text
    assert wilson(7, 10).to_dict() == {"estimate": 0.7, "low": wilson(7, 10).low, "high": wilson(7, 10).high, "method": "wilson",
                                       "n": 10, "confidence": 0.95, "note": ""}
