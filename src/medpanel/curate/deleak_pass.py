"""The de-leaking pass: a model cuts what could not be known at the decision point, and the
deterministic validator (deleak.py) decides whether each cut stands.

Per the paper (Appendix F): the summary and each caption may only lose words (check_deletion /
check_caption); a question may be kept, trimmed (a deletion that removes no negation from what stays),
paraphrased (no content word outside the de-leaked case and the question), or dropped. An edit the
validator refuses is not applied: the text stays as it was, and the refusal with its reasons is recorded
in the case's de-leak report for a curator to read.

A small model (the embedded one) names the sentences to delete instead of rewriting the text, and
only keeps or drops a question: the form it can hold. An edit that empties the summary (a case needs
one), or that empties any text when a small model made it, is refused as "emptied".
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from medpanel.curate import prompts
from medpanel.curate.deleak import check_caption, check_deletion, new_content_words
from medpanel.curate.extract import Extracted
from medpanel.curate.understand import ask


@dataclass
class Edit:
    field: str  # summary / caption:slide_01 / question:3
    action: str  # kept / cut / trimmed / paraphrased / dropped / refused
    removed: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    proposed: str = ""  # a refused edit's text, for the curator


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(text.strip()) if s]


async def _cut(model: Any, decision: str, text: str, *, caption: bool) -> tuple[str, Edit]:
    if getattr(model, "small", False):
        # A small model rewrites when asked to delete; asked for sentence numbers, its edit is a deletion
        # by construction (and still goes through the validator below).
        parts = sentences(text)
        numbered = "\n".join(f"[{i}] {p}" for i, p in enumerate(parts, 1))
        answer = await ask(model, prompts.DELEAK_SENTENCES_SYSTEM, f"Decision: {decision}\n\nText:\n{numbered}", prompts.SentenceCuts,
                           max_tokens=48)
        edited = " ".join(p for i, p in enumerate(parts, 1) if i not in set(answer.delete))
    else:
        answer = await ask(model, prompts.DELEAK_SYSTEM, f"Decision: {decision}\n\nText:\n{text}", prompts.DeletionAnswer,
                           max_tokens=max(64, len(text) // 2))
        edited = answer.text.strip()
    small = getattr(model, "small", False)
    if not edited and (small or not caption):
        # A case needs its summary; and a small model that cuts every sentence is not reading them.
        return text, Edit("", "refused", reasons=["emptied"], proposed="")
    verdict = (check_caption if caption else check_deletion)(text, edited)
    if not verdict.accepted:
        return text, Edit("", "refused", reasons=verdict.reasons, proposed=edited)
    if not verdict.removed:
        return text, Edit("", "kept")
    return edited, Edit("", "cut", removed=verdict.removed)


async def deleak_case(model: Any, case: Extracted, captions: dict[str, str]) -> tuple[Extracted, dict[str, str], list[Edit]]:
    """The case and its captions de-leaked against its conclusion, with one Edit per field read."""
    decision = case.conclusion or "(no conclusion recorded)"
    edits: list[Edit] = []
    summary, edit = await _cut(model, decision, case.summary, caption=False) if case.summary else (case.summary, Edit("", "kept"))
    edit.field = "summary"
    edits.append(edit)
    new_captions = dict(captions)
    for slide_id in case.slide_ids:
        text = captions.get(slide_id, "")
        if not text:
            continue
        new_captions[slide_id], edit = await _cut(model, decision, text, caption=True)
        edit.field = f"caption:{slide_id}"
        edits.append(edit)
    case.slide_ids = [s for s in case.slide_ids if new_captions.get(s)]  # a caption cut whole takes its slide with it
    visible = " ".join([summary, *(new_captions.get(s, "") for s in case.slide_ids)])
    kept_questions = []
    for i, q in enumerate(case.questions):
        user = f"Decision: {decision}\n\nCase before the decision: {visible}\n\nQuestion: {q.question}"
        if getattr(model, "small", False):  # keep or drop: a small model's trims and paraphrases are not worth checking
            answer = await ask(model, prompts.QUESTION_DELEAK_SYSTEM, user, prompts.QuestionKeep, max_tokens=16)
            answer = prompts.QuestionVerdict(verdict=answer.verdict, text=q.question)
        else:
            answer = await ask(model, prompts.QUESTION_DELEAK_SYSTEM, user, prompts.QuestionVerdict, max_tokens=200)
        text = " ".join(answer.text.split())
        edit = Edit(f"question:{i}", answer.verdict)
        if answer.verdict == "drop":
            edit.action = "dropped"
            edits.append(edit)
            continue
        if answer.verdict == "trim":
            verdict = check_deletion(q.question, text)
            if verdict.accepted and verdict.removed:
                edit.action, edit.removed = "trimmed", verdict.removed
                q.question = text
            else:
                edit.action, edit.reasons, edit.proposed = "refused", verdict.reasons or ["nothing_removed"], text
        elif answer.verdict == "paraphrase":
            extra = new_content_words(text, visible, q.question)
            if text and not extra:
                edit.action = "paraphrased"
                q.question = text
            else:
                edit.action, edit.reasons, edit.proposed = "refused", ["new_content_word"] if extra else ["empty"], text
        else:
            edit.action = "kept"
        edits.append(edit)
        kept_questions.append(q)
    case.summary, case.questions = summary, kept_questions
    return case, new_captions, edits


def edits_to_json(edits: list[Edit]) -> list[dict]:
    return [asdict(e) for e in edits]
