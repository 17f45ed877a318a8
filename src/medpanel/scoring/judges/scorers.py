"""The rubric judges as scorers the runner calls after a protocol's run (and `medpanel judge run` on a
stored one, through the same `score_outcome`): each reads the outcome and its transcript, calls the
panel's `judge` role, records every JudgeResult as a score event in `ctx.transcript`, and returns the
merged scores (judge_failed included). Options come from the run's settings: judge_mode,
judge_prompt_file(s), judge_max_tokens; the four-decision scopes from the run-wide scope book.

    BOARD_JUDGE       both board protocols: conclusion alignment, four decisions, consistency
    SPECIALIST_JUDGE  Specialist Turn: clinical equivalence to the real specialist's answer
    BERTSCORE         a board's conclusion against the real one (opt-in: settings.bertscore)
    BOARD_REWARD      the Dr.GRPO training reward (scoring/reward.py) with its own judges (opt-in: settings.reward,
                      a preset); `medpanel train grpo` scores its samples through this same scorer
"""

from __future__ import annotations

import asyncio
from typing import Any

from medpanel.cases.model import Case
from medpanel.scoring.judges.candidates import raw_answer, released_answer_text, response_text
from medpanel.scoring.judges.rubrics import judge_board, judge_equivalence
from medpanel.scoring.judges.schemas import merged_scores, record
from medpanel.errors import UsageError
from medpanel.scoring.board_format import score_format
from medpanel.scoring.judges.release_mode import reward_judgements
from medpanel.scoring.judges.scope import ScopeBook
from medpanel.scoring.metrics import MetricKind, metric_kind
from medpanel.scoring.reward import JudgeScores, RewardSettings, board_reward
from medpanel.scoring.scorer import ScoreContext, Scorer, Scores
from medpanel.scoring.text import bertscore


def _declared(*names: str) -> dict[str, MetricKind]:
    """Each score's kind as the metric table declares it (a `decision_*` family included)."""
    return {name: metric_kind(name) for name in names}


def _events(outcome: Any) -> Any:
    return (event.model_dump() for event in outcome.transcript.events)  # lazy: read only where needed


async def _judge_board(case: Case, outcome: Any, ctx: ScoreContext) -> Scores:
    settings = ctx.settings
    response = response_text({"answer": outcome.answer, "data": outcome.data}, _events(outcome))
    results = await judge_board(ctx.roles["judge"], case, response, scopes=ctx.shared("scope_book", ScopeBook),
                                prompt_files=settings.judge_prompt_files or None, max_tokens=settings.judge_max_tokens,
                                mode=settings.judge_mode)
    for result in results.values():
        record(ctx.transcript, result, scorer=BOARD_JUDGE.name)
    return merged_scores(results)


def specialist_candidate(outcome: Any, mode: str) -> str | None:
    """What the equivalence judge grades: medpanel's reading of the answer (the outcome's), or in
    released mode the release's reader on the raw reply recorded in the transcript."""
    if mode != "released":
        return outcome.answer
    raw = raw_answer(_events(outcome))
    return released_answer_text(raw) if raw is not None else outcome.answer


async def _judge_specialist(case: Case, outcome: Any, ctx: ScoreContext) -> Scores:
    settings = ctx.settings
    result = await judge_equivalence(ctx.roles["judge"], case, specialist_candidate(outcome, settings.judge_mode),
                                     prompt_file=settings.judge_prompt_file, max_tokens=settings.judge_max_tokens,
                                     mode=settings.judge_mode)
    record(ctx.transcript, result, scorer=SPECIALIST_JUDGE.name)
    return merged_scores([result])


async def _bertscore(case: Case, outcome: Any, ctx: ScoreContext) -> Scores:
    reference = case.reference.conclusion
    if not reference:
        return {}
    result = await asyncio.to_thread(bertscore, [outcome.answer or ""], [reference])
    # The note (which model, why not comparable to published numbers) stays with the score it explains.
    ctx.transcript.record("score", result.note, speaker="BERTScore", role="bertscore_f1", model=result.model, phase="score",
                          data={"bertscore_f1": result.f1[0], "layer": result.layer, "note": result.note, "scorer": BERTSCORE.name})
    return {"bertscore_f1": result.f1[0]}


async def _board_reward(case: Case, outcome: Any, ctx: ScoreContext) -> Scores:
    """The training reward of a board response. The format term is computed first and the judges are asked
    only when it leaves something to judge (the released reward's gate), so a failed format costs no call.
    A judge that cannot score leaves the reward unscored (None, reward_judge_failed = 1), never a zero.
    The outcome's data may carry `output_tokens`, `truncated` and `length_limit` for the overlength terms."""
    settings, data = ctx.settings, outcome.data or {}
    response = response_text({"answer": outcome.answer, "data": data}, _events(outcome))
    rules = RewardSettings.for_preset(settings.reward)
    tokens = dict(response_tokens=data.get("output_tokens") or None, truncated=bool(data.get("truncated")),
                  length_limit=data.get("length_limit"))
    fmt = score_format(response, settings=rules.format, **tokens)
    judged: JudgeScores | None = None
    floored = False
    if fmt.needs_judges:
        results = await reward_judgements(ctx.roles["judge"], case, response, scopes=ctx.shared("reward_scope_book", ScopeBook),
                                          prompt_files=settings.judge_prompt_files or None)
        for result in results.values():
            record(ctx.transcript, result, scorer=BOARD_REWARD.name)
        try:
            judged = JudgeScores.from_judgements(results)
        except UsageError:  # a judge failed for good: the reward is unknown, not low
            return {"reward": None, "reward_format": fmt.score, "reward_judged": 0.0, "reward_judge_failed": 1.0}
        if judged is None:  # the paper preset has no gate: a conclusion without a discussion block scores the judged terms' floor
            judged, floored = JudgeScores(alignment=1, decisions=0, consistency=0), True
    result = board_reward(response, judged, settings=rules, format_score=fmt)  # the format term computed above
    return {"reward": result.reward, "reward_match": result.match, "reward_format": result.format.score,
            "reward_alignment": result.alignment, "reward_decisions": result.decisions, "reward_consistency": result.consistency,
            "reward_judged": 1.0 if result.judged and not floored else 0.0, "reward_judge_failed": 0.0}


BOARD_JUDGE = Scorer("board_judge", score=_judge_board, role="judge",
                     metrics=_declared("conclusion_alignment", "four_decisions", "decision_*", "consistency", "judge_failed"))
SPECIALIST_JUDGE = Scorer("specialist_judge", score=_judge_specialist, role="judge",
                          metrics=_declared("clinical_equivalence", "critical_error", "unsupported_claim", "judge_failed"))
BERTSCORE = Scorer("bertscore", score=_bertscore, metrics=_declared("bertscore_f1"), wanted=lambda settings: settings.bertscore)
BOARD_REWARD = Scorer("board_reward", score=_board_reward, role="judge", wanted=lambda settings: getattr(settings, "reward", "off") != "off",
                      metrics=_declared("reward", "reward_match", "reward_format", "reward_alignment", "reward_decisions",
                                        "reward_consistency", "reward_judged", "reward_judge_failed"))
