"""What a line of an MCC debate log's body is, judged on its own or from the line after it: which seat
names which answer in it, whether it is a choice or status line, and whether it can only be structure (a
turn's opening, a banner, a round summary), which is what ends a model's reasoning. These judgements are
kept apart from the reader's pass (`mcc_reader`) because they hold none of its state, only the log's
lines, seat names and answer form: the pass decides what to do with a line, `LineKinds` only says what
the line is. `Turn`, what a reasoning block belongs to, is defined here for the same reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from medpanel.replay.mcc_text import (AGREED, BANNER, BODY_HEADER, BODY_HEADER_END, CHOICE_LABEL, CONCLUSION_HEADING, CONSENSUS_LINE,
                                      DISAGREED, ELLIPSIS_END, FINAL_LINE, GOLD_LINE, INITIAL_STATUS, LABEL, MODEL_SPEAK, NO_CONSENSUS_END,
                                      NOTICE, OPTION, POSSESSIVE, RESPONDING, RESULT_TITLE, ROUND_IN_TITLE, ROUND_SUMMARY, SEATS_DID_NOT_AGREE,
                                      SEPARATOR, STATUS_LABEL, TURN_START, WORD, WORD_CHOICE, WORD_LABEL, SeatNames, option_refs, word_answer)


@dataclass
class Turn:
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


class LineKinds:
    """What a line of one log is; the log's seat names and answer form (option letters or words) are fixed."""

    def __init__(self, keys: list[str], names: SeatNames, word_answers: bool) -> None:
        self.keys = keys  # the lines as the patterns see them (`norm`)
        self.names = names
        self.word_answers = word_answers

    # --- what a line says about choices

    def attributions(self, key: str) -> list[tuple[str | None, str | None]]:
        """(seat or None, choice) pairs in a line: each seat takes the first answer named after it."""
        if self.word_answers:  # only lines led by a seat or a label: prose "chose" is not a choice
            m = WORD_CHOICE.search(key)
            mentions = [(pos, seat) for pos, seat in self.names.mentions(key) if pos < (m.start() if m else 0)]
            led = (mentions and mentions[0][0] == 0) or WORD_LABEL.match(key)
            if not m or not led or (answer := word_answer(m.group("ans"))) is None:
                return []
            return [(mentions[-1][1] if mentions else None, answer)]
        refs = option_refs(key)
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
        m = LABEL.match(key)
        if not m:
            return False
        label = m.group("label").strip()
        lead = WORD.match(label)
        if lead and self.names(lead.group()):
            label = label[lead.end():].lstrip()
            if POSSESSIVE.match(label):
                return False
        return bool(CHOICE_LABEL.fullmatch(label))

    def value(self, key: str) -> tuple[bool, str | None]:
        """(found, choice) for a result line: its first option, or its answer word."""
        if self.word_answers:
            m = WORD_CHOICE.search(key)
            answer = word_answer(m.group("ans") if m else re.split(r"[:：]", key)[-1])
            return answer is not None, answer
        refs = option_refs(key)
        return (True, refs[0][1]) if refs else (False, None)

    def is_notice(self, key: str) -> bool:
        """'DeepSeek changed its position! From Option 1 to Option 2', warnings: news about a choice, not a choice."""
        refs = option_refs(key)
        return bool(NOTICE.search(key[: refs[0][0]] if refs else key))

    # --- what can only be structure

    def seat_starting(self, key: str) -> tuple[str, bool] | None:
        """(seat, responding) when the line opens a turn."""
        m = TURN_START.match(key)
        if m and (seat := self.names(m.group("seat"))):
            return seat, bool(RESPONDING.search(key[m.end("seat"):m.end()]))
        return None

    def ends_body(self, owner: Turn, i: int, key: str) -> bool:
        """A block opened by a row of '=' ends at the next such row; as its closing row can be missing (MedQA
        case_1084), it also ends at a line that can only be structure: a round or result banner, a round summary,
        its owner's own status line ("GPT's post-response choice: Option 5"), the panel's initial status, and a
        turn's opening line ("Qwen is reasoning the answer...") only when what follows it is a turn's structure.
        A block without rows ends at a line that can only be structure: another turn, a banner, a round summary,
        a seat's status line, the panel's initial status."""
        if SEPARATOR.match(key):
            return True
        if owner.fenced:
            if m := BANNER.match(key):  # a banner a model could have written closes only before what such a banner heads
                if RESULT_TITLE.search(m.group("title")):
                    return self.result_follows(i)
                if ROUND_IN_TITLE.search(m.group("title")):
                    return self.structure_follows(i)
            if self.round_summary_match(key):
                return True
            if self.is_status_line(key) and self.names.mentions(key)[0][1] == owner.seat:
                return True
            if owner.phase == "initial" and INITIAL_STATUS.search(key) and (AGREED.search(key) or DISAGREED.search(key)):
                return True
            return bool(self.seat_starting(key) and ELLIPSIS_END.search(key) and self.structure_follows(i))
        return self.ends_reasoning(owner, key)

    def result_follows(self, i: int) -> bool:
        """Whether the next non-blank line after line i is what a result banner heads: the seats' agreement or
        disagreement ("GPT, Qwen, and DeepSeek-R1 have reached a consensus!"), a final or gold line."""
        j = next((j for j in range(i + 1, len(self.keys)) if self.keys[j]), None)
        if j is None:
            return True
        key = self.keys[j]
        if MODEL_SPEAK.search(key):
            return False
        if FINAL_LINE.search(key) or GOLD_LINE.match(key) or CONSENSUS_LINE.search(key) or NO_CONSENSUS_END.search(key):
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
        if SEPARATOR.match(key) or BANNER.match(key) or self.seat_starting(key) or self.is_choice_line(key):
            return True
        if BODY_HEADER.search(key) and BODY_HEADER_END.search(key) and self.names.mentions(key):
            return True
        if MODEL_SPEAK.search(key):
            return False
        if ELLIPSIS_END.search(key) and len(key) <= 60:  # the tooling's progress line ("Start extracting model selection...")
            return True
        mentions = self.names.mentions(key)
        if not mentions or mentions[0][0] != 0:
            return False
        label = LABEL.match(key)
        heading = bool(label and not label.group("value") and CONCLUSION_HEADING.search(label.group("label")))
        return heading or self.is_status_line(key)

    def round_summary_match(self, key: str) -> re.Match | None:
        """'Debate Round 2: Still no consensus, GPT chooses Option 4, ...': a round number opening the line, then the
        panel's status (consensus or not) or the seats' choices. 'Round 2: the authors revisit...' is a model's words."""
        m = ROUND_SUMMARY.match(key)
        if m is None:
            return None
        rest = key[m.end():]
        says_status = AGREED.search(rest) or len({seat for seat, _ in self.attributions(rest) if seat}) >= 2
        return m if says_status else None

    def is_status_line(self, key: str) -> bool:
        """A line led by a seat that gives its choice and nothing else: 'Qwen's choice: Option 2 (Medial meniscus)'."""
        mentions = self.names.mentions(key)
        if not mentions or mentions[0][0] != 0:
            return False
        if self.word_answers:
            return bool(self.attributions(key))
        m = LABEL.match(key)
        return bool(m and STATUS_LABEL.search(m.group("label")) and OPTION.match(m.group("value")))

    def seats_did_not_agree(self, key: str) -> bool:
        """'GPT, Qwen and DeepSeek-R1 did not reach a consensus': the line opens with every seat, then says so."""
        m = SEATS_DID_NOT_AGREE.search(key)
        if not m:
            return False
        before = self.names.mentions(key[:m.start()])
        return bool(before) and before[0][0] == 0 and {seat for _, seat in before} == set(self.names.seats)

    def ends_reasoning(self, turn: Turn, key: str) -> bool:
        """Whether a line can only be structure, so the open reasoning of a turn without '=' rows ends before it."""
        return bool(BANNER.match(key) or self.round_summary_match(key) or self.seat_starting(key) or self.is_status_line(key)
                    or (turn.phase == "initial" and INITIAL_STATUS.search(key) and (AGREED.search(key) or DISAGREED.search(key))))
