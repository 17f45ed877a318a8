"""Scorers: what turns a protocol's outcome into scores, as first-class objects the runner calls.

A scorer is `(case, outcome, context) -> scores`; what it wants in the item's transcript (a judge's
verdict, with its tokens and cost) it records with `context.transcript.record("score", ...)`. It declares its metrics and their kind
(proportion / count / bounded scale), which decides each mean's interval. A pure scorer needs no model;
a judging scorer names the panel role it calls (`role="judge"`).

The runner runs a protocol's scorers after `run` (runs/scoring.py), and `medpanel judge run` runs the
same judging scorers over a stored run afterwards, through the same function: both record alike.
Scorers read the outcome and its transcript, never a side channel written by another scorer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping

from medpanel.scoring.metrics import MetricKind
from medpanel.transcript import Transcript

if TYPE_CHECKING:
    from medpanel.cases.model import Case
    from medpanel.context import RunContext
    from medpanel.models.base import Model

Scores = dict[str, float | None]


@dataclass
class ScoreContext:
    """What a scorer may use besides the case and the outcome: the run's settings (plain data), the
    panel's named roles (the judge among them), the run context (its shared caches), and the transcript
    its score events go to (the item's own during a run; a fresh one that is appended to the stored
    events when judging afterwards)."""

    settings: Any = None
    roles: Mapping[str, "Model"] = field(default_factory=dict)
    run: "RunContext | None" = None
    transcript: Transcript = field(default_factory=Transcript)

    def shared(self, name: str, make: Callable[[], Any]) -> Any:
        """A run-wide object (e.g. the judges' scope book); without a run context, a fresh one."""
        return self.run.shared(name, make) if self.run is not None else make()


@dataclass(frozen=True)
class Scorer:
    """One scorer. `score` is async so judging and pure scorers share one path; `role` names the panel
    role it calls (None: pure); `wanted(settings)` says whether this run asked for it (BERTScore is opt-in);
    `applies(case)` whether it scores that case at all (HealthBench's grader: only a case with a rubric), and
    `covers` says which cases in words, for the refusal of `judge run` on a run where it applies to none.
    `unjudged` is the warning the runner gives once per run when the scorer applies but its role is not on
    the panel ("" for none: a run may be judged afterwards on purpose)."""

    name: str
    score: Callable[["Case", Any, ScoreContext], Awaitable[Scores]]
    metrics: Mapping[str, MetricKind]
    role: str | None = None
    wanted: Callable[[Any], bool] = lambda settings: True
    applies: Callable[["Case"], bool] = lambda case: True
    covers: str = "every case"
    unjudged: str = ""

    def declares(self, name: str) -> MetricKind | None:
        """The kind this scorer declares for score `name` (exact names, then `prefix*` families)."""
        if name in self.metrics:
            return self.metrics[name]
        for pattern, kind in self.metrics.items():
            if pattern.endswith("*") and name.startswith(pattern[:-1]):
                return kind
        return None


def pure(name: str, fn: Callable[["Case", Any], Scores], metrics: Mapping[str, MetricKind],
         wanted: Callable[[Any], bool] = lambda settings: True) -> Scorer:
    """A scorer from a plain function `(case, outcome) -> scores` that needs no model and adds no events."""

    async def score(case: "Case", outcome: Any, context: ScoreContext) -> Scores:
        return dict(fn(case, outcome))

    return Scorer(name=name, score=score, metrics=metrics, wanted=wanted)
