"""What a judge answers and what a judging gives back: the strict verdict schemas (no extra keys), the
JudgeResult every rubric returns in either mode, and how results are recorded and merged into scores."""

from __future__ import annotations

from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, create_model

from medpanel.errors import UsageError
from medpanel.models.base import Model, Reply
from medpanel.scoring.reward import DIMENSIONS
from medpanel.transcript import Transcript

NO_CONCLUSION = "The response has no conclusion to judge: a format failure, scored at the floor of the scale."
NO_ANSWER = "The response has no answer to judge: a format failure, scored at the floor of the scale."


# ---------------------------------------------------------------- verdicts (medpanel's mode; released.py has the release's shapes)

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EquivalenceVerdict(_Strict):
    clinical_equivalence_score: int = Field(ge=1, le=5)
    critical_error: bool
    unsupported_claim: bool
    rationale: str = Field(min_length=1, max_length=1000)


class AlignmentScore(_Strict):
    score: int = Field(ge=1, le=5)
    rationale: str = Field(min_length=1, max_length=1000)


class AlignmentVerdict(_Strict):
    conclusion_alignment: AlignmentScore  # nested as in the paper's released schema


ScopeLabel = Literal["positive", "negative", "absent"]


class DecisionScope(_Strict):
    """Per dimension: the reference decided to do something (positive), decided against it (negative),
    or said nothing decisive about it (absent, hence out of scope)."""

    therapy: ScopeLabel
    surgery: ScopeLabel
    next_action: ScopeLabel
    clinical_trial: ScopeLabel
    rationale: str = Field(default="", max_length=800)


class ConsistencyVerdict(_Strict):
    consistency: int = Field(ge=0, le=5)
    rationale: str = Field(min_length=1, max_length=1000)


def decisions_schema(scope: Mapping[str, str]) -> type[BaseModel]:
    """The scoring call's schema: an absent dimension can only be -1, one in scope only 1-5."""
    fields: dict[str, Any] = {
        dim: ((Literal[-1] if scope[dim] == "absent" else Literal[1, 2, 3, 4, 5]), ...) for dim in DIMENSIONS
    }
    fields["rationale"] = (str, Field(min_length=1, max_length=1200))
    return create_model("FourDecisions", __base__=_Strict, **fields)


# ---------------------------------------------------------------- verdict -> scores (one reading for both modes' shapes)

def equivalence_scores(verdict: Mapping[str, Any]) -> dict[str, float | None]:
    return {"clinical_equivalence": float(verdict["clinical_equivalence_score"]),
            "critical_error": float(verdict["critical_error"]), "unsupported_claim": float(verdict["unsupported_claim"])}


def alignment_scores(verdict: Mapping[str, Any]) -> dict[str, float | None]:
    return {"conclusion_alignment": float(verdict["conclusion_alignment"]["score"])}


# A conclusion-less response is floored at 1 on alignment in both modes, without a call.
ALIGNMENT_FLOOR = {"scores": {"conclusion_alignment": 1.0}, "verdict": {"conclusion_alignment": {"score": 1, "rationale": NO_CONCLUSION}}}


# ---------------------------------------------------------------- results

Status = Literal["ok", "format_failure", "failed"]

# The scores each rubric produces; a failed judgement reports all of them as None (unscored).
SCORE_NAMES: dict[str, tuple[str, ...]] = {
    "clinical_equivalence": ("clinical_equivalence", "critical_error", "unsupported_claim"),
    "conclusion_alignment": ("conclusion_alignment",),
    "four_decisions": ("four_decisions", *(f"decision_{d}" for d in DIMENSIONS)),
    "consistency": ("consistency",),
}

JudgeMode = Literal["medpanel", "released"]
JUDGE_MODES: tuple[str, ...] = ("medpanel", "released")


def check_mode(mode: str) -> str:
    if mode not in JUDGE_MODES:
        raise UsageError(f"Unknown judge mode '{mode}'.", "Use --judge-mode medpanel (the default) or released (the benchmark's own evaluation).")
    return mode


class JudgeResult(BaseModel):
    rubric: str  # clinical_equivalence | conclusion_alignment | four_decisions | consistency
    status: Status
    mode: str = "medpanel"  # medpanel | released | reward (the training reward's judges)
    scores: dict[str, float | None] = Field(default_factory=dict)
    verdict: dict[str, Any] | None = None  # the judge's validated reply
    scope: dict[str, str] | None = None  # four decisions only: the frozen scope used
    error: str | None = None  # why a failed judgement is unscored
    judge: str = ""
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0

    @property
    def rationale(self) -> str:
        if self.error:
            return self.error
        verdict = self.verdict or {}
        if "conclusion_alignment" in verdict:
            return verdict["conclusion_alignment"].get("rationale", "")
        return str(verdict.get("rationale", ""))

    def charge(self, reply: Reply) -> None:
        self.calls += 1
        self.input_tokens += reply.usage.input_tokens
        self.output_tokens += reply.usage.output_tokens
        self.cost_usd += reply.cost_usd
        self.latency_s += reply.latency_s

    def spent_like(self, other: "JudgeResult") -> None:
        """Take `other`'s accounting (the scope call a judging made on its behalf)."""
        self.calls, self.input_tokens, self.output_tokens = other.calls, other.input_tokens, other.output_tokens
        self.cost_usd, self.latency_s = other.cost_usd, other.latency_s

    def fail(self, error: str) -> None:
        """Unscored, with the reason: every score of the rubric (and any already set) becomes None, never a zero."""
        self.status, self.error = "failed", error
        self.scores = {name: None for name in SCORE_NAMES.get(self.rubric, ())} | {k: None for k in self.scores}


def failed(rubric: str, judge: Model, error: str, mode: str = "medpanel") -> JudgeResult:
    return JudgeResult(rubric=rubric, status="failed", mode=mode, judge=judge.id, error=error,
                       scores={name: None for name in SCORE_NAMES[rubric]})


def record(transcript: Transcript, result: JudgeResult, scorer: str | None = None) -> None:
    """Add a judgement to a transcript as a score event, with its tokens and cost. `scorer` (the scorer
    that made it) goes into the event's data, so judging a stored run again can replace its events."""
    data = result.model_dump(mode="json") | ({"scorer": scorer} if scorer else {})
    transcript.record("score", result.rationale, speaker="Judge", role=result.rubric, model=result.judge, phase="judge",
                      data=data, input_tokens=result.input_tokens, output_tokens=result.output_tokens,
                      latency_s=result.latency_s, cost_usd=result.cost_usd)


def merged_scores(results: Mapping[str, JudgeResult] | list[JudgeResult]) -> dict[str, float | None]:
    """All rubrics' scores in one dict, plus judge_failed (1.0 when any rubric is unscored)."""
    items = list(results.values()) if isinstance(results, Mapping) else list(results)
    scores: dict[str, float | None] = {}
    for result in items:
        scores.update(result.scores)
    scores["judge_failed"] = 1.0 if any(r.status == "failed" for r in items) else 0.0
    return scores
