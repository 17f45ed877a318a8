"""MCC's long-form consensus score: how closely the panel's cross-evaluation scores agree.

Each model scores every other model's answer on a few dimensions (factual accuracy, completeness,
safety; 1-10). For one dimension d, with all scores given on it pooled (six for three models),

    A_d = max(0, 1 - sigma_d / scale)      sigma_d = POPULATION standard deviation (divide by n)

and the consensus score is the mean of A_d over the dimensions. MCC stops debating once it is at
least 0.8 (scale 4). The population deviation is what MCC's released code and its logged run use:
it reproduces the logged round scores 0.89 and 0.91, the sample deviation would not.
"""

from __future__ import annotations

from statistics import fmean, pstdev
from collections.abc import Mapping, Sequence

from medpanel.errors import UsageError

MCC_SCALE = 4.0
MCC_THRESHOLD = 0.8


def dimension_agreement(scores: Sequence[float], scale: float = MCC_SCALE) -> float:
    """A_d for one dimension: 1 when every score is equal, falling linearly with the spread, floored at 0."""
    if not scores:
        raise UsageError("A dimension has no scores to measure agreement on.", "Give at least one score per dimension.")
    if scale <= 0:
        raise UsageError(f"The consensus scale must be positive, got {scale}.", "Use MCC's 4.0 or another positive number.")
    return max(0.0, 1.0 - pstdev([float(s) for s in scores]) / scale)


def dimension_agreements(scores_by_dimension: Mapping[str, Sequence[float]], scale: float = MCC_SCALE) -> dict[str, float]:
    """A_d for every dimension, in the order given."""
    return {dim: dimension_agreement(scores, scale) for dim, scores in scores_by_dimension.items()}


def consensus_score(scores_by_dimension: Mapping[str, Sequence[float]], scale: float = MCC_SCALE) -> float:
    """The mean over dimensions of max(0, 1 - sigma_d / scale), sigma_d the population standard deviation."""
    if not scores_by_dimension:
        raise UsageError("No dimensions were given to the consensus score.", "Pass scores like {'safety': [9, 10, 10]}.")
    return fmean(dimension_agreements(scores_by_dimension, scale).values())


__all__ = ["MCC_SCALE", "MCC_THRESHOLD", "consensus_score", "dimension_agreement", "dimension_agreements"]
