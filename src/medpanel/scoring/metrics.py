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
    scale: a bounded score in [lo, hi] (Student t clipped to the range); mean: unbounded (Student t)."""

    kind: Kind
    lo: float | None = None
    hi: float | None = None
    declared: bool = True

    def __post_init__(self) -> None:
        if (self.kind == "scale") != (self.lo is not None and self.hi is not None):
            raise ValueError("a scale needs lo and hi, and only a scale has them")
        if self.kind == "scale" and not self.lo < self.hi:
            raise ValueError(f"scale range [{self.lo}, {self.hi}] is empty")

    @property
    def bounds(self) -> tuple[float, float] | None:
        """The range a mean of this metric must lie in, where there is one."""
        if self.kind == "proportion":
            return (0.0, 1.0)
        if self.kind == "scale":
            return (float(self.lo), float(self.hi))
        return None

    def describe(self) -> str:
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
}

# Families, tried in order after the exact names.
PATTERNS: list[tuple[str, MetricKind]] = [
    ("decision_*", scale(1, 5)),  # four-decision dimensions; out of scope is stored as None, not -1
    ("initial_accuracy.*", PROPORTION),  # one per seat
    ("initial_*", PROPORTION),  # MCC replay (replay/mcc.py): initial_SEAT, that seat's first answer right
    ("code_*", UNIT), ("category_*", UNIT), ("chapter_*", UNIT),  # ICD-10 precision/recall/f1/jaccard
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
