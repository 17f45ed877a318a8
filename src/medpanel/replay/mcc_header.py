"""The header of an MCC debate log, the lines before the first turn: case id, question, numbered options
and gold answer. It is read apart from the body because it has a grammar of its own (labelled fields, an
options list whose texts can run onto the next line, a gold answer given as a number, an index or the
option's text) and because what it finds decides how the body is read: option letters when the header
lists numbered options, answer words (as in the PubMedQA logs) when it does not.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

from medpanel.replay.mcc_text import BANNER, LABEL, NUMBERED, SEPARATOR, norm, option_letter, word_answer


def _label_kind(label: str) -> str:
    low = label.casefold().strip()
    if re.search(r"(?:^|[\s_])id$|案例id$|编号$|^pmid$", low):
        return "id"
    if re.search(r"^(?:options?|choices?)$|^选项$", low):
        return "options"
    if re.search(r"^(?:correct|answer|gold|正确|答案)", low):
        return "gold"
    if re.search(r"^(?:case[\s_]*description|description|question|vignette|case|clinical\s+case|问题|病例|题目|案例描述)", low):
        return "question"
    return "other"


def _match_gold(value: str, options: dict[str, str]) -> str | None:
    """The letter whose option text the gold answer names: exact, then normalised, then a unique containment."""
    def fold(text: str) -> str:
        return re.sub(r"[\s\W_]+", " ", unicodedata.normalize("NFKC", text).casefold()).strip()

    target = value.strip()
    if not target:
        return None
    for same in (lambda a, b: a.strip() == b, lambda a, b: a.strip().casefold() == b.casefold(), lambda a, b: fold(a) == fold(b)):
        hits = [k for k, text in options.items() if same(text, target)]
        if len(hits) == 1:
            return hits[0]
    folded = fold(target)
    if folded:
        hits = [k for k, text in options.items() if re.search(rf"\b{re.escape(folded)}\b", fold(text)) or (fold(text) and fold(text) in folded)]
        if len(hits) == 1:
            return hits[0]
    return None


def _resolve_gold(label: str, value: str, options: dict[str, str]) -> str | None:
    if not options:
        return word_answer(value)
    value_n = norm(value)
    explicit = re.search(r"(?:(?i:option\s*(?:number)?)|选项编号|选项)\s*[:：]?\s*(\d{1,2})(?!\d)", value_n)
    if explicit:
        return option_letter(int(explicit.group(1)))
    if re.search(r"(?i:index)|索引", label) and (m := re.match(r"\s*(\d{1,2})\b", value_n)):
        return option_letter(int(m.group(1)) + 1)  # a 0-based index
    letter = _match_gold(value, options)
    if letter is None and re.fullmatch(r"[A-J]", value_n) and value_n in options:
        letter = value_n
    return letter


@dataclass
class Header:
    case_id: str = ""
    question: str = ""
    options: dict[str, str] = field(default_factory=dict)
    gold: str | None = None
    gold_text: str = ""
    metadata: dict[str, str] = field(default_factory=dict)


def parse_header(lines: list[str]) -> Header:
    """Id, question, options and gold from the lines before the first turn."""
    head = Header()
    question: list[str] = []
    gold_label = ""
    mode = "pre"
    last_letter = None
    for raw in lines:
        line = raw.rstrip()
        key = norm(line)
        if not key or SEPARATOR.match(key) or BANNER.match(key):
            mode = "done" if mode == "gold" and key else mode
            continue
        label = LABEL.match(key)
        kind = _label_kind(label.group("label")) if label else None
        if mode == "question" and kind not in ("options", "gold"):
            question.append(line)
            continue
        if mode == "options" and kind != "gold":
            numbered = NUMBERED.match(line)
            if numbered and int(numbered.group("num")) >= 1:
                last_letter = option_letter(int(numbered.group("num")))
                head.options[last_letter] = numbered.group("text").strip()
            elif last_letter:  # an option's text running onto the next line
                head.options[last_letter] = f"{head.options[last_letter]} {line.strip()}"
            continue
        if mode == "done" or label is None:
            continue
        value = label.group("value").strip()
        if kind == "id" and not head.case_id:
            head.case_id = value
        elif kind == "question" and not question:
            mode = "question"
            if value:
                question.append(value)
        elif kind == "options":
            mode = "options"
        elif kind == "gold" and not gold_label:
            gold_label, head.gold_text, mode = label.group("label"), value, "gold"
        elif kind == "other" and mode == "pre":
            head.metadata[label.group("label").strip()] = value
    head.question = "\n".join(question).strip()
    head.gold = _resolve_gold(gold_label, head.gold_text, head.options) if gold_label else None
    return head
