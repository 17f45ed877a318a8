"""The rubric judges in `released` mode (requests, checks and layouts: released.py), and the
training reward's judges (`reward_judgements`). Each goes through the one rubric runner (runner.py)
like medpanel's mode; results are JudgeResults with `mode` telling them apart. What differs is
listed in docs/judges.md."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Mapping

from medpanel.cases.model import Case
from medpanel.models.base import Model
from medpanel.models.messages import Message
from medpanel.scoring.board_format import strict_blocks
from medpanel.scoring.board_reader import extract_conclusion
from medpanel.scoring.judges import released as R
from medpanel.scoring.judges.prompts import check_prompt_files
from medpanel.scoring.judges.runner import ask, frozen_scope, judge_rubric
from medpanel.scoring.judges.schemas import (ALIGNMENT_FLOOR, NO_ANSWER, NO_CONCLUSION, SCORE_NAMES, JudgeResult,
                                             alignment_scores, equivalence_scores, failed)
from medpanel.scoring.judges.scope import ScopeBook
from medpanel.scoring.reward import DIMENSIONS

BOARD_RUBRICS = ("conclusion_alignment", "four_decisions", "consistency")


def _reference(text: str | None) -> str | None:
    return text if text and text.strip() else None


async def judge_equivalence(judge: Model, case: Case, candidate: str | None, reference: str | None = None, *,
                            prompt_file: str | Path | None = None) -> JudgeResult:
    """A format failure is floored at 1 in the mean; the flags' rates leave it out."""
    system = R.system_prompt("equivalence", prompt_file)
    floor = {"verdict": {"rationale": NO_ANSWER}, "scores": {"clinical_equivalence": 1.0, "critical_error": None, "unsupported_claim": None}}
    return await judge_rubric(
        judge, case, "clinical_equivalence", mode="released", missing="reference answer", floor=floor,
        reference=reference if reference is not None else case.reference.answer,
        candidate=(candidate or "").strip(),  # the release strips the extracted answer
        request=lambda ref, cand: R.request("clinical_equivalence", system, R.user_message(judge, case, R.equivalence_text(case, ref, cand)),
                                            R.EQUIVALENCE_SCHEMA, R.check_equivalence),
        read=equivalence_scores)


async def judge_alignment(judge: Model, case: Case, conclusion: str | None, reference: str | None = None, *,
                          prompt_file: str | Path | None = None) -> JudgeResult:
    system = R.system_prompt("alignment", prompt_file)
    return await judge_rubric(
        judge, case, "conclusion_alignment", mode="released", missing="reference conclusion", floor=ALIGNMENT_FLOOR,
        reference=reference if reference is not None else case.reference.conclusion, candidate=(conclusion or "").strip(),
        request=lambda ref, cand: R.request("conclusion_alignment", system, R.user_message(judge, case, R.board_text(case, ref, cand)),
                                            R.ALIGNMENT_SCHEMA, R.check_alignment),
        read=alignment_scores)


async def judge_decisions(judge: Model, case: Case, conclusion: str | None, reference: str | None = None, *,
                          prompt_file: str | Path | None = None) -> JudgeResult:
    """One call; the judge settles scope itself. A format failure is left out of every dimension's mean."""
    rubric = "four_decisions"
    system = R.system_prompt("decisions", prompt_file)
    result = await judge_rubric(
        judge, case, rubric, mode="released", missing="reference conclusion",
        floor={"verdict": {"rationale": NO_CONCLUSION}, "scores": {name: None for name in SCORE_NAMES[rubric]}},
        reference=reference if reference is not None else case.reference.conclusion, candidate=(conclusion or "").strip(),
        request=lambda ref, cand: R.request(rubric, system, R.user_message(judge, case, R.board_text(case, ref, cand)),
                                            R.FOUR_DECISIONS_SCHEMA, R.check_four_decisions),
        read=R.decision_scores)
    if result.status == "ok" and result.verdict is not None:
        result.scope = {d: ("absent" if result.verdict[d] == -1 else "in_scope") for d in DIMENSIONS}
    return result


# ---------------------------------------------------------------- scope frozen from reference + evidence

async def reward_scope(judge: Model, case: Case, reference: str, scopes: ScopeBook, result: JudgeResult, *,
                       prompt_file: str | Path | None = None) -> dict[str, str] | None:
    """The training reward's scope: decided once per (judge, prompt, reference, case evidence), candidate unseen."""
    system = R.system_prompt("scope", prompt_file)
    key = ScopeBook.key(judge.id, system, reference + "\n\x00" + R.case_evidence(case))
    request = R.request("scope", system, Message(role="user", content=R.scope_text(case, reference)), R.SCOPE_SCHEMA, R.check_scope)
    return await frozen_scope(judge, result, scopes, key, request)


# ---------------------------------------------------------------- consistency: the training reward's judge

def reference_discussion(case: Case) -> str | None:
    turns = case.reference.discussion
    return "\n".join(f"<turn {i}> {t.role}: {t.text}" for i, t in enumerate(turns, 1)) if turns else None


async def judge_consistency(judge: Model, case: Case, response: str, reference: str | None = None, *,
                            scopes: ScopeBook | None = None, prompt_files: Mapping[str, str | Path] | None = None,
                            mode: str = "released") -> JudgeResult:
    rubric = "consistency"
    files = check_prompt_files(prompt_files)
    reference = _reference(reference if reference is not None else case.reference.conclusion)
    if reference is None:
        return failed(rubric, judge, f"case '{case.id}' has no reference conclusion to judge against", mode)
    ref_discussion = reference_discussion(case)
    if ref_discussion is None:
        return failed(rubric, judge, f"case '{case.id}' has no reference discussion (the released consistency judge reads it) "
                      "to judge against", mode)
    discussion, conclusion = strict_blocks(response)
    result = JudgeResult(rubric=rubric, status="ok", mode=mode, judge=judge.id)
    if discussion is None or conclusion is None:  # the reward calls no judge on such a response
        result.status, result.verdict = "format_failure", {"rationale": "The response lacks a single discussion or conclusion block."}
        result.scores = {"consistency": None}
        return result
    scope = await reward_scope(judge, case, reference, scopes if scopes is not None else ScopeBook(), result, prompt_file=files.get("scope"))
    if scope is None:
        return result
    result.scope = {d: scope[d] for d in DIMENSIONS}
    user = Message(role="user", content=R.consistency_text(case, scope, ref_discussion, reference, discussion, conclusion))
    verdict = await ask(judge, result, R.request(rubric, R.system_prompt("consistency", files.get("consistency")), user,
                                                 R.consistency_schema(scope), R.check_consistency(scope)))
    if verdict is not None:
        result.verdict = verdict
        result.scores = {"consistency": float(verdict["discussion_conclusion_consistency"])}
    return result


async def judge_board(judge: Model, case: Case, response: str, reference: str | None = None, *,
                      scopes: ScopeBook | None = None, prompt_files: Mapping[str, str | Path] | None = None) -> dict[str, JudgeResult]:
    """The evaluation's two Board Simulation rubrics, plus the training consistency judge where the
    case has a reference discussion for it to read."""
    files = check_prompt_files(prompt_files)
    # The release's own reader (tables, raw-text tag search), not medpanel's lenient split_response.
    conclusion = extract_conclusion(response or "", reader="released")[0] or None
    jobs = {"conclusion_alignment": judge_alignment(judge, case, conclusion, reference, prompt_file=files.get("alignment")),
            "four_decisions": judge_decisions(judge, case, conclusion, reference, prompt_file=files.get("decisions"))}
    if case.reference.discussion:
        jobs["consistency"] = judge_consistency(judge, case, response, reference, scopes=scopes, prompt_files=files)
    done = await asyncio.gather(*jobs.values())
    return dict(zip(jobs, done))


# ---------------------------------------------------------------- the training reward's judges

async def reward_judgements(judge: Model, case: Case, response: str, reference: str | None = None, *,
                            scopes: ScopeBook | None = None, prompt_files: Mapping[str, str | Path] | None = None) -> dict[str, JudgeResult]:
    """Alignment, four decisions (0-5, scope frozen from reference + case evidence) and consistency, as
    training/verl_otb/reward.py asks them; feed them to `JudgeScores.from_judgements`. A response
    without exactly one discussion and one conclusion block gets no judge (the reward's gate)."""
    files = check_prompt_files(prompt_files)
    scopes = scopes if scopes is not None else ScopeBook()
    reference = _reference(reference if reference is not None else case.reference.conclusion)
    if reference is None:
        return {n: failed(n, judge, f"case '{case.id}' has no reference conclusion to judge against", "reward") for n in BOARD_RUBRICS}
    discussion, conclusion = strict_blocks(response)
    if conclusion is None or discussion is None:
        gate = {"rationale": "The response lacks a single discussion or conclusion block: the reward calls no judge."}
        return {n: JudgeResult(rubric=n, status="format_failure", mode="reward", judge=judge.id, verdict=gate,
                               scores={k: None for k in SCORE_NAMES[n]}) for n in BOARD_RUBRICS}
    alignment, decisions, consistency = await asyncio.gather(
        _reward_alignment(judge, case, reference, conclusion, files.get("alignment")),
        _reward_decisions(judge, case, reference, conclusion, scopes, files),
        judge_consistency(judge, case, response, reference, scopes=scopes, prompt_files=files, mode="reward"))
    return {"conclusion_alignment": alignment, "four_decisions": decisions, "consistency": consistency}


async def _reward_alignment(judge: Model, case: Case, reference: str, conclusion: str, prompt_file) -> JudgeResult:
    system = R.system_prompt("alignment", prompt_file)
    return await judge_rubric(
        judge, case, "conclusion_alignment", mode="reward", missing="reference conclusion", floor=ALIGNMENT_FLOOR,
        reference=reference, candidate=conclusion,  # the gate has already seen both
        request=lambda ref, cand: R.request("reward_alignment", system, Message(role="user", content=R.reward_board_text(case, ref, cand)),
                                            R.ALIGNMENT_SCHEMA, R.check_reward_alignment),
        read=alignment_scores)


async def _reward_decisions(judge: Model, case: Case, reference: str, conclusion: str, scopes: ScopeBook,
                            files: Mapping[str, Path]) -> JudgeResult:
    result = JudgeResult(rubric="four_decisions", status="ok", mode="reward", judge=judge.id)
    scope = await reward_scope(judge, case, reference, scopes, result, prompt_file=files.get("scope"))
    if scope is None:
        return result
    result.scope = {d: scope[d] for d in DIMENSIONS}
    if all(scope[d] == "absent" for d in DIMENSIONS):  # nothing in scope: the reward's decisions term is 0
        result.verdict = {**{d: -1 for d in DIMENSIONS}, "rationale": "The reference takes no decision on any dimension."}
        result.scores = R.decision_scores(result.verdict)
        return result
    # The release sends the same user text as alignment; the frozen scope reaches the judge through the schema.
    user = Message(role="user", content=R.reward_board_text(case, reference, conclusion))
    verdict = await ask(judge, result, R.request("reward_decisions", R.system_prompt("reward_decisions", files.get("decisions")), user,
                                                 R.reward_decisions_schema(scope), R.check_reward_decisions(scope)))
    if verdict is not None:
        result.verdict = verdict
        result.scores = R.decision_scores(verdict)
    return result
