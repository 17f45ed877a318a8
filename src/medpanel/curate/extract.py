"""Extraction: from one case's stretch of the meeting, the case summary, the specialist questions with
their answers, the discussion trajectory and the board's conclusion.

- The discussion is the case's utterances merged by consecutive speaker, each with its role: no model.
- Questions: each specialist turn (not the moderator's, not Other's, at least MIN_TURN_CHARS long) is read
  with the turn before it; the model writes the question it answered and trims the answer. An answer that
  is not a deletion from the turn (deleak.check_deletion) is replaced by the whole turn, so the reference
  answer is always the specialist's own words.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from medpanel.curate import prompts
from medpanel.curate.align import Linked
from medpanel.curate.deleak import check_deletion
from medpanel.curate.understand import CaseSpan, ask

MIN_TURN_CHARS = 60  # shorter turns ("I agree.") carry no answer worth a question
MAX_QUESTIONS = 40  # per case: the calls one case may make for questions
NOT_SPECIALISTS = ("Moderator", "Other")


@dataclass
class Turn:
    role: str
    speaker: str
    text: str
    start: float
    end: float
    slide_ids: list[str] = field(default_factory=list)


@dataclass
class Question:
    question: str
    target_role: str
    answer: str
    type: str
    turn: int  # index into the case's turns
    answer_trimmed: bool = True  # False: the model's trim was refused and the whole turn is the answer


@dataclass
class Extracted:
    case_id: str
    span: dict
    summary: str
    slide_ids: list[str]
    questions: list[Question]
    discussion: list[Turn]
    conclusion: str

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "Extracted":
        return cls(d["case_id"], d["span"], d["summary"], list(d["slide_ids"]), [Question(**q) for q in d["questions"]],
                   [Turn(**t) for t in d["discussion"]], d["conclusion"])


def turns(links: Sequence[Linked], roles: dict[str, str], span: CaseSpan) -> list[Turn]:
    """The case's utterances merged by consecutive speaker, with roles and the slides on screen."""
    out: list[Turn] = []
    for link in links[span.first:span.last + 1]:
        u = link.utterance
        role = roles.get(u.speaker, "Other")
        if out and out[-1].speaker == u.speaker:
            last = out[-1]
            last.text, last.end = f"{last.text} {u.text}", u.end
        else:
            out.append(Turn(role, u.speaker, u.text, u.start, u.end))
        if link.slide_id and link.slide_id not in out[-1].slide_ids:
            out[-1].slide_ids.append(link.slide_id)
    return out


def case_slides(discussion: Sequence[Turn], shown: Sequence[tuple[str, float, float]], span: CaseSpan) -> list[str]:
    """The slides of a case, in order of first appearance: those linked to its turns, and any shown
    during the case though no one spoke over it (the paper's alignment loses those)."""
    ids: list[str] = []
    events = sorted([(t.start, s) for t in discussion for s in t.slide_ids] +
                    [(max(a, span.start), s) for s, a, b in shown if a < span.end and b > span.start])
    for _, s in events:
        if s not in ids:
            ids.append(s)
    return ids


def render(discussion: Sequence[Turn]) -> str:
    return "\n".join(f"{t.role}: {t.text}" for t in discussion)


async def extract_case(model: Any, case_id: str, span: CaseSpan, discussion: list[Turn], slide_ids: list[str],
                       captions: dict[str, str]) -> Extracted:
    slides_text = "\n".join(f"- {captions[s]}" for s in slide_ids if captions.get(s))
    transcript = render(discussion)
    context = f"Transcript:\n{transcript}" + (f"\n\nSlides:\n{slides_text}" if slides_text else "")
    summary = (await ask(model, prompts.SUMMARY_SYSTEM, context, prompts.SummaryAnswer, max_tokens=400)).summary.strip()
    if not summary:  # the model wrote nothing: the case as presented (its opening turn) is what the board heard
        summary = discussion[0].text if discussion else ""
    questions: list[Question] = []
    for i, turn in enumerate(discussion):
        if len(questions) >= MAX_QUESTIONS:
            break
        if i == 0 or turn.role in NOT_SPECIALISTS or len(turn.text) < MIN_TURN_CHARS:
            continue
        before = discussion[i - 1]
        user = f"Case summary: {summary}\n\nTurn before ({before.role}): {before.text}\n\n{turn.role}'s turn: {turn.text}"
        answer = await ask(model, prompts.QUESTION_SYSTEM, user, prompts.QuestionAnswer, max_tokens=300)
        if not answer.keep or not answer.question.strip():
            continue
        trimmed = answer.answer.strip()
        ok = bool(trimmed) and check_deletion(turn.text, trimmed).accepted
        questions.append(Question(" ".join(answer.question.split()), turn.role, trimmed if ok else turn.text,
                                  answer.type, i, ok))
    conclusion = (await ask(model, prompts.CONCLUSION_SYSTEM, f"Transcript:\n{transcript}", prompts.ConclusionAnswer,
                            max_tokens=300)).conclusion.strip()
    return Extracted(case_id, asdict(span), summary, slide_ids, questions, discussion, conclusion)
