"""OpenTumorBoard's Dr.GRPO reward for Board Simulation, as a library function over plain numbers.

The judges are not called here: their results come in as numbers on the judges' own scales, and
this module normalises and combines them with the judge-free format term (board_format.py):

    alignment   = (conclusion-alignment score - 1) / 4        1..5  -> 0..1
    decisions   = weighted mean of the in-scope four-decision scores / 5, on the training
                  reward's 0-5 scale (0: decision left out or overturned; JudgeScores.from_judgements)
                  (therapy 1.00, surgery 1.25, next action 1.15, clinical trial 2.00;
                   a dimension scored -1 is out of scope; none in scope -> 0)   0..5 -> 0..1
    consistency = discussion-to-conclusion consistency / 5    0..5  -> 0..1
    support     = decisions * consistency
    match       = 0.40 * alignment + 0.35 * support + 0.25 * decisions
    reward      = match + 0.10 * format

Two presets (`RewardSettings.for_preset`):

* ``released_code`` - OpenTumorBoard's training/verl_otb/reward.py, quirks included (its loop
  scanner's block grid, Unicode turn digits; see board_format.FormatSettings). A truncated, severely looping
  or block-less response skips every judge: match = -0.20 and format takes a fixed failure score
  (-1, or -0.75 with one block missing), so its reward is -0.30 or -0.275.
* ``paper`` - the paper's appendix E.2. It names the terms and the normalisations above but not
  the weights of match and reward, so those are the released ones. Its format term scores six
  parts the paper lists (blocks in order, turn syntax, numbering, at least two roles with the
  Moderator first, a 2-4 sentence conclusion, no stray whitespace; equal weights, an assumption)
  and has no fail-closed gate: loops and length only subtract their penalties (floored at -1).
  A response without a conclusion gives the judges nothing to read; its judged terms sit at the
  floor of their scales (0), as the benchmark's evaluation scores a missing conclusion.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from medpanel.errors import UsageError
from medpanel.scoring.board_format import FormatScore, FormatSettings, Tokenizer, score_format

DIMENSIONS = ("therapy", "surgery", "next_action", "clinical_trial")
DIMENSION_WEIGHTS = {"therapy": 1.00, "surgery": 1.25, "next_action": 1.15, "clinical_trial": 2.00}


def decisions_mean(scores: Mapping[str, int | float | None], weights: Mapping[str, float] = DIMENSION_WEIGHTS) -> float | None:
    """Weighted mean, on the judge's 0-5 scale, of the four-decision scores in scope.

    A score of -1 (or None, or a missing dimension) is out of scope and leaves the denominator.
    Returns None when no dimension is in scope.
    """
    unknown = set(scores) - set(weights)
    if unknown:
        raise UsageError(f"Unknown decision dimensions {sorted(unknown)}.", f"Use: {', '.join(weights)}.")
    in_scope = {name: float(value) for name, value in scores.items() if value is not None and value != -1}
    for name, value in in_scope.items():
        if not 0 <= value <= 5:
            raise UsageError(f"Decision score {name}={value:g} is outside 0..5.", "Pass the judge's score, or -1 for out of scope.")
    total = sum(weights[name] for name in in_scope)
    return sum(weights[name] * value for name, value in in_scope.items()) / total if total else None


class JudgeScores(BaseModel):
    """The three judged numbers, each on its judge's own scale."""

    alignment: float = Field(ge=1, le=5, description="conclusion-alignment rubric, 1..5")
    decisions: float | None = Field(None, ge=0, le=5, description="weighted mean of in-scope decision scores, 0..5; None: none in scope")
    consistency: float = Field(ge=0, le=5, description="discussion-to-conclusion consistency, 0..5")


    @classmethod
    def from_judgements(cls, results: Mapping[str, Any]) -> "JudgeScores | None":
        """The three numbers from the training reward's own judges (`judges.release_mode.reward_judgements`),
        or None when the reward's gate called none. Their four-decision scale is 0-5 with 0 for a decision
        left out or overturned, so an overturned decision adds 0 to the decisions term; an evaluation rubric
        (1-5, medpanel or released mode) would have given it 1, i.e. 0.2, which is why those are refused."""
        wrong = sorted({getattr(r, "mode", None) for r in results.values()} - {"reward"})
        if wrong:
            raise UsageError(f"Reward terms need the training reward's judges, not {', '.join(map(str, wrong))}-mode judgements "
                             "(their four-decision scale is 1-5, the reward's is 0-5).",
                             "Judge the response with medpanel.scoring.judges.release_mode.reward_judgements.")
        if all(r.status == "format_failure" for r in results.values()):
            return None
        unscored = [name for name, r in results.items() if r.status != "ok"]
        if unscored:
            raise UsageError(f"The reward's judges could not score {', '.join(unscored)}: the reward of this response is unscored.",
                             "See each judgement's error; rerun when the judge answers.")
        scores = {k: v for r in results.values() for k, v in r.scores.items()}
        return cls(alignment=scores["conclusion_alignment"], decisions=scores["four_decisions"], consistency=scores["consistency"])


def normalise_alignment(score: float) -> float:
    return (score - 1.0) / 4.0


def normalise_decisions(mean: float | None) -> float:
    return 0.0 if mean is None else mean / 5.0


def normalise_consistency(score: float) -> float:
    return score / 5.0


class RewardSettings(BaseModel):
    preset: str = "released_code"
    alignment_weight: float = 0.40
    support_weight: float = 0.35
    decisions_weight: float = 0.25
    format_weight: float = 0.10
    invalid_match: float = -0.20  # match of a response the format term fails closed on (no judge called)
    format: FormatSettings = Field(default_factory=FormatSettings)

    @classmethod
    def for_preset(cls, name: str, **overrides) -> "RewardSettings":
        """A preset, with any field overridden: for_preset("paper", format_weight=0.2)."""
        return cls.model_validate({"preset": name, "format": FormatSettings.for_preset(name)} | overrides)


class Reward(BaseModel):
    reward: float
    match: float
    judged: bool                      # False: match came from the gate or the floor, not from judges
    alignment: float | None = None    # normalised terms, 0..1
    decisions: float | None = None
    consistency: float | None = None
    support: float | None = None
    format: FormatScore
    preset: str


def split_reference(reference: str) -> tuple[str | None, str]:
    """(discussion, conclusion) of a reference: tagged text with exactly one <conclusion> block
    (and at most one <discussion>), or plain text, which is taken as the conclusion itself."""
    conclusions = re.findall(r"<conclusion>\s*(.*?)\s*</conclusion>", reference or "", re.S)
    discussions = re.findall(r"<discussion>\s*(.*?)\s*</discussion>", reference or "", re.S)
    if not conclusions and not discussions:
        if not (reference or "").strip():
            raise UsageError("The reference is empty.", "Pass the board's recorded conclusion (and discussion, if tagged).")
        return None, reference.strip()
    if len(conclusions) != 1 or not conclusions[0] or len(discussions) > 1:
        raise UsageError("A tagged reference must hold exactly one non-empty <conclusion> block and at most one <discussion>.",
                         "Pass the recorded conclusion as plain text, or fix the reference's tags.")
    return (discussions[0] if discussions else None), conclusions[0]


def needs_judges(format_score: FormatScore) -> bool:
    """Whether the judges must be asked for this response (skip them when False)."""
    return format_score.needs_judges


def board_reward(
    response: str,
    judges: JudgeScores | None = None,
    *,
    reference: str | None = None,
    settings: RewardSettings | None = None,
    response_tokens: int | None = None,
    tokenizer: Tokenizer | None = None,
    length_limit: int | None = None,
    truncated: bool = False,
    format_score: FormatScore | None = None,
) -> Reward:
    """The reward of one Board Simulation response.

    `judges` may be None only for a response that needs none (see `needs_judges`); passing them for
    such a response is harmless, they are ignored. `reference`, when given, is checked to hold a
    conclusion the judges can read (`split_reference`). Token arguments: see board_format. `format_score`:
    the response's format term when the caller has already computed it under these settings.
    """
    s = settings or RewardSettings()
    if reference is not None:
        split_reference(reference)
    fmt = format_score if format_score is not None else score_format(
        response, settings=s.format, response_tokens=response_tokens, tokenizer=tokenizer, length_limit=length_limit, truncated=truncated)
    if fmt.failure is not None:
        match = s.invalid_match
        return Reward(reward=match + s.format_weight * fmt.score, match=match, judged=False, format=fmt, preset=s.preset)
    if fmt.conclusion is None:  # only reachable without the gate (paper preset): judged terms at their floor
        return Reward(reward=s.format_weight * fmt.score, match=0.0, judged=False, alignment=0.0, decisions=0.0,
                      consistency=0.0, support=0.0, format=fmt, preset=s.preset)
    if judges is None:
        raise UsageError("This response has both blocks, so its reward needs the judges' scores.",
                         "Pass judges=JudgeScores(alignment=..., decisions=..., consistency=...).")
    alignment = normalise_alignment(judges.alignment)
    decisions = normalise_decisions(judges.decisions)
    consistency = normalise_consistency(judges.consistency)
    support = decisions * consistency
    match = s.alignment_weight * alignment + s.support_weight * support + s.decisions_weight * decisions
    return Reward(reward=match + s.format_weight * fmt.score, match=match, judged=True, alignment=alignment,
                  decisions=decisions, consistency=consistency, support=support, format=fmt, preset=s.preset)
