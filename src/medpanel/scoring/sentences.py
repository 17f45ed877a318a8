"""Sentence boundaries for prose answers and meeting turns (not the reward's own counter, which
scoring/board_format.py keeps byte-faithful to the released code)."""

from __future__ import annotations

import re

# Only words that are almost never the last word of a sentence: "no", "mg" or "etc." often are.
_ABBREVIATIONS = {"dr", "mr", "mrs", "ms", "prof", "vs", "e.g", "i.e", "approx", "fig", "cf", "al"}
_BOUNDARY = re.compile(r"[.!?]+[\"')\]]*(?=\s+|$)")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence. A boundary is ., ! or ? before whitespace or the end, unless the
    word it closes is a common abbreviation or the next word starts in lower case ("e.g. a spacer")."""
    spans: list[tuple[int, int]] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        end = match.end()
        word = re.search(r"([A-Za-z][A-Za-z.]*)$", text[start:match.start()])
        rest = text[end:].lstrip()
        if word and word.group(1).lower().rstrip(".") in _ABBREVIATIONS and rest:
            continue
        if rest and rest[0].islower():
            continue
        if text[start:end].strip():
            spans.append((start + len(text[start:end]) - len(text[start:end].lstrip()), end))
        start = end
    if text[start:].strip():
        spans.append((start + len(text[start:]) - len(text[start:].lstrip()), len(text.rstrip())))
    return spans


def count_sentences(text: str) -> int:
    return len(sentence_spans(text))


def first_sentences(text: str, limit: int) -> tuple[str, bool]:
    """The first `limit` sentences of `text` in its own words, and whether anything was cut."""
    spans = sentence_spans(text)
    if len(spans) > limit:
        return text[: spans[limit - 1][1]].strip(), True
    return text.strip(), False
