"""The `Case` model: everything a panel may be shown, plus the reference answer where one is known."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from medpanel.errors import UsageError
from medpanel.models.messages import Image


class Slide(BaseModel):
    """One slide of a tumor-board case: an image file (or none, when only the caption was released) and its caption."""

    image: str | None = None
    caption: str = ""

    def as_image(self) -> Image | None:
        return Image(path=self.image, caption=self.caption) if self.image else None


class Turn(BaseModel):
    role: str
    text: str


class Criterion(BaseModel):
    """One rubric criterion (HealthBench): met or not by a response, worth `points`; negative points mark
    something a response should not do. Tags such as `axis:accuracy` or `level:cluster` group criteria."""

    criterion: str
    points: float
    tags: list[str] = Field(default_factory=list)


class Reference(BaseModel):
    """What a real board, exam key or coder said. Never shown to the panel."""

    answer: str | None = None  # option letter for multiple choice, free text otherwise
    answer_text: str | None = None
    conclusion: str | None = None
    discussion: list[Turn] = Field(default_factory=list)
    codes: list[str] = Field(default_factory=list)
    rubric: list[Criterion] = Field(default_factory=list)  # graded criteria of a response (HealthBench)


GROUP_FIELDS = ("question_type", "medical_task", "body_system", "subject")  # metadata fields reports break scores down by


class Case(BaseModel):
    id: str
    source: str = ""  # dataset or file it came from
    synthetic: bool = False
    summary: str = ""
    slides: list[Slide] = Field(default_factory=list)
    note: dict[str, str] = Field(default_factory=dict)  # clinical note sections by name
    chief_complaint: str = ""
    question: str = ""
    options: dict[str, str] = Field(default_factory=dict)  # letter -> option text
    target_role: str = ""
    conversation: list[Turn] = Field(default_factory=list)  # a chat to answer the last turn of (role user/assistant/system)
    reference: Reference = Field(default_factory=Reference)
    metadata: dict[str, Any] = Field(default_factory=dict)

    def groups(self) -> dict[str, str]:
        """What a report may break this item down by: the case's groups (a HealthBench theme) and its dataset's
        question fields (MedXpertQA's question_type, medical_task and body_system; MMLU's subject)."""
        fields = {key: value for key in GROUP_FIELDS if isinstance(value := self.metadata.get(key), str) and value}
        return fields | {str(k): str(v) for k, v in (self.metadata.get("groups") or {}).items()}

    def missing(self, *fields: str) -> list[str]:
        """The needed fields this case lacks; "a|b" is met by either, and named "a or b"."""
        return [f.replace("|", " or ") for f in fields if not any(getattr(self, name) for name in f.split("|"))]

    def require(self, *fields: str, protocol: str) -> None:
        """Reject a case that lacks what a protocol needs, naming the fields and the fix."""
        missing = self.missing(*fields)
        if missing:
            raise UsageError(
                f"Case '{self.id}' cannot run the {protocol} protocol: it has no {', '.join(missing)}.",
                f"Add {' and '.join(missing)} to the case file, or pick a protocol that fits this case.",
            )

    def slide_text(self) -> str:
        """Slides as caption lines, for models that cannot see images."""
        if not self.slides:
            return "No slide descriptions are available."
        return "\n".join(f"Slide {i}: {s.caption}" for i, s in enumerate(self.slides, 1))

    def images(self) -> list[Image]:
        return [img for s in self.slides if (img := s.as_image()) is not None]

    def options_text(self) -> str:
        return "\n".join(f"{k}. {v}" for k, v in self.options.items())

    def conversation_messages(self) -> list[dict[str, str]]:
        """The conversation as chat messages, to be answered as its next assistant turn."""
        return [{"role": t.role, "content": t.text} for t in self.conversation]

    def conversation_text(self) -> str:
        """The conversation as text, one "role: text" block per turn."""
        return "\n\n".join(f"{t.role}: {t.text}" for t in self.conversation)
