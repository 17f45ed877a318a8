"""`released` judge mode: the requests and the aggregation of OpenTumorBoard's own evaluation.

Behaviour reproduced (AnqiLi24/OpenTumorBoard, scripts/evaluation/judge/ and training/verl_otb/):

* every call is system + user at temperature 0, top_p 1, seed 0, with a strict `json_schema`
  response format named as the release names it, and the release's output budget;
* the user text tags its parts as the release does (Specialist Turn: `<REFERENCE_EXPERT_ANSWER>`,
  `<CANDIDATE_ANSWER>`); slides are the raw `<image> caption` string, and a vision judge gets each
  slide image where its marker stood (the marker removed), when the case has every slide's image;
* a reply that does not pass the release's own checks is a judge failure, counted, never re-asked;
* four decisions are judged in one call in which the judge settles scope itself (-1 or 1-5);
* format failures: clinical equivalence and alignment are floored at 1, the two flags and the
  decision dimensions are left out (unscored), as the release's summary does;
* consistency is the training reward's judge: it reads the reference discussion, with the scope
  frozen beforehand from the reference conclusion plus the case evidence.

`reward_judgements` runs the training reward's three judges (decisions on its 0-5 scale, scope
frozen the same way) for `scoring.reward.JudgeScores.from_judgements`.

Prompts stay medpanel's own wording unless a prompt file is given: pass the release's prompt files
(`--prompt-file RUBRIC=PATH`) to reproduce its requests byte for byte. docs/judges.md lists every
difference between this mode and medpanel's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Mapping

from medpanel.cases.model import Case
from medpanel.models.base import Model
from medpanel.models.messages import Message
from medpanel.scoring.judges import prompts
from medpanel.scoring.judges.prompts import read_prompt_file
from medpanel.scoring.judges.runner import Request
from medpanel.scoring.reward import DIMENSIONS, decisions_mean

SAMPLING = {"temperature": 0.0, "top_p": 1.0, "seed": 0}
# Output budgets: the evaluation batch builder's defaults, and the training reward's.
MAX_TOKENS = {"clinical_equivalence": 1024, "conclusion_alignment": 1200, "four_decisions": 1200,
              "consistency": 768, "scope": 384, "reward_alignment": 512, "reward_decisions": 768}
SCHEMA_NAMES = {"clinical_equivalence": "opentumorboard_clinical_equivalence",
                "conclusion_alignment": "opentumorboard_conclusion_alignment",
                "four_decisions": "opentumorboard_four_decisions", "consistency": "otb_consistency",
                "scope": "otb_reference_scope", "reward_alignment": "otb_conclusion_alignment",
                "reward_decisions": "otb_four_decisions"}
NO_SLIDES = "No slide descriptions are available."
MARKER = "<image>"
EQUIVALENCE_TAGS = ("TARGET_SPECIALIST_ROLE", "CASE_SUMMARY", "SLIDE_DESCRIPTIONS", "QUESTION",
                    "REFERENCE_EXPERT_ANSWER", "CANDIDATE_ANSWER")
BOARD_TAGS = ("CASE_SUMMARY", "SLIDE_DESCRIPTIONS", "REFERENCE_CONCLUSION", "CANDIDATE_RESPONSE")
SCOPE_TAGS = ("CASE_EVIDENCE", "REFERENCE_CONCLUSION")
CONSISTENCY_TAGS = ("CASE_EVIDENCE", "SCOPE", "REFERENCE_DISCUSSION", "REFERENCE_CONCLUSION",
                    "CANDIDATE_DISCUSSION", "CANDIDATE_CONCLUSION")

# Default system prompts for this mode's user texts (medpanel's wording; see prompts.py).
DEFAULT_PROMPTS = {
    "equivalence": prompts.equivalence(EQUIVALENCE_TAGS),
    "alignment": prompts.alignment(BOARD_TAGS),
    "decisions": prompts.decisions_one_call(BOARD_TAGS),
    "scope": prompts.scope(SCOPE_TAGS, with_evidence=True),
    "consistency": prompts.consistency_full(CONSISTENCY_TAGS),
    "reward_decisions": prompts.decisions_locked(BOARD_TAGS, floor=0, scope_in="schema"),
}


# ---------------------------------------------------------------- schemas (the release's shapes)

def _score(low: int, high: int) -> dict:
    return {"type": "integer", "minimum": low, "maximum": high}


def _text(high: int) -> dict:
    return {"type": "string", "minLength": 1, "maxLength": high}


def _object(properties: dict[str, Any]) -> dict:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


EQUIVALENCE_SCHEMA = _object({"clinical_equivalence_score": _score(1, 5), "critical_error": {"type": "boolean"},
                              "unsupported_claim": {"type": "boolean"}, "rationale": _text(1000)})
ALIGNMENT_SCHEMA = _object({"conclusion_alignment": _object({"score": _score(1, 5), "rationale": _text(1000)})})
FOUR_DECISIONS_SCHEMA = _object({**{d: {"type": "integer", "enum": [-1, 1, 2, 3, 4, 5]} for d in DIMENSIONS},
                                 "rationale": _text(1200)})
SCOPE_SCHEMA = _object({**{d: {"type": "string", "enum": ["positive", "negative", "absent"]} for d in DIMENSIONS},
                        "rationale": _text(800)})


def _locked(scope: Mapping[str, str]) -> dict[str, dict]:
    """Absent dimensions can only be -1; those in scope take the training scale 0-5."""
    return {d: ({"type": "integer", "enum": [-1]} if scope[d] == "absent" else _score(0, 5)) for d in DIMENSIONS}


def reward_decisions_schema(scope: Mapping[str, str]) -> dict:
    return _object({**_locked(scope), "rationale": _text(1200)})


def consistency_schema(scope: Mapping[str, str]) -> dict:
    return _object({**_locked(scope), "discussion_quality": _score(0, 5), "discussion_conclusion_consistency": _score(0, 5),
                    "grounding_and_safety": _score(0, 5), "major_contradiction": {"type": "boolean"},
                    "unsafe_addition": {"type": "boolean"}, "rationale": _text(1600)})


# ---------------------------------------------------------------- the release's checks on a reply
# A reply passes when the release's own summary (or reward) would use it; anything else is a judge failure.

def _int_in(value: Any, low: int, high: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{what} {value!r} is not an integer in {low}..{high}")
    return value


def _keys(data: Any, expected: set[str]) -> dict:
    if not isinstance(data, dict):
        raise ValueError("the reply is not a JSON object")
    if set(data) != expected:
        raise ValueError(f"the reply's keys are {sorted(data)}, not {sorted(expected)}")
    return data


def check_equivalence(data: Any) -> dict:
    data = _keys(data, {"clinical_equivalence_score", "critical_error", "unsupported_claim", "rationale"})
    _int_in(data["clinical_equivalence_score"], 1, 5, "clinical_equivalence_score")
    for flag in ("critical_error", "unsupported_claim"):
        if not isinstance(data[flag], bool):
            raise ValueError(f"{flag} is not a boolean")
    return data


def check_alignment(data: Any) -> dict:
    data = _keys(data, {"conclusion_alignment"})
    inner = data["conclusion_alignment"]
    if not isinstance(inner, dict):
        raise ValueError("conclusion_alignment is not an object")
    _int_in(inner.get("score"), 1, 5, "conclusion_alignment.score")
    return data


def check_four_decisions(data: Any) -> dict:
    data = _keys(data, {*DIMENSIONS, "rationale"})
    for dim in DIMENSIONS:
        if data[dim] != -1 or isinstance(data[dim], bool):
            _int_in(data[dim], 1, 5, dim)
    return data


def check_scope(data: Any) -> dict:
    data = _keys(data, {*DIMENSIONS, "rationale"})
    if any(data[d] not in ("positive", "negative", "absent") for d in DIMENSIONS):
        raise ValueError("a scope label is not positive, negative or absent")
    return data


def _nonempty(value: Any, what: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} is empty")


def check_reward_alignment(data: Any) -> dict:
    check_alignment(data)
    _nonempty(data["conclusion_alignment"].get("rationale"), "the rationale")
    return data


def check_reward_decisions(scope: Mapping[str, str]) -> Callable[[Any], dict]:
    def check(data: Any) -> dict:
        if not isinstance(data, dict):
            raise ValueError("the reply is not a JSON object")
        for dim in DIMENSIONS:
            value = _int_in(data.get(dim), -1, 5, dim)
            if (scope[dim] == "absent") != (value == -1):
                raise ValueError(f"{dim}={value} does not fit the frozen scope ({scope[dim]})")
        _nonempty(data.get("rationale"), "the rationale")
        return data
    return check


def check_consistency(scope: Mapping[str, str]) -> Callable[[Any], dict]:
    """The training judge's checks; like the release, a dimension score that breaks the frozen scope is corrected, not refused."""
    def check(data: Any) -> dict:
        if not isinstance(data, dict):
            raise ValueError("the reply is not a JSON object")
        fixed = dict(data)
        for dim in DIMENSIONS:
            value = _int_in(data.get(dim), -1, 5, dim)
            fixed[dim] = -1 if scope[dim] == "absent" else max(value, 0)
        for name in ("discussion_quality", "discussion_conclusion_consistency", "grounding_and_safety"):
            _int_in(data.get(name), 0, 5, name)
        for flag in ("major_contradiction", "unsafe_addition"):
            if not isinstance(data.get(flag), bool):
                raise ValueError(f"{flag} is not a boolean")
        return fixed
    return check


# ---------------------------------------------------------------- user texts, as the release lays them out

def slides_string(case: Case) -> str:
    """The record's raw `slides` string when the case came from a released file, else one `<image> caption` line per slide."""
    if "slides_text" in case.metadata:
        return str(case.metadata.get("slides_text") or "")
    return "\n".join(f"{MARKER} {slide.caption}" for slide in case.slides)


def _block(tag: str, text: str) -> str:
    return f"<{tag}>\n{text}\n</{tag}>"


def _raw(case: Case, field: str, value: str) -> str:
    """A released record's field as it was released (the loader strips what Case holds)."""
    return (case.metadata.get("raw_fields") or {}).get(field, value)


def equivalence_text(case: Case, reference: str, candidate: str) -> str:
    return "\n\n".join([_block("TARGET_SPECIALIST_ROLE", _raw(case, "target_specialist_role", case.target_role)),
                        _block("CASE_SUMMARY", _raw(case, "case_summary", case.summary)),
                        _block("SLIDE_DESCRIPTIONS", slides_string(case) or NO_SLIDES),
                        _block("QUESTION", _raw(case, "question", case.question)),
                        _block("REFERENCE_EXPERT_ANSWER", reference), _block("CANDIDATE_ANSWER", candidate)])


def board_text(case: Case, reference: str, candidate: str) -> str:
    return "\n\n".join([_block("CASE_SUMMARY", _raw(case, "case_summary", case.summary)),
                        _block("SLIDE_DESCRIPTIONS", slides_string(case) or NO_SLIDES),
                        _block("REFERENCE_CONCLUSION", reference), _block("CANDIDATE_RESPONSE", candidate)])


def case_evidence(case: Case) -> str:
    """The training data's case evidence: the image-variant user text of the Board Simulation manifest."""
    return f"CASE SUMMARY:\n{_raw(case, 'case_summary', case.summary)}\n\nSLIDES:\n{slides_string(case)}"


def _evidence_split(evidence: str) -> tuple[str, str]:
    """(summary, slides) cut back out of the case evidence the way the training reward cuts them. Its
    quirk is kept: the evidence is stripped first, so with no slides the separator is gone and the
    whole evidence text lands in CASE_SUMMARY, with the no-slides sentence beside it."""
    text, prefix, separator = evidence.strip(), "CASE SUMMARY:\n", "\n\nSLIDES:\n"
    if text.startswith(prefix) and separator in text:
        summary, slides = text[len(prefix):].split(separator, 1)
        return summary.strip(), slides.strip() or NO_SLIDES
    return text, NO_SLIDES


def reward_board_text(case: Case, reference: str, candidate: str) -> str:
    """The training reward's conclusion-judge text: the evaluation's tags, filled from the case evidence."""
    summary, slides = _evidence_split(case_evidence(case))
    return "\n\n".join([_block("CASE_SUMMARY", summary), _block("SLIDE_DESCRIPTIONS", slides),
                        _block("REFERENCE_CONCLUSION", reference), _block("CANDIDATE_RESPONSE", candidate)])


def scope_text(case: Case, reference: str) -> str:
    return _block("CASE_EVIDENCE", case_evidence(case)) + "\n\n" + _block("REFERENCE_CONCLUSION", reference)


def consistency_text(case: Case, scope: Mapping[str, str], reference_discussion: str, reference: str,
                     discussion: str, conclusion: str) -> str:
    scope_json = json.dumps({d: scope[d] for d in DIMENSIONS}, separators=(",", ":"))
    return "\n\n".join([_block("CASE_EVIDENCE", case_evidence(case)), _block("SCOPE", scope_json),
                        _block("REFERENCE_DISCUSSION", reference_discussion), _block("REFERENCE_CONCLUSION", reference),
                        _block("CANDIDATE_DISCUSSION", discussion), _block("CANDIDATE_CONCLUSION", conclusion)])


_SLIDE_BLOCK = re.compile(r"(<SLIDE_DESCRIPTIONS>\n)(.*?)(\n</SLIDE_DESCRIPTIONS>)", re.S)


def user_message(judge: Model, case: Case, text: str) -> Message:
    """The user turn. A vision judge gets each slide image where its `<image>` marker stood (markers
    counted inside the slide block only, the marker itself removed), when the case has an image for
    every marker; otherwise the text goes as it is, markers included."""
    images = case.images()
    block = _SLIDE_BLOCK.search(text)
    if not judge.supports_vision or not images or block is None:
        return Message(role="user", content=text)
    pieces = block.group(2).split(MARKER)
    if len(pieces) - 1 != len(images) or len(images) != len(case.slides):
        return Message(role="user", content=text)
    head, offsets, body = text[:block.start(2)], [], ""
    for piece in pieces[:-1]:
        body += piece
        offsets.append(len(head) + len(body))
    body += pieces[-1]
    return Message(role="user", content=head + body + text[block.end(2):], images=images, image_at=offsets)


# ---------------------------------------------------------------- one call (run by runner.ask, as every rubric's)

def request(budget: str, system: str, user: Message, schema: dict, check: Callable[[Any], dict]) -> Request:
    """The release's call: a strict json_schema named as it names it, its sampling and output budget,
    no re-ask; the reply is read by the release's own `check`."""
    return Request(system, user, schema, {"schema_name": SCHEMA_NAMES[budget], "strict_schema": True, "max_reasks": 0,
                                          "max_tokens": MAX_TOKENS[budget], **SAMPLING}, check)


def system_prompt(rubric: str, prompt_file: str | Path | None) -> str:
    """The prompt file's text stripped (the release strips its prompt files), or this mode's default."""
    return read_prompt_file(prompt_file).strip() if prompt_file else DEFAULT_PROMPTS[rubric]


def decision_scores(values: Mapping[str, int]) -> dict[str, float | None]:
    """Per-dimension scores (None where out of scope) and medpanel's weighted mean of those in scope."""
    return {"four_decisions": decisions_mean({d: values[d] for d in DIMENSIONS}),
            **{f"decision_{d}": (float(values[d]) if values[d] != -1 else None) for d in DIMENSIONS}}
