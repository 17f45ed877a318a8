"""What kind of number each stored score is, which decides its interval (see docs/statistics.md).

The kind comes from the metric's declaration, never from the values a run happened to produce: a
1-5 judge score that came out 1 on every item is still a 1-5 scale, and a turn count that is always
1 is still a count. Names are those of the scores table; families share a pattern (`decision_*`).

A name declared nowhere gets `UNDECLARED`: an unbounded mean with a Student-t interval, marked as
undeclared wherever it is shown, so a missing declaration is visible instead of guessed around.

Kept free of runs/protocols/cli imports, so scorers can import it (later they may declare their
metrics on themselves and register them here).
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

Kind = Literal["proportion", "count", "scale", "mean"]


@dataclass(frozen=True)
class MetricKind:
    """proportion: a 0/1 outcome per item (Wilson); count: a whole number of things (Student t);
    scale: a bounded score in [lo, hi] (Student t clipped to the range); mean: unbounded (Student t).
    `clip` (a mean only): the reported mean is clipped to this range and its interval is a seeded bootstrap
    of the clipped mean, `resamples` draws (HealthBench's score, whose per-item values fall below 0)."""

    kind: Kind
    lo: float | None = None
    hi: float | None = None
    declared: bool = True
    clip: tuple[float, float] | None = None
    resamples: int = 10_000

    def __post_init__(self) -> None:
        if (self.kind == "scale") != (self.lo is not None and self.hi is not None):
            raise ValueError("a scale needs lo and hi, and only a scale has them")
        if self.kind == "scale" and not self.lo < self.hi:
            raise ValueError(f"scale range [{self.lo}, {self.hi}] is empty")
        if self.clip is not None and (self.kind != "mean" or not self.clip[0] < self.clip[1]):
            raise ValueError("only a mean is clipped, to a non-empty range")
        if self.resamples < 1:
            raise ValueError("a bootstrap needs at least one resample")

    @property
    def bounds(self) -> tuple[float, float] | None:
        """The range a mean of this metric must lie in, where there is one."""
        if self.kind == "proportion":
            return (0.0, 1.0)
        if self.kind == "scale":
            return (float(self.lo), float(self.hi))
        return None

    def describe(self) -> str:
        if self.clip is not None:
            return f"mean clipped to {self.clip[0]:g}-{self.clip[1]:g}"
        if self.kind == "scale":
            return f"scale {self.lo:g}-{self.hi:g}"
        return self.kind if self.declared else "undeclared (mean)"


PROPORTION = MetricKind("proportion")
COUNT = MetricKind("count")
MEAN = MetricKind("mean")
UNDECLARED = MetricKind("mean", declared=False)


def scale(lo: float, hi: float) -> MetricKind:
    return MetricKind("scale", lo, hi)


UNIT = scale(0, 1)  # a per-item share or similarity: precision, ROUGE-L, PICR (not a 0/1 outcome)
# HealthBench (scoring/healthbench.py): an example's score is at most 1 and below 0 when met penalties outweigh;
# the score reported is the mean clipped to [0, 1], as HealthBench reports it, with a bootstrap interval.
HEALTHBENCH_SCORE = MetricKind("mean", clip=(0.0, 1.0))
# Its ~70 tag scores (theme:..., axis:..., cluster:...) draw 1,000 resamples, as simple-evals' bootstrap does
# for every score: `show` on the 5,000-conversation file stays fast; the headline keeps 10,000 (docs/healthbench.md).
HEALTHBENCH_TAG_SCORE = MetricKind("mean", clip=(0.0, 1.0), resamples=1_000)

METRICS: dict[str, MetricKind] = {
    # multiple choice: single, vote, self-consistency, debate
    "accuracy": PROPORTION, "parsed": PROPORTION, "unanimous": PROPORTION, "tie": PROPORTION,
    "initial_consensus": PROPORTION, "consensus": PROPORTION, "initial_vote_accuracy": PROPORTION,
    "accuracy_tie_half": UNIT,  # a tie the gold answer is among scores 0.5
    "sample_accuracy": UNIT, "agreement": UNIT,
    "rounds_used": COUNT, "rounds": COUNT, "stance_shifts": COUNT, "shifts": COUNT,
    # board and board-live: format score (floor and failure scores reach -1), ROUGE-L, BERTScore (cosine)
    "format": scale(-1, 1), "format_exact": PROPORTION, "has_conclusion": PROPORTION, "turns": COUNT,
    "rouge_l": UNIT, "bertscore_f1": scale(-1, 1),
    "reward": MEAN,  # its range moves with the weight settings (docs/board_scoring.md)
    "reward_match": MEAN, "reward_format": scale(-1, 1), "reward_alignment": UNIT, "reward_decisions": UNIT,
    "reward_consistency": UNIT, "reward_judged": PROPORTION, "reward_judge_failed": PROPORTION,
    # rubric judges (scoring/judges.py)
    "clinical_equivalence": scale(1, 5), "conclusion_alignment": scale(1, 5), "four_decisions": scale(1, 5),
    "consistency": scale(0, 5), "critical_error": PROPORTION, "unsupported_claim": PROPORTION, "judge_failed": PROPORTION,
    # specialist turn
    "answered": PROPORTION, "format_ok": PROPORTION, "within_three_sentences": PROPORTION, "insufficient_context": PROPORTION,
    # consult (ICD-10)
    "finished": PROPORTION, "invalid_rate": UNIT, "n_predicted": COUNT, "n_gold": COUNT, "empty": PROPORTION,
    "questions": COUNT, "exchanges": COUNT,
    # OSCE: per-item rates, diagnosis match
    "picr": UNIT, "prqr": UNIT, "sda": UNIT, "pda": PROPORTION, "diagnosis_consensus": PROPORTION,
    # long form
    "reached_consensus": PROPORTION, "seats_credited": UNIT,
    # HealthBench rubric grading; its tags' scores are the `healthbench.*` family
    "healthbench": HEALTHBENCH_SCORE,
}

# Families, tried in order after the exact names.
PATTERNS: list[tuple[str, MetricKind]] = [
    ("decision_*", scale(1, 5)),  # four-decision dimensions; out of scope is stored as None, not -1
    ("initial_accuracy.*", PROPORTION),  # one per seat
    ("initial_*", PROPORTION),  # MCC replay (replay/mcc.py): initial_SEAT, that seat's first answer right
    ("code_*", UNIT), ("category_*", UNIT), ("chapter_*", UNIT),  # ICD-10 precision/recall/f1/jaccard
    ("healthbench.*", HEALTHBENCH_TAG_SCORE),  # by example tag (theme:...) and rubric tag (axis:..., level:cluster)
]

# Where a protocol uses a name for a different kind of number than the default.
BY_PROTOCOL: dict[str, dict[str, MetricKind]] = {
    "longform": {"consensus": UNIT},  # MCC's agreement score of the last round, not a 0/1 outcome
}


def metric_kind(name: str, protocol: str | None = None) -> MetricKind:
    """The declared kind of a score, or UNDECLARED (an unbounded mean, marked so) for an unknown name."""
    override = BY_PROTOCOL.get(protocol or "", {}).get(name)
    if override is not None:
        return override
    if name in METRICS:
        return METRICS[name]
    for pattern, kind in PATTERNS:
        if fnmatchcase(name, pattern):
            return kind
    return UNDECLARED
