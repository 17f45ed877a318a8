"""Read one of MCC's published debate logs (one question per file) into a Case and a Transcript.

Each log is the console output of one question: a header (id, question, numbered options, gold
answer), each model's initial choice and reasoning, up to three debate rounds, a summary line per
round, and the final result. The wording was machine-translated and varies from file to file, and
some files are the raw Chinese output, so the parser keys on structure, not on sentences:

- a seat name opening a line with a verb ("GPT is reasoning", "Qwen正在回应", "DeepSeek is
  responding") starts that seat's turn: an initial turn before the first round, a debate turn after;
- a line of '=' or '-' around a title ("=== Debate Round 2 ===", "=== 辩论第2轮 ===") opens a round;
- the first option a turn's own status lines give its seat, or give no one ("Choice: Option 5",
  "GPT response completed, Choice: Option 5", "GPT回应完成，选择: 选项 5") is its choice; the
  reasoning is the block between rows of '=' after a "...response...:" / "...回答:" header;
- "Debate Round r: ..." lines summarise a round; lines naming the "final" choice or diagnosis
  (最终诊断), "Consensus: All models chose ..." and "Is the final ... correct?" give the logged result.
  Every result line is kept as a `ResultStatement`; one that cannot be read is kept as unread.

Structure markers match only where they can structurally occur: a block opened by a row of '=' ends
at the next row, or, its closing row missing, at a line that can only be structure (a round or result
banner, a round summary, its owner's own status line, the panel's initial status, or a turn's opening
line followed by a turn's structure); a block still open at the end of the log is warned about and its
result-like lines counted as unread. A log with no result section whose debate is not over ends
mid-debate: it is warned about and reported apart from the figures. Reasoning without rows ends only at a line that can only be structure (another
turn, a banner, a round summary, a seat's status line); summary markers are read only outside a turn's
open reasoning and only as whole lines of their kind (docs/replay.md lists them).

Answers are option numbers ("Option 5", "选项 5", "Option B") when the header lists numbered
options, and words ("GPT selected: yes", as in the PubMedQA logs) when it does not.

A seat's initial choice is read one of two ways (`choice_reading`):

- ``mcc`` (the default): only from a choice line, a line labelled as the choice itself ("Choice:
  Option 5", "选择: 选项 5", "GPT selected: yes"), which is the second line of each conclusion block
  ("GPT's diagnostic conclusion:" / "GPT的诊断结论:", then "Choice: ..."). MCC's tooling printed
  that line from the answer it had extracted, and its published per-model accuracies evidently count
  that value, so a seat whose block has no choice line (case_174: "Qwen's diagnostic conclusion:
  Option 5", the option on the heading) is unparsed;
- ``lenient``: every statement the log makes about the turn, as for debate turns: the option on a
  heading line, extraction traces ("【严格匹配】找到最终选择: 选项2"), and the reasoning's own
  "final selection" when those are missing or split.

Debate turns are read the lenient way under both settings.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from medpanel.cases.model import Case, Reference
from medpanel.errors import UsageError
from medpanel.transcript import Transcript

SEATS: tuple[str, ...] = ("GPT", "Qwen", "DeepSeek")
ChoiceReading = Literal["mcc", "lenient"]
CHOICE_READINGS: tuple[str, ...] = get_args(ChoiceReading)
# The models behind the seats in the MCC paper (GPT-o1 was run as o1-mini).
SEAT_MODELS = {"GPT": "o1-mini", "Qwen": "QwQ-32B", "DeepSeek": "DeepSeek-R1"}

# "Option 5", "option5", "选项 5", "Option B"; "Option?" and "Option None" mean the log could not tell.
_OPTION = re.compile(r"(?:(?<![A-Za-z])(?i:option)|选项)\s*(?:(?P<num>\d{1,2})(?!\d)|(?P<letter>[A-J])(?![A-Za-z])|(?P<unknown>[?？]|(?i:none)\b))")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)*")
_SEPARATOR = re.compile(r"^={10,}$")
_BANNER = re.compile(r"^[=\-]{3,}\s*(?P<title>[^=\-\s].*?)\s*[=\-]{3,}$")  # "======== Debate Round 2 ========"
_ROUND_IN_TITLE = re.compile(r"(?i:round\s*(?P<a>\d+))|第\s*(?P<b>\d+)\s*轮")
_RESULT_TITLE = re.compile(r"(?i:final|result)|最终|结果")
_ROUND_SUMMARY = re.compile(r"^(?:(?i:debate\s+round|round)\s*(?P<a>\d+)(?i:\s+of\s+(?:the\s+)?debate)?|辩论第\s*(?P<b>\d+)\s*轮)\s*[:：,，]")
_TURN_START = re.compile(r"^(?P<seat>[A-Za-z][\w-]*?)\s*(?:(?i:is\s+(?:reasoning|generating|thinking|responding))|正在(?:推理|生成|思考|回应))")
_ELLIPSIS_END = re.compile(r"(?:\.{2,}|…+)\s*$")  # "Qwen is responding to the diagnosis of other models..."
_RESPONDING = re.compile(r"(?i:responding)|回应")
_BODY_HEADER = re.compile(r"(?i:full\s+response|complete\s+response|response\s+to\s+(?:the\s+)?other\s+models|response\s+content|answer\s+content)"
                          r"|完整回答|回应内容|回答内容")
_CONCLUSION_HEADING = re.compile(r"(?i:conclusion|diagnos)|结论|诊断")  # "GPT's diagnostic conclusion:" heads a turn
_BODY_HEADER_END = re.compile(r"[:：]\s*=*\s*$")
_NOT_A_CHOICE = re.compile(r"(?i:unable\s+to\s+extract|could\s+not\s+extract|no\s+clear\s+choice)|无法提取|未能提取|无法确定")
_NOTICE = re.compile(r"(?i:\bfrom\b.*\bto\b|warning|chang(?:e|ed|es)\b|correct(?:ed|s)\b|stance)|警告|从.*(?:到|改为)|改变|纠正")
_GOLD_LINE = re.compile(r"^(?i:correct\s+(?:answer|diagnosis|choice|option))|^正确(?:答案|诊断|选项)")
_FINAL_LINE = re.compile(r"(?i:final\s+(?:choice|diagnosis|decision|selection|answer|result))|最终(?:诊断|选择|决定|答案|结果)")
# "Consensus reached: All models selected yes", "Consensus: All models chose Option 2", and a bare "All models chose Option 2"
_CONSENSUS_LINE = re.compile(r"^(?i:consensus\s*(?:reached|achieved)?\s*[:：!！])|^达成(?:共识|一致)|^(?i:all\s+(?:three\s+)?models\s+(?:have\s+)?(?:chose|choose|chosen|selected|select|picked))")
_VERDICT_LINE = re.compile(r"^(?i:is\s+the\s+final\s+\w+\s+correct)|^最终\S{0,4}是否正确")
_MODEL_SPEAK = re.compile(r"^[*#>\-【\[]|(?i:\bmy\s+final)")  # a model's own words or an extraction trace, never the result
# a result line the handlers could not read still counts, as unread: it names the result and a choice
_RESULT_WORDS = re.compile(r"(?i:\bfinal\b|majority|\bvote\b|consensus|\ball\s+(?:three\s+)?models\b)|最终|多数|投票|共识|一致")
_CHOICE_WORDS = re.compile(r"(?i:\bchos|\bchoos|\bselect|\bpicked\b|\bchoice\b|\banswer\b|\bdiagnosis\b|\bdecision\b)|选择|诊断|答案")
# the label of a seat's status line after its reasoning: "GPT's post-response choice:", "Qwen chooses:", "GPT回应后的选择："
_STATUS_LABEL = re.compile(r"(?i:choice|choos|chose|select|option|answer|response)|选择|答案|回应")
_MARKDOWN = re.compile(r"^(?:[*#>\-]|\d+\.\s)")
_MAJORITY = re.compile(r"(?i:majority|vote)|多数|投票")
# "Maximum debate rounds reached", "The maximum number of debate rounds has been reached", "达到最大辩论轮次": only as a
# line of its own kind (a line opening with the maximum), never a "maximum" anywhere in a model's sentence. The seats'
# "GPT, Qwen and DeepSeek-R1 did not reach a consensus" is recognised by `_Reader.ending` (every seat named first).
_NO_CONSENSUS_END = re.compile(r"^(?i:(?:the\s+)?maximum\s+(?:number\s+of\s+)?(?:debate\s+)?rounds?\b)|^(?:达到)?最大辩论轮次")
_SEATS_DID_NOT_AGREE = re.compile(r"(?i:\bdid\s+not\s+reach\s+(?:a\s+|full\s+)?(?:consensus|agreement))|未达成(?:共识|一致)")
_INITIAL_STATUS = re.compile(r"^(?i:(?:the\s+)?(?:three|all)\s+models.*initial|(?:the\s+)?initial\s+diagnos.*three\s+models|initial\s+consensus)|^三个模型初始|^模型初始")
_AGREED = re.compile(r"(?i:consensus|agree(?:d|ment)?\b)|一致|共识")
_DISAGREED = re.compile(r"(?i:\bno\s+consensus|not\s+(?:yet\s+)?reach|did\s+not|different|disagree|still\s+no)|未达成|仍未|分歧|不一致")
_FINAL_SELECTION_IN_TEXT = re.compile(
    r"(?i:final\s+(?:selection|choice|decision|answer|diagnosis)\s*(?:is)?)[\s:：]*\**\s*(?:(?i:option)|选项)\s*(?P<num>\d{1,2})(?!\d)")
_FINAL_WORD_IN_TEXT = re.compile(r"(?i:final\s+(?:selection|choice|decision|answer)\s*(?:is)?)[\s:：]*\**\s*[\"“']?(?P<word>[A-Za-z][\w-]*)")
# "GPT selected: yes", "All models selected yes", "Qwen chose: maybe" (answers given as words)
_WORD_CHOICE = re.compile(r"(?i:\b(?:selected|selects|chose|chooses|choose|choice|answered))(?:\s*(?i:is)\b)?[\s:：=\-–—]*[\"“']?(?P<ans>[A-Za-z][\w\- ]{0,30}?)[\"”']?\s*[.,;!]?$")
_WORD_LABEL = re.compile(r"^(?i:choice|answer|selected|final|all\s+models)|^选择|^答案")
# what a choice line's label says once its seat is removed: "Choice:", "选择:", "GPT selected:"
_CHOICE_LABEL = re.compile(r"(?i:choice|chose|selected|selection|answer)|选择|答案")
_POSSESSIVE = re.compile(r"^(?:'s\b|’s\b|的)")  # "GPT's diagnostic conclusion:", "GPT的选择:" head a block, they are not a choice line
_LABEL = re.compile(r"^(?P<label>[^:：]{1,40}?)\s*[:：](?:\s*[:：])*\s*(?P<value>.*)$")  # "selected:: maybe" too
_NUMBERED = re.compile(r"^\s*(?P<num>\d{1,2})\s*[.、．)]\s*(?P<text>.*)$")


@dataclass
class RoundSummary:
    """What the log's own "Debate Round r: ..." line says about the end of round r."""

    round: int
    consensus: bool
    choices: dict[str, str | None] = field(default_factory=dict)  # seat -> choice (consensus: every seat the same)


@dataclass
class ResultStatement:
    """One line where the log states its result ("Final diagnosis: Option 5", "Consensus: All models chose Option 2")."""

    line: int
    text: str
    kind: str  # final | consensus | initial_consensus
    choice: str | None = None
    read: bool = False  # False: the line states a result this parser could not read (counted, never dropped)


@dataclass
class LoggedResult:
    """What the log itself reports, kept apart from what the replay recomputes."""

    final: str | None = None
    method: str | None = None  # consensus | majority
    correct: bool | None = None  # the log's "Is the final diagnosis correct?"
    initial_consensus: bool | None = None
    gold: str | None = None  # restated later ("Correct Answer: Option 5 (...)"); the header's gold is preferred
    rounds: list[RoundSummary] = field(default_factory=list)
    finals_seen: list[str] = field(default_factory=list)  # every final-choice line, to spot a log contradicting itself
    statements: list[ResultStatement] = field(default_factory=list)  # every result line, read or not

    @property
    def unread(self) -> list[ResultStatement]:
        return [st for st in self.statements if not st.read]


@dataclass
class ParsedLog:
    path: Path
    case: Case
    transcript: Transcript
    logged: LoggedResult
    warnings: list[str] = field(default_factory=list)
    ends_mid_debate: bool = False  # no result section and the debate not over: a cut-off log, not a finished debate

    @property
    def id(self) -> str:
        return self.case.id


# ---------------------------------------------------------------- small helpers


def option_letter(num: int) -> str:
    return chr(ord("A") + num - 1)


def _norm(line: str) -> str:
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
        return [(m.start(), seat) for m in _WORD.finditer(line) if (seat := self(m.group()))]


def _option_refs(line: str) -> list[tuple[int, str | None]]:
    """(position, letter, or None for an explicit 'unknown') for every option reference in a line."""
    refs = []
    for m in _OPTION.finditer(line):
        if m.group("num"):
            n = int(m.group("num"))
            refs.append((m.start(), option_letter(n) if n >= 1 else None))
        else:
            refs.append((m.start(), m.group("letter")))  # None for 'Option?'
    return refs


def _word_answer(text: str) -> str | None:
    text = text.strip().strip("\"“”'*.").strip().casefold()
    return text if text and len(text.split()) <= 4 and not _OPTION.search(text) else None


def _verdict(line: str) -> bool | None:
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


def _round_number(match: re.Match) -> int:
    return int(next(g for g in match.groups() if g is not None))


# ---------------------------------------------------------------- header: id, question, options, gold


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
        return _word_answer(value)
    value_n = _norm(value)
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
class _Header:
    case_id: str = ""
    question: str = ""
    options: dict[str, str] = field(default_factory=dict)
    gold: str | None = None
    gold_text: str = ""
    metadata: dict[str, str] = field(default_factory=dict)


def _parse_header(lines: list[str]) -> _Header:
    """Id, question, options and gold from the lines before the first turn."""
    head = _Header()
    question: list[str] = []
    gold_label = ""
    mode = "pre"
    last_letter = None
    for raw in lines:
        line = raw.rstrip()
        key = _norm(line)
        if not key or _SEPARATOR.match(key) or _BANNER.match(key):
            mode = "done" if mode == "gold" and key else mode
            continue
        label = _LABEL.match(key)
        kind = _label_kind(label.group("label")) if label else None
        if mode == "question" and kind not in ("options", "gold"):
            question.append(line)
            continue
        if mode == "options" and kind != "gold":
            numbered = _NUMBERED.match(line)
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


# ---------------------------------------------------------------- the body: turns, rounds, result


@dataclass
class _Turn:
    seat: str
    phase: str
    round: int
    line: int
    stated: str | None = None  # the first choice statement before the reasoning block
    stated_found: bool = False
    choice_line: str | None = None  # the first line before the reasoning labelled as the choice ("Choice: Option 5")
    choice_line_found: bool = False
    status: str | None = None  # the first status line after the reasoning naming this seat's choice
    status_found: bool = False
    body: list[str] = field(default_factory=list)
    loose: list[str] = field(default_factory=list)  # unclassified lines: the reasoning when the log has no '=' block
    in_body: bool = False
    fenced: bool = False  # the reasoning block opened with a row of '=': only a row of '=' closes it
    closed: bool = False  # the reasoning is over (its block closed, or the seat's selection line came): structure may follow


class _Reader:
    """One pass over a log's lines after the header; each method handles one kind of line."""

    def __init__(self, lines: list[str], keys: list[str], names: SeatNames, word_answers: bool) -> None:
        self.lines = lines
        self.keys = keys
        self.names = names
        self.word_answers = word_answers
        self.logged = LoggedResult()
        self.turns: list[_Turn] = []
        self.warnings: list[str] = []
        self.current: _Turn | None = None
        self.body_owner: _Turn | None = None
        self.round_no = 0
        self.pending_summary: RoundSummary | None = None  # "No consensus yet." with the choices on the next lines
        self.majority_ending = False
        self.in_result = False  # under the "Final Debate Result" banner: lines restate the result, not a round's status
        self.skip_opening_row = False
        self.body_from = 0  # the first line of the open reasoning block

    # --- what a line says about choices

    def attributions(self, key: str) -> list[tuple[str | None, str | None]]:
        """(seat or None, choice) pairs in a line: each seat takes the first answer named after it."""
        if self.word_answers:  # only lines led by a seat or a label: prose "chose" is not a choice
            m = _WORD_CHOICE.search(key)
            mentions = [(pos, seat) for pos, seat in self.names.mentions(key) if pos < (m.start() if m else 0)]
            led = (mentions and mentions[0][0] == 0) or _WORD_LABEL.match(key)
            if not m or not led or (answer := _word_answer(m.group("ans"))) is None:
                return []
            return [(mentions[-1][1] if mentions else None, answer)]
        refs = _option_refs(key)
        if not refs:
            return []
        mentions = self.names.mentions(key)
        out: list[tuple[str | None, str | None]] = []
        seen: set[str] = set()
        for pos, letter in refs:
            owner = next((seat for mpos, seat in reversed(mentions) if mpos < pos), None)
            if owner is None:
                out.append((None, letter))
            elif owner not in seen:
                seen.add(owner)
                out.append((owner, letter))
        return out

    def is_choice_line(self, key: str) -> bool:
        """'Choice: Option 5', '选择: 选项 5', 'GPT selected: yes': a label naming the choice itself, with at
        most a seat before it. A seat's heading ("Qwen's diagnostic conclusion: Option 5") is not one."""
        m = _LABEL.match(key)
        if not m:
            return False
        label = m.group("label").strip()
        lead = _WORD.match(label)
        if lead and self.names(lead.group()):
            label = label[lead.end():].lstrip()
            if _POSSESSIVE.match(label):
                return False
        return bool(_CHOICE_LABEL.fullmatch(label))

    def value(self, key: str) -> tuple[bool, str | None]:
        """(found, choice) for a result line: its first option, or its answer word."""
        if self.word_answers:
            m = _WORD_CHOICE.search(key)
            answer = _word_answer(m.group("ans") if m else re.split(r"[:：]", key)[-1])
            return answer is not None, answer
        refs = _option_refs(key)
        return (True, refs[0][1]) if refs else (False, None)

    def is_notice(self, key: str) -> bool:
        """'DeepSeek changed its position! From Option 1 to Option 2', warnings: news about a choice, not a choice."""
        refs = _option_refs(key)
        return bool(_NOTICE.search(key[: refs[0][0]] if refs else key))

    def seat_starting(self, key: str) -> tuple[str, bool] | None:
        """(seat, responding) when the line opens a turn."""
        m = _TURN_START.match(key)
        if m and (seat := self.names(m.group("seat"))):
            return seat, bool(_RESPONDING.search(key[m.end("seat"):m.end()]))
        return None

    # --- the pass

    def run(self, start: int) -> None:
        i = start
        while i < len(self.lines):
            i = self.step(i)
        owner = self.body_owner
        if owner is not None and owner.fenced:
            # the block's closing row is missing and nothing structural followed: what it holds may be the log's own
            # result, so a result-like line in it is counted as unread, never silently taken as the model's words
            self.warnings.append(f"line {owner.line}: {owner.seat}'s reasoning block opened with a row of '=' never closes; "
                                 "it runs to the end of the log")
            for j in range(self.body_from, len(self.lines)):
                key = self.keys[j]
                if _MODEL_SPEAK.search(key) or _GOLD_LINE.match(key):
                    continue
                if (_FINAL_LINE.search(key) or _CONSENSUS_LINE.search(key) or _VERDICT_LINE.search(key)
                        or (_RESULT_WORDS.search(key) and (_CHOICE_WORDS.search(key) or _option_refs(key)))):
                    self.statement(j, "unknown", False, None)

    def step(self, i: int) -> int:
        key = self.keys[i]
        if self.skip_opening_row:
            self.skip_opening_row = False
            return i + 1
        if self.body_owner is not None:
            if not self.ends_body(self.body_owner, i, key):
                self.body_owner.body.append(self.lines[i])
                return i + 1
            self.body_owner.closed = True
            self.body_owner = None
            if _SEPARATOR.match(key):
                return i + 1
        if not key:
            self.pending_summary = None
            return i + 1
        for handler in (self.banner, self.turn_start, self.body_header):
            if handler(i, key):
                return i + 1
        # summary markers occur only between turns or after a turn's reasoning, never inside it
        if self.current is not None and not self.current.closed and self.ends_reasoning(self.current, key):
            self.current.closed = True
        if self.current is None or self.current.closed:
            for handler in (self.round_summary, self.summary_continuation, self.verdict, self.final, self.consensus_reached,
                            self.gold, self.initial_status, self.ending):
                if handler(i, key):
                    return i + 1
        self.choice_line(i, key)
        if self.current is None:
            self.unread_result(i, key)
        return i + 1

    def ends_body(self, owner: _Turn, i: int, key: str) -> bool:
        """A block opened by a row of '=' ends at the next such row; as its closing row can be missing (MedQA
        case_1084), it also ends at a line that can only be structure: a round or result banner, a round summary,
        its owner's own status line ("GPT's post-response choice: Option 5"), the panel's initial status, and a
        turn's opening line ("Qwen is reasoning the answer...") only when what follows it is a turn's structure.
        A block without rows ends at a line that can only be structure: another turn, a banner, a round summary,
        a seat's status line, the panel's initial status."""
        if _SEPARATOR.match(key):
            return True
        if owner.fenced:
            if m := _BANNER.match(key):  # a banner a model could have written closes only before what such a banner heads
                if _RESULT_TITLE.search(m.group("title")):
                    return self.result_follows(i)
                if _ROUND_IN_TITLE.search(m.group("title")):
                    return self.structure_follows(i)
            if self.round_summary_match(key):
                return True
            if self.is_status_line(key) and self.names.mentions(key)[0][1] == owner.seat:
                return True
            if owner.phase == "initial" and _INITIAL_STATUS.search(key) and (_AGREED.search(key) or _DISAGREED.search(key)):
                return True
            return bool(self.seat_starting(key) and _ELLIPSIS_END.search(key) and self.structure_follows(i))
        return self.ends_reasoning(owner, key)

    def result_follows(self, i: int) -> bool:
        """Whether the next non-blank line after line i is what a result banner heads: the seats' agreement or
        disagreement ("GPT, Qwen, and DeepSeek-R1 have reached a consensus!"), a final or gold line."""
        j = next((j for j in range(i + 1, len(self.keys)) if self.keys[j]), None)
        if j is None:
            return True
        key = self.keys[j]
        if _MODEL_SPEAK.search(key):
            return False
        if _FINAL_LINE.search(key) or _GOLD_LINE.match(key) or _CONSENSUS_LINE.search(key) or _NO_CONSENSUS_END.search(key):
            return True
        mentions = self.names.mentions(key)
        return bool(mentions) and mentions[0][0] == 0 and {seat for _, seat in mentions} == set(self.names.seats)

    def structure_follows(self, i: int) -> bool:
        """Whether the next non-blank line after line i is a turn's structure: a row or banner, a conclusion heading
        ("GPT's diagnostic conclusion:"), a choice or status line ("Choice: Option 5", "Qwen response completed,
        Choice: Option 4"), a reasoning block's header, or another turn's opening line."""
        j = next((j for j in range(i + 1, len(self.keys)) if self.keys[j]), None)
        if j is None:
            return True
        key = self.keys[j]
        if _SEPARATOR.match(key) or _BANNER.match(key) or self.seat_starting(key) or self.is_choice_line(key):
            return True
        if _BODY_HEADER.search(key) and _BODY_HEADER_END.search(key) and self.names.mentions(key):
            return True
        if _MODEL_SPEAK.search(key):
            return False
        if _ELLIPSIS_END.search(key) and len(key) <= 60:  # the tooling's progress line ("Start extracting model selection...")
            return True
        mentions = self.names.mentions(key)
        if not mentions or mentions[0][0] != 0:
            return False
        label = _LABEL.match(key)
        heading = bool(label and not label.group("value") and _CONCLUSION_HEADING.search(label.group("label")))
        return heading or self.is_status_line(key)

    def round_summary_match(self, key: str) -> re.Match | None:
        """'Debate Round 2: Still no consensus, GPT chooses Option 4, ...': a round number opening the line, then the
        panel's status (consensus or not) or the seats' choices. 'Round 2: the authors revisit...' is a model's words."""
        m = _ROUND_SUMMARY.match(key)
        if m is None:
            return None
        rest = key[m.end():]
        says_status = _AGREED.search(rest) or len({seat for seat, _ in self.attributions(rest) if seat}) >= 2
        return m if says_status else None

    def is_status_line(self, key: str) -> bool:
        """A line led by a seat that gives its choice and nothing else: 'Qwen's choice: Option 2 (Medial meniscus)'."""
        mentions = self.names.mentions(key)
        if not mentions or mentions[0][0] != 0:
            return False
        if self.word_answers:
            return bool(self.attributions(key))
        m = _LABEL.match(key)
        return bool(m and _STATUS_LABEL.search(m.group("label")) and _OPTION.match(m.group("value")))

    def statement(self, i: int, kind: str, found: bool, choice: str | None) -> None:
        self.logged.statements.append(ResultStatement(i + 1, self.lines[i].strip(), kind, choice, read=found and choice is not None))

    def unread_result(self, i: int, key: str) -> None:
        """A line outside every turn that names the result and a choice, which no handler read: counted as unread."""
        if _MODEL_SPEAK.search(key) or _GOLD_LINE.match(key) or _VERDICT_LINE.search(key):
            return
        if _RESULT_WORDS.search(key) and (_CHOICE_WORDS.search(key) or _option_refs(key)):
            self.statement(i, "unknown", False, None)

    def banner(self, i: int, key: str) -> bool:
        m = _BANNER.match(key)
        if not m:
            return bool(_SEPARATOR.match(key))
        title = m.group("title")
        rnd = _ROUND_IN_TITLE.search(title)
        if rnd and not _RESULT_TITLE.search(title):
            self.round_no = _round_number(rnd)
            self.current = None
        elif _RESULT_TITLE.search(title):
            self.current = None
            self.in_result = True
        return True  # other titles ("GPT's initial response") carry nothing

    def turn_start(self, i: int, key: str) -> bool:
        started = self.seat_starting(key)
        if not started:
            return False
        seat, responding = started
        if responding and self.round_no == 0:
            self.round_no = 1
            self.warnings.append(f"line {i + 1}: a debate turn before any round header; taken as round 1")
        phase = "debate" if self.round_no > 0 else "initial"
        self.current = _Turn(seat=seat, phase=phase, round=self.round_no, line=i + 1)
        self.turns.append(self.current)
        self.pending_summary = None
        return True

    def body_header(self, i: int, key: str) -> bool:
        if not (_BODY_HEADER.search(key) and _BODY_HEADER_END.search(key)):
            return False
        mentioned = self.names.mentions(key)
        if not mentioned:
            return False
        seat = mentioned[0][1]
        owner = self.current if self.current is not None and self.current.seat == seat else None
        if owner is None:
            self.warnings.append(f"line {i + 1}: reasoning of {seat} outside its turn; ignored")
            owner = _Turn(seat=seat, phase="orphan", round=self.round_no, line=i + 1)
        owner.in_body = True
        owner.closed = False
        self.body_owner = owner
        self.body_from = i + 1
        # the block opens with a row of '=' (on this line or the next), which must not be read as its end
        self.skip_opening_row = not key.endswith("=") and i + 1 < len(self.lines) and bool(_SEPARATOR.match(self.keys[i + 1]))
        owner.fenced = key.endswith("=") or self.skip_opening_row
        return True

    def round_summary(self, i: int, key: str) -> bool:
        m = self.round_summary_match(key)
        if not m:
            return False
        summary = RoundSummary(round=_round_number(m), consensus=bool(_AGREED.search(key)) and not _DISAGREED.search(key))
        pairs = self.attributions(key[m.end():])
        if summary.consensus:
            value = next((c for _, c in pairs if c), None)
            summary.choices = {seat: value for seat in self.names.seats}
        else:
            summary.choices = {seat: c for seat, c in pairs if seat}
        self.logged.rounds.append(summary)
        pending = not summary.consensus and len(summary.choices) < len(self.names.seats)
        self.pending_summary = summary if pending else None
        self.current = None
        return True

    def summary_continuation(self, i: int, key: str) -> bool:
        if self.pending_summary is None:
            return False
        pairs = [(s, c) for s, c in self.attributions(key) if s]
        mentions = self.names.mentions(key)
        if not pairs or mentions[0][0] != 0:
            self.pending_summary = None
            return False
        for seat, choice in pairs:
            self.pending_summary.choices.setdefault(seat, choice)
        return True

    def verdict(self, i: int, key: str) -> bool:
        if not _VERDICT_LINE.search(key):
            return False
        verdict = _verdict(key)
        if verdict is not None:
            self.logged.correct = verdict
        return True

    def final(self, i: int, key: str) -> bool:
        if not _FINAL_LINE.search(key) or _MODEL_SPEAK.search(key) or (self.current is not None and not self.current.in_body):
            return False
        found, choice = self.value(key)
        if not found:
            if _LABEL.match(key) and self.current is None:  # "Final diagnosis: <something unreadable>": a result, unread
                self.statement(i, "final", False, None)
                return True
            return False
        self.statement(i, "final", found, choice)
        if choice is not None:
            self.logged.finals_seen.append(choice)
            self.logged.final = choice
        self.logged.method = "majority" if (_MAJORITY.search(key) or self.majority_ending) else "consensus"
        self.current = None
        return True

    def consensus_reached(self, i: int, key: str) -> bool:
        """'Consensus reached: All models selected yes' closes the current round (or the initial answers)."""
        if not _CONSENSUS_LINE.search(key):
            return False
        found, choice = self.value(key)
        if self.in_result:
            pass  # a restatement of the result under its banner: no round's or initial status
        elif self.round_no > 0:
            if not any(r.round == self.round_no for r in self.logged.rounds):  # the round's own summary line says it already
                self.logged.rounds.append(RoundSummary(round=self.round_no, consensus=True, choices={s: choice for s in self.names.seats}))
        else:
            self.logged.initial_consensus = True
        if found or _CHOICE_WORDS.search(key):
            self.statement(i, "consensus", found, choice)
        if found and choice is not None:
            self.logged.final, self.logged.method = choice, "consensus"
            self.logged.finals_seen.append(choice)
        self.current = None
        return True

    def gold(self, i: int, key: str) -> bool:
        if not _GOLD_LINE.match(key):
            return False
        found, choice = self.value(key)
        if found and choice is not None:
            self.logged.gold = choice
        return True

    def initial_status(self, i: int, key: str) -> bool:
        if not _INITIAL_STATUS.search(key):
            return False
        if _DISAGREED.search(key):
            self.logged.initial_consensus = False
        elif _AGREED.search(key):
            self.logged.initial_consensus = True
            found, choice = self.value(key)
            if found or (self.word_answers and _CHOICE_WORDS.search(key)):  # "... All models chose Option 2" states the result
                self.statement(i, "initial_consensus", found, choice)
            if found and choice is not None and self.word_answers:  # "Initial consensus: All models selected yes" is the result
                self.logged.final, self.logged.method = choice, "consensus"
                self.logged.finals_seen.append(choice)
        self.current = None
        return True

    def ending(self, i: int, key: str) -> bool:
        """'Maximum debate rounds reached' / 'did not reach a consensus': what follows is a vote."""
        if _NO_CONSENSUS_END.search(key) or self.seats_did_not_agree(key):
            self.majority_ending = True
            self.current = None
            return True
        return False

    def seats_did_not_agree(self, key: str) -> bool:
        """'GPT, Qwen and DeepSeek-R1 did not reach a consensus': the line opens with every seat, then says so."""
        m = _SEATS_DID_NOT_AGREE.search(key)
        if not m:
            return False
        before = self.names.mentions(key[:m.start()])
        return bool(before) and before[0][0] == 0 and {seat for _, seat in before} == set(self.names.seats)

    def choice_line(self, i: int, key: str) -> None:
        turn = self.current
        if turn is None:
            return
        if not turn.in_body and _MARKDOWN.match(key):
            self.reasoning(turn, i)  # a model's own words, when the log has no '=' block around them
            return
        if self.is_notice(key):
            return
        if not turn.in_body and not turn.choice_line_found and self.is_choice_line(key):
            if _NOT_A_CHOICE.search(key):
                turn.choice_line_found = True
            elif owned := [choice for seat, choice in self.attributions(key) if seat in (None, turn.seat)]:
                turn.choice_line_found, turn.choice_line = True, owned[0]
        if not turn.in_body and not turn.stated_found:
            # the seat's first statement of its choice (in word logs, the selection line after its reasoning)
            if _NOT_A_CHOICE.search(key):
                turn.stated_found, turn.stated, turn.closed = True, None, True
                return
            for seat, choice in self.attributions(key):
                if seat in (None, turn.seat):
                    turn.stated_found, turn.stated, turn.closed = True, choice, True
                    return
            self.reasoning(turn, i)
        elif not turn.status_found and (turn.in_body or self.is_status_line(key)):
            # the status line after the reasoning; where there is no block, only a line of a status line's shape
            for seat, choice in self.attributions(key):
                if seat == turn.seat:
                    turn.status_found, turn.status, turn.closed = True, choice, True
                    return
            if not turn.in_body:
                self.reasoning(turn, i)
        elif not turn.in_body and not self.is_status_line(key):
            self.reasoning(turn, i)

    def reasoning(self, turn: _Turn, i: int) -> None:
        """A line of a model's own words outside any block: what follows is reasoning until structure says otherwise."""
        turn.loose.append(self.lines[i])
        turn.closed = False

    def ends_reasoning(self, turn: _Turn, key: str) -> bool:
        """Whether a line can only be structure, so the open reasoning of a turn without '=' rows ends before it."""
        return bool(_BANNER.match(key) or self.round_summary_match(key) or self.seat_starting(key) or self.is_status_line(key)
                    or (turn.phase == "initial" and _INITIAL_STATUS.search(key) and (_AGREED.search(key) or _DISAGREED.search(key))))


def _where(turn: _Turn) -> str:
    return f"line {turn.line}: {turn.seat}'s {turn.phase} turn" + (f" (round {turn.round})" if turn.phase == "debate" else "")


def _initial_choice_mcc(turn: _Turn, word_answers: bool, warnings: list[str]) -> tuple[str | None, dict]:
    """An initial turn read as MCC's tooling read it: its choice line, or unparsed. A note says what the
    lenient reading would have taken instead, so no departure goes unseen."""
    lenient, _ = _settle_choice(turn, word_answers, [])
    choice = turn.choice_line if turn.choice_line_found else None
    data: dict = {"choice": choice, "source": "choice-line"} if turn.choice_line_found else {"choice": None}
    if lenient != choice:
        data["lenient_choice"] = lenient
        warnings.append(f"{_where(turn)}: no choice line gives {lenient}, which the lenient reading takes; unparsed under MCC's reading"
                        if not turn.choice_line_found else
                        f"{_where(turn)}: the choice line gives {choice}, the lenient reading {lenient}; took the choice line")
    elif choice is None:
        warnings.append(f"{_where(turn)}: the log states no choice")
    return choice, data


def _settle_choice(turn: _Turn, word_answers: bool, warnings: list[str]) -> tuple[str | None, dict]:
    """A turn's choice from what the log says about it: the statement before the reasoning, the status
    line after it, and the reasoning's own "final selection". They nearly always agree; when they do
    not (a mistranslated line), the majority wins, ties going to the status line (printed right before
    MCC's consensus check), then the statement, then the reasoning."""
    witnesses: dict[str, str | None] = {}
    if turn.status_found:
        witnesses["status"] = turn.status
    if turn.stated_found:
        witnesses["stated"] = turn.stated
    if len(set(witnesses.values())) != 1:  # the reasoning can only settle a missing or split statement
        reasoning = _norm("\n".join(turn.body or turn.loose))
        if word_answers:
            if hits := [w.casefold() for w in _FINAL_WORD_IN_TEXT.findall(reasoning)]:
                witnesses["reasoning"] = hits[-1]
        elif hits := _FINAL_SELECTION_IN_TEXT.findall(reasoning):
            witnesses["reasoning"] = option_letter(int(hits[-1]))
    where = _where(turn)
    if not witnesses:
        warnings.append(f"{where}: the log states no choice")
        return None, {"choice": None}
    votes = list(witnesses.values())
    best = max(votes, key=lambda v: (votes.count(v), -votes.index(v)))  # most named; ties to the earliest witness
    source = next(name for name, v in witnesses.items() if v == best)
    data: dict = {"choice": best, "source": source}
    if source == "reasoning" and len(witnesses) == 1:
        warnings.append(f"{where}: choice read from the reasoning text")
    if len({v for k, v in witnesses.items() if k != "reasoning"}) > 1:
        data["witnesses"] = witnesses
        warnings.append(f"{where}: the log states different choices {witnesses}; took {best}")
    return best, data


def check_choice_reading(choice_reading: str) -> ChoiceReading:
    if choice_reading not in CHOICE_READINGS:
        raise UsageError(f"Unknown choice reading '{choice_reading}'.",
                         f"Use one of: {', '.join(CHOICE_READINGS)} (mcc reads initial choices only from their 'Choice:' line).")
    return choice_reading  # type: ignore[return-value]


def parse_log(text: str, path: str | Path = "log.txt", seats: tuple[str, ...] = SEATS, choice_reading: ChoiceReading = "mcc") -> ParsedLog:
    """Parse one log's text. Never raises on odd content: what cannot be read is left None and noted in warnings.
    `choice_reading` says how initial choices are read (see the module's docstring)."""
    check_choice_reading(choice_reading)
    path = Path(path)
    names = SeatNames(seats)
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    keys = [_norm(line) for line in lines]
    first_turn = next((i for i, key in enumerate(keys) if (m := _TURN_START.match(key)) and names(m.group("seat"))), len(lines))
    head = _parse_header(lines[:first_turn])
    word_answers = not head.options
    reader = _Reader(lines, keys, names, word_answers)
    reader.run(first_turn)
    warnings = reader.warnings
    logged = reader.logged

    transcript = Transcript()
    for turn in reader.turns:
        if choice_reading == "mcc" and turn.phase == "initial":
            choice, data = _initial_choice_mcc(turn, word_answers, warnings)
        else:
            choice, data = _settle_choice(turn, word_answers, warnings)
        if choice is not None and head.options and choice not in head.options:
            warnings.append(f"line {turn.line}: {turn.seat} chose option {choice}, which the header does not list")
        transcript.add("turn", "\n".join(turn.body or turn.loose).strip(), speaker=turn.seat, model=SEAT_MODELS.get(turn.seat, ""),
                       round=turn.round, phase=turn.phase, data=data)

    gold = head.gold
    if gold is None and logged.gold is not None:
        gold = logged.gold
        warnings.append("gold answer taken from a later 'Correct answer' line")
    elif gold is not None and logged.gold is not None and gold != logged.gold:
        warnings.append(f"header gold {gold} differs from the later logged gold {logged.gold}; kept the header's")
    if gold is None:
        warnings.append(f"gold answer '{head.gold_text}' matches no option")
    ends_mid_debate = _ends_mid_debate(reader)
    if ends_mid_debate:
        warnings.append(f"log ends mid-debate: no result section, and {ends_mid_debate}")
    if len(set(logged.finals_seen)) > 1:
        warnings.append(f"the log names different final choices: {', '.join(logged.finals_seen)}")
    if logged.final is not None:
        data = {"choice": logged.final, "method": logged.method, "source": "log"}
        consensus_round = next((r.round for r in logged.rounds if r.consensus), 0 if logged.initial_consensus else None)
        if logged.method == "consensus" and consensus_round is not None:
            data["round"] = consensus_round
        transcript.add("decision", logged.final, speaker="panel", data=data)

    answer_text = head.options.get(gold) if gold and head.options else (head.gold_text or None)
    case = Case(id=head.case_id or path.stem, source=str(path), question=head.question, options=head.options,
                reference=Reference(answer=gold, answer_text=answer_text), metadata={"log": path.name, **head.metadata})
    return ParsedLog(path=path, case=case, transcript=transcript, logged=logged, warnings=warnings, ends_mid_debate=bool(ends_mid_debate))


def _ends_mid_debate(reader: _Reader) -> str:
    """Why the log stops before its debate is over ("" when it does not): it has no result section (no result
    banner, no final or consensus line) and its last stage is incomplete (fewer turns than seats, a reasoning
    block never closed, no status line for it) or, complete, settled nothing (no consensus, no last round)."""
    logged = reader.logged
    if not reader.turns or reader.in_result or logged.final is not None or any(st.kind in ("final", "consensus") for st in logged.statements):
        return ""
    last = reader.round_no
    stage = [t for t in reader.turns if t.round == last and t.phase in ("initial", "debate")]
    where = "the initial answers" if last == 0 else f"round {last}"
    if len({t.seat for t in stage}) < len(reader.names.seats):
        return f"{where} has {len(stage)} of {len(reader.names.seats)} turns"
    if reader.body_owner is not None:
        return f"{where} stops inside {reader.body_owner.seat}'s reasoning"
    summarised = logged.initial_consensus is not None if last == 0 else any(r.round == last for r in logged.rounds)
    if not summarised:
        return f"{where} has no status line"
    settled = logged.initial_consensus is True or any(r.consensus for r in logged.rounds) or reader.majority_ending
    return "" if settled else f"the debate is not settled after {where}"


def parse_log_file(path: str | Path, seats: tuple[str, ...] = SEATS, choice_reading: ChoiceReading = "mcc") -> ParsedLog:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig", errors="replace")
    except OSError as exc:
        raise UsageError(f"Cannot read the MCC log {path}: {exc.strerror or exc}.", "Check the path and its permissions.") from None
    return parse_log(text, path, seats, choice_reading)


__all__ = ["CHOICE_READINGS", "SEATS", "SEAT_MODELS", "ChoiceReading", "LoggedResult", "ParsedLog", "ResultStatement", "RoundSummary", "SeatNames",
           "check_choice_reading", "option_letter", "parse_log", "parse_log_file"]
