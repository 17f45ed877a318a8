"""MCC's long-form consensus score, on examples worked by hand."""

from __future__ import annotations

import pytest

from medpanel.errors import UsageError
from medpanel.scoring.consensus import consensus_score, dimension_agreement, dimension_agreements


def test_hand_worked_example():
    scores = {
        # mean 9.5; deviations ±0.5 -> population variance 0.25, sigma 0.5; A = 1 - 0.5/4 = 0.875
        "safety": [10, 10, 9, 9],
        # all equal: sigma 0, A = 1
        "completeness": [8, 8, 8, 8],
        # mean 7; deviations -2, 0, 0, +2 -> variance (4+0+0+4)/4 = 2, sigma sqrt(2) = 1.41421; A = 1 - 1.41421/4 = 0.64645
        "factual_accuracy": [5, 7, 7, 9],
    }
    by_dim = dimension_agreements(scores)
    assert by_dim["safety"] == pytest.approx(0.875)
    assert by_dim["completeness"] == pytest.approx(1.0)
    assert by_dim["factual_accuracy"] == pytest.approx(1 - 2 ** 0.5 / 4)
    # mean of the three: (0.875 + 1 + 0.646447) / 3 = 0.840482
    assert consensus_score(scores) == pytest.approx((0.875 + 1 + (1 - 2 ** 0.5 / 4)) / 3)
    assert consensus_score(scores) == pytest.approx(0.840482, abs=1e-6)


def test_uses_the_population_not_the_sample_deviation():
    # [9, 10]: population sigma 0.5 -> 0.875; the sample sigma (0.7071) would give 0.8232
    assert dimension_agreement([9, 10]) == pytest.approx(0.875)


def test_floor_at_zero_and_the_scale():
    # [1, 10]: mean 5.5, sigma 4.5 > 4 -> 1 - 4.5/4 < 0, floored to 0
    assert dimension_agreement([1, 10]) == 0.0
    # scale 2: [9, 10] -> 1 - 0.5/2 = 0.75
    assert dimension_agreement([9, 10], scale=2.0) == pytest.approx(0.75)
    assert consensus_score({"a": [9, 10], "b": [3, 3]}, scale=2.0) == pytest.approx((0.75 + 1.0) / 2)


@pytest.mark.parametrize("bad, message", [
    ({}, "No dimensions"),
    ({"safety": []}, "no scores"),
])
def test_bad_input_names_the_problem(bad, message):
    with pytest.raises(UsageError, match=message):
        consensus_score(bad)


def test_scale_must_be_positive():
    with pytest.raises(UsageError, match="scale must be positive"):
        dimension_agreement([1, 2], scale=0)
