"""The one place that strips a model reply's reasoning block and code fence before it is read.

One policy everywhere (choice parsing, Specialist Turn answers, board responses, structured output):
- every closed ``<think>…</think>`` (or ``<thinking>``/``<reasoning>``) block is removed, wherever it is;
- a reply whose reasoning never closes (cut off by the token limit while thinking) has *no answer*:
  the text left is empty and ``unclosed_reasoning`` is set, so callers record it as such instead of
  grading the reasoning as the answer;
- a lone closing tag (templates that open the block in the prompt, as DeepSeek-R1's does) means
  everything before it was reasoning;
- a surrounding Markdown code fence (with or without a language tag) is removed.

Readers that must reproduce a released benchmark byte for byte (the ``released`` board reader)
keep their own faithful rules and say so; everything else calls `strip_reply`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_OPEN = r"<\s*(?:think|thinking|reasoning)\b[^>]*>"
_CLOSE = r"<\s*/\s*(?:think|thinking|reasoning)\s*>"
_BLOCK = re.compile(_OPEN + r".*?" + _CLOSE, re.I | re.S)
_OPEN_TAG = re.compile(_OPEN, re.I)
_CLOSE_TAG = re.compile(_CLOSE, re.I)
_FENCE_OPEN = re.compile(r"\A```[^\n`]*\n?")
_FENCE_CLOSE = re.compile(r"\n?```\s*\Z")


@dataclass(frozen=True)
class StrippedReply:
    text: str  # what is left to read as the answer ("" when the reasoning never closed)
    steps: tuple[str, ...] = ()  # what was removed, in order: "think", "code_fence"
    unclosed_reasoning: bool = False  # a reasoning block opened and never closed: no answer

    @property
    def no_answer(self) -> bool:
        return self.unclosed_reasoning or not self.text


def strip_reasoning(text: str | None) -> StrippedReply:
    """Remove reasoning blocks only (see the module docstring for the policy)."""
    body = (text or "").strip()
    steps: list[str] = []
    without = _BLOCK.sub("", body)
    if without != body:
        steps.append("think")
        body = without.strip()
    if _OPEN_TAG.search(body):
        return StrippedReply("", tuple(steps) + ("think",), unclosed_reasoning=True)
    closes = list(_CLOSE_TAG.finditer(body))
    if closes:  # the opening tag was in the prompt: everything up to the last close was reasoning
        body = body[closes[-1].end():].strip()
        steps.append("think")
    return StrippedReply(body, tuple(dict.fromkeys(steps)))


def strip_fence(text: str) -> tuple[str, bool]:
    """(text without a surrounding ``` fence, whether one was removed)."""
    body = text.strip()
    if not body.startswith("```"):
        return body, False
    body = _FENCE_OPEN.sub("", body, count=1)
    body = _FENCE_CLOSE.sub("", body, count=1)
    return body.strip(), True


def strip_reply(text: str | None) -> StrippedReply:
    """Reasoning blocks, then a surrounding code fence, removed: the text a reader should parse."""
    stripped = strip_reasoning(text)
    if stripped.unclosed_reasoning:
        return stripped
    body, fenced = strip_fence(stripped.text)
    return StrippedReply(body, stripped.steps + (("code_fence",) if fenced else ()))
