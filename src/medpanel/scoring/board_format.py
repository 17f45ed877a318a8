"""How OpenTumorBoard reads a Board Simulation response, and the judge-free part of its reward.

A Board Simulation response is one discussion block of numbered turns and one conclusion block:

    <discussion>
    <turn 1> Moderator: ...
    <turn 2> Radiologist: ...
    </discussion>
    <conclusion>Two to four sentences.</conclusion>

Two readings of it are involved, because the benchmark has two (board_reader.py explains them):

* `score_format` is the *training reward's* format term (OpenTumorBoard's
  training/verl_otb/reward.py): strict, on the response as written. It gives dense partial credit
  per component plus an all-or-nothing exact part, minus a repetition penalty and an overlength
  penalty, and (in the released-code preset) fails closed on a truncated, looping or block-less
  response so that no judge is called for it.
* `parse_board_response` is the *evaluation* reader (scripts/evaluation/...), whose conclusion
  the judge, ROUGE-L and BERTScore score; `score_format` reports its view in `FormatScore.parse`.
  It has a ``released`` mode (the release's rules, exactly) and a ``lenient`` one (medpanel's).

Tokens. Two counts are involved and they are kept apart on purpose:

* Repetition is looked for in *word tokens* (`word_tokens`: casefolded runs of letters and
  digits, with one inner apostrophe or hyphen, and single CJK characters), the unit the
  released reward's thresholds were set in.
* Overlength is measured in *model tokens*. Pass the true count (`response_tokens`) or the
  model's tokenizer (`tokenizer`, any callable text -> sequence of tokens). Without either, word
  tokens stand in; they are an approximation that undercounts (subword tokenizers give roughly
  1.3 tokens per English word), and the result says which count was used.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from medpanel.errors import UsageError
from medpanel.reply_text import strip_reply
from medpanel.scoring.board_reader import (READERS, BoardTurn, ParsedBoard, ParseStatus, Reader, clean_response,  # noqa: F401
                                           count_sentences_loosely, extract_conclusion, parse_board_response, turn_number)

Tokenizer = Callable[[str], Sequence[object]]

# ---------------------------------------------------------------- tokens

_WORD = re.compile(r"[A-Za-z0-9]+(?:['’-][A-Za-z0-9]+)?|[\u4e00-\u9fff]")


def word_tokens(text: str) -> list[str]:
    """Casefolded word tokens: the unit of the repetition check (and the stand-in length count)."""
    return [token.casefold() for token in _WORD.findall(text or "")]


# ---------------------------------------------------------------- sentences

_SENTENCE_MARK = re.compile(r"[.!?][\"'”]*(?=\s|$)")
_TITLES = {"Mr", "Ms", "Dr"}


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"  # what the regex \w matches, in Unicode


def _word_before(text: str, end: int) -> str:
    """The word that ends at `end` when it has at most 3 characters (titles and initials are
    shorter), else "". Looks back only a few characters, so long texts stay linear."""
    start = end
    while start > 0 and end - start < 3 and _is_word_char(text[start - 1]):
        start -= 1
    return "" if start > 0 and _is_word_char(text[start - 1]) else text[start:end]


def count_sentences(text: str) -> int:
    """Sentences as the format score counts them: a '.', '!' or '?' (closing quotes allowed) before
    whitespace or the end, except after the titles Mr, Ms, Dr or a single capital initial ("J.")."""
    count = 0
    for mark in _SENTENCE_MARK.finditer(text or ""):
        word = _word_before(text, mark.start())
        if word in _TITLES or (len(word) == 1 and "A" <= word <= "Z"):
            continue
        count += 1
    return count


# ---------------------------------------------------------------- settings of the format term

COMPONENTS = ("blocks", "blocks_in_order", "envelope", "turn_syntax", "numbering", "roles",
              "conclusion_sentences", "no_outer_whitespace")

RELEASED_DENSE_WEIGHTS = {"blocks": 0.25, "envelope": 0.1875, "turn_syntax": 0.1875, "numbering": 0.1875,
                          "conclusion_sentences": 0.125, "no_outer_whitespace": 0.0625}
# The paper names six parts without weights; equal weights are this project's assumption.
PAPER_DENSE_WEIGHTS = {name: 1 / 6 for name in ("blocks_in_order", "turn_syntax", "numbering", "roles",
                                                 "conclusion_sentences", "no_outer_whitespace")}


class FormatSettings(BaseModel):
    """Every number of the format term. Defaults are the released reward code's; see `preset`."""

    preset: str = "released_code"
    dense_weights: dict[str, float] = Field(default_factory=lambda: dict(RELEASED_DENSE_WEIGHTS))
    dense_share: float = 0.25
    exact_share: float = 0.75
    # conclusion length: full credit inside [min, max], `near_credit` one sentence outside
    conclusion_min_sentences: int = 2
    conclusion_max_sentences: int = 4
    conclusion_near_credit: float = 0.5
    # repetition, in word tokens of the response's tail
    repetition_tail_tokens: int = Field(2048, ge=1)
    repetition_max_block: int = Field(8, ge=1)
    repetition_min_run: int = Field(8, ge=2)          # a block repeated this often in a row is a loop
    repetition_ngram: int = Field(4, ge=1)
    repetition_min_ngram_count: int = Field(12, ge=1)
    repetition_min_ngram_fraction: float = 0.15       # ... or one n-gram filling this share of the tail
    # "released_grid": the released scanner (block starts on a grid of the block width);
    # "every_offset": medpanel's stricter scanner (every start). See `longest_block_run`.
    repetition_detector: Literal["released_grid", "every_offset"] = "released_grid"
    run_penalty_range: tuple[float, float] = (8.0, 128.0)
    ngram_penalty_range: tuple[float, float] = (0.15, 0.50)
    # overlength, in model tokens
    overlength_start: int = 6144
    overlength_end: int = 8192
    # with no token count (neither `response_tokens` nor a tokenizer): "none" applies no overlength penalty, as
    # the release's _overlong_penalty(None, ...) does; "word_tokens" lets word tokens stand in (an undercount)
    length_without_count: Literal["none", "word_tokens"] = "none"
    floor: float = -1.0
    # fail closed: fixed scores (and no judge) for truncated / severely looping / block-less replies
    fail_closed: bool = True
    severe_run: float = 128.0
    severe_ngram_fraction: float = 0.50
    failure_scores: dict[str, float] = Field(default_factory=lambda: {
        "truncated": -1.0, "severe_repetition": -1.0, "no_blocks": -1.0, "one_block": -0.75})
    # score the response as written (released), or after the evaluation reader's cleanup
    score_cleaned_text: bool = False
    # strict turn lines: "unicode" reads <turn N> as the released pattern [1-9]\d* does (any
    # Unicode digit after the first); "ascii" takes ASCII digits only
    turn_digits: Literal["unicode", "ascii"] = "unicode"
    # distinct roles (role_count, the paper's roles part): "as_written" as the release counts
    # them ("Moderator" and "moderator" are two), or "casefolded"
    distinct_roles: Literal["as_written", "casefolded"] = "as_written"
    # the evaluation reader whose view is reported in FormatScore.parse (see board_reader.py)
    evaluation_reader: Reader = "released"

    @model_validator(mode="after")
    def _check(self) -> "FormatSettings":
        unknown = set(self.dense_weights) - set(COMPONENTS)
        if unknown:
            raise UsageError(f"Unknown format components {sorted(unknown)}.", f"Use weights for: {', '.join(COMPONENTS)}.")
        if any(w < 0 for w in self.dense_weights.values()) or abs(sum(self.dense_weights.values()) - 1.0) > 1e-6:
            raise UsageError(f"Format dense weights must be non-negative and sum to 1 (they sum to {sum(self.dense_weights.values()):g}).",
                             "Adjust the weights so the dense score stays within 0..1.")
        if self.overlength_end <= self.overlength_start:
            raise UsageError("overlength_end must exceed overlength_start.", "Set e.g. overlength_start=6144, overlength_end=8192.")
        for name, (lo, hi) in (("run_penalty_range", self.run_penalty_range), ("ngram_penalty_range", self.ngram_penalty_range)):
            if hi <= lo:
                raise UsageError(f"{name} must rise: ({lo}, {hi}).", "Give (start, end) with end > start.")
        return self

    @classmethod
    def for_preset(cls, name: str, **overrides) -> "FormatSettings":
        """'released_code': training/verl_otb/reward.py of OpenTumorBoard's repository, exactly (with
        its evaluation script's reader for `parse`).
        'paper': the paper's appendix E.2 (dense parts include roles, no fail-closed gate,
        continuous repetition penalty, floor -1); numbers the paper leaves out are the released
        ones; where it states no rule, medpanel's stricter or more lenient choice is used (every
        offset for loops, ASCII turn numbers, roles casefolded, the lenient reader)."""
        if name == "released_code":
            base = cls()
        elif name == "paper":
            base = cls(preset="paper", dense_weights=dict(PAPER_DENSE_WEIGHTS), fail_closed=False, length_without_count="word_tokens",
                       repetition_detector="every_offset", turn_digits="ascii", distinct_roles="casefolded",
                       evaluation_reader="lenient")
        else:
            raise UsageError(f"Unknown reward preset '{name}'.", "Use 'released_code' or 'paper'.")
        return cls.model_validate(base.model_dump() | overrides)


# ---------------------------------------------------------------- repetition and length

class RepetitionCheck(BaseModel):
    tail_tokens: int
    max_run: int              # most consecutive repeats of one block of 1..max_block word tokens, as the detector counts
    detector: str
    ngram_count: int          # occurrences of the commonest n-gram in the tail
    ngram_fraction: float     # share of the tail it covers: min(1, count * n / tail length)
    detected: bool
    severe: bool
    penalty: float


def _ramp(value: float, start: float, end: float) -> float:
    return min(1.0, max(0.0, (value - start) / (end - start)))


def longest_block_run(tokens: Sequence[str], max_block: int) -> int:
    """Most consecutive copies of any block of 1..max_block tokens, at any alignment (the
    "every_offset" detector).

    A stretch where tokens[i] == tokens[i - w] holds for L positions in a row is a block of width w
    repeated 1 + L // w times.
    """
    if not tokens:
        return 0
    best = 1
    for width in range(1, max_block + 1):
        streak = 0
        for i in range(width, len(tokens)):
            streak = streak + 1 if tokens[i] == tokens[i - width] else 0
            best = max(best, 1 + streak // width)
    return best


def released_block_run(tokens: Sequence[str], max_block: int) -> int:
    """The released scanner's longest run (the "released_grid" detector).

    For each width w it reads the tail in blocks that start at multiples of w: it counts how many
    copies of the block at a start follow back to back, then jumps past them. A loop that starts off
    that grid is therefore seen one copy short (its first copy is split across two blocks), and a
    final copy cut short is not counted. Tails under 8 tokens are not scanned (the run is 1), and a
    width is scanned only while two whole blocks still fit.
    """
    if len(tokens) < 8:
        return 1
    best = 1
    for width in range(1, max_block + 1):
        start = 0
        while start + 2 * width <= len(tokens):
            matched = 0  # positions j past the first block with tokens[j] == tokens[j - width]
            j = start + width
            while j < len(tokens) and tokens[j] == tokens[j - width]:
                matched += 1
                j += 1
            copies = 1 + matched // width
            best = max(best, copies)
            start += copies * width
    return best


def check_repetition(text: str, settings: FormatSettings | None = None) -> RepetitionCheck:
    s = settings or FormatSettings()
    tail = word_tokens(text)[-s.repetition_tail_tokens:]
    scan = released_block_run if s.repetition_detector == "released_grid" else longest_block_run
    max_run = scan(tail, s.repetition_max_block)
    n = s.repetition_ngram
    count = max(Counter(tuple(tail[i:i + n]) for i in range(len(tail) - n + 1)).values(), default=0)
    fraction = min(1.0, count * n / len(tail)) if tail else 0.0
    detected = max_run >= s.repetition_min_run or (count >= s.repetition_min_ngram_count and fraction >= s.repetition_min_ngram_fraction)
    severe = detected and (fraction >= s.severe_ngram_fraction or max_run >= s.severe_run)
    penalty = max(_ramp(max_run, *s.run_penalty_range), _ramp(fraction, *s.ngram_penalty_range)) if detected else 0.0
    return RepetitionCheck(tail_tokens=len(tail), max_run=max_run, detector=s.repetition_detector, ngram_count=count,
                           ngram_fraction=fraction, detected=detected, severe=severe, penalty=penalty)


def overlength_penalty(tokens: int | None, settings: FormatSettings | None = None, limit: int | None = None) -> float:
    """0 up to `overlength_start` tokens, rising linearly to 1 at `overlength_end` (or at a smaller
    generation `limit`); a limit at or below the start makes it a step at the limit."""
    if tokens is None:
        return 0.0
    s = settings or FormatSettings()
    end = min(s.overlength_end, limit) if limit is not None else s.overlength_end
    if end <= s.overlength_start:
        return float(tokens >= end)
    return _ramp(tokens, s.overlength_start, end)


# ---------------------------------------------------------------- the format score

LENGTH_UNKNOWN_NOTE = "length unknown: no overlength penalty (as the release)"


class LengthCheck(BaseModel):
    tokens: int
    source: Literal["given", "tokenizer", "word_tokens"]  # word_tokens: an approximation, see module docstring
    penalty: float
    note: str | None = None  # e.g. no token count, so no overlength penalty (released_code, as the release)


class FormatScore(BaseModel):
    score: float                      # what enters the reward: base - penalties (floored), or a failure score
    base: float                       # dense_share * dense + exact_share * exact
    dense: float
    exact: bool
    components: dict[str, float]      # every component, weighted or not
    weights: dict[str, float]
    failure: str | None = None        # truncated / severe_repetition / no_blocks / one_block (fail-closed presets)
    repetition: RepetitionCheck
    length: LengthCheck
    turn_count: int
    role_count: int
    moderator_first: bool
    conclusion_sentences: int
    discussion: str | None = None     # the strict blocks: what the reward's judges read
    conclusion: str | None = None
    parse: ParsedBoard                # the evaluation reader's view of the same response
    preset: str

    @property
    def needs_judges(self) -> bool:
        """False when the reward is settled without a judge: a fail-closed failure, or no conclusion to read."""
        return self.failure is None and self.conclusion is not None


_DISCUSSION_BLOCK = re.compile(r"<discussion>\s*(.*?)\s*</discussion>", re.S)
_CONCLUSION_BLOCK = re.compile(r"<conclusion>\s*(.*?)\s*</conclusion>", re.S)
_ENVELOPE = re.compile(r"<discussion>\n.*?\n</discussion>\n<conclusion>[^\n]+</conclusion>", re.S)
# The training reward's turn line; the released pattern's \d takes any Unicode digit after the first.
_STRICT_TURN = {"unicode": re.compile(r"<turn ([1-9]\d*)> ([^:\n<>]+): (.+)"),
                "ascii": re.compile(r"<turn ([1-9][0-9]*)> ([^:\n<>]+): (.+)")}


def _single_block(pattern: re.Pattern[str], text: str) -> tuple[str | None, re.Match[str] | None]:
    """The block's text when exactly one non-empty block exists; two blocks count as none."""
    found = list(pattern.finditer(text))
    if len(found) == 1 and found[0].group(1).strip():
        return found[0].group(1).strip(), found[0]
    return None, None


def strict_blocks(text: str) -> tuple[str | None, str | None]:
    """(discussion, conclusion): each the one non-empty block of its kind, stripped, else None, as the
    training reward reads a response before calling any judge."""
    return _single_block(_DISCUSSION_BLOCK, text or "")[0], _single_block(_CONCLUSION_BLOCK, text or "")[0]


def render_board(turns: Iterable[tuple[str, str]], conclusion: str | None) -> str:
    """A meeting in Board Simulation's tagged format, numbered from 1: what a live or structured board
    becomes so every board scorer reads one format. No conclusion: no conclusion block."""
    lines = [f"<turn {i}> {role}: {text}" for i, (role, text) in enumerate(turns, 1)]
    closing = f"<conclusion>{conclusion}</conclusion>" if conclusion is not None else ""
    return "<discussion>\n" + "\n".join(lines) + "\n</discussion>\n" + closing


def _conclusion_credit(sentences: int, s: FormatSettings) -> float:
    if s.conclusion_min_sentences <= sentences <= s.conclusion_max_sentences:
        return 1.0
    if sentences in (s.conclusion_min_sentences - 1, s.conclusion_max_sentences + 1) and sentences > 0:
        return s.conclusion_near_credit
    return 0.0


def score_format(
    response: str,
    *,
    settings: FormatSettings | None = None,
    response_tokens: int | None = None,
    tokenizer: Tokenizer | None = None,
    length_limit: int | None = None,
    truncated: bool = False,
) -> FormatScore:
    """The reward's format term for one response (no judge). See the module docstring for tokens.

    `truncated`: the generation stopped at its token limit (finish_reason "length").
    `length_limit`: the generation's max tokens, when below `overlength_end`.
    """
    s = settings or FormatSettings()
    parse = parse_board_response(response, s.evaluation_reader)
    if not s.score_cleaned_text:
        text = response or ""
    else:
        text = clean_response(response)[0] if s.evaluation_reader == "released" else strip_reply(response).text

    discussion, discussion_match = _single_block(_DISCUSSION_BLOCK, text)
    conclusion, conclusion_match = _single_block(_CONCLUSION_BLOCK, text)
    lines = discussion.splitlines() if discussion is not None else []
    turn_line = _STRICT_TURN[s.turn_digits]
    turns = [m for m in (turn_line.fullmatch(line) for line in lines) if m is not None]
    roles = [m.group(2).strip() for m in turns]
    distinct_roles = {r.casefold() if s.distinct_roles == "casefolded" else r for r in roles}
    moderator_first = bool(roles) and roles[0].casefold() == "moderator"
    sentences = count_sentences(conclusion) if conclusion is not None else 0
    present = (discussion is not None) + (conclusion is not None)
    in_order = present == 2 and discussion_match.end() <= conclusion_match.start()

    components = {
        "blocks": 0.5 * present,
        "blocks_in_order": 1.0 if in_order else 0.5 * (present > 0),
        "envelope": float(_ENVELOPE.fullmatch(text) is not None),
        "turn_syntax": len(turns) / len(lines) if lines else 0.0,
        "numbering": sum(turn_number(m.group(1)) == i for i, m in enumerate(turns, 1)) / len(turns) if turns else 0.0,
        "roles": 0.5 * (len(distinct_roles) >= 2) + 0.5 * moderator_first,
        "conclusion_sentences": _conclusion_credit(sentences, s),
        "no_outer_whitespace": float(bool(text) and text == text.strip()),
    }
    dense = sum(w * components[name] for name, w in s.dense_weights.items())
    exact = bool(turns) and all(components[name] == 1.0 for name, w in s.dense_weights.items() if w > 0)
    base = s.dense_share * dense + s.exact_share * float(exact)

    repetition = check_repetition(text, s)
    if response_tokens is not None:
        tokens, source = response_tokens, "given"
    elif tokenizer is not None:
        tokens, source = len(tokenizer(response or "")), "tokenizer"
    else:
        tokens, source = len(word_tokens(response)), "word_tokens"
    if source == "word_tokens" and s.length_without_count == "none":
        # the release applies no overlength penalty when it is given no length; the word count is kept for reference
        length = LengthCheck(tokens=tokens, source=source, penalty=0.0, note=LENGTH_UNKNOWN_NOTE)
    else:
        length = LengthCheck(tokens=tokens, source=source, penalty=overlength_penalty(tokens, s, length_limit))

    failure = None
    if s.fail_closed:
        if truncated:
            failure = "truncated"
        elif repetition.severe:
            failure = "severe_repetition"
        elif present == 0:
            failure = "no_blocks"
        elif present == 1:
            failure = "one_block"
    score = s.failure_scores[failure] if failure else max(s.floor, base - repetition.penalty - length.penalty)
    return FormatScore(score=score, base=base, dense=dense, exact=exact, components=components, weights=dict(s.dense_weights),
                       failure=failure, repetition=repetition, length=length, turn_count=len(turns),
                       role_count=len(distinct_roles), moderator_first=moderator_first, conclusion_sentences=sentences,
                       discussion=discussion, conclusion=conclusion, parse=parse, preset=s.preset)
