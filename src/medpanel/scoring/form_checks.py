"""The form of a deliberation, judged from its text alone: does it repeat itself, recite the case,
leak its reply schema, end in a conclusion of the right length? No model, no protocol.

Words are compared lowercased with punctuation dropped: a word is a run of letters and digits, so
"Non-small-cell," and "non small cell" are the same three words (and "3.2 cm" is "3", "2", "cm").

    repeats_earlier(text, earlier)      the text repeats an 8-word sequence of an earlier text
    recites_case(text, case)            share of the text's words inside runs of >= 12 words copied from the case
    sentence_count(text), conclusion_ok(text)    2 to 4 sentences
    contains_schema_text(text, schema)  a field description (or a field name written as a JSON key) of the schema
    board_checks(turns, conclusion, case_text)   a tumor board's acceptance points
    consult_checks(messages, schemas)            a consult's acceptance points
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from medpanel.scoring.sentences import count_sentences

REPEAT_WORDS = 8  # an n-gram this long shared with an earlier turn is a repetition
RECITE_RUN = 12  # a run of this many words copied from the case is recitation
MOSTLY = 0.5  # "mostly recites": more than this share of the words lie in copied runs
DESCRIPTION_WORDS = 6  # a description this long or longer matches on any 6 of its consecutive words
MIN_DESCRIPTION_WORDS = 4  # shorter descriptions ("what they say") are ordinary prose, never matched
MODERATOR = "moderator"

_WORD = re.compile(r"[^\W_]+")


def words(text: str) -> list[str]:
    """The text's words, lowercased, without punctuation."""
    return _WORD.findall((text or "").lower())


def ngrams(tokens: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


def repeated_phrase(text: str, earlier_texts: Iterable[str], n: int = REPEAT_WORDS) -> str | None:
    """The first n-word sequence of `text` that also occurs in one of `earlier_texts`, or None."""
    seen: set[tuple[str, ...]] = set()
    for earlier in earlier_texts:
        seen |= ngrams(words(earlier), n)
    tokens = words(text)
    for i in range(len(tokens) - n + 1):
        if tuple(tokens[i : i + n]) in seen:
            return " ".join(tokens[i : i + n])
    return None


def repeats_earlier(text: str, earlier_texts: Iterable[str], n: int = REPEAT_WORDS) -> bool:
    """Whether `text` repeats an n-word sequence (8 by default) of an earlier text."""
    return repeated_phrase(text, earlier_texts, n) is not None


def loops(text: str, n: int = REPEAT_WORDS) -> bool:
    """Whether `text` repeats one of its own n-word sequences (a reply stuck in a loop)."""
    tokens = words(text)
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


# Words a sentence does not end on: a small model stopped by a bound mid-phrase ("... and the next step is.").
DANGLING = frozenset("a an and or of with without in on at to for from by the its his her their is are was were be "
                     "diagnosis patient".split())


def stops_mid_phrase(text: str) -> str | None:
    """The word `text` stops on when it is one that leads on (DANGLING), else None."""
    tokens = words(text)
    return tokens[-1] if tokens and tokens[-1] in DANGLING else None


def recites_case(text: str, case_text: str, run: int = RECITE_RUN) -> float:
    """The share of `text`'s words that lie in runs of at least `run` consecutive words copied from
    `case_text` (0.0 for an empty text). Above MOSTLY (0.5) the text mostly recites the case."""
    tokens = words(text)
    if not tokens:
        return 0.0
    case_grams = ngrams(words(case_text), run)
    copied = [False] * len(tokens)
    for i in range(len(tokens) - run + 1):
        if tuple(tokens[i : i + run]) in case_grams:
            copied[i : i + run] = [True] * run
    return sum(copied) / len(tokens)


def sentence_count(text: str) -> int:
    """Sentences, by medpanel.scoring.sentences (a boundary is . ! or ? before whitespace, abbreviations aside)."""
    return count_sentences(text or "")


def conclusion_ok(text: str) -> bool:
    """A conclusion of two to four sentences."""
    return 2 <= sentence_count(text) <= 4


def spoken_text(text: str) -> str:
    """What a reply says: the string values of a JSON object (not its keys), else the text itself."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError):
        return text or ""
    if not isinstance(data, dict):
        return text or ""
    parts: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, (list, dict)):
            for item in value.values() if isinstance(value, dict) else value:
                walk(item)

    walk(data)
    return " ".join(parts)


def schema_parts(schema: Any) -> tuple[list[str], list[str]]:
    """(field descriptions, field names) of a pydantic model (class or instance) or a JSON schema dict."""
    if not isinstance(schema, dict):
        if hasattr(schema, "model_json_schema"):
            schema = schema.model_json_schema()
        else:
            raise TypeError(f"not a schema: {schema!r}")
    descriptions: list[str] = []
    names: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key == "properties" and isinstance(value, dict):
                    names.extend(value)
                    for sub in value.values():
                        walk(sub)
                elif key == "description" and isinstance(value, str):
                    descriptions.append(value)
                else:
                    walk(value)

    walk(schema)
    return descriptions, list(dict.fromkeys(names))


def schema_text_in(text: str, schema: Any) -> str | None:
    """What of the schema `text` contains, or None: a field description of at least four words (any six
    consecutive words of a longer one), or a field name written as a JSON key (`"message":`), or a
    multi-word field name as written (`next_speaker`)."""
    descriptions, names = schema_parts(schema)
    tokens = words(text)
    joined = " " + " ".join(tokens) + " "
    for description in descriptions:
        described = words(description)
        if len(described) < MIN_DESCRIPTION_WORDS:
            continue
        size = min(len(described), DESCRIPTION_WORDS)
        for i in range(len(described) - size + 1):
            phrase = " ".join(described[i : i + size])
            if f" {phrase} " in joined:
                return phrase
    lowered = (text or "").lower()
    for name in names:
        key = name.lower()
        if re.search(r"[\"']" + re.escape(key) + r"[\"']\s*:", lowered) or ("_" in key and key in lowered):
            return name
    return None


def contains_schema_text(text: str, schema: Any) -> bool:
    """Whether `text` contains a field description or field name of the schema (see schema_text_in)."""
    return schema_text_in(text, schema) is not None


@dataclass
class FormChecks:
    """Acceptance points by name (True: passed), with a line on each failure."""

    passed: dict[str, bool] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(self.passed.values())

    def check(self, name: str, ok: bool, detail: str = "") -> None:
        self.passed[name] = bool(ok)
        if not ok and detail:
            self.details[name] = detail

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "passed": dict(self.passed), "details": dict(self.details)}


def _role(role: str) -> str:
    return " ".join((role or "").split()).lower()


def board_checks(turns: Sequence[tuple[str, str]], conclusion: str, case_text: str, specialists: int = 3,
                 min_turns: int = 4) -> FormChecks:
    """A tumor board's form: at least `min_turns` turns, at least `specialists` distinct specialist roles
    (the Moderator not counted, roles compared without case), no turn repeating an 8-word sequence of an
    earlier turn, no turn mostly reciting the case, and a conclusion of two to four sentences.
    `turns` are (role, text) in order."""
    out = FormChecks()
    out.check("turns", len(turns) >= min_turns, f"{len(turns)} turns, fewer than {min_turns}")
    roles = {_role(role) for role, _ in turns} - {MODERATOR, ""}
    out.check("specialists", len(roles) >= specialists, f"{len(roles)} specialist role(s): {', '.join(sorted(roles)) or 'none'}")
    repeats = []
    for i, (role, text) in enumerate(turns):
        phrase = repeated_phrase(text, [t for _, t in turns[:i]])
        if phrase:
            repeats.append(f"turn {i + 1} ({role}): '{phrase}'")
    out.check("no_repeats", not repeats, "; ".join(repeats))
    reciting = [f"turn {i + 1} ({role}): {share:.0%} copied" for i, (role, text) in enumerate(turns)
                if (share := recites_case(text, case_text)) > MOSTLY]
    out.check("no_recitation", not reciting, "; ".join(reciting))
    n = sentence_count(conclusion)
    out.check("conclusion", 2 <= n <= 4, f"conclusion of {n} sentence(s)")
    return out


def consult_checks(messages: Sequence[tuple[str, str] | str], schemas: Iterable[Any] = ()) -> FormChecks:
    """A consult's form: no message repeats an earlier one of the same speaker (the same words, or an
    8-word sequence of it), and none contains text of the reply schemas the seats were given.
    `messages` are (speaker, text) in order, or bare texts (then all are one speaker's)."""
    pairs = [(m if isinstance(m, tuple) else ("", m)) for m in messages]
    schemas = list(schemas)
    out = FormChecks()
    repeats, leaks = [], []
    for i, (speaker, text) in enumerate(pairs):
        earlier = [t for s, t in pairs[:i] if s == speaker]
        mine = words(text)
        if mine and any(words(t) == mine for t in earlier):
            repeats.append(f"message {i + 1} ({speaker or 'message'}) repeats an earlier one")
        elif phrase := repeated_phrase(text, earlier):
            repeats.append(f"message {i + 1} ({speaker or 'message'}): '{phrase}'")
        for schema in schemas:
            if found := schema_text_in(text, schema):
                leaks.append(f"message {i + 1} ({speaker or 'message'}): '{found}'")
                break
    out.check("no_repeats", not repeats, "; ".join(repeats))
    out.check("no_schema_text", not leaks, "; ".join(leaks))
    return out
