"""HealthBench's scoring maths, pure (docs/healthbench.md): one example's scores from its criteria and which
of them the grader found met. The grader itself is healthbench_grader.py; the meta-evaluation healthbench_meta.py.

    example score   points of the met criteria / points of all positive criteria
                    (at most 1; below 0 when met penalties outweigh; never clipped per example)
    example tag     every tag of the example (theme:..., physician_agreed_category:...) scores the example score
    rubric tag      every tag of a criterion (axis:..., level:cluster, cluster:...) scores the same ratio over the
                    criteria that carry it, where those include a positive one
    run score       the mean over the examples that have the score, clipped to [0, 1] (the run's summary does this:
                    the metric's declared kind, scoring/metrics.py HEALTHBENCH_SCORE)

This is how HealthBench's released grader computes them (simple-evals' healthbench_eval.py). The consensus
subset's criteria carry `level:cluster`, so `healthbench.level:cluster` is the score on the consensus criteria
(on the consensus file, where every criterion is one, it equals `healthbench`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

SCORE = "healthbench"  # the example's score; its tags' scores are SCORE.TAG


class Graded(Protocol):
    points: float
    tags: list[str]


def score_name(tag: str) -> str:
    return f"{SCORE}.{tag}"


def points_ratio(criteria: Sequence[Graded], met: Sequence[bool]) -> float | None:
    """Points of the met criteria over the points of the positive ones; None when none is positive."""
    if len(criteria) != len(met):
        raise ValueError(f"{len(criteria)} criteria but {len(met)} grades")
    possible = sum(c.points for c in criteria if c.points > 0)
    if possible <= 0:
        return None
    return sum(c.points for c, m in zip(criteria, met) if m) / possible


def example_scores(criteria: Sequence[Graded], met: Sequence[bool], example_tags: Sequence[str] = ()) -> dict[str, float]:
    """The example's score, its example tags' scores and its rubric tags' scores (see the module doc).
    A rubric tag named like an example tag takes the rubric tag's score, as the release does."""
    overall = points_ratio(criteria, met)
    if overall is None:
        raise ValueError("no criterion has positive points")  # the loader refuses such an example
    scores = {SCORE: overall} | {score_name(tag): overall for tag in example_tags}
    by_tag: dict[str, list[int]] = {}
    for i, criterion in enumerate(criteria):
        for tag in criterion.tags:
            by_tag.setdefault(tag, []).append(i)
    for tag, indices in by_tag.items():
        ratio = points_ratio([criteria[i] for i in indices], [met[i] for i in indices])
        if ratio is not None:
            scores[score_name(tag)] = ratio
    return scores


def points_summary(criteria: Sequence[Graded], met: Sequence[bool]) -> dict[str, float | int]:
    """What the example's score is made of, for its transcript: points achieved and possible, criteria met."""
    return {"achieved_points": sum(c.points for c, m in zip(criteria, met) if m),
            "possible_points": sum(c.points for c in criteria if c.points > 0),
            "criteria_met": sum(1 for m in met if m), "criteria": len(criteria)}
