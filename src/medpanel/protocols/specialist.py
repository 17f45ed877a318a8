"""Specialist Turn (OpenTumorBoard): one model, seated as the named specialist, answers one question
the board put to that specialist, from the case summary and the slides, in at most three sentences.

The answer is asked for as JSON `{"answer": ...}`. A model that never writes valid JSON is read
leniently, as the benchmark reads responses: its last text (think block and code fence removed) is
the answer, and `format_ok` records the lapse. The three-sentence limit is checked on every answer;
by default an answer that runs over is kept whole and the violation scored (`within_three_sentences`
= 0), so the judge grades what the model said; `sentence_limit="trim"` keeps the first three
sentences instead and records that it did.

With a `judge` model spec, the clinical-equivalence judge grades the answer against the reference
answer at the end of the protocol, and `score` reads the judgement from Outcome.data.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from medpanel.cases.model import Case, Reference
from medpanel.errors import StructuredOutputError, UsageError
from medpanel.models import build_model
from medpanel.models.messages import Message
from medpanel.models.registry import parse_spec
from medpanel.protocols.base import Outcome, Panel, ProtocolSpec
from medpanel.scoring import judges
from medpanel.scoring.sentences import count_sentences, first_sentences, sentence_spans  # noqa: F401  (re-exported for callers)
from medpanel.transcript import Transcript

MAX_SENTENCES = 3

SYSTEM = (
    "You sit on a multidisciplinary tumour board as the specialist named in the message, and the board has put "
    "a question to you. Answer it from the case summary and the slides, speaking as that specialist would in "
    "the room. Use general medical knowledge to interpret the evidence, but state no fact about this patient "
    "that the material does not give. If the material is not enough for a useful answer, say in your answer "
    "that the information is insufficient and name what is missing. Keep to the point: three sentences at most. "
    'Reply with one JSON object of the form {"answer": "..."} and nothing else: no Markdown, no other keys.'
)
VISION_NOTE = (
    " Each slide is shown as its image followed by a one-line caption. Read the image itself: values, dates, "
    "stages, doses, gene names and imaging findings are often legible only there, and where the image and "
    "its caption disagree, the image is the evidence."
)


class SpecialistAnswer(BaseModel):
    answer: str = Field(description="the specialist's answer, at most three sentences")


class SpecialistSettings(BaseModel):
    temperature: float = 0.0
    max_tokens: int = Field(default=300, ge=16)
    prompt_file: Path | None = None  # a system prompt file, e.g. the paper's own Specialist Turn prompt
    sentence_limit: Literal["score", "trim"] = "score"  # what to do with an answer over three sentences
    judge: str | None = None  # model spec of the clinical-equivalence judge; None: no judging
    judge_prompt_file: Path | None = None
    judge_max_tokens: int = Field(default=judges.DEFAULT_MAX_TOKENS, ge=16)

    @field_validator("prompt_file", "judge_prompt_file")
    @classmethod
    def _prompt_file_exists(cls, value: Path | None) -> Path | None:
        if value is not None:
            judges.read_prompt_file(value)  # raises UsageError (not a ValueError), so it reaches the user as is
        return value

    @field_validator("judge")
    @classmethod
    def _judge_spec_parses(cls, value: str | None) -> str | None:
        if value:
            parse_spec(value)  # an unknown provider fails before any item runs
        return value or None


# ---------------------------------------------------------------- pure helpers

_INSUFFICIENT = re.compile(
    r"\b(insufficient|not enough (?:information|data|detail)|cannot (?:be )?(?:determine|assess|answer|say)|"
    r"can't (?:determine|assess|say)|unable to (?:determine|assess|answer)|(?:information|data|details?) (?:is|are) (?:missing|not (?:provided|available|given))|"
    r"would need (?:to know|more)|need(?:s)? more information)\b", re.I)


def says_insufficient(answer: str) -> bool:
    """Whether an answer declares the context insufficient (for the breakdown of such answers)."""
    return bool(_INSUFFICIENT.search(answer or ""))


_THINK = re.compile(r"^\s*<think>.*?</think>", re.S)
_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*|\s*```\s*$")


def answer_text(raw: str) -> str:
    """The answer in a raw reply, read leniently: think block and code fence removed, then the
    'answer' of a JSON object if there is one, else the text itself."""
    if re.match(r"^\s*<think>", raw or "") and "</think>" not in raw:
        return ""  # cut off while still thinking: no answer, a format failure (never the reasoning graded as one)
    body = _FENCE.sub("", _THINK.sub("", raw or "")).strip()
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

async def run(case: Case, panel: Panel, settings: SpecialistSettings) -> Outcome:
    case.require("summary", "question", "target_role", protocol="specialist")
    seat, model = panel.first()
    images = case.images() if model.supports_vision else []
    if settings.prompt_file:
        system = judges.read_prompt_file(settings.prompt_file)
    else:
        system = SYSTEM + (VISION_NOTE if images else "")
    messages = [Message(role="system", content=system), Message(role="user", content=specialist_prompt(case), images=images)]
    transcript = Transcript()
    try:
        reply = await model.complete(messages, schema=SpecialistAnswer, temperature=settings.temperature, max_tokens=settings.max_tokens)
        said, format_ok = reply.parsed.answer.strip(), True
        transcript.add_reply(reply, speaker=seat, role=case.target_role, phase="answer", data={"format_ok": True})
    except StructuredOutputError as exc:
        # Read the last reply as the benchmark would, rather than dropping the item.
        said, format_ok = answer_text(exc.last_text), False
        transcript.add("turn", exc.last_text, speaker=seat, role=case.target_role, model=model.id, phase="answer",
                       data={"format_ok": False, "error": exc.problem})
    sentences = count_sentences(said)
    answer = first_sentences(said, MAX_SENTENCES)[0] if settings.sentence_limit == "trim" else said
    trimmed = answer != said
    data = {
        "qa_type": case.metadata.get("qa_type"), "target_role": case.target_role, "question": case.question,
        "format_ok": format_ok, "sentences": sentences, "within_limit": sentences <= MAX_SENTENCES, "trimmed": trimmed,
        "insufficient_context": says_insufficient(answer),
    }
    if trimmed:
        data["untrimmed_answer"] = said
    transcript.add("decision", answer, speaker=seat, role=case.target_role, phase="answer", data={"sentences": sentences, "trimmed": trimmed})
    if settings.judge:
        judge = build_model(settings.judge, runtime=model.runtime)
        try:
            result = await judges.judge_equivalence(judge, case, answer, prompt_file=settings.judge_prompt_file,
                                                    max_tokens=settings.judge_max_tokens)
        finally:
            await judge.aclose()
        judges.record(transcript, result)
        data["judge"] = result.model_dump(mode="json")
    return Outcome(answer=answer or None, transcript=transcript, data=data)


def score(case: Case, outcome: Outcome) -> dict[str, float | None]:
    data = outcome.data
    scores: dict[str, float | None] = {
        "answered": 1.0 if outcome.answer else 0.0,
        "format_ok": 1.0 if data.get("format_ok") else 0.0,
        "within_three_sentences": 1.0 if data.get("within_limit") else 0.0,
        "insufficient_context": 1.0 if data.get("insufficient_context") else 0.0,
    }
    if "judge" in data:
        scores |= judges.merged_scores([judges.JudgeResult.model_validate(data["judge"])])
    return scores


SPEC = ProtocolSpec(name="specialist", run=run, settings=SpecialistSettings, score=score, expand=specialist_items,
                    description="one model, as the named specialist, answers the board's question in at most three sentences")
