"""Agreement between raters, and between a judge and people: pure functions of plain lists, no store.

    percent_agreement(a, b)              share of items two raters rated identically
    cohen_kappa(a, b, weights=...)       Cohen's kappa; weights None, "linear" or "quadratic" (distance
                                         between category values, as statsmodels defines it)
    fleiss_kappa(subjects)               Fleiss' kappa, each subject rated by the same number of raters
    spearman(x, y)                       Spearman's rho (scipy), ties given mean ranks
    confusion(a, b, categories)          the table of a's category (rows) against b's (columns)
    permutation_test(clusters, ...)      two systems' mean ratings compared, labels permuted within each
                                         item's cluster of ratings (seeded, bounded)
    holm(p_values)                       Holm's step-down adjustment (statsmodels)

The kappas and rho come from statsmodels and scipy. What they return as NaN (or warn about) is checked
here first and reported as an Estimate with value None and the reason: for instance, when both raters
gave one same label to every item, chance agreement is 1 and kappa is 0/0, undefined.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Hashable, Sequence

import numpy as np

WEIGHTS = (None, "linear", "quadratic")
MAX_EXACT_CLUSTERS = 20  # 2**20 sign patterns at most are enumerated, whatever max_permutations allows


@dataclass(frozen=True)
class Estimate:
    """A statistic, or None with the reason it is undefined. n: the pairs (or subjects) it is computed on."""

    value: float | None
    n: int
    reason: str | None = None

    def as_dict(self) -> dict:
        return {"value": self.value, "n": self.n, "reason": self.reason}


def _pairs(a: Sequence, b: Sequence) -> list[tuple]:
    if len(a) != len(b):
        raise ValueError(f"paired ratings of unequal length: {len(a)} and {len(b)}")
    return [(x, y) for x, y in zip(a, b) if x is not None and y is not None]


def percent_agreement(a: Sequence, b: Sequence) -> Estimate:
    """Share of the items rated by both on which the two ratings are identical (None pairs are left out)."""
    pairs = _pairs(a, b)
    if not pairs:
        return Estimate(None, 0, "no item was rated by both")
    return Estimate(sum(x == y for x, y in pairs) / len(pairs), len(pairs))


def _categories(values: Sequence, categories: Sequence | None) -> list:
    if categories is not None:
        extra = [v for v in values if v not in set(categories)]
        if extra:
            raise ValueError(f"ratings {sorted(set(extra), key=str)} are not among the categories {list(categories)}")
        return list(categories)
    return sorted(set(values), key=lambda v: (isinstance(v, str), v))


def confusion(a: Sequence, b: Sequence, categories: Sequence | None = None) -> dict:
    """Counts of (a's category, b's category): rows follow a, columns b, both in `categories` order."""
    pairs = _pairs(a, b)
    cats = _categories([v for p in pairs for v in p], categories)
    index = {c: i for i, c in enumerate(cats)}
    counts = [[0] * len(cats) for _ in cats]
    for x, y in pairs:
        counts[index[x]][index[y]] += 1
    return {"categories": cats, "counts": counts, "n": len(pairs)}


def _disagreement_weights(cats: list, weights: str | None) -> np.ndarray:
    k = len(cats)
    if weights is None:
        return 1.0 - np.eye(k)
    if weights not in WEIGHTS:
        raise ValueError(f"unknown kappa weights '{weights}': use None, 'linear' or 'quadratic'")
    if not all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in cats):
        raise ValueError("weighted kappa needs numeric categories (the scale's values)")
    values = np.asarray(cats, float)
    span = values[-1] - values[0]
    distance = np.abs(values[:, None] - values[None, :]) / span
    return distance if weights == "linear" else distance ** 2


def cohen_kappa(a: Sequence, b: Sequence, categories: Sequence | None = None, weights: str | None = None) -> Estimate:
    """Cohen's kappa of two raters over the items both rated. `categories`: the scale's values in order
    (default: those seen, sorted); `weights`: None (unweighted), "linear" or "quadratic", by distance between
    the category values over the scale's span. Undefined (None) with no pairs or when chance disagreement
    is zero, i.e. both raters used one same single category throughout."""
    from statsmodels.stats.inter_rater import cohens_kappa as sm_kappa

    pairs = _pairs(a, b)
    if not pairs:
        return Estimate(None, 0, "no item was rated by both")
    table = confusion([x for x, _ in pairs], [y for _, y in pairs], categories)
    cats, counts = table["categories"], np.asarray(table["counts"], float)
    if len(cats) < 2:
        return Estimate(None, len(pairs), f"both raters gave every item the same rating ({cats[0]!r}): chance agreement is 1, kappa is undefined")
    w = _disagreement_weights(cats, weights)
    n = counts.sum()
    expected = np.outer(counts.sum(axis=1), counts.sum(axis=0)) / n ** 2
    if float((w * expected).sum()) <= 1e-15:
        only = cats[int(np.argmax(counts.sum(axis=1)))]
        return Estimate(None, len(pairs), f"both raters gave every item the same rating ({only!r}): chance agreement is 1, kappa is undefined")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if weights is None:
            result = sm_kappa(counts)
        else:
            result = sm_kappa(counts, weights=np.asarray(cats, float), wt=weights)
    value = float(result.kappa)
    if not math.isfinite(value):
        return Estimate(None, len(pairs), "kappa is undefined on these ratings")
    return Estimate(value, len(pairs))


def fleiss_kappa(subjects: Sequence[Sequence[Hashable]], categories: Sequence | None = None) -> Estimate:
    """Fleiss' kappa: `subjects` holds, per rated thing, the labels its raters gave (the same number of raters
    for every subject, at least two; who they are may differ). Undefined when every label is the same."""
    from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss

    subjects = [list(s) for s in subjects if s]
    if not subjects:
        return Estimate(None, 0, "no subject was rated")
    sizes = {len(s) for s in subjects}
    if len(sizes) != 1:
        raise ValueError(f"Fleiss' kappa needs the same number of ratings per subject; got {sorted(sizes)}")
    if sizes.pop() < 2:
        return Estimate(None, len(subjects), "each subject has only one rating")
    cats = _categories([v for s in subjects for v in s], categories)
    index = {c: i for i, c in enumerate(cats)}
    table = np.zeros((len(subjects), len(cats)))
    for row, labels in enumerate(subjects):
        for label in labels:
            table[row, index[label]] += 1
    shares = table.sum(axis=0) / table.sum()
    if float((shares ** 2).sum()) >= 1 - 1e-15:
        return Estimate(None, len(subjects), f"every rating is the same ({cats[int(np.argmax(shares))]!r}): chance agreement is 1, kappa is undefined")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        value = float(sm_fleiss(table, method="fleiss"))
    if not math.isfinite(value):
        return Estimate(None, len(subjects), "kappa is undefined on these ratings")
    return Estimate(value, len(subjects))


def spearman(x: Sequence[float | None], y: Sequence[float | None]) -> Estimate:
    """Spearman's rho over the pairs where both are known; None with fewer than three pairs or a constant side."""
    from scipy.stats import spearmanr

    pairs = _pairs(x, y)
    if len(pairs) < 3:
        return Estimate(None, len(pairs), f"Spearman's rho needs at least 3 pairs; there are {len(pairs)}")
    xs, ys = [float(p[0]) for p in pairs], [float(p[1]) for p in pairs]
    for name, side in (("first", xs), ("second", ys)):
        if len(set(side)) == 1:
            return Estimate(None, len(pairs), f"the {name} side is constant ({side[0]:g} throughout): rho is undefined")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rho = float(spearmanr(xs, ys).statistic)
    if not math.isfinite(rho):
        return Estimate(None, len(pairs), "rho is undefined on these values")
    return Estimate(rho, len(pairs))


def permutation_test(clusters: Sequence[tuple[Sequence[float], Sequence[float]]], *, max_permutations: int = 10_000,
                     seed: int = 0) -> dict:
    """Compare systems A and B by the difference of their mean ratings (all ratings pooled, A minus B).

    Each cluster is one item: (A's ratings of its answer, B's ratings of its answer). Under the null the two
    answers' system labels are exchangeable within an item, so a permutation swaps an item's two whole
    clusters of ratings, or not: the raters' ratings of one answer stay together (MCC clusters by answer).
    All 2**n swap patterns are enumerated when that is at most `max_permutations` (and n <= 20); otherwise
    `max_permutations` patterns are drawn with numpy's generator seeded by `seed`, and
    p = (1 + hits) / (1 + draws). Two-sided: a hit is a pattern whose |difference| >= the observed one.
    Items missing either side are left out."""
    if max_permutations < 1:
        raise ValueError("max_permutations must be at least 1")
    kept = [([float(v) for v in a], [float(v) for v in b]) for a, b in clusters if len(a) and len(b)]
    if not kept:
        return {"difference": None, "p_value": None, "clusters": 0, "permutations": 0, "exact": False,
                "mean_a": None, "mean_b": None, "reason": "no item has ratings of both systems"}
    sa = np.array([sum(a) for a, _ in kept])
    na = np.array([len(a) for a, _ in kept], float)
    sb = np.array([sum(b) for _, b in kept])
    nb = np.array([len(b) for _, b in kept], float)

    def difference(swap: np.ndarray) -> np.ndarray:  # swap: (patterns, n) of 0/1
        keep = 1 - swap
        a_sum, a_n = keep @ sa + swap @ sb, keep @ na + swap @ nb
        b_sum, b_n = keep @ sb + swap @ sa, keep @ nb + swap @ na
        return a_sum / a_n - b_sum / b_n

    observed = float(difference(np.zeros((1, len(kept))))[0])
    n = len(kept)
    exact = n <= MAX_EXACT_CLUSTERS and 2 ** n <= max_permutations
    if exact:
        patterns = ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1).astype(float)
    else:
        patterns = np.random.default_rng(seed).integers(0, 2, size=(max_permutations, n)).astype(float)
    diffs = difference(patterns)
    hits = int(np.sum(np.abs(diffs) >= abs(observed) - 1e-12))
    p = hits / len(patterns) if exact else (1 + hits) / (1 + len(patterns))
    return {"difference": observed, "p_value": float(min(1.0, p)), "clusters": n, "permutations": int(len(patterns)), "exact": exact,
            "mean_a": float(sa.sum() / na.sum()), "mean_b": float(sb.sum() / nb.sum()), "reason": None}


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values (statsmodels' multipletests), None kept where a test had no p-value."""
    from statsmodels.stats.multitest import multipletests

    known = [(i, p) for i, p in enumerate(p_values) if p is not None]
    out: list[float | None] = [None] * len(p_values)
    if known:
        adjusted = multipletests([p for _, p in known], method="holm")[1]
        for (i, _), q in zip(known, adjusted):
            out[i] = float(q)
    return out


__all__ = ["Estimate", "cohen_kappa", "confusion", "fleiss_kappa", "holm", "percent_agreement", "permutation_test", "spearman"]
