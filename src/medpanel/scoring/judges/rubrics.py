"""The rubrics in medpanel's mode (released mode: release_mode.py), each a request built for the one
rubric runner (runner.py).

    clinical equivalence   Specialist Turn: an answer against the real specialist's answer (1-5,
                           plus critical_error and unsupported_claim flags)
    conclusion alignment   Board Simulation: a conclusion against the real board's conclusion (1-5)
    four decisions         therapy / surgery / next_action / clinical_trial, each 1-5 or -1 (out of
                           scope), combined as a weighted mean over the dimensions in scope
    consistency            does the candidate's own discussion support its conclusion (0-5)

The four-decision scope is decided from the reference conclusion alone, in a first call that never
sees the candidate, and frozen in a ScopeBook; the scoring call's schema then locks every absent
dimension to -1 and every dimension in scope to 1-5.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Mapping

from medpanel.cases.model import Case
from medpanel.models.base import Model
from medpanel.models.messages import Image
from medpanel.scoring.judges import prompts, release_mode
from medpanel.scoring.judges.candidates import split_response
from medpanel.scoring.judges.prompts import check_prompt_files, read_prompt_file
from medpanel.scoring.judges.runner import DEFAULT_MAX_TOKENS, ask, frozen_scope, judge_rubric, medpanel_request
from medpanel.scoring.judges.schemas import (ALIGNMENT_FLOOR, NO_ANSWER, NO_CONCLUSION, AlignmentVerdict, ConsistencyVerdict,
                                             DecisionScope, EquivalenceVerdict, JudgeMode, JudgeResult, alignment_scores,
                                             check_mode, decisions_schema, equivalence_scores, failed)
from medpanel.scoring.judges.scope import ScopeBook
from medpanel.scoring.judges.tags import UNTRUSTED_TAGS, evidence_text, tagged
# The four dimensions and OpenTumorBoard's weights for them (Appendix E.2: therapy 1.00, surgery 1.25,
# next action 1.15, clinical trial 2.00) come from the reward, so judge and reward cannot drift apart.
from medpanel.scoring.reward import DIMENSION_WEIGHTS as DECISION_WEIGHTS
from medpanel.scoring.reward import DIMENSIONS, decisions_mean

# ---------------------------------------------------------------- prompts (medpanel's own wording: prompts.py)

EQUIVALENCE_SYSTEM = prompts.equivalence(UNTRUSTED_TAGS)
ALIGNMENT_SYSTEM = prompts.alignment(UNTRUSTED_TAGS)
SCOPE_SYSTEM = prompts.scope(UNTRUSTED_TAGS)
DECISIONS_SYSTEM = prompts.decisions_locked(UNTRUSTED_TAGS)
CONSISTENCY_SYSTEM = prompts.consistency(UNTRUSTED_TAGS)

DEFAULT_PROMPTS = {"equivalence": EQUIVALENCE_SYSTEM, "alignment": ALIGNMENT_SYSTEM, "decisions": DECISIONS_SYSTEM,
                   "scope": SCOPE_SYSTEM, "consistency": CONSISTENCY_SYSTEM}


def system_prompt(rubric: str, prompt_files: Mapping[str, str | Path] | None = None) -> str:
    path = (prompt_files or {}).get(rubric)
    return read_prompt_file(path) if path else DEFAULT_PROMPTS[rubric]


def _system(rubric: str, prompt_file: str | Path | None) -> str:
    return system_prompt(rubric, {rubric: prompt_file} if prompt_file else None)


# ---------------------------------------------------------------- pure parts of the four decisions

def in_scope(scope: Mapping[str, str]) -> list[str]:
    return [dim for dim in DIMENSIONS if scope.get(dim, "absent") != "absent"]


def force_scope(scores: Mapping[str, int], scope: Mapping[str, str]) -> dict[str, int]:
    """Lock every dimension the reference leaves out of scope to -1, whatever the judge said about it."""
    return {dim: (-1 if scope.get(dim, "absent") == "absent" else int(scores[dim])) for dim in DIMENSIONS}


def weighted_decision_mean(scores: Mapping[str, int], weights: Mapping[str, float] = DECISION_WEIGHTS) -> float | None:
    """Weighted mean of the dimensions scored 1-5; -1 (out of scope) is left out of numerator and
    denominator alike. None when no dimension is in scope. Divide by 5 for the paper's 0-1 reward term.
    (The arithmetic is the reward's own `decisions_mean`, so judge and reward agree by construction.)"""
    return decisions_mean({dim: scores.get(dim, -1) for dim in DIMENSIONS}, weights)


# ---------------------------------------------------------------- user texts

def equivalence_user_text(case: Case, candidate: str, reference: str) -> str:
    return "\n\n".join([
        tagged("TARGET_SPECIALIST_ROLE", case.target_role), evidence_text(case), tagged("QUESTION", case.question),
        tagged("REFERENCE_ANSWER", reference), tagged("CANDIDATE_RESPONSE", candidate),
    ])


def board_user_text(case: Case, reference: str, candidate: str) -> str:
    return "\n\n".join([evidence_text(case), tagged("REFERENCE_CONCLUSION", reference), tagged("CANDIDATE_RESPONSE", candidate)])


def scope_user_text(reference: str) -> str:
    return tagged("REFERENCE_CONCLUSION", reference)


_SCOPE_LINES = {"absent": "out of scope: answer -1", "positive": "in scope (the reference decided to act): score 1-5",
                "negative": "in scope (the reference decided against acting): score 1-5"}


def decisions_user_text(case: Case, reference: str, conclusion: str, scope: Mapping[str, str]) -> str:
    lines = [f"- {dim}: {_SCOPE_LINES[scope[dim]]}" for dim in DIMENSIONS]
    return board_user_text(case, reference, conclusion) + "\n\nScope, fixed from the reference conclusion alone:\n" + "\n".join(lines)


def _images(judge: Model, case: Case, use_images: bool) -> list[Image]:
    return case.images() if use_images and judge.supports_vision else []


# ---------------------------------------------------------------- the rubrics

async def judge_equivalence(judge: Model, case: Case, candidate: str | None, reference: str | None = None, *,
                            prompt_file: str | Path | None = None, max_tokens: int = DEFAULT_MAX_TOKENS,
                            images: bool = True, mode: JudgeMode = "medpanel") -> JudgeResult:
    """Clinical equivalence of a specialist's answer to the reference answer (the case's, unless given).
    `mode="released"`: the benchmark's own request and checks (release_mode.py; budget and images its own)."""
    if check_mode(mode) == "released":
        return await release_mode.judge_equivalence(judge, case, candidate, reference, prompt_file=prompt_file)
    system = _system("equivalence", prompt_file)
    floor = {"verdict": {"rationale": NO_ANSWER}, "scores": {"clinical_equivalence": 1.0, "critical_error": 0.0, "unsupported_claim": 0.0}}
    return await judge_rubric(
        judge, case, "clinical_equivalence", mode="medpanel", missing="reference answer", candidate=candidate, floor=floor,
        reference=reference if reference is not None else case.reference.answer,
        request=lambda ref, cand: medpanel_request(system, equivalence_user_text(case, cand, ref), EquivalenceVerdict,
                                                   max_tokens=max_tokens, images=_images(judge, case, images)),
        read=equivalence_scores)


def _board_reference(case: Case, reference: str | None) -> str | None:
    text = reference if reference is not None else case.reference.conclusion
    return text if text and text.strip() else None


async def judge_alignment(judge: Model, case: Case, conclusion: str | None, reference: str | None = None, *,
                          prompt_file: str | Path | None = None, max_tokens: int = DEFAULT_MAX_TOKENS) -> JudgeResult:
    system = _system("alignment", prompt_file)
    return await judge_rubric(
        judge, case, "conclusion_alignment", mode="medpanel", missing="reference conclusion", candidate=conclusion,
        reference=_board_reference(case, reference), floor=ALIGNMENT_FLOOR,
        request=lambda ref, cand: medpanel_request(system, board_user_text(case, ref, cand), AlignmentVerdict, max_tokens=max_tokens),
        read=alignment_scores)


async def judge_consistency(judge: Model, case: Case, response: str | None, conclusion: str | None, reference: str | None = None, *,
                            prompt_file: str | Path | None = None, max_tokens: int = DEFAULT_MAX_TOKENS) -> JudgeResult:
    """Whether the candidate's discussion supports its own conclusion (`response` is the whole meeting);
    a response with no conclusion is the format failure, though the judge reads the whole meeting."""
    system = _system("consistency", prompt_file)
    return await judge_rubric(
        judge, case, "consistency", mode="medpanel", missing="reference conclusion", candidate=conclusion,
        reference=_board_reference(case, reference),
        floor={"scores": {"consistency": 0.0}, "verdict": {"consistency": 0, "rationale": NO_CONCLUSION}},
        request=lambda ref, cand: medpanel_request(system, board_user_text(case, ref, response or cand), ConsistencyVerdict,
                                                   max_tokens=max_tokens),
        read=lambda verdict: {"consistency": float(verdict["consistency"])})


async def judge_decisions(judge: Model, case: Case, conclusion: str | None, reference: str | None = None, *,
                          scopes: ScopeBook | None = None, prompt_file: str | Path | None = None,
                          scope_prompt_file: str | Path | None = None, max_tokens: int = DEFAULT_MAX_TOKENS) -> JudgeResult:
    """The four-decision rubric in two calls: scope from the reference alone (frozen), then the scores."""
    rubric = "four_decisions"
    reference = _board_reference(case, reference)
    if reference is None:
        return failed(rubric, judge, f"case '{case.id}' has no reference conclusion to judge against")
    result = JudgeResult(rubric=rubric, status="ok", judge=judge.id)
    scope_system = _system("scope", scope_prompt_file)
    scope = await frozen_scope(judge, result, scopes if scopes is not None else ScopeBook(), ScopeBook.key(judge.id, scope_system, reference),
                               medpanel_request(scope_system, scope_user_text(reference), DecisionScope, max_tokens=max_tokens))
    if scope is None:
        return result
    result.scope = {dim: scope[dim] for dim in DIMENSIONS}
    if not conclusion or not conclusion.strip():  # format failure: every dimension in scope at the floor
        values = force_scope({dim: 1 for dim in DIMENSIONS}, scope)
        result.status, result.verdict = "format_failure", {**values, "rationale": NO_CONCLUSION}
    elif not in_scope(scope):  # nothing to compare: no second call
        values = force_scope({dim: -1 for dim in DIMENSIONS}, scope)
        result.verdict = {**values, "rationale": "The reference conclusion states no decision on any of the four dimensions."}
    else:
        request = medpanel_request(_system("decisions", prompt_file), decisions_user_text(case, reference, conclusion, scope),
                                   decisions_schema(scope), max_tokens=max_tokens)
        verdict = await ask(judge, result, request)
        if verdict is None:
            return result
        values = force_scope(verdict, scope)
        result.verdict = {**values, "rationale": verdict["rationale"]}
    result.scores = {"four_decisions": weighted_decision_mean(values),
                     **{f"decision_{d}": (float(values[d]) if values[d] != -1 else None) for d in DIMENSIONS}}
    return result


async def judge_board(judge: Model, case: Case, response: str, reference: str | None = None, *,
                      scopes: ScopeBook | None = None, prompt_files: Mapping[str, str | Path] | None = None,
                      max_tokens: int = DEFAULT_MAX_TOKENS, mode: JudgeMode = "medpanel") -> dict[str, JudgeResult]:
    """Conclusion alignment, the four decisions and consistency for one written (or live) board.
    `mode="released"`: the benchmark's evaluation rubrics as it runs them (release_mode.py)."""
    if check_mode(mode) == "released":
        return await release_mode.judge_board(judge, case, response, reference, scopes=scopes, prompt_files=prompt_files)
    files = check_prompt_files(prompt_files)
    conclusion, _ = split_response(response)
    alignment, decisions, consistency = await asyncio.gather(
        judge_alignment(judge, case, conclusion, reference, prompt_file=files.get("alignment"), max_tokens=max_tokens),
        judge_decisions(judge, case, conclusion, reference, scopes=scopes, prompt_file=files.get("decisions"),
                        scope_prompt_file=files.get("scope"), max_tokens=max_tokens),
        judge_consistency(judge, case, response, conclusion, reference, prompt_file=files.get("consistency"), max_tokens=max_tokens),
    )
    return {"conclusion_alignment": alignment, "four_decisions": decisions, "consistency": consistency}
