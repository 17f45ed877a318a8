"""The model stages that read the meeting: who each voice is (role inference), where each patient's
case begins (segmentation), and what each slide shows (captions).

Every call asks for a JSON object under a schema (prompts.py), and every answer is checked here before
it is used: a role outside the list is Other, case starts outside the transcript are dropped, and a
caption naming a word the slide does not show is replaced by the slide's own first lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal, Sequence

from medpanel.curate import prompts
from medpanel.curate.align import Utterance
from medpanel.curate.deleak import new_content_words
from medpanel.models.messages import Image, Message

SPEAKER_CHARS = 1500  # what one voice said, at most, shown for its role
LINE_WORDS = 24  # a transcript line is cut to this many words for segmentation
MIN_SLIDE_WORDS = 3  # fewer words of text on a slide: unreadable


async def ask(model: Any, system: str, user: str, schema: type, *, max_tokens: int, images: Sequence[Image] = ()) -> Any:
    messages = [Message(role="system", content=system), Message(role="user", content=user, images=list(images))]
    reply = await model.complete(messages, schema=schema, max_tokens=max_tokens, temperature=0.0)
    return reply.parsed


def speaker_texts(utterances: Sequence[Utterance]) -> dict[str, str]:
    """Each speaker's words, in order of first appearance, cut at SPEAKER_CHARS."""
    out: dict[str, str] = {}
    for u in utterances:
        out[u.speaker] = (out.get(u.speaker, "") + " " + u.text).strip()
    return {k: v if len(v) <= SPEAKER_CHARS else v[:SPEAKER_CHARS].rsplit(" ", 1)[0] + " ..." for k, v in out.items()}


# Words that point to a role, for a small model's shortlist (below). Lower-case stems, matched at word starts.
ROLE_WORDS = {
    "Moderator": ("patient", "case", "next", "thank", "agree", "present", "question", "let's", "welcome"),
    "Pathologist": ("biops", "patholog", "histolog", "tissue", "cytolog", "margin", "grade", "stain"),
    "Radiologist": ("scan", "ct", "mri", "pet", "imaging", "ultrasound", "lesion", "enhanc", "nodule"),
    "Medical Oncologist": ("chemo", "therap", "systemic", "immunotherap", "targeted", "adjuvant", "neoadjuvant", "regimen", "cycles"),
    "Radiation Oncologist": ("radiation", "radiotherap", "gy", "fraction", "sbrt", "irradiat", "dose"),
    "Surgeon": ("surg", "resect", "operat", "excision", "laparoscop", "ectomy"),
    "Molecular Pathologist": ("mutation", "egfr", "kras", "braf", "alk", "sequencing", "variant", "molecular"),
    "Genetic Counselor": ("germline", "hereditary", "brca", "genetic", "family history", "counsel"),
    "Clinical Trial Specialist": ("trial", "eligib", "enrol", "protocol", "study"),
    "Nurse Navigator": ("schedul", "appointment", "coordinat", "support", "transport", "nurse"),
}


def role_shortlist(text: str, k: int = 3) -> list[str]:
    """The k roles whose cue words the speaker used most (ties in the list's order), then Other: the
    choices a small model is held to, so it cannot name a role nothing it heard points to."""
    said = " " + " ".join(re.findall(r"[a-z0-9']+", text.lower())) + " "
    score = {role: sum(said.count(" " + w) for w in words) for role, words in ROLE_WORDS.items()}
    ranked = [r for r in sorted(score, key=lambda r: -score[r]) if score[r] > 0][:k]
    return [*ranked, "Other"]


async def infer_roles(model: Any, utterances: Sequence[Utterance]) -> dict[str, str]:
    """Speaker label -> one of prompts.ROLES; one call per speaker (at most 10 from diarization). A small
    model chooses among its shortlist (role_shortlist); others among all eleven."""
    from pydantic import create_model

    roles = {}
    for speaker, text in speaker_texts(utterances).items():
        schema = prompts.RoleAnswer
        if getattr(model, "small", False):
            schema = create_model("RoleAnswer", role=(Literal[tuple(role_shortlist(text))], ...))  # type: ignore[valid-type]
        answer = await ask(model, prompts.ROLES_SYSTEM, f"Speaker {speaker} said:\n{text}\n\nWhich role does {speaker} hold?",
                           schema, max_tokens=24)
        roles[speaker] = answer.role if answer.role in prompts.ROLES else "Other"
    return roles


def transcript_lines(utterances: Sequence[Utterance], roles: dict[str, str]) -> list[str]:
    out = []
    for i, u in enumerate(utterances):
        words = u.text.split()
        text = " ".join(words[:LINE_WORDS]) + (" ..." if len(words) > LINE_WORDS else "")
        out.append(f"[{i}] {roles.get(u.speaker, u.speaker)}: {text}")
    return out


@dataclass(frozen=True)
class CaseSpan:
    """A case: utterances first..last (inclusive indices) and the seconds they cover."""

    first: int
    last: int
    start: float
    end: float


MIN_CASE_S = 20.0  # a patient's case shorter than this is not one: its start is dropped (the case joins the one before)


def spans_from_starts(starts: Sequence[int], utterances: Sequence[Utterance], min_case_s: float = MIN_CASE_S) -> list[CaseSpan]:
    """Valid starts (in range, sorted, unique, each at least min_case_s after the one before and before
    the end) to case spans; none valid: the whole meeting is one case."""
    n = len(utterances)
    valid: list[int] = []
    for s in sorted({s for s in starts if 0 <= s < n}):
        if valid and utterances[s].start - utterances[valid[-1]].start < min_case_s:
            continue
        valid.append(s)
    if len(valid) > 1 and utterances[-1].end - utterances[valid[-1]].start < min_case_s:
        valid.pop()  # a last "case" too short to be one belongs to the case before
    valid = valid or ([0] if n else [])
    ends = [*valid[1:], n]
    return [CaseSpan(a, b - 1, utterances[a].start, utterances[b - 1].end) for a, b in zip(valid, ends)]


async def segment_cases(model: Any, utterances: Sequence[Utterance], roles: dict[str, str], *, window: int = 120) -> list[CaseSpan]:
    """Case spans from the model's case starts, asked over windows of `window` lines (a long meeting does
    not fit a small model's context), line numbers kept global."""
    lines = transcript_lines(utterances, roles)
    starts: list[int] = []
    for at in range(0, len(lines), window):
        part = "\n".join(lines[at:at + window])
        answer = await ask(model, prompts.SEGMENT_SYSTEM, f"Transcript lines {at} to {min(at + window, len(lines)) - 1}:\n{part}",
                           prompts.CaseStarts, max_tokens=160)
        starts += [s for s in answer.case_starts if at <= s < at + window]
    return spans_from_starts(starts, utterances)


@dataclass(frozen=True)
class Caption:
    slide_id: str
    kept: bool
    caption: str
    why: str = ""  # for a dropped slide: unreadable / not clinical; for a kept one: "slide text" when the caption was replaced


def fallback_caption(text: str, words: int = 20) -> str:
    """The slide's own first lines, as one line."""
    return " ".join(" ".join(text.split()).split()[:words])


async def caption_slide(model: Any, slide_id: str, text: str, image: str | None) -> Caption:
    """Keep a readable, clinical slide with a one-line caption. A model that sees images gets the crop
    and the text read from it; one that does not gets the text alone. A caption with a content word the
    slide's text lacks (a text-only model inventing) is replaced by the slide's first words."""
    if len([w for w in text.split() if sum(c.isalpha() for c in w) >= 3]) < MIN_SLIDE_WORDS and not getattr(model, "supports_vision", False):
        return Caption(slide_id, False, "", "unreadable: too little text on the slide")
    images = [Image(path=image)] if image and getattr(model, "supports_vision", False) else []
    answer = await ask(model, prompts.CAPTION_SYSTEM, f"Text read from the slide:\n{text or '(none read)'}", prompts.CaptionAnswer,
                       max_tokens=96, images=images)
    if not answer.readable:
        return Caption(slide_id, False, "", "unreadable")
    if not answer.clinical:
        return Caption(slide_id, False, "", "not clinical")
    caption = " ".join(answer.caption.split())
    if not images and (not caption or new_content_words(caption, text)):
        return Caption(slide_id, True, fallback_caption(text), "slide text")
    return Caption(slide_id, True, caption or fallback_caption(text), "")
