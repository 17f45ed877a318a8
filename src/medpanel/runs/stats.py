"""Statistics for repeated runs and paired comparisons between systems.

Every function wraps scipy or statsmodels rather than re-deriving the maths, returns a small frozen
dataclass with `.to_dict()` (plain JSON: no numpy types, no NaN), and handles degenerate input
(no values, one value, all values equal, no discordant pairs) with a stated result and a `note`
saying why. Everything random takes a `seed` and gives the same answer for the same seed.

What each test is for, and where the report uses it, is written up in docs/statistics.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
from scipy import stats as sps

from medpanel.errors import UsageError
from medpanel.scoring.metrics import MetricKind

DEFAULT_CONFIDENCE = 0.95


# ---------------------------------------------------------------- results


def _plain(value: Any) -> Any:
    """Numpy scalars to Python; NaN and infinities to None, so the JSON stays strict."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass(frozen=True)
class Interval:
    """A point estimate with its two-sided interval. `low`/`high` are None when no interval exists."""

    estimate: float | None
    low: float | None
    high: float | None
    method: str
    n: int
    confidence: float = DEFAULT_CONFIDENCE
    note: str = ""

    def to_dict(self) -> dict:
        return _plain(asdict(self))


@dataclass(frozen=True)
class TestResult:
    """A hypothesis test's statistic and two-sided p-value; `details` holds what it was computed from."""

    __test__ = False  # not a pytest test class, despite the name

    statistic: float | None
    p_value: float | None
    method: str
    n: int
    note: str = ""
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return _plain(asdict(self))


@dataclass(frozen=True)
class PairwiseResult:
    """One pair within a Friedman follow-up: the raw Wilcoxon result and its Bonferroni-adjusted p."""

    a: str
    b: str
    test: TestResult
    p_adjusted: float | None

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "p_adjusted": _plain(self.p_adjusted), **self.test.to_dict()}


@dataclass(frozen=True)
class FriedmanResult:
    overall: TestResult
    pairwise: list[PairwiseResult]

    def to_dict(self) -> dict:
        return {"overall": self.overall.to_dict(), "pairwise": [p.to_dict() for p in self.pairwise]}


# ---------------------------------------------------------------- input checks


def _values(values: Sequence[float], what: str = "values") -> np.ndarray:
    arr = np.asarray(list(values), dtype=float)
    if arr.ndim != 1 or not np.all(np.isfinite(arr)):
        raise UsageError(f"The {what} must be a flat list of finite numbers.", "Drop missing (None/NaN) scores before computing statistics.")
    return arr


def _paired(a: Sequence[float], b: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x, y = _values(a, "first sample"), _values(b, "second sample")
    if len(x) != len(y):
        raise UsageError(f"Paired samples differ in length ({len(x)} and {len(y)}).", "Pair the two systems on the items they share.")
    return x, y


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise UsageError(f"Confidence {confidence} is not between 0 and 1.", "Use e.g. 0.95 for a 95% interval.")


def _statsmodels(feature: str):
    # statsmodels is a core dependency (pyproject.toml): no extra to name, no install hint to give.
    from statsmodels.stats import contingency_tables as tables
    from statsmodels.stats import multitest

    return tables, multitest


# ---------------------------------------------------------------- intervals


def mean_t_interval(values: Sequence[float], confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """Mean with a Student-t interval (mean ± t_{n-1} · s/√n).

    n=0: no estimate. n=1: the value, no interval (one value has no spread). All values equal: the
    interval collapses to the mean (s = 0), said in the note.
    """
    _check_confidence(confidence)
    x = _values(values)
    n = len(x)
    method = "student-t"
    if n == 0:
        return Interval(None, None, None, method, 0, confidence, "no values")
    mean = float(np.mean(x))
    if n == 1:
        return Interval(mean, None, None, method, 1, confidence, "one value: no spread to build an interval from")
    sem = float(sps.sem(x))
    if sem == 0:
        return Interval(mean, mean, mean, method, n, confidence, "all values equal: zero spread, the interval is the mean itself")
    low, high = sps.t.interval(confidence, n - 1, loc=mean, scale=sem)
    return Interval(mean, float(low), float(high), method, n, confidence)


def _binomial_interval(k: int, n: int, confidence: float, method: str, label: str) -> Interval:
    _check_confidence(confidence)
    if isinstance(k, bool) or isinstance(n, bool) or int(k) != k or int(n) != n or not 0 <= k <= n:
        raise UsageError(f"A proportion needs whole counts 0 <= k <= n; got k={k}, n={n}.", "Pass the number of successes and of trials.")
    k, n = int(k), int(n)
    if n == 0:
        return Interval(None, None, None, label, 0, confidence, "no trials")
    ci = sps.binomtest(k, n).proportion_ci(confidence_level=confidence, method=method)
    return Interval(k / n, float(ci.low), float(ci.high), label, n, confidence)


def clopper_pearson(k: int, n: int, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """Exact (Clopper–Pearson) interval for k successes in n trials: beta quantiles, conservative.

    k=0 gives low 0 and k=n gives high 1 exactly. n=0: no estimate.
    """
    return _binomial_interval(k, n, confidence, "exact", "clopper-pearson")


def wilson(k: int, n: int, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """Wilson score interval (no continuity correction): stays inside [0, 1] and honest near 0 and 1."""
    return _binomial_interval(k, n, confidence, "wilson", "wilson")


def bootstrap_interval(
    values: Sequence[float],
    statistic: Callable = np.mean,
    resamples: int = 10_000,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Interval:
    """Non-parametric bootstrap interval by the percentile method, seeded.

    Resamples `values` with replacement `resamples` times (numpy Generator seeded with `seed`) and
    takes the (1-c)/2 and (1+c)/2 quantiles of the statistic. For a paired comparison pass the
    per-item differences. n=0: no estimate; n=1 or all values equal: every resample is the same
    data, so there is no interval (n=1) or it is the single value (all equal), said in the note.
    """
    _check_confidence(confidence)
    if resamples < 1:
        raise UsageError(f"resamples={resamples} is not positive.", "Use e.g. 10000 resamples.")
    x = _values(values)
    n = len(x)
    method = f"bootstrap percentile ({resamples} resamples, seed {seed})"
    if n == 0:
        return Interval(None, None, None, method, 0, confidence, "no values")
    estimate = float(statistic(x))
    if n == 1:
        return Interval(estimate, None, None, method, 1, confidence, "one value: resampling cannot show any spread")
    if np.all(x == x[0]):
        return Interval(estimate, estimate, estimate, method, n, confidence, "all values equal: every resample gives the same statistic")
    result = sps.bootstrap((x,), statistic, n_resamples=resamples, confidence_level=confidence, method="percentile",
                           rng=np.random.default_rng(seed))
    return Interval(estimate, float(result.confidence_interval.low), float(result.confidence_interval.high), method, n, confidence)


def clipped_mean_bootstrap(values: Sequence[float], clip: tuple[float, float], resamples: int = 10_000, seed: int = 0,
                           confidence: float = DEFAULT_CONFIDENCE, clusters: Sequence[Hashable] | None = None) -> Interval:
    """The mean clipped to `clip`, with a seeded percentile bootstrap of that clipped mean: HealthBench's
    score. The estimate is always the clipped mean of every value (simple-evals' number, repeats included).

    `clusters` (one label per value, e.g. the example id of each example x repeat) makes the bootstrap
    resample whole clusters, so an example's repeats stay together and are not counted as independent
    evidence; each resample's statistic is the clipped mean of all the values it drew. Resamples are drawn
    in blocks (numpy Generator seeded with `seed`) of at most ~2 million indices. The note gives the
    bootstrap standard deviation (population, of the clipped means), the spread simple-evals reports."""
    _check_confidence(confidence)
    if resamples < 1:
        raise UsageError(f"resamples={resamples} is not positive.", "Use e.g. 10000 resamples.")
    x = _values(values)
    lo, hi = clip
    if clusters is None:
        sums, counts, what = x, None, f"{resamples} resamples"
    else:
        labels = list(clusters)
        if len(labels) != len(x):
            raise UsageError(f"{len(labels)} cluster labels for {len(x)} values.", "Give one cluster label (e.g. the example id) per value.")
        index = {g: k for k, g in enumerate(dict.fromkeys(labels))}  # first-seen order: no dependence on hashing
        at = np.fromiter((index[g] for g in labels), dtype=np.int64, count=len(labels))
        sums, counts = np.bincount(at, weights=x, minlength=len(index)), np.bincount(at, minlength=len(index)).astype(float)
        what = f"{resamples} resamples of {len(index)} clusters with their values together"
    method = f"bootstrap percentile of the clipped mean ({what}, seed {seed})"
    n, k = len(x), len(sums)
    if n == 0:
        return Interval(None, None, None, method, 0, confidence, "no values")
    estimate = float(np.clip(np.mean(x), lo, hi))
    if k == 1:
        return Interval(estimate, None, None, method, n, confidence, "one value: resampling cannot show any spread" if n == 1
                        else "one cluster: resampling clusters cannot show any spread")
    rng, drawn = np.random.default_rng(seed), np.empty(resamples)
    block = max(1, 2_000_000 // k)
    for start in range(0, resamples, block):
        picks = rng.integers(0, k, size=(min(block, resamples - start), k))
        total = np.take(sums, picks).sum(axis=1)  # np.take: faster than fancy indexing on this shape
        drawn[start:start + len(picks)] = total / (k if counts is None else np.take(counts, picks).sum(axis=1))
    np.clip(drawn, lo, hi, out=drawn)
    low, high = np.quantile(drawn, [(1 - confidence) / 2, (1 + confidence) / 2])
    return Interval(estimate, float(low), float(high), method, n, confidence, f"bootstrap std {float(np.std(drawn)):.4f}")


def metric_interval(values: Sequence[float], kind: MetricKind, confidence: float = DEFAULT_CONFIDENCE, seed: int = 0) -> Interval:
    """A score's mean with the interval its declared kind calls for: the one function behind `show`,
    `report` and `judge run` (docs/statistics.md, "Which interval").

    proportion: Wilson on the 0/1 outcomes. A clipped mean: the bootstrap above, `kind.resamples` draws
    seeded with `seed` (the only kind that draws at random). count and mean: Student t. scale [lo, hi]: Student t
    clipped to the range (a mean of 1-5 scores cannot pass 5). The values never choose the kind; where
    they contradict it (a proportion with a 0.5, a scale value out of range) the note says so and the
    interval is the plain Student t, unclipped, so the mismatch shows instead of being hidden.
    """
    x = _values(values)
    if kind.clip is not None:
        return clipped_mean_bootstrap(x, kind.clip, resamples=kind.resamples, seed=seed, confidence=confidence)
    if kind.kind == "proportion":
        if np.isin(x, (0.0, 1.0)).all():
            return wilson(int(x.sum()), len(x), confidence)
        return _noted(mean_t_interval(x, confidence), "declared a 0/1 proportion but has other values: Student t, check the declaration")
    return bounded_t_interval(x, kind, confidence)


def bounded_t_interval(values: Sequence[float], kind: MetricKind, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """Student t, clipped to the kind's range where it has one (proportions and scales). Also the
    interval of per-repeat means, whose values are means even when the items were 0/1."""
    x = _values(values)
    interval = mean_t_interval(x, confidence)
    bounds = kind.bounds
    if bounds is None:
        return _noted(interval, "" if kind.declared else "undeclared metric: treated as an unbounded mean")
    lo, hi = bounds
    if len(x) and (x.min() < lo or x.max() > hi):
        return _noted(interval, f"values outside the declared range [{lo:g}, {hi:g}]: not clipped, check the declaration")
    low, high, clipped = interval.low, interval.high, False
    if low is not None and high is not None:
        low, high = max(low, lo), min(high, hi)
        clipped = (low, high) != (interval.low, interval.high)
    return Interval(interval.estimate, low, high, f"student-t clipped to [{lo:g}, {hi:g}]", interval.n, confidence,
                    _join(interval.note, f"clipped to [{lo:g}, {hi:g}]" if clipped else ""))


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def _noted(interval: Interval, note: str) -> Interval:
    return Interval(interval.estimate, interval.low, interval.high, interval.method, interval.n, interval.confidence,
                    _join(interval.note, note))


# ---------------------------------------------------------------- paired tests


def paired_t_test(a: Sequence[float], b: Sequence[float]) -> TestResult:
    """Two-sided paired Student t-test on a - b (e.g. matched runs, or the items two systems share).

    n<2: no test. All differences zero: t = 0, p = 1 (the systems agree everywhere). All differences
    equal but non-zero: zero variance makes t infinite, so no p is given; use the sign-based tests.
    """
    x, y = _paired(a, b)
    d = x - y
    n = len(d)
    method = "paired t-test"
    details = {"mean_difference": float(d.mean()) if n else None}
    if n < 2:
        return TestResult(None, None, method, n, "fewer than two pairs: no test", details)
    if np.all(d == 0):
        return TestResult(0.0, 1.0, method, n, "all differences are zero", details)
    if np.all(d == d[0]):
        return TestResult(None, None, method, n, f"every difference equals {d[0]:g}: zero variance, t is undefined", details)
    res = sps.ttest_rel(x, y)
    return TestResult(float(res.statistic), float(res.pvalue), method, n, "", {**details, "df": n - 1})


def mcnemar_exact(a_correct: Sequence[int | bool], b_correct: Sequence[int | bool]) -> TestResult:
    """Exact McNemar test for paired 0/1 outcomes: a two-sided binomial test on the discordant pairs.

    b = items A got right and B wrong, c = the reverse; p = min(1, 2·P(X ≤ min(b, c))), X ~ Bin(b+c, ½)
    (statsmodels' mcnemar(exact=True)). The statistic is min(b, c). No discordant pairs: p = 1.
    """
    x, y = _paired(a_correct, b_correct)
    if not (np.isin(x, (0, 1)).all() and np.isin(y, (0, 1)).all()):
        raise UsageError("McNemar's test needs 0/1 outcomes.", "Use the paired t or Wilcoxon test for graded scores.")
    tables, _ = _statsmodels("McNemar's exact test")
    both = int(np.sum((x == 1) & (y == 1)))
    only_a = int(np.sum((x == 1) & (y == 0)))
    only_b = int(np.sum((x == 0) & (y == 1)))
    neither = int(np.sum((x == 0) & (y == 0)))
    details = {"both_right": both, "only_a_right": only_a, "only_b_right": only_b, "both_wrong": neither}
    method = "McNemar exact (binomial on discordant pairs)"
    if only_a + only_b == 0:
        return TestResult(0.0, 1.0, method, len(x), "no discordant pairs: the systems agree on every item", details)
    res = tables.mcnemar([[both, only_a], [only_b, neither]], exact=True)
    return TestResult(float(res.statistic), float(min(1.0, res.pvalue)), method, len(x), "", details)


def wilcoxon_signed_rank(a: Sequence[float], b: Sequence[float]) -> TestResult:
    """Two-sided Wilcoxon signed-rank test on a - b; zero differences are dropped (Wilcoxon's rule).

    scipy picks the p-value: the exact distribution when n ≤ 50 with no ties or zeros; with ties or
    zeros, exact by enumerating every sign flip when n ≤ 13; otherwise the normal approximation.
    `method` says which was used. No pairs or all differences zero: statistic 0, p = 1.
    """
    x, y = _paired(a, b)
    d = x - y
    nonzero = d[d != 0]
    details = {"median_difference": float(np.median(d)) if len(d) else None, "nonzero_pairs": len(nonzero)}
    if len(nonzero) == 0:
        note = "no pairs" if len(d) == 0 else "all differences are zero"
        return TestResult(0.0 if len(d) else None, 1.0 if len(d) else None, "Wilcoxon signed-rank", len(d), note, details)
    ties = len(nonzero) != len(d) or len(np.unique(np.abs(nonzero))) != len(nonzero)
    if len(d) <= 50 and not ties:
        how = "exact"
    elif len(d) <= 13:
        how = "exact: all sign flips enumerated, as there are ties or zeros"
    else:
        how = "normal approximation"
    res = sps.wilcoxon(x, y, zero_method="wilcox", alternative="two-sided", method="auto")
    return TestResult(float(res.statistic), float(res.pvalue), f"Wilcoxon signed-rank ({how})", len(d), "", details)


def friedman_with_bonferroni(scores: dict[str, Sequence[float]]) -> FriedmanResult:
    """Friedman test across ≥3 systems scored on the same items, then pairwise Wilcoxon tests with
    Bonferroni-adjusted p-values (p × number of pairs, capped at 1; statsmodels' multipletests).

    `scores` maps each system to its per-item scores, in the same item order. Fewer than two items:
    no overall test. Every item tied across all systems: chi² = 0, p = 1.
    """
    names = list(scores)
    if len(names) < 3:
        raise UsageError(f"The Friedman test needs at least 3 systems; got {len(names)}.", "Compare two systems with a paired test instead.")
    columns = [_values(scores[name], f"scores of {name}") for name in names]
    n = len(columns[0])
    if any(len(c) != n for c in columns):
        raise UsageError("Every system needs a score on the same items for the Friedman test.", "Keep only the items all systems share.")
    _, multitest = _statsmodels("Bonferroni-adjusted pairwise comparisons")
    method = "Friedman chi-square"
    matrix = np.column_stack(columns) if n else np.empty((0, len(names)))
    details = {"systems": names, "mean_ranks": None}
    if n < 2:
        overall = TestResult(None, None, method, n, "fewer than two items: no test", details)
    elif np.all(matrix == matrix[:, :1]):
        overall = TestResult(0.0, 1.0, method, n, "every item scored the same by all systems", details)
    else:
        res = sps.friedmanchisquare(*columns)
        ranks = np.apply_along_axis(sps.rankdata, 1, matrix).mean(axis=0)
        details = {"systems": names, "mean_ranks": [float(r) for r in ranks]}
        overall = TestResult(float(res.statistic), float(res.pvalue), method, n, "", {**details, "df": len(names) - 1})
    pairs = list(combinations(range(len(names)), 2))
    tests = [wilcoxon_signed_rank(columns[i], columns[j]) for i, j in pairs]
    raw = [t.p_value for t in tests]
    adjusted: list[float | None] = [None] * len(raw)
    known = [k for k, p in enumerate(raw) if p is not None]
    if known:
        corrected = multitest.multipletests([raw[k] for k in known], method="bonferroni")[1]
        for k, p in zip(known, corrected):
            adjusted[k] = float(p)
    pairwise = [PairwiseResult(names[i], names[j], t, p) for (i, j), t, p in zip(pairs, tests, adjusted)]
    return FriedmanResult(overall, pairwise)


def permutation_test_clustered(
    a: Sequence[float],
    b: Sequence[float],
    clusters: Sequence[Hashable],
    resamples: int = 10_000,
    seed: int = 0,
) -> TestResult:
    """Paired permutation test on the mean difference a - b when observations come in clusters
    (several repeats of one item, several raters of one answer).

    Under the null hypothesis the two systems are exchangeable on each item, so the sign of a whole
    cluster's differences may be flipped, never the sign of one repeat alone: repeats of an item are
    not treated as independent. The test statistic is the mean difference over all observations;
    since it is proportional to the sum of the cluster sums, flipping signs of cluster sums with
    scipy's permutation_test (paired 'samples' permutations) is the same test. With 2^K ≤ resamples
    (K clusters) every sign pattern is enumerated and p is exact; otherwise `resamples` random
    patterns are drawn from a generator seeded with `seed`. Two-sided p = min(1, 2·min(P(T* ≤ T),
    P(T* ≥ T))). All differences zero: p = 1. Fewer than one cluster: no test.
    """
    x, y = _paired(a, b)
    groups = list(clusters)
    if len(groups) != len(x):
        raise UsageError(f"{len(groups)} cluster labels for {len(x)} pairs.", "Give one cluster label (e.g. the item id) per pair.")
    if resamples < 1:
        raise UsageError(f"resamples={resamples} is not positive.", "Use e.g. 10000 resamples.")
    d = x - y
    order = list(dict.fromkeys(groups))  # first-seen order, so results do not depend on hashing
    index = {g: k for k, g in enumerate(order)}
    sums_a = np.zeros(len(order))
    sums_b = np.zeros(len(order))
    for xi, yi, g in zip(x, y, groups):
        sums_a[index[g]] += xi
        sums_b[index[g]] += yi
    n, k = len(d), len(order)
    details = {"mean_difference": float(d.mean()) if n else None, "clusters": k}
    if n == 0:
        return TestResult(None, None, "clustered sign-flip permutation test", 0, "no pairs", details)
    exact = 2 ** k <= resamples
    method = (f"clustered sign-flip permutation test (exact, all 2^{k} sign patterns)" if exact
              else f"clustered sign-flip permutation test ({resamples} random sign patterns, seed {seed})")
    if np.all(sums_a == sums_b):
        return TestResult(0.0, 1.0, method, n, "every cluster's differences sum to zero", details)
    if k == 1:  # scipy refuses one observation; its two sign patterns are T and -T, so p = 1 exactly
        return TestResult(float(d.mean()), 1.0, method, n, "one cluster: its two sign patterns cannot tell the systems apart", details)

    def mean_difference(x_sums, y_sums, axis=-1):
        return np.sum(x_sums - y_sums, axis=axis) / n

    res = sps.permutation_test((sums_a, sums_b), mean_difference, permutation_type="samples", vectorized=True,
                               n_resamples=resamples, alternative="two-sided", rng=np.random.default_rng(seed))
    return TestResult(float(res.statistic), float(min(1.0, res.pvalue)), method, n, "", details)
