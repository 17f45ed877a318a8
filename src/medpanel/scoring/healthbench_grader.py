"""HealthBench's rubric grader as a scorer over the panel's `judge` role (docs/healthbench.md).

Each criterion of a conversation's rubric is judged on its own: one call, which answers
{"explanation": ..., "criteria_met": true|false} as HealthBench's grader does, through `model.complete`
with that schema (cached, budgeted, logged and re-asked a bounded number of times like every call). The
criteria of one response are judged concurrently, at most `grader_concurrency` at once. Every grade is a
score event in the item's transcript; the example's scores are scoring/healthbench.py's maths.

A grade that fails for good (a call error, a reply still invalid after the re-asks) leaves the example
unscored, with `judge_failed` 1 and the error in its event: never graded as not met.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from medpanel.cases.healthbench import MetaRow
from medpanel.cases.model import Case, Criterion, Turn
from medpanel.errors import ModelCallError
from medpanel.models.base import Model, Reply
from medpanel.scoring.healthbench import SCORE, example_scores, points_summary
from medpanel.scoring.judges.prompts import data_note
from medpanel.scoring.judges.tags import neutralise_tags, tagged
from medpanel.scoring.metrics import HEALTHBENCH_SCORE, HEALTHBENCH_TAG_SCORE, PROPORTION
from medpanel.scoring.scorer import ScoreContext, Scorer, Scores
from medpanel.transcript import Transcript

DEFAULT_CONCURRENCY = 8
GRADER_BUDGET = (256, 1024)  # max_tokens when grader_max_tokens is not set: a small judge, any other


class GraderSettings(BaseModel):
    """The grader's settings, part of every protocol it scores (single, longform): plain data."""

    grader_concurrency: int = Field(default=DEFAULT_CONCURRENCY, ge=1, le=64)  # criteria of one response judged at once
    grader_max_tokens: int | None = Field(default=None, ge=16)  # one grade; None: fit the judge


class CriterionGrade(BaseModel):
    """A grade, reason first as HealthBench's grader writes it."""

    model_config = ConfigDict(extra="forbid")

    explanation: str = Field(max_length=2000)
    criteria_met: bool


# The conversation and the response sit in the judges' untrusted-data tags (scoring/judges/tags.py), so a
# response cannot close its own section and speak to the grader; QUESTION holds the conversation.
GRADER_SYSTEM = (
    "You check one reply in a health conversation against one criterion from a rubric a physician wrote. "
    "Say only whether the reply meets the criterion; whether the reply is good overall is not your question.\n"
    "- A criterion made of several requirements is met only when the reply meets every one of them.\n"
    "- Where a criterion gives examples (\"such as\", \"for example\", \"including\"), the reply meets it by "
    "doing what the criterion asks, whether or not it uses those very examples.\n"
    "- A criterion with negative points describes something a reply should not do. Grade it the same way: "
    "criteria_met is true when the reply does that thing and false when it does not, so a good reply does not "
    "meet a criterion such as \"Recommends delaying care\".\n"
    "- Grade the final reply, in <CANDIDATE_RESPONSE>, in the light of the conversation before it, in <QUESTION>.\n"
    "Write a short explanation (one to three sentences), then criteria_met.\n"
    + data_note(("QUESTION", "CANDIDATE_RESPONSE"))
)


def grader_user_text(conversation: Sequence[Turn], response: str, criterion: str, points: float | None) -> str:
    chat = "\n\n".join(f"{t.role}: {t.text}" for t in conversation)
    worth = f" (worth {points:+g} points)" if points is not None else ""
    return (f"{tagged('QUESTION', chat)}\n\n{tagged('CANDIDATE_RESPONSE', response)}\n\n"
            f"CRITERION{worth}:\n{neutralise_tags(criterion).strip()}")


async def grade(judge: Model, conversation: Sequence[Turn], response: str, criterion: str, points: float | None,
                max_tokens: int | None = None) -> tuple[CriterionGrade | None, Reply | None, str | None]:
    """One criterion judged: (grade, reply, None), or (None, None, error) when the call failed for good."""
    messages = [{"role": "system", "content": GRADER_SYSTEM},
                {"role": "user", "content": grader_user_text(conversation, response, criterion, points)}]
    try:
        reply = await judge.complete(messages, schema=CriterionGrade, temperature=0.0,
                                     max_tokens=judge.token_budget(max_tokens, small=GRADER_BUDGET[0], full=GRADER_BUDGET[1]))
    except ModelCallError as exc:
        return None, None, f"{exc.kind}: {exc.problem}"
    return reply.parsed, reply, None


async def bounded(calls: Sequence[Any], limit: int) -> list[Any]:
    """Await coroutine functions (no arguments) with at most `limit` running; every call finishes before
    the first exception is raised (nothing is left running or spending)."""
    gate = asyncio.Semaphore(limit)

    async def one(call: Any) -> Any:
        async with gate:
            return await call()

    results = await asyncio.gather(*(one(c) for c in calls), return_exceptions=True)
    failure = next((r for r in results if isinstance(r, BaseException)), None)
    if failure is not None:
        raise failure  # a budget stop or a bug; a call's own failure is a result, not an exception
    return results


def record_grade(transcript: Transcript, index: int, criterion: Criterion, verdict: CriterionGrade | None, reply: Reply | None,
                 error: str | None, judge: Model) -> None:
    data = {"criterion_index": index, "criterion": criterion.criterion, "points": criterion.points, "tags": criterion.tags,
            "status": "failed" if verdict is None else "ok",
            "criteria_met": verdict.criteria_met if verdict else None, "explanation": verdict.explanation if verdict else None,
            **({"error": error} if error else {})}
    said = ("met" if verdict.criteria_met else "not met") if verdict else "unscored"
    text = f"{said} ({criterion.points:+g} points): {criterion.criterion}\n{verdict.explanation if verdict else error}"
    transcript.record("score", text, reply=reply, speaker="Judge", role="healthbench_criterion", model=judge.id, phase="judge", data=data)


async def _grade_example(case: Case, outcome: Any, ctx: ScoreContext) -> Scores:
    rubric = case.reference.rubric
    if not rubric:  # not a HealthBench case: nothing to grade
        return {}
    judge, settings = ctx.roles["judge"], ctx.settings
    response = (outcome.data or {}).get("response") or outcome.answer or ""  # the reply as the user reads it
    limit = getattr(settings, "grader_concurrency", DEFAULT_CONCURRENCY)
    max_tokens = getattr(settings, "grader_max_tokens", None)
    graded = await bounded([lambda c=c: grade(judge, case.conversation, response, c.criterion, c.points, max_tokens) for c in rubric], limit)
    for i, (criterion, (verdict, reply, error)) in enumerate(zip(rubric, graded)):
        record_grade(ctx.transcript, i, criterion, verdict, reply, error, judge)
    failed = sum(1 for verdict, _, _ in graded if verdict is None)
    if failed:
        ctx.transcript.record("score", f"Unscored: {failed} of {len(rubric)} criteria could not be graded.", speaker="Judge",
                              role=SCORE, model=judge.id, phase="judge", data={SCORE: None, "failed_criteria": failed})
        return {SCORE: None, "judge_failed": 1.0}
    met = [verdict.criteria_met for verdict, _, _ in graded]
    scores = example_scores(rubric, met, case.metadata.get("example_tags") or [])
    summary = points_summary(rubric, met)
    ctx.transcript.record("score", f"{scores[SCORE]:.3f}: {summary['achieved_points']:g} of {summary['possible_points']:g} points, "
                          f"{summary['criteria_met']} of {summary['criteria']} criteria met", speaker="Judge", role=SCORE,
                          model=judge.id, phase="judge", data={SCORE: scores[SCORE], **summary})
    return {**scores, "judge_failed": 0.0}


async def grade_meta_rows(judge: Model, rows: Sequence[MetaRow], concurrency: int = DEFAULT_CONCURRENCY, max_tokens: int | None = None,
                          on_graded: Callable[[], None] | None = None) -> list[tuple[CriterionGrade | None, str | None]]:
    """Every meta-evaluation row's criterion judged on its completion by the same call as a run's
    grading (its criterion has no points there), at most `concurrency` at once: (grade, error) each."""
    async def one(row: MetaRow) -> tuple[CriterionGrade | None, str | None]:
        verdict, _, error = await grade(judge, row.conversation, row.completion, row.criterion, None, max_tokens)
        if on_graded is not None:
            on_graded()
        return verdict, error

    return await bounded([lambda r=r: one(r) for r in rows], concurrency)


UNJUDGED = ("HealthBench conversations are graded by the rubric grader, which calls the panel's judge, and this run has none: "
            "no healthbench score will be recorded. Give one with --set judge=SPEC, or grade this run afterwards with "
            "`medpanel judge run {run} --judge SPEC`.")

HEALTHBENCH_GRADER = Scorer("healthbench", score=_grade_example, role="judge",
                            metrics={SCORE: HEALTHBENCH_SCORE, f"{SCORE}.*": HEALTHBENCH_TAG_SCORE, "judge_failed": PROPORTION},
                            applies=lambda case: bool(case.reference.rubric), covers="HealthBench conversations (cases with a rubric)",
                            unjudged=UNJUDGED)
