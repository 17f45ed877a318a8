"""Multiple-choice answers: find the chosen letter in free text, and score it against the key.

`parse_choice` never guesses. It looks for an explicit statement ("Answer: B", "the answer is (C)",
"I choose option D", "\\boxed{A}"), takes the last one (models revise mid-reply), and otherwise
accepts a reply that is only a letter, or, when the option texts are given, an "Answer: yes" that
names exactly one option's text. Keywords match in any case; the letter itself must be a capital,
so "the answer is a rare syndrome" is not read as option A.

The reply is first read through `medpanel.reply_text.strip_reply`, the one reasoning/fence stripper:
closed reasoning blocks are dropped, and a reply whose reasoning never closed (cut off while thinking)
has no answer at all. `read_choice` says which of these happened (`ChoiceRead.status`), so a protocol
records "unclosed_reasoning" apart from "no_choice_found"; `parse_choice` gives only the letter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from medpanel.reply_text import strip_reply

# A statement that names the answer, then the letter. Keywords case-insensitive, letter case-sensitive.
_KEY = r"(?i:\b(?:final\s+|correct\s+|best\s+)?(?:answer|choice|selection))"
_LINK = r"[\s\*_]*(?:(?i:is|would\s+be|will\s+be|remains|stays)\b)?[\s\*_:\-=]*"
_LETTER = r"(?i:option\s+|letter\s+)?[\(\[]?\**([A-J])\**[\)\]]?(?![A-Za-z0-9])"
_EXPLICIT = [
    re.compile(_KEY + _LINK + _LETTER),
    re.compile(r"(?i:\bI\s+(?:would\s+)?(?:choose|select|pick|go\s+with|stick\s+with|keep))\s+(?i:option\s+)?[\(\[]?\**([A-J])\**[\)\]]?(?![A-Za-z0-9])"),
    re.compile(r"(?i:\boption)\s+\(?([A-J])\)?\s+(?i:is\s+(?:the\s+)?(?:correct|best|right|most\s+likely))"),
    re.compile(r"\\boxed\{\s*(?:\\text\{\s*)?([A-J])"),
]
# A line that starts with a letter ("B. Cholesterol embolization"): only trusted when every such line names the same letter,
# since a reply that walks through the options lists them all.
_LINE_LETTER = re.compile(r"^[\s\*]*\(?([A-J])[\).:]\**\s", re.MULTILINE)
_PRONOUN_I = re.compile(r"\s+(?:am|think|believe|would|will|have|had|can|cannot|could|should|must|agree|disagree|maintain|still|now|'m|feel)\b")
_ANSWER_TEXT = re.compile(_KEY + r"[\s\*_]*(?:(?i:is)\b)?[\s\*_:\-=]*([^\n]+)")

# Why a reply yields no letter: its reasoning never closed, nothing was left after the reasoning, or
# the text left states no choice. "parsed" when a letter was read.
ANSWER_STATUSES = ("parsed", "unclosed_reasoning", "empty", "no_choice_found")


@dataclass(frozen=True)
class ChoiceRead:
    choice: str | None
    status: str  # one of ANSWER_STATUSES

    @property
    def parsed(self) -> bool:
        return self.choice is not None

    def as_data(self) -> dict:
        """The fields a protocol writes on the seat's turn event."""
        return {"choice": self.choice, "parsed": self.parsed, "answer_status": self.status}


def _normalise(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


def _explicit_hits(text: str, allowed: set[str]) -> list[str]:
    hits: list[tuple[int, str]] = []
    for pattern in _EXPLICIT:
        for match in pattern.finditer(text):
            letter = match.group(1)
            # "Answer: I think..." is the pronoun, not option I.
            if letter == "I" and _PRONOUN_I.match(text, match.end(1)):
                continue
            if letter in allowed:
                hits.append((match.start(1), letter))
    return [letter for _, letter in sorted(hits)]


def _by_option_text(text: str, options: Mapping[str, str]) -> str | None:
    """'Answer: maybe' -> the letter whose option text it names; None unless exactly one option fits best."""
    statements = _ANSWER_TEXT.findall(text)
    if not statements:
        return None
    said = _normalise(statements[-1])
    texts = {letter: _normalise(body) for letter, body in options.items() if _normalise(body)}
    exact = [letter for letter, body in texts.items() if said == body]
    if len(exact) == 1:
        return exact[0]
    prefixed = [(len(body), letter) for letter, body in texts.items() if said.startswith(body + " ")]
    if not prefixed:
        return None
    prefixed.sort(reverse=True)
    if len(prefixed) > 1 and prefixed[0][0] == prefixed[1][0]:
        return None
    return prefixed[0][1]


def read_choice(text: str | None, letters: str | Iterable[str] | Mapping[str, str] = "ABCDE") -> ChoiceRead:
    """The option letter a reply settles on, with why there is none when it cannot be told (never a guess).

    `letters` are the allowed letters; pass the options mapping {letter: text} to also accept an
    answer stated as an option's text ("Answer: yes" for PubMedQA's A. yes).
    """
    stripped = strip_reply(text)
    if stripped.unclosed_reasoning:
        return ChoiceRead(None, "unclosed_reasoning")  # truncated reasoning is not a committed answer
    if not stripped.text:
        return ChoiceRead(None, "empty")
    choice = _choice_in(stripped.text, letters)
    return ChoiceRead(choice, "parsed" if choice is not None else "no_choice_found")


def parse_choice(text: str | None, letters: str | Iterable[str] | Mapping[str, str] = "ABCDE") -> str | None:
    """The option letter a reply settles on, or None when it cannot be told (see `read_choice`)."""
    return read_choice(text, letters).choice


def _choice_in(body: str, letters: str | Iterable[str] | Mapping[str, str]) -> str | None:
    options = letters if isinstance(letters, Mapping) else None
    allowed = {str(x).upper() for x in letters}
    hits = _explicit_hits(body, allowed)
    if hits:
        return hits[-1]  # the last explicit statement wins: models often revise mid-reply
    lines = {h for h in _LINE_LETTER.findall(body) if h in allowed}
    if len(lines) == 1:
        return lines.pop()
    bare = body.strip().strip(".*()[] ").upper()
    if bare in allowed:
        return bare
    if options:
        return _by_option_text(body, options)
    return None


def exact_match(predicted: str | None, gold: str | None) -> float | None:
    """1.0 or 0.0; None when there is no gold answer to compare with. An unparsed answer counts as wrong."""
    if gold is None:
        return None
    return 1.0 if predicted is not None and predicted.strip().upper() == gold.strip().upper() else 0.0


def recall_on(flagged: Iterable[tuple[str | None, str | None]]) -> float | None:
    """Share of flagged items whose prediction equals the target (e.g. MetaMedQA-style missing-answer
    recall: how often the 'None of the above' option was picked where it was the right one).
    Items are (predicted, target) pairs; None when there are none."""
    pairs = list(flagged)
    if not pairs:
        return None
    return sum(exact_match(p, t) or 0.0 for p, t in pairs) / len(pairs)
