"""How well the offline stages did on a recording whose truth is known (testing/meeting.py builds one).

- Word error rate (jiwer), after lower-casing, hyphens as spaces and punctuation dropped on both sides.
- Diarization error rate (pyannote.metrics): missed speech + false alarm + speaker confusion over the
  truth's speech time, with a 0.5 s collar around each truth boundary (0.25 s each side, NIST's
  convention) and the best one-to-one mapping of speaker labels.
- Slides: each kept slide is matched to the truth slide on screen when it was first seen. Recall is the
  share of the truth's slides matched; precision the share of kept slides that match one; duplicate rate
  the share of kept slides that match a truth slide an earlier kept slide already matched.
- Alignment accuracy: the share of the truth's utterances whose found utterance is linked to the slide
  truly on screen while it was said (no slide counts as a value: linked to none when none was shown is
  right).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from medpanel.curate.align import Utterance


def normalise(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]", " ", text.lower().replace("-", " ")).split())


def word_error_rate(truth: Sequence[str], heard: Sequence[str]) -> float:
    import jiwer

    return float(jiwer.wer(normalise(" ".join(truth)), normalise(" ".join(heard))))


def diarization_error_rate(truth: Sequence[Utterance], found: Sequence[Utterance], collar: float = 0.5) -> float:
    from pyannote.core import Annotation, Segment, Timeline
    from pyannote.metrics.diarization import DiarizationErrorRate

    def annotation(turns: Sequence[Utterance]) -> Annotation:
        a = Annotation()
        for i, u in enumerate(turns):
            if u.end > u.start:
                a[Segment(u.start, u.end), i] = u.speaker
        return a

    # Scored over the whole span either side speaks in (said outright: pyannote warns when it must guess it).
    spans = [u for u in [*truth, *found] if u.end > u.start]
    uem = Timeline([Segment(min(u.start for u in spans), max(u.end for u in spans))]) if spans else Timeline()
    return float(DiarizationErrorRate(collar=collar)(annotation(truth), annotation(found), uem=uem))


def truth_slide_at(t: float, showings: Sequence[dict]) -> str | None:
    return next((s["slide_id"] for s in showings if s["from"] <= t < s["to"]), None)


def slide_quality(truth_showings: Sequence[dict], found: Sequence[Any]) -> dict[str, Any]:
    """Recall, precision and duplicate rate of the kept slides, and each kept slide's truth id."""
    matched: dict[str, str | None] = {}
    seen: set[str] = set()
    duplicates = 0
    for slide in sorted(found, key=lambda s: s.first_seen):
        truth = truth_slide_at(slide.first_seen, truth_showings)
        matched[slide.slide_id] = truth
        if truth is not None and truth in seen:
            duplicates += 1
        if truth is not None:
            seen.add(truth)
    shown = {s["slide_id"] for s in truth_showings}
    kept = len(found)
    return {"recall": len(seen) / len(shown) if shown else 1.0,
            "precision": sum(1 for v in matched.values() if v is not None) / kept if kept else 1.0,
            "duplicate_rate": duplicates / kept if kept else 0.0,
            "kept": kept, "shown": len(shown), "truth_of": matched}


def alignment_accuracy(truth: Sequence[dict], links: Sequence[tuple[Utterance, str | None]], truth_of: dict[str, str | None]) -> float:
    """The share of the truth's utterances (each with the `slide` on screen while it was said) whose
    found utterance (the one overlapping it most) is linked to that slide; no slide counts as a value."""
    if not truth:
        return 1.0
    right = 0
    for u in truth:
        overlaps = [(min(u["end"], f.end) - max(u["start"], f.start), slide) for f, slide in links]
        best = max(overlaps, default=(0.0, None), key=lambda o: o[0])
        if best[0] > 0 and (truth_of.get(best[1]) if best[1] else None) == u.get("slide"):
            right += 1
    return right / len(truth)
