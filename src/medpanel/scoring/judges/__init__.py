"""OpenTumorBoard's rubric judges: protocols over any judge model, each with a strict output schema.

Every judge runs at temperature 0 and sees the case, the reference and the candidate inside tags
that the prompt declares to be data, not instructions. A reply that never validates (after the
model layer's bounded re-asks) or a call that fails for good leaves the item unscored, with the
error recorded: never a zero. A board response with no conclusion is a format failure scored at the
floor of each scale, without calling the judge on it. Any rubric's system prompt can be replaced by
a text file (for instance the paper's released prompt files); `mode="released"` reproduces the
benchmark's own evaluation instead (docs/judges.md lists every difference).

The package, by concern:

    schemas.py       verdict schemas, JudgeResult, recording and merging results
    tags.py          the untrusted-data tags and their neutralising
    prompts.py       medpanel's default prompts, prompt files
    scope.py         ScopeBook: four-decision scopes frozen per reference
    runner.py        the one rubric runner (a judging's skeleton and its one call) every rubric uses
    rubrics.py       the rubrics in medpanel's mode
    released.py      released mode's requests, checks and layouts; release_mode.py its rubrics and
                     the training reward's judges
    candidates.py    the text each judge grades, read from an outcome and its transcript
    scorers.py       the judges as scorers (BOARD_JUDGE, SPECIALIST_JUDGE, BERTSCORE, BOARD_REWARD)

This module only gathers the public names, so `from medpanel.scoring import judges` reads as one API.
"""

from __future__ import annotations

from medpanel.scoring.judges import prompts, release_mode, released  # noqa: F401  (judges.release_mode.* is public)
from medpanel.scoring.judges.candidates import raw_answer, released_answer_text, response_text, split_response
from medpanel.scoring.judges.prompts import RUBRICS, check_prompt_files, read_prompt_file
from medpanel.scoring.judges.rubrics import (ALIGNMENT_SYSTEM, CONSISTENCY_SYSTEM, DECISION_WEIGHTS, DECISIONS_SYSTEM,
                                             DEFAULT_PROMPTS, DIMENSIONS, EQUIVALENCE_SYSTEM, SCOPE_SYSTEM, board_user_text,
                                             decisions_mean, decisions_user_text, equivalence_user_text, force_scope, in_scope,
                                             judge_alignment, judge_board, judge_consistency, judge_decisions, judge_equivalence,
                                             scope_user_text, system_prompt, weighted_decision_mean)
from medpanel.scoring.judges.runner import DEFAULT_MAX_TOKENS, Request, ask, frozen_scope, judge_rubric, medpanel_request
from medpanel.scoring.judges.schemas import (JUDGE_MODES, NO_ANSWER, NO_CONCLUSION, SCORE_NAMES, AlignmentScore, AlignmentVerdict,
                                             ConsistencyVerdict, DecisionScope, EquivalenceVerdict, JudgeMode, JudgeResult, ScopeLabel,
                                             Status, check_mode, decisions_schema, failed, merged_scores, record)
from medpanel.scoring.judges.scope import ScopeBook
from medpanel.scoring.judges.scorers import BERTSCORE, BOARD_JUDGE, BOARD_REWARD, SPECIALIST_JUDGE, specialist_candidate
from medpanel.scoring.judges.tags import UNTRUSTED_NOTE, UNTRUSTED_TAGS, evidence_text, neutralise_tags, tagged

__all__ = [
    "ALIGNMENT_SYSTEM", "BERTSCORE", "BOARD_JUDGE", "BOARD_REWARD", "CONSISTENCY_SYSTEM", "DECISION_WEIGHTS", "DECISIONS_SYSTEM",
    "DEFAULT_MAX_TOKENS", "DEFAULT_PROMPTS", "DIMENSIONS", "EQUIVALENCE_SYSTEM", "JUDGE_MODES", "NO_ANSWER", "NO_CONCLUSION",
    "RUBRICS", "SCOPE_SYSTEM", "SCORE_NAMES", "SPECIALIST_JUDGE", "UNTRUSTED_NOTE", "UNTRUSTED_TAGS", "AlignmentScore",
    "AlignmentVerdict", "ConsistencyVerdict", "DecisionScope", "EquivalenceVerdict", "JudgeMode", "JudgeResult", "Request",
    "ScopeBook", "ScopeLabel", "Status", "ask", "board_user_text", "check_mode", "check_prompt_files", "decisions_mean",
    "decisions_schema", "decisions_user_text", "equivalence_user_text", "evidence_text", "failed", "force_scope",
    "frozen_scope", "in_scope", "judge_alignment", "judge_board", "judge_consistency", "judge_decisions", "judge_equivalence",
    "judge_rubric", "medpanel_request", "merged_scores", "neutralise_tags", "prompts", "raw_answer", "read_prompt_file",
    "record", "release_mode", "released", "released_answer_text", "response_text", "scope_user_text", "specialist_candidate",
    "split_response", "system_prompt", "tagged", "weighted_decision_mean",
]
