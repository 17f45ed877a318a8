"""Specialist Turn (OpenTumorBoard): one model, seated as the named specialist, answers one question
the board put to that specialist, from the summary and the slides, in at most three sentences.

The answer is asked for as JSON `{"answer": ...}`. A model that never writes valid JSON is read
leniently, as the benchmark reads responses: its last text (think block and code fence removed) is
the answer, and `format_ok` records the lapse. The three-sentence limit is checked on every answer;
by default an answer that runs over is kept whole and the violation scored (`within_three_sentences`
= 0), so the judge grades what the model said; `sentence_limit="trim"` keeps the first three
sentences instead and records that it did.

When the panel has a `judge` role, the runner's clinical-equivalence scorer (scoring.judges.SPECIALIST_JUDGE)
grades the answer against the reference answer after the run, reading the outcome and its transcript.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from medpanel.cases.model import Case, Reference
from medpanel.context import RunContext, quiet
from medpanel.errors import StructuredOutputError, UsageError
from medpanel.models.messages import Message
from medpanel.protocols.base import Outcome, Panel, ProtocolSpec
from medpanel.reply_text import strip_reply
from medpanel.scoring import judges
from medpanel.scoring.judges import released_answer_text  # noqa: F401  (re-exported for callers)
from medpanel.scoring.metrics import metric_kind
from medpanel.scoring.scorer import pure
from medpanel.scoring.sentences import count_sentences, first_sentences, sentence_spans  # noqa: F401  (re-exported for callers)

MAX_SENTENCES = 3

SYSTEM = (
    "The tumour board has turned to you, the specialist named in the message, with one question about this "
    "patient. Give the answer you would give at the table, in that specialty's voice. Facts about the patient "
    "come only from the written summary and the slides you are shown: your medical knowledge is for reading them, not for "
    "supplying details they lack. When the material will not support a useful answer, say that it is "
    "insufficient and which information you would need. Stay on the question and use three sentences at most. "
    'Output a single JSON object, {"answer": "..."}, with no other keys, no Markdown and nothing before or after it.'
)
VISION_NOTE = (
    " The slides reach you as images, each with a short caption; treat a caption as a title rather than a "
    "summary, look in the image for what matters (lab values, staging, drug doses, mutations, what a scan "
    "shows), and go by the image wherever the two conflict."
)


class SpecialistAnswer(BaseModel):
    answer: str = Field(description="the specialist's answer, at most three sentences")


class SpecialistSettings(BaseModel):
    temperature: float = 0.0
    max_tokens: int = Field(default=300, ge=16)
    prompt_file: Path | None = None  # a system prompt file, e.g. the paper's own Specialist Turn prompt
    sentence_limit: Literal["score", "trim"] = "score"  # what to do with an answer over three sentences
    # The judge is the panel's `judge` role (the run's config); these say how it judges.
    judge_prompt_file: Path | None = None
    judge_max_tokens: int = Field(default=judges.DEFAULT_MAX_TOKENS, ge=16)  # medpanel mode; released uses the release's budget
    judge_mode: Literal["medpanel", "released"] = "medpanel"  # released: the benchmark's own evaluation (docs/judges.md)

    @field_validator("prompt_file", "judge_prompt_file")
    @classmethod
    def _prompt_file_exists(cls, value: Path | None) -> Path | None:
        if value is not None:
            judges.read_prompt_file(value)  # raises UsageError (not a ValueError), so it reaches the user as is
        return value


# ---------------------------------------------------------------- pure helpers

_INSUFFICIENT = re.compile(
    r"\b(insufficient|not enough (?:information|data|detail)|cannot (?:be )?(?:determine|assess|answer|say)|"
    r"can't (?:determine|assess|say)|unable to (?:determine|assess|answer)|(?:information|data|details?) (?:is|are) (?:missing|not (?:provided|available|given))|"
    r"would need (?:to know|more)|need(?:s)? more information)\b", re.I)


def says_insufficient(answer: str) -> bool:
    """Whether an answer declares the context insufficient (for the breakdown of such answers)."""
    return bool(_INSUFFICIENT.search(answer or ""))


def answer_text(raw: str) -> str:
    """The answer in a raw reply, read leniently: reasoning and code fence removed (the shared
    `strip_reply`), then the 'answer' of a JSON object if there is one, else the text itself.
    Reasoning that never closes is no answer at all: "" (never the reasoning graded as one)."""
    stripped = strip_reply(raw)
    if stripped.unclosed_reasoning:
        return ""
    body = stripped.text
    start = body.find("{")
    if start >= 0:
        try:
            value, _ = json.JSONDecoder().raw_decode(body[start:])
            if isinstance(value, dict) and isinstance(value.get("answer"), str):
                return value["answer"].strip()
        except json.JSONDecodeError:
            pass
    return body


def specialist_prompt(case: Case) -> str:
    """The user text, laid out as the benchmark's Specialist Turn manifests lay it out."""
    return (f"TARGET SPECIALIST ROLE:\n{case.target_role}\n\nCASE SUMMARY:\n{case.summary}\n\n"
            f"SLIDE DESCRIPTIONS:\n{case.slide_text()}\n\nQUESTION:\n{case.question}")


def specialist_items(case: Case) -> list[Case]:
    """One Case per question in `metadata.specialist_questions` (the example cases' format), each with
    its target role, reference answer and qa_type; a case without that list yields itself."""
    questions = case.metadata.get("specialist_questions") or []
    if not questions:
        return [case]
    items = []
    for i, q in enumerate(questions, 1):
        if not isinstance(q, dict) or not q.get("question") or not q.get("target_role"):
            raise UsageError(f"Case '{case.id}': specialist question {i} needs 'question' and 'target_role'.", "Fix metadata.specialist_questions in the case file.")
        metadata = {k: v for k, v in case.metadata.items() if k != "specialist_questions"} | {"qa_type": q.get("type") or q.get("qa_type")}
        items.append(case.model_copy(update={
            "id": f"{case.id}-q{i}", "question": q["question"].strip(), "target_role": q["target_role"].strip(),
            "reference": Reference(answer=(q.get("reference_answer") or "").strip() or None, conclusion=case.reference.conclusion),
            "metadata": metadata,
        }))
    return items


def _same_question(a: str, b: str) -> bool:
    return " ".join(a.split()).lower() == " ".join(b.split()).lower()


def specialist_item(case: Case, question: str, role: str, reference: str | None = None) -> Case:
    """The case as one Specialist Turn: `question` put to `role`. When the case holds that question (at
    the top level or in metadata.specialist_questions), its reference answer and qa_type come along;
    an explicit `reference` wins."""
    question, role = " ".join(question.split()), role.strip()
    if not question or not role:
        raise UsageError("A specialist turn needs a question and a role.", 'Give both, e.g. --role "Radiologist" "How do you read the MRI?".')
    known = [c for c in specialist_items(case) if _same_question(c.question, question)]
    if not known and case.question and _same_question(case.question, question):
        known = [case]
    base = known[0] if known else case.model_copy(update={"reference": Reference(conclusion=case.reference.conclusion)})
    answer = reference.strip() if reference else base.reference.answer
    return base.model_copy(update={"question": question, "target_role": role,
                                   "reference": base.reference.model_copy(update={"answer": answer or None})})


# ---------------------------------------------------------------- the protocol

async def run(case: Case, panel: Panel, settings: SpecialistSettings, context: RunContext | None = None) -> Outcome:
    context = quiet(context)
    case.require("summary", "question", "target_role", protocol="specialist")
    seat, model = panel.first()
    images = case.images() if model.supports_vision else []
    if settings.prompt_file:
        system = judges.read_prompt_file(settings.prompt_file)
    else:
        system = SYSTEM + (VISION_NOTE if images else "")
    messages = [Message(role="system", content=system), Message(role="user", content=specialist_prompt(case), images=images)]
    transcript = context.transcript()
    unclosed = False
    try:
        reply = await model.complete(messages, schema=SpecialistAnswer, temperature=settings.temperature, max_tokens=settings.max_tokens)
        said, format_ok, raw = reply.parsed.answer.strip(), True, reply.text
        transcript.record("turn", reply=reply, speaker=seat, role=case.target_role, phase="answer", data={"format_ok": True})
    except StructuredOutputError as exc:
        # Read the last reply as the benchmark would, rather than dropping the item.
        said, format_ok, raw = answer_text(exc.last_text), False, exc.last_text
        unclosed = strip_reply(exc.last_text).unclosed_reasoning
        transcript.record("turn", exc.last_text, speaker=seat, role=case.target_role, model=model.id, phase="answer",
                          data={"format_ok": False, "error": exc.problem,
                                **({"no_answer": "the reasoning never closed"} if unclosed else {})})
    sentences = count_sentences(said)
    answer = first_sentences(said, MAX_SENTENCES)[0] if settings.sentence_limit == "trim" else said
    trimmed = answer != said
    data = {
        "qa_type": case.metadata.get("qa_type"), "target_role": case.target_role, "question": case.question,
        "format_ok": format_ok, "sentences": sentences, "within_limit": sentences <= MAX_SENTENCES, "trimmed": trimmed,
        "insufficient_context": says_insufficient(answer),
    }
    if not format_ok and unclosed:
        data["no_answer"] = "the reasoning never closed"  # recorded as no answer, not as a wrong one
    if trimmed:
        data["untrimmed_answer"] = said
    if settings.judge_mode == "released":  # shown beside medpanel's reading; the judge scorer reads the raw turn itself
        data["released_answer"] = released_answer_text(raw)
    transcript.record("decision", answer, speaker=seat, role=case.target_role, phase="answer", data={"sentences": sentences, "trimmed": trimmed})
    return Outcome(answer=answer or None, transcript=transcript, data=data)


def turn_scores(case: Case, outcome: Outcome) -> dict[str, float | None]:
    """Judge-free scores of the answer: given at all, valid JSON, within three sentences, insufficient context."""
    data = outcome.data
    return {
        "answered": 1.0 if outcome.answer else 0.0,
        "format_ok": 1.0 if data.get("format_ok") else 0.0,
        "within_three_sentences": 1.0 if data.get("within_limit") else 0.0,
        "insufficient_context": 1.0 if data.get("insufficient_context") else 0.0,
    }


TURN_METRICS = {name: metric_kind(name) for name in ("answered", "format_ok", "within_three_sentences", "insufficient_context")}

SPEC = ProtocolSpec(name="specialist", run=run, settings=SpecialistSettings, scorers=(pure("turn", turn_scores, TURN_METRICS), judges.SPECIALIST_JUDGE),
                    expand=specialist_items, needs=("summary", "question", "target_role"),
                    description="one model, as the named specialist, answers the board's question in at most three sentences")
