"""HealthBench's grader meta-evaluation, the maths pure (docs/healthbench.md): how well a grader's met /
not-met calls agree with physicians' on the meta-evaluation file, so a cheaper judge can be checked
against the reference grader before it stands in for it.

As HealthBench reports it (simple-evals' healthbench_meta_eval.py), agreement is pairwise: every grader
label is compared with every physician label on the same row (a completion and one criterion).

    precision of class c   among pairs where the grader said c, the share where the physician said c too
    recall of class c      among pairs where the physician said c, the share where the grader said c too
    F1 of class c          2PR / (P + R); 0 when P and R are both 0; none when either has no pairs
    macro F1               the mean of the met and not-met F1 (HealthBench's headline "balanced" F1)

computed over all rows and per row category (the consensus criterion). `against="majority"` (medpanel's
addition: the "agreement with the physician majority" the issue asked for) compares the grader with the
physicians' majority label instead; a row whose physicians split evenly has no majority and is left out, counted. A physician's own agreement is the same computation with
that physician as the rater and the other physicians on each row as the reference.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

Against = Literal["pairwise", "majority"]
AGAINST: tuple[str, ...] = ("pairwise", "majority")
CLASSES = (("met", True), ("not_met", False))


@dataclass
class Agreement:
    """Pair counts of one rater against its references: agree[c] / said[c] is the precision of class c,
    agree[c] / truth[c] its recall."""

    rows: int = 0
    pairs: int = 0
    said: dict[bool, int] = field(default_factory=lambda: {True: 0, False: 0})
    truth: dict[bool, int] = field(default_factory=lambda: {True: 0, False: 0})
    agree: dict[bool, int] = field(default_factory=lambda: {True: 0, False: 0})

    def add(self, label: bool, references: Sequence[bool]) -> None:
        self.rows += 1
        for reference in references:
            self.pairs += 1
            self.said[label] += 1
            self.truth[reference] += 1
            if label == reference:
                self.agree[label] += 1

    def precision(self, c: bool) -> float | None:
        return self.agree[c] / self.said[c] if self.said[c] else None

    def recall(self, c: bool) -> float | None:
        return self.agree[c] / self.truth[c] if self.truth[c] else None

    def f1(self, c: bool) -> float | None:
        p, r = self.precision(c), self.recall(c)
        if p is None or r is None:
            return None
        return 0.0 if p == 0 and r == 0 else 2 * (p * r) / (p + r)

    def macro(self, measure: str) -> float | None:
        """The mean over the two classes of precision, recall or f1; none when either is undefined."""
        values = [getattr(self, measure)(c) for _, c in CLASSES]
        return None if None in values else (values[0] + values[1]) / 2

    def summary(self) -> dict[str, float | int | None]:
        out: dict[str, float | int | None] = {"rows": self.rows, "pairs": self.pairs, "macro_f1": self.macro("f1"),
                                              "macro_precision": self.macro("precision"), "macro_recall": self.macro("recall")}
        for name, c in CLASSES:
            out |= {f"{name}_precision": self.precision(c), f"{name}_recall": self.recall(c), f"{name}_f1": self.f1(c)}
        return out


def majority(labels: Sequence[bool]) -> bool | None:
    """The label most physicians gave; None on an even split."""
    yes = sum(1 for v in labels if v)
    no = len(labels) - yes
    return None if yes == no else yes > no


def references(labels: Sequence[bool], against: Against) -> list[bool]:
    """What one rater's label is compared with on a row: every label, or their majority (none on a tie)."""
    if against == "pairwise":
        return list(labels)
    winner = majority(labels)
    return [] if winner is None else [winner]


@dataclass
class MetaReport:
    """A rater's agreement over all rows and per category, and rows left out (no majority)."""

    overall: Agreement
    by_category: dict[str, Agreement]
    without_majority: int = 0


def agreement(own: Sequence[bool], others: Sequence[Sequence[bool]], categories: Sequence[str], against: Against = "pairwise") -> MetaReport:
    """One rater's labels against the reference labels of the same rows (see the module doc)."""
    if not len(own) == len(others) == len(categories):
        raise ValueError("own labels, reference labels and categories must be aligned")
    overall, by_category, skipped = Agreement(), defaultdict(Agreement), 0
    for label, labels, category in zip(own, others, categories):
        refs = references(labels, against)
        if not refs:
            skipped += 1
            continue
        overall.add(label, refs)
        by_category[category].add(label, refs)
    return MetaReport(overall, dict(sorted(by_category.items())), skipped)


def physician_agreement(rows: Sequence[tuple[Sequence[bool], Sequence[str], str]], against: Against = "pairwise") -> dict[str, MetaReport]:
    """Each physician as the rater against the other physicians of every row they labelled; `rows` are
    (labels, physician ids, category). A row one physician labelled alone gives that physician nothing."""
    own: dict[str, list[bool]] = defaultdict(list)
    others: dict[str, list[list[bool]]] = defaultdict(list)
    categories: dict[str, list[str]] = defaultdict(list)
    for labels, physicians, category in rows:
        for i, physician in enumerate(physicians):
            rest = [*labels[:i], *labels[i + 1:]]
            if not rest:
                continue
            own[physician].append(labels[i])
            others[physician].append(rest)
            categories[physician].append(category)
    return {p: agreement(own[p], others[p], categories[p], against) for p in sorted(own)}


def mean_macro_f1(reports: Sequence[MetaReport], category: str | None = None) -> tuple[float | None, int]:
    """The mean macro F1 over the raters for whom it is defined (overall, or in one category), and how many."""
    values = []
    for report in reports:
        scope = report.overall if category is None else report.by_category.get(category)
        value = scope.macro("f1") if scope is not None else None
        if value is not None:
            values.append(value)
    return (sum(values) / len(values) if values else None), len(values)


def meta_report(grader: Sequence[bool | None], labels: Sequence[Sequence[bool]], physicians: Sequence[Sequence[str]],
                categories: Sequence[str], against: Against = "pairwise") -> dict:
    """The meta-evaluation as plain data: the grader's agreement overall and per category over the rows it
    graded (None: a row it could not grade), and beside it the physicians' own over every row (the mean over
    physicians of each one's macro F1 against the others): a grader's failures do not change the physicians'."""
    if not len(grader) == len(labels) == len(physicians) == len(categories):
        raise ValueError("grades, labels, physician ids and categories must be aligned")
    graded = [i for i, g in enumerate(grader) if g is not None]
    report = agreement([grader[i] for i in graded], [labels[i] for i in graded], [categories[i] for i in graded], against)  # type: ignore[misc]
    doctors = list(physician_agreement(list(zip(labels, physicians, categories)), against).values())
    mean, counted = mean_macro_f1(doctors)
    by_category = {}
    for category, scope in report.by_category.items():
        doctors_mean, doctors_counted = mean_macro_f1(doctors, category)
        by_category[category] = {**scope.summary(), "physicians_macro_f1": doctors_mean, "physicians": doctors_counted}
    return {"against": against, "grader": report.overall.summary(), "without_majority": report.without_majority,
            "physicians": {"macro_f1": mean, "physicians": counted}, "by_category": by_category}
