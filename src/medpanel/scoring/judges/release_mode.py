"""The rubric judges in `released` mode (requests, checks and layouts: released.py), and the
training reward's judges (`reward_judgements`). Results are JudgeResults like medpanel's mode, with
`mode` telling them apart; what differs is listed in docs/judges.md."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

from medpanel.cases.model import Case
from medpanel.models.base import Model
from medpanel.models.messages import Message
from medpanel.scoring.judges import (NO_ANSWER, NO_CONCLUSION, SCORE_NAMES, DecisionScope, JudgeResult, ScopeBook,
                                     check_prompt_files, failed)
from medpanel.scoring.judges import released as R
from medpanel.scoring.reward import DIMENSIONS


def _result(rubric: str, judge: Model, mode: str = "released", **fields) -> JudgeResult:
    return JudgeResult(rubric=rubric, judge=judge.id, mode=mode, **({"status": "ok"} | fields))


def _no_reference(rubric: str, judge: Model, case: Case, what: str, mode: str = "released") -> JudgeResult:
    return failed(rubric, judge, f"case '{case.id}' has no {what} to judge against").model_copy(update={"mode": mode})


def _reference(text: str | None) -> str | None:
    return text if text and text.strip() else None


async def judge_equivalence(judge: Model, case: Case, candidate: str | None, reference: str | None = None, *,
                            prompt_file: str | Path | None = None) -> JudgeResult:
    rubric = "clinical_equivalence"
    reference = _reference(reference if reference is not None else case.reference.answer)
    if reference is None:
        return _no_reference(rubric, judge, case, "reference answer")
    candidate = (candidate or "").strip()  # the release strips the extracted answer
    if not candidate:  # floored at 1 in the mean; the flags' rates leave it out
        return _result(rubric, judge, status="format_failure", verdict={"rationale": NO_ANSWER},
                       scores={"clinical_equivalence": 1.0, "critical_error": None, "unsupported_claim": None})
    result = _result(rubric, judge)
    user = R.user_message(judge, case, R.equivalence_text(case, reference, candidate))
    verdict = await R.ask(judge, result, rubric, R.system_prompt("equivalence", prompt_file), user,
                          R.EQUIVALENCE_SCHEMA, R.check_equivalence)
    if verdict is not None:
        result.verdict = verdict
        result.scores = {"clinical_equivalence": float(verdict["clinical_equivalence_score"]),
                         "critical_error": float(verdict["critical_error"]), "unsupported_claim": float(verdict["unsupported_claim"])}
    return result


async def judge_alignment(judge: Model, case: Case, conclusion: str | None, reference: str | None = None, *,
                          prompt_file: str | Path | None = None) -> JudgeResult:
    rubric = "conclusion_alignment"
    reference = _reference(reference if reference is not None else case.reference.conclusion)
    if reference is None:
        return _no_reference(rubric, judge, case, "reference conclusion")
    conclusion = (conclusion or "").strip()
    if not conclusion:
        return _result(rubric, judge, status="format_failure", scores={"conclusion_alignment": 1.0},
                       verdict={"conclusion_alignment": {"score": 1, "rationale": NO_CONCLUSION}})
    result = _result(rubric, judge)
    user = R.user_message(judge, case, R.board_text(case, reference, conclusion))
    verdict = await R.ask(judge, result, rubric, R.system_prompt("alignment", prompt_file), user,
                          R.ALIGNMENT_SCHEMA, R.check_alignment)
    if verdict is not None:
        result.verdict = verdict
        result.scores = {"conclusion_alignment": float(verdict["conclusion_alignment"]["score"])}
    return result


async def judge_decisions(judge: Model, case: Case, conclusion: str | None, reference: str | None = None, *,
                          prompt_file: str | Path | None = None) -> JudgeResult:
    """One call; the judge settles scope itself. A format failure is left out of every dimension's mean."""
    rubric = "four_decisions"
    reference = _reference(reference if reference is not None else case.reference.conclusion)
    if reference is None:
        return _no_reference(rubric, judge, case, "reference conclusion")
    conclusion = (conclusion or "").strip()
    if not conclusion:
        return _result(rubric, judge, status="format_failure", verdict={"rationale": NO_CONCLUSION},
                       scores={name: None for name in SCORE_NAMES[rubric]})
    result = _result(rubric, judge)
    user = R.user_message(judge, case, R.board_text(case, reference, conclusion))
    verdict = await R.ask(judge, result, rubric, R.system_prompt("decisions", prompt_file), user,
                          R.FOUR_DECISIONS_SCHEMA, R.check_four_decisions)
    if verdict is not None:
        result.verdict = verdict
        result.scope = {d: ("absent" if verdict[d] == -1 else "in_scope") for d in DIMENSIONS}
        result.scores = R.decision_scores(verdict)
    return result


# ---------------------------------------------------------------- scope frozen from reference + evidence

async def frozen_scope(judge: Model, case: Case, reference: str, scopes: ScopeBook, result: JudgeResult, *,
                       prompt_file: str | Path | None = None) -> dict[str, str] | None:
    """The training reward's scope: decided once per (judge, prompt, reference, case evidence), candidate unseen."""
    system = R.system_prompt("scope", prompt_file)
    evidence = R.case_evidence(case)

    async def decide() -> dict[str, str] | None:
        probe = JudgeResult(rubric=result.rubric, status="ok", judge=judge.id)
        read = await R.ask(judge, probe, "scope", system, Message(role="user", content=R.scope_text(case, reference)),
                           R.SCOPE_SCHEMA, R.check_scope)
        result.calls, result.input_tokens, result.output_tokens = probe.calls, probe.input_tokens, probe.output_tokens
        result.cost_usd, result.latency_s = probe.cost_usd, probe.latency_s
        if read is None:
            result.error = f"the scope call failed: {probe.error}"
            return None
        return DecisionScope.model_validate(read).model_dump()

    scope = await scopes.freeze(ScopeBook.key(judge.id, system, reference + "\n\x00" + evidence), decide)
    if scope is None:
        result.status = "failed"
        result.error = result.error or "the scope call failed (see the concurrent judging of this reference)"
        result.scores = {name: None for name in SCORE_NAMES[result.rubric]}
    return scope


# ---------------------------------------------------------------- consistency: the training reward's judge

_DISCUSSION = re.compile(r"<discussion>\s*(.*?)\s*</discussion>", re.S)
_CONCLUSION = re.compile(r"<conclusion>\s*(.*?)\s*</conclusion>", re.S)


def unique_block(pattern: re.Pattern[str], text: str) -> str | None:
    """The one block of its kind, stripped; None when there is none, more than one, or it is empty (as the reward reads)."""
    found = [m.group(1).strip() for m in pattern.finditer(text or "")]
    return found[0] if len(found) == 1 and found[0] else None


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
        return _no_reference(rubric, judge, case, "reference conclusion", mode)
    ref_discussion = reference_discussion(case)
    if ref_discussion is None:
        return _no_reference(rubric, judge, case, "reference discussion (the released consistency judge reads it)", mode)
    discussion, conclusion = unique_block(_DISCUSSION, response), unique_block(_CONCLUSION, response)
    result = _result(rubric, judge, mode)
    if discussion is None or conclusion is None:  # the reward calls no judge on such a response
        result.status, result.verdict = "format_failure", {"rationale": "The response lacks a single discussion or conclusion block."}
        result.scores = {"consistency": None}
        return result
    scope = await frozen_scope(judge, case, reference, scopes if scopes is not None else ScopeBook(), result,
                               prompt_file=files.get("scope"))
    if scope is None:
        return result
    result.scope = {d: scope[d] for d in DIMENSIONS}
    user = Message(role="user", content=R.consistency_text(case, scope, ref_discussion, reference, discussion, conclusion))
    verdict = await R.ask(judge, result, rubric, R.system_prompt("consistency", files.get("consistency")), user,
                          R.consistency_schema(scope), R.check_consistency(scope))
    if verdict is not None:
        result.verdict = verdict
        result.scores = {"consistency": float(verdict["discussion_conclusion_consistency"])}
    return result


async def judge_board(judge: Model, case: Case, response: str, reference: str | None = None, *,
                      scopes: ScopeBook | None = None, prompt_files: Mapping[str, str | Path] | None = None) -> dict[str, JudgeResult]:
    """The evaluation's two Board Simulation rubrics, plus the training consistency judge where the
    case has a reference discussion for it to read."""
    import asyncio

    from medpanel.scoring.board_reader import extract_conclusion

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
    import asyncio

    files = check_prompt_files(prompt_files)
    scopes = scopes if scopes is not None else ScopeBook()
    reference = _reference(reference if reference is not None else case.reference.conclusion)
    names = ("conclusion_alignment", "four_decisions", "consistency")
    if reference is None:
        return {n: _no_reference(n, judge, case, "reference conclusion", "reward") for n in names}
    conclusion = unique_block(_CONCLUSION, response)
    if conclusion is None or unique_block(_DISCUSSION, response) is None:
        gate = {"rationale": "The response lacks a single discussion or conclusion block: the reward calls no judge."}
        return {n: _result(n, judge, "reward", status="format_failure", verdict=gate,
                           scores={k: None for k in SCORE_NAMES[n]}) for n in names}
    alignment, decisions, consistency = await asyncio.gather(
        _reward_alignment(judge, case, reference, conclusion, files.get("alignment")),
        _reward_decisions(judge, case, reference, conclusion, scopes, files),
        judge_consistency(judge, case, response, reference, scopes=scopes, prompt_files=files, mode="reward"))
    return {"conclusion_alignment": alignment, "four_decisions": decisions, "consistency": consistency}


async def _reward_alignment(judge: Model, case: Case, reference: str, conclusion: str, prompt_file) -> JudgeResult:
    result = _result("conclusion_alignment", judge, "reward")
    user = Message(role="user", content=R.reward_board_text(case, reference, conclusion))
    verdict = await R.ask(judge, result, "conclusion_alignment", R.system_prompt("alignment", prompt_file), user,
                          R.ALIGNMENT_SCHEMA, R.check_reward_alignment, budget="reward_alignment")
    if verdict is not None:
        result.verdict = verdict
        result.scores = {"conclusion_alignment": float(verdict["conclusion_alignment"]["score"])}
    return result


async def _reward_decisions(judge: Model, case: Case, reference: str, conclusion: str, scopes: ScopeBook,
                            files: Mapping[str, Path]) -> JudgeResult:
    result = _result("four_decisions", judge, "reward")
    scope = await frozen_scope(judge, case, reference, scopes, result, prompt_file=files.get("scope"))
    if scope is None:
        return result
    result.scope = {d: scope[d] for d in DIMENSIONS}
    if all(scope[d] == "absent" for d in DIMENSIONS):  # nothing in scope: the reward's decisions term is 0
        result.verdict = {**{d: -1 for d in DIMENSIONS}, "rationale": "The reference takes no decision on any dimension."}
        result.scores = R.decision_scores(result.verdict)
        return result
    # The release sends the same user text as alignment; the frozen scope reaches the judge through the schema.
    user = Message(role="user", content=R.reward_board_text(case, reference, conclusion))
    verdict = await R.ask(judge, result, "four_decisions", R.system_prompt("reward_decisions", files.get("decisions")), user,
                          R.reward_decisions_schema(scope), R.check_reward_decisions(scope), budget="reward_decisions")
    if verdict is not None:
        result.verdict = verdict
        result.scores = R.decision_scores(verdict)
    return result
