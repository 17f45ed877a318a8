"""Multimodal temporal alignment: which slide was on screen while each utterance was spoken.

Why: OpenTumorBoard links the evidence shown on screen to what was being said at that moment (paper,
section 2.2), so a question asked in the meeting can be paired with the slide it was asked about. The
audio track gives time-stamped utterances and the visual track gives the interval each slide was shown;
this stage joins them by time alone, with no model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Utterance:
    """One voice's stretch of speech, in seconds from the start of the recording."""

    start: float
    end: float
    speaker: str
    text: str


@dataclass(frozen=True)
class SlideShown:
    """A slide on screen from `shown_from` to `shown_to` (seconds, half-open: [from, to))."""

    slide_id: str
    shown_from: float
    shown_to: float


@dataclass(frozen=True)
class Linked:
    """An utterance with the slide it is linked to (None when no slide was on screen) and the seconds of overlap."""

    utterance: Utterance
    slide_id: str | None
    overlap: float


def _check(start: float, end: float, what: str) -> None:
    if end < start:
        raise ValueError(f"{what} ends ({end}) before it starts ({start}).")


def slide_at(start: float, end: float, slides: Sequence[SlideShown], min_share: float = 0.0) -> tuple[str | None, float]:
    """The slide covering most of [start, end], with its overlap in seconds; on a tie the slide shown
    earlier (then the one listed first). A zero-length span takes the slide on screen at that instant.
    None (overlap 0) when no slide overlaps the span, or when the best covers less than `min_share` of it
    (0, the released pipeline's rule: any overlap counts)."""
    _check(start, end, "The span")
    best: tuple[str | None, float] = (None, 0.0)
    best_from = float("inf")
    for slide in slides:
        _check(slide.shown_from, slide.shown_to, f"Slide {slide.slide_id}")
        if start == end:
            covers = slide.shown_from <= start < slide.shown_to
            if covers and (best[0] is None or slide.shown_from < best_from):
                best, best_from = (slide.slide_id, 0.0), slide.shown_from
            continue
        overlap = min(end, slide.shown_to) - max(start, slide.shown_from)
        if overlap <= 0:
            continue
        if overlap > best[1] or (overlap == best[1] and slide.shown_from < best_from):
            best, best_from = (slide.slide_id, overlap), slide.shown_from
    if start < end and best[1] < min_share * (end - start):
        return None, 0.0
    return best


def link_utterances(utterances: Sequence[Utterance], slides: Sequence[SlideShown], min_share: float = 0.0) -> list[Linked]:
    """Each utterance, in the order given, with the slide on screen for most of it (see `slide_at`).
    Pure: the inputs are not changed, and the same inputs always give the same links."""
    return [Linked(u, *slide_at(u.start, u.end, slides, min_share)) for u in utterances]
