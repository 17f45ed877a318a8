"""Reading a Board Simulation response into turns and a conclusion: the evaluation's view.

OpenTumorBoard has two readers, and they disagree, so medpanel names its modes after them:

* The training reward (``training/verl_otb/reward.py``) reads strictly: exactly one
  ``<discussion>`` and one ``<conclusion>`` block, one ``<turn N> Role: text`` per line. That
  reading is the format score itself and lives in board_format.py (`score_format`).
* The evaluation (``scripts/evaluation/formats/simulation_evaluation_format.py``) reads leniently
  and reports a parse status. Its conclusion is what the judge, ROUGE-L and BERTScore score. Two
  modes of it live here:

  - ``reader="released"`` does what that script does, quirks included: turn numbers in any
    Unicode digit; a turn head may stand alone on its line with the role on the next; ``<Turn 1>``
    in capitals is not a turn (the reply then goes to the older markdown-table reading); a turn's
    continuation lines are joined after a blank line; a turn head with nothing after its colon
    takes the next line as its text, even when that line is the next turn's head. Only one
    *leading* ``<think>`` block is removed. These rules are the release's own, kept on purpose
    instead of `medpanel.reply_text.strip_reply`.
  - ``reader="lenient"`` (the default of `parse_board_response`) is medpanel's reader: reasoning
    and fences are removed by `strip_reply` (a reply whose reasoning never closes has no answer),
    a turn head must name its role on its own line, ``<Turn 1>`` is accepted in any case, a
    turn's text joins its lines with single newlines, and a head with nothing said is no turn.
    The markdown-table format is not read.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

from pydantic import BaseModel, Field

from medpanel.errors import UsageError
from medpanel.reply_text import strip_reply

ParseStatus = Literal["parsed", "parsed_with_warnings", "parsed_after_cleanup", "raw_fallback"]
Reader = Literal["released", "lenient"]
READERS = ("released", "lenient")


class BoardTurn(BaseModel):
    number: int  # as written; a markdown-table row (released reader) carries its position instead
    role: str
    text: str


class ParsedBoard(BaseModel):
    """What the evaluation reader found. `conclusion` is None when the status is raw_fallback."""

    status: ParseStatus
    warnings: list[str] = Field(default_factory=list)
    cleanup: list[str] = Field(default_factory=list)  # "think", "code_fence": what was removed first
    turns: list[BoardTurn] = Field(default_factory=list)
    conclusion: str | None = None
    conclusion_sentences: int | None = None
    role_count: int = 0
    reader: Reader = "lenient"
    layout: Literal["turns", "table"] = "turns"


_LOOSE_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*(?=\s|$)")


def count_sentences_loosely(text: str) -> int:
    """Sentences as the evaluation reader counts them for its warning: any run of end marks
    (closing quotes or brackets allowed) before whitespace or the end; no abbreviation rules."""
    return len(_LOOSE_SENTENCE_END.findall((text or "").strip()))


def turn_number(digits: str) -> int:
    """int() of a turn number in any Unicode digits; a number too long for int() (over 4,300
    digits, only seen in loops) is larger than any turn count, so it stands in as 10**20. Each digit
    is read as its value first, so leading zeros in any script ("1" after 25 Arabic-Indic zeros)
    are dropped before the length check, as int() ignores them."""
    digits = "".join(str(unicodedata.digit(ch)) for ch in digits).lstrip("0") or "0"
    return int(digits) if len(digits) <= _INT_MAX_STR_DIGITS else 10**20


_INT_MAX_STR_DIGITS = 4300  # CPython's default limit on int() of a string


_OPEN_DISCUSSION = re.compile(r"<\s*discussion\s*>", re.I)
_CLOSE_DISCUSSION = re.compile(r"<\s*/\s*discussion\s*>", re.I)
_OPEN_CONCLUSION = re.compile(r"<\s*conclusion\s*>", re.I)
_CLOSE_CONCLUSION = re.compile(r"<\s*/\s*conclusion\s*>", re.I)

# The released head. Every `\s*` may cross line ends, which is what lets "<turn 1>\nModerator: ..."
# be a head and lets a head with nothing after its colon take the next line as its text; `\d`
# takes any Unicode digit; no IGNORECASE, so "<Turn 1>" is not a head.
_RELEASED_HEAD = re.compile(r"^\s*<\s*turn\s+(\d+)\s*>\s*([^:\n]{1,80}?)\s*:\s*(.*)$", re.M)
# medpanel's head: spaces and tabs only inside the head line, any case.
_LENIENT_HEAD = re.compile(r"^[ \t]*<\s*turn\s+(\d+)\s*>[ \t]*([^:\n]{1,80}?)[ \t]*:[ \t]*(.*)$", re.M | re.I)

_RELEASED_THINK = re.compile(r"\A\s*<think\b[^>]*>.*?</think>\s*", re.I | re.S)


def clean_response(text: str) -> tuple[str, list[str]]:
    """The released evaluation's cleanup: outer whitespace, one *leading* <think>...</think> block,
    then a surrounding ``` fence (its first line, and a last line that is only ```)."""
    cleaned = (text or "").strip()
    steps: list[str] = []
    without_think = _RELEASED_THINK.sub("", cleaned, count=1).strip()
    if without_think != cleaned:
        steps.append("think")
        cleaned = without_think
    if cleaned.startswith("```"):
        lines = cleaned.splitlines()[1:]  # the opening fence line, with any language tag
        if lines and lines[-1].strip() == "```":
            lines = lines[:-1]
        cleaned = "\n".join(lines).strip()
        steps.append("code_fence")
    return cleaned, steps


def _read_turns(cleaned: str, steps: list[str], reader: Reader) -> ParsedBoard:
    """The tagged-turns reading, shared by both modes; they differ in the head pattern, how a
    turn's lines are joined, and how roles are trimmed."""
    released = reader == "released"
    warnings: list[str] = []
    opened, closed = _OPEN_DISCUSSION.search(cleaned), _CLOSE_DISCUSSION.search(cleaned)
    if opened is None:
        warnings.append("missing <discussion> tag")
    if closed is None:
        warnings.append("missing </discussion> tag")
    conclusion_open = _OPEN_CONCLUSION.search(cleaned)
    if conclusion_open is None:
        return ParsedBoard(status="raw_fallback", warnings=["missing <conclusion> section"], cleanup=steps, reader=reader)
    conclusion_close = _CLOSE_CONCLUSION.search(cleaned, conclusion_open.end())
    if conclusion_close is None:
        warnings.append("missing </conclusion> tag")  # a reply cut at max_tokens: keep what is there
    conclusion = cleaned[conclusion_open.end():conclusion_close.start() if conclusion_close else len(cleaned)].strip()

    body = cleaned[opened.end() if opened else 0:closed.start() if closed else conclusion_open.start()]
    heads = list((_RELEASED_HEAD if released else _LENIENT_HEAD).finditer(body))
    turns: list[BoardTurn] = []
    for index, head in enumerate(heads):
        rest = body[head.end():heads[index + 1].start() if index + 1 < len(heads) else len(body)]
        # The rest starts with its own newline; the release adds one more, so continuation lines
        # follow a blank line there.
        said = (head.group(3) + ("\n" if released else "") + rest).strip()
        if not said:  # a head with nothing said is not a turn
            continue
        role = head.group(2).strip().strip("*")
        turns.append(BoardTurn(number=turn_number(head.group(1)), role=role if released else role.strip(), text=said))
    if not turns or not conclusion:
        return ParsedBoard(status="raw_fallback", warnings=["missing turns or conclusion text"], cleanup=steps, reader=reader)
    if [t.number for t in turns] != list(range(1, len(turns) + 1)):
        warnings.append("turn numbers are not 1..N in order")
    roles = [t.role.casefold() for t in turns]
    if released and any("insufficient_evidence" in role for role in roles):
        warnings.append("disallowed insufficient_evidence role")
    return _finish(turns, conclusion, warnings, steps, reader, "turns", len(set(roles)))


def _finish(turns: list[BoardTurn], conclusion: str, warnings: list[str], steps: list[str], reader: Reader,
            layout: Literal["turns", "table"], role_count: int) -> ParsedBoard:
    sentences = count_sentences_loosely(conclusion)
    if not 2 <= sentences <= 4:
        warnings.append(f"expected a 2-4 sentence conclusion, found approximately {sentences}")
    status: ParseStatus = "parsed_with_warnings" if warnings else ("parsed_after_cleanup" if "think" in steps else "parsed")
    return ParsedBoard(status=status, warnings=warnings, cleanup=steps, turns=turns, conclusion=conclusion,
                       conclusion_sentences=sentences, role_count=role_count, reader=reader, layout=layout)


# The older reply format the released evaluation still reads when no turn head is found: a
# markdown table of | role | response | rows, then a "Conclusion:" line.
_TABLE_CONCLUSION = re.compile(r"^\s*(?:#{1,6}\s*)?(?:\*\*conclusion:\*\*|\*\*conclusion\*\*:|conclusion:)\s*(.*)$", re.M | re.I)
_TABLE_ROW = re.compile(r"^\s*\|\s*([^|]+?)\s*\|\s*(.*)$")
_TABLE_RULE = re.compile(r":?-+:?")


def _read_table(cleaned: str, steps: list[str]) -> ParsedBoard:
    label = _TABLE_CONCLUSION.search(cleaned)
    if label is None:
        return ParsedBoard(status="raw_fallback", warnings=["missing Conclusion section"], cleanup=steps, reader="released")
    conclusion = (label.group(1) + "\n" + cleaned[label.end():]).strip()
    rows: list[tuple[str, list[str]]] = []  # (role, lines said); a line that is no row continues the last
    for line in cleaned[:label.start()].strip().splitlines():
        row = _TABLE_ROW.match(line)
        if row is None:
            if rows:
                rows[-1][1].append(line.rstrip())
            continue
        role = row.group(1).strip()
        if role.casefold() == "role" or _TABLE_RULE.fullmatch(role):  # the header row and its rule
            continue
        rows.append((role.strip("*").strip(), [row.group(2).strip()]))
    turns: list[BoardTurn] = []
    for role, lines in rows:
        said = "\n".join(lines).strip()
        said = said[:-1].rstrip() if said.endswith("|") else said  # the row's closing bar
        if said:
            turns.append(BoardTurn(number=len(turns) + 1, role=role, text=said))
    if not turns or not conclusion:
        return ParsedBoard(status="raw_fallback", warnings=["missing table rows or conclusion text"], cleanup=steps, reader="released")
    roles = [t.role.casefold() for t in turns]
    warnings = ["duplicate specialist roles"] if len(set(roles)) != len(roles) else []
    if any("insufficient_evidence" in role for role in roles):
        warnings.append("disallowed insufficient_evidence role")
    return _finish(turns, conclusion, warnings, steps, "released", "table", len(set(roles)))


def parse_board_response(text: str, reader: Reader = "lenient") -> ParsedBoard:
    """Read a response as the benchmark's evaluation does (`reader="released"`, exactly) or as
    medpanel does (`"lenient"`); see the module docstring for how they differ.

    Status: raw_fallback when no turn (or, released, table row), no conclusion tag, no turn text or
    an empty conclusion is found; parsed_with_warnings when a tag is missing, the turns are not
    numbered 1..N, or the conclusion is not 2-4 sentences; parsed_after_cleanup when it parsed
    cleanly only after a reasoning block was removed (a removed code fence is listed in `cleanup`
    but, as in the released reader, does not change the status); parsed otherwise.
    """
    if reader == "released":
        cleaned, steps = clean_response(text)
        return _read_turns(cleaned, steps, reader) if _RELEASED_HEAD.search(cleaned) else _read_table(cleaned, steps)
    if reader != "lenient":
        raise UsageError(f"Unknown board reader '{reader}'.", f"Use one of: {', '.join(READERS)}.")
    stripped = strip_reply(text)
    steps = list(stripped.steps)
    if stripped.unclosed_reasoning:
        return ParsedBoard(status="raw_fallback", warnings=["reasoning never closed: no answer"], cleanup=steps, reader=reader)
    if not _LENIENT_HEAD.search(stripped.text):
        return ParsedBoard(status="raw_fallback", warnings=["no '<turn N> Role: text' line"], cleanup=steps, reader=reader)
    return _read_turns(stripped.text, steps, reader)


_CLOSED_CONCLUSION = re.compile(r"<\s*conclusion\s*>(.*?)<\s*/\s*conclusion\s*>", re.I | re.S)
_OPEN_ENDED_CONCLUSION = re.compile(r"<\s*conclusion\s*>(.+)\Z", re.I | re.S)
_LABELLED_CONCLUSION = re.compile(r"\A\s*(?:#{1,6}\s*)?(?:\*\*conclusion:\*\*|\*\*conclusion\*\*:|conclusion:)\s*(.+)\Z", re.I | re.S)


def extract_conclusion(text: str, reader: Reader = "lenient") -> tuple[str, str]:
    """(conclusion, how it was found) for judging; ("", "unavailable") is a format failure, scored
    at the floor of each scale, never dropped. Tries the reader, then a reply that is only
    "Conclusion: ...", then a closed or open-ended <conclusion> tag anywhere. The released mode
    searches the raw reply for these, as the release does; the lenient one searches what is left
    once `strip_reply` has removed reasoning, so a conclusion drafted inside <think> is not taken."""
    parsed = parse_board_response(text, reader)
    if parsed.conclusion:
        return parsed.conclusion, "parsed"
    raw = (text or "") if reader == "released" else strip_reply(text).text
    if "|" not in raw and (labelled := _LABELLED_CONCLUSION.match(raw.strip())) and labelled.group(1).strip():
        return labelled.group(1).strip(), "conclusion_only_response"
    for pattern in (_CLOSED_CONCLUSION, _OPEN_ENDED_CONCLUSION):
        found = pattern.search(raw)
        if found and found.group(1).strip():
            return found.group(1).strip(), "conclusion_xml"
    return "", "unavailable"
