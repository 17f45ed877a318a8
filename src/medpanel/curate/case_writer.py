"""Write a curated case as a case folder: case.yaml plus its slide images under slides/.

Why: the end of curation is a case every medpanel protocol can run, so the writer targets the one
format `medpanel.cases.load_case` reads (the same as examples/prostate): summary and slides are what the
panel sees; the recorded discussion and conclusion go under `reference`, never shown to the panel; the
specialist questions go under `metadata.specialist_questions`, which the specialist protocol expands into
one item per question. The first question is also set as the case's own question, as in the examples.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str, fallback: str) -> str:
    """`text` as a file or folder name: runs of other characters become "_", no leading or trailing dot."""
    return _SAFE.sub("_", text).strip("._") or fallback


@dataclass(frozen=True)
class CuratedSlide:
    """A slide image file (or None when only the caption is kept) and its one-line caption."""

    image: Path | None
    caption: str


@dataclass(frozen=True)
class SpecialistQuestion:
    """A question raised in the meeting, put to `target_role`, with the answer given and its type
    (e.g. findings_interpretation, treatment_recommendation)."""

    question: str
    target_role: str
    answer: str
    type: str = ""


@dataclass(frozen=True)
class CuratedCase:
    id: str
    summary: str
    slides: list[CuratedSlide] = field(default_factory=list)
    questions: list[SpecialistQuestion] = field(default_factory=list)
    discussion: list[tuple[str, str]] = field(default_factory=list)  # (role, text), in meeting order
    conclusion: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)  # e.g. source URL, recording id, timestamps


def slide_file_name(index: int, image: Path) -> str:
    """slides/NN_<stem><suffix>: numbered in slide order, so two images with one name never collide."""
    stem = safe_name(image.stem, "slide")
    return f"{index:02d}_{stem}{image.suffix.lower()}"


def case_record(case: CuratedCase, image_names: list[str | None]) -> dict[str, Any]:
    """The case.yaml mapping, with slide images at the given paths relative to the case folder."""
    record: dict[str, Any] = {"id": case.id, "summary": case.summary,
                              "slides": [{"image": name, "caption": s.caption} if name else {"caption": s.caption}
                                         for s, name in zip(case.slides, image_names)]}
    if case.questions:
        first = case.questions[0]
        record |= {"question": first.question, "target_role": first.target_role}
    record["reference"] = {
        **({"answer": case.questions[0].answer} if case.questions else {}),
        "conclusion": case.conclusion,
        "discussion": [{"role": role, "text": text} for role, text in case.discussion],
    }
    questions = [{"type": q.type, "target_role": q.target_role, "question": q.question, "reference_answer": q.answer}
                 for q in case.questions]
    record["metadata"] = {**case.metadata, **({"specialist_questions": questions} if questions else {})}
    return record


def write_case(case: CuratedCase, folder: Path, *, overwrite: bool = False) -> Path:
    """Write `case` into `folder` (created) as case.yaml with each slide image copied to slides/; returns
    the case.yaml path. Refuses a folder that already holds a case unless `overwrite`, and a slide whose
    image file is missing, before anything is written. (Overwriting leaves earlier images in slides/ that
    the new case.yaml no longer names.)"""
    if not case.id or _SAFE.search(case.id):
        raise ValueError(f"Case id {case.id!r} must be letters, digits, '.', '_' or '-'.")
    target = folder / "case.yaml"
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} exists; pass overwrite=True to replace it.")
    missing = [str(s.image) for s in case.slides if s.image is not None and not Path(s.image).is_file()]
    if missing:
        raise FileNotFoundError(f"Slide image(s) not found: {', '.join(missing)}.")
    folder.mkdir(parents=True, exist_ok=True)
    names: list[str | None] = []
    for i, slide in enumerate(case.slides, 1):
        if slide.image is None:
            names.append(None)
            continue
        name = f"slides/{slide_file_name(i, Path(slide.image))}"
        (folder / "slides").mkdir(exist_ok=True)
        shutil.copyfile(slide.image, folder / name)
        names.append(name)
    text = yaml.safe_dump(case_record(case, names), sort_keys=False, allow_unicode=True, width=110)
    target.write_text(text, encoding="utf-8")
    return target
