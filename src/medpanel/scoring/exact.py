"""Multiple-choice answers: find the chosen letter in free text, and score it against the key."""

from __future__ import annotations

import re

# Patterns tried in order, most explicit first. Each captures a single option letter.
_CHOICE_PATTERNS = [
    r"(?:final\s+)?answer\s*(?:is|:)?\s*[:\-]?\s*\(?\**\s*option\s+([A-J])\b",
    r"(?:final\s+)?(?:answer|choice)\s*(?:is|:)\s*\**\s*\(?([A-J])\)?(?![a-z])",
    r"\boption\s+\(?([A-J])\)?\s+is\s+(?:the\s+)?(?:correct|best|right)",
    r"^\s*\(?([A-J])[\).:]\s",
]


def parse_choice(text: str, letters: str | list[str] = "ABCDE") -> str | None:
    """The option letter a reply settles on, or None when it cannot be told (never a guess)."""
    allowed = set(letters)
    for pattern in _CHOICE_PATTERNS:
        hits = [h.upper() for h in re.findall(pattern, text, flags=re.IGNORECASE | re.MULTILINE)]
        hits = [h for h in hits if h in allowed]
        if hits:
            return hits[-1]  # the last explicit statement wins: models often revise mid-reply
    bare = text.strip().strip(".*()").upper()
    return bare if bare in allowed else None


def exact_match(predicted: str | None, gold: str | None) -> float | None:
    """1.0 or 0.0; None when there is no gold answer to compare with. An unparsed answer counts as wrong."""
    if gold is None:
        return None
    return 1.0 if predicted is not None and predicted.strip().upper() == gold.strip().upper() else 0.0
