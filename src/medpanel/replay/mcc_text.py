"""The text side of reading MCC's debate logs: every line pattern ("Option 5", banners, labels, round
summaries, result lines) and the small helpers that read a seat's name, an option or an answer word out
of a line. They are kept in one list, apart from the readers that use them, because the header reader,
the body reader and the choice settling all match the same markers, and the logs' varied wording
(machine-translated, sometimes Chinese) is easiest to follow and extend in one place. Lines are matched
as `norm` gives them (NFKC-folded), so full-width colons, brackets and digits need no patterns of their own.
"""

from __future__ import annotations

import re
import unicodedata

# "Option 5", "option5", "选项 5", "Option B"; "Option?" and "Option None" mean the log could not tell.
OPTION = re.compile(r"(?:(?<![A-Za-z])(?i:option)|选项)\s*(?:(?P<num>\d{1,2})(?!\d)|(?P<letter>[A-J])(?![A-Za-z])|(?P<unknown>[?？]|(?i:none)\b))")
WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)*")
SEPARATOR = re.compile(r"^={10,}$")
BANNER = re.compile(r"^[=\-]{3,}\s*(?P<title>[^=\-\s].*?)\s*[=\-]{3,}$")  # "======== Debate Round 2 ========"
ROUND_IN_TITLE = re.compile(r"(?i:round\s*(?P<a>\d+))|第\s*(?P<b>\d+)\s*轮")
RESULT_TITLE = re.compile(r"(?i:final|result)|最终|结果")
ROUND_SUMMARY = re.compile(r"^(?:(?i:debate\s+round|round)\s*(?P<a>\d+)(?i:\s+of\s+(?:the\s+)?debate)?|辩论第\s*(?P<b>\d+)\s*轮)\s*[:：,，]")
TURN_START = re.compile(r"^(?P<seat>[A-Za-z][\w-]*?)\s*(?:(?i:is\s+(?:reasoning|generating|thinking|responding))|正在(?:推理|生成|思考|回应))")
ELLIPSIS_END = re.compile(r"(?:\.{2,}|…+)\s*$")  # "Qwen is responding to the diagnosis of other models..."
RESPONDING = re.compile(r"(?i:responding)|回应")
BODY_HEADER = re.compile(r"(?i:full\s+response|complete\s+response|response\s+to\s+(?:the\s+)?other\s+models|response\s+content|answer\s+content)"
                          r"|完整回答|回应内容|回答内容")
CONCLUSION_HEADING = re.compile(r"(?i:conclusion|diagnos)|结论|诊断")  # "GPT's diagnostic conclusion:" heads a turn
BODY_HEADER_END = re.compile(r"[:：]\s*=*\s*$")
NOT_A_CHOICE = re.compile(r"(?i:unable\s+to\s+extract|could\s+not\s+extract|no\s+clear\s+choice)|无法提取|未能提取|无法确定")
NOTICE = re.compile(r"(?i:\bfrom\b.*\bto\b|warning|chang(?:e|ed|es)\b|correct(?:ed|s)\b|stance)|警告|从.*(?:到|改为)|改变|纠正")
GOLD_LINE = re.compile(r"^(?i:correct\s+(?:answer|diagnosis|choice|option))|^正确(?:答案|诊断|选项)")
FINAL_LINE = re.compile(r"(?i:final\s+(?:choice|diagnosis|decision|selection|answer|result))|最终(?:诊断|选择|决定|答案|结果)")
# "Consensus reached: All models selected yes", "Consensus: All models chose Option 2", and a bare "All models chose Option 2"
CONSENSUS_LINE = re.compile(r"^(?i:consensus\s*(?:reached|achieved)?\s*[:：!！])|^达成(?:共识|一致)|^(?i:all\s+(?:three\s+)?models\s+(?:have\s+)?(?:chose|choose|chosen|selected|select|picked))")
VERDICT_LINE = re.compile(r"^(?i:is\s+the\s+final\s+\w+\s+correct)|^最终\S{0,4}是否正确")
MODEL_SPEAK = re.compile(r"^[*#>\-【\[]|(?i:\bmy\s+final)")  # a model's own words or an extraction trace, never the result
# a result line the handlers could not read still counts, as unread: it names the result and a choice
RESULT_WORDS = re.compile(r"(?i:\bfinal\b|majority|\bvote\b|consensus|\ball\s+(?:three\s+)?models\b)|最终|多数|投票|共识|一致")
CHOICE_WORDS = re.compile(r"(?i:\bchos|\bchoos|\bselect|\bpicked\b|\bchoice\b|\banswer\b|\bdiagnosis\b|\bdecision\b)|选择|诊断|答案")
# the label of a seat's status line after its reasoning: "GPT's post-response choice:", "Qwen chooses:", "GPT回应后的选择："
STATUS_LABEL = re.compile(r"(?i:choice|choos|chose|select|option|answer|response)|选择|答案|回应")
MARKDOWN = re.compile(r"^(?:[*#>\-]|\d+\.\s)")
MAJORITY = re.compile(r"(?i:majority|vote)|多数|投票")
# "Maximum debate rounds reached", "The maximum number of debate rounds has been reached", "达到最大辩论轮次": only as a
# line of its own kind (a line opening with the maximum), never a "maximum" anywhere in a model's sentence. The seats'
# "GPT, Qwen and DeepSeek-R1 did not reach a consensus" is recognised by `Reader.ending` (every seat named first).
NO_CONSENSUS_END = re.compile(r"^(?i:(?:the\s+)?maximum\s+(?:number\s+of\s+)?(?:debate\s+)?rounds?\b)|^(?:达到)?最大辩论轮次")
SEATS_DID_NOT_AGREE = re.compile(r"(?i:\bdid\s+not\s+reach\s+(?:a\s+|full\s+)?(?:consensus|agreement))|未达成(?:共识|一致)")
INITIAL_STATUS = re.compile(r"^(?i:(?:the\s+)?(?:three|all)\s+models.*initial|(?:the\s+)?initial\s+diagnos.*three\s+models|initial\s+consensus)|^三个模型初始|^模型初始")
AGREED = re.compile(r"(?i:consensus|agree(?:d|ment)?\b)|一致|共识")
DISAGREED = re.compile(r"(?i:\bno\s+consensus|not\s+(?:yet\s+)?reach|did\s+not|different|disagree|still\s+no)|未达成|仍未|分歧|不一致")
FINAL_SELECTION_IN_TEXT = re.compile(
    r"(?i:final\s+(?:selection|choice|decision|answer|diagnosis)\s*(?:is)?)[\s:：]*\**\s*(?:(?i:option)|选项)\s*(?P<num>\d{1,2})(?!\d)")
FINAL_WORD_IN_TEXT = re.compile(r"(?i:final\s+(?:selection|choice|decision|answer)\s*(?:is)?)[\s:：]*\**\s*[\"“']?(?P<word>[A-Za-z][\w-]*)")
# "GPT selected: yes", "All models selected yes", "Qwen chose: maybe" (answers given as words)
WORD_CHOICE = re.compile(r"(?i:\b(?:selected|selects|chose|chooses|choose|choice|answered))(?:\s*(?i:is)\b)?[\s:：=\-–—]*[\"“']?(?P<ans>[A-Za-z][\w\- ]{0,30}?)[\"”']?\s*[.,;!]?$")
WORD_LABEL = re.compile(r"^(?i:choice|answer|selected|final|all\s+models)|^选择|^答案")
# what a choice line's label says once its seat is removed: "Choice:", "选择:", "GPT selected:"
CHOICE_LABEL = re.compile(r"(?i:choice|chose|selected|selection|answer)|选择|答案")
POSSESSIVE = re.compile(r"^(?:'s\b|’s\b|的)")  # "GPT's diagnostic conclusion:", "GPT的选择:" head a block, they are not a choice line
LABEL = re.compile(r"^(?P<label>[^:：]{1,40}?)\s*[:：](?:\s*[:：])*\s*(?P<value>.*)$")  # "selected:: maybe" too
NUMBERED = re.compile(r"^\s*(?P<num>\d{1,2})\s*[.、．)]\s*(?P<text>.*)$")



# ---------------------------------------------------------------- small helpers


def option_letter(num: int) -> str:
    return chr(ord("A") + num - 1)


def norm(line: str) -> str:
    """The line as the patterns see it: NFKC folds full-width colons, brackets and digits."""
    return unicodedata.normalize("NFKC", line).strip()


def _edit_distance_at_most_one(a: str, b: str) -> bool:
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b)) <= 1
    if abs(len(a) - len(b)) > 1:
        return False
    short, long_ = sorted((a, b), key=len)
    return any(long_[:i] + long_[i + 1:] == short for i in range(len(long_)))


class SeatNames:
    """Recognises seat names as the logs spell them: 'DeepSeek-R1', 'Deepseek', and typos such as 'Qwwn'."""

    def __init__(self, seats: tuple[str, ...]) -> None:
        self.seats = seats
        self._folded = {s.casefold(): s for s in seats}
        self._cache: dict[str, str | None] = {}

    def __call__(self, token: str) -> str | None:
        if token not in self._cache:
            base = re.split(r"[-_]", token, maxsplit=1)[0].casefold()
            seat = self._folded.get(base)
            if seat is None and len(base) >= 4:  # one typo allowed on longer names only ('GPT' vs 'Get' must not match)
                close = [s for f, s in self._folded.items() if len(f) >= 4 and f[0] == base[0] and _edit_distance_at_most_one(f, base)]
                seat = close[0] if len(close) == 1 else None
            self._cache[token] = seat
        return self._cache[token]

    def mentions(self, line: str) -> list[tuple[int, str]]:
        return [(m.start(), seat) for m in WORD.finditer(line) if (seat := self(m.group()))]


def option_refs(line: str) -> list[tuple[int, str | None]]:
    """(position, letter, or None for an explicit 'unknown') for every option reference in a line."""
    refs = []
    for m in OPTION.finditer(line):
        if m.group("num"):
            n = int(m.group("num"))
            refs.append((m.start(), option_letter(n) if n >= 1 else None))
        else:
            refs.append((m.start(), m.group("letter")))  # None for 'Option?'
    return refs


def word_answer(text: str) -> str | None:
    text = text.strip().strip("\"“”'*.").strip().casefold()
    return text if text and len(text.split()) <= 4 and not OPTION.search(text) else None


def verdict_of(line: str) -> bool | None:
    if "✓" in line or "✔" in line:
        return True
    if "✗" in line or "✘" in line or "×" in line:
        return False
    tail = re.split(r"[?？:：]", line, maxsplit=1)[-1]
    if re.search(r"(?i:incorrect|wrong|false)|错误|不正确", tail):
        return False
    if re.search(r"(?i:correct|true)|正确", tail):
        return True
    return None


def round_number(match: re.Match) -> int:
    return int(next(g for g in match.groups() if g is not None))
