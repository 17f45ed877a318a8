"""The pass over an MCC debate log's body, one line at a time after the header: it opens turns and
reasoning blocks, follows the rounds, and records what the log states (round summaries, the final choice,
the verdict) in a `LoggedResult`. It is the only stateful part of the parser (which turn and block are
open, which round it is, whether the result section has begun), so it sits alone: what a single line is
comes from `LineKinds` (`mcc_lines`), each handler here takes one kind of line and updates that state,
and how a finished turn's statements become its choice is left to `mcc_choices`.
"""

from __future__ import annotations

from medpanel.replay.mcc_lines import LineKinds, Turn
from medpanel.replay.mcc_model import LoggedResult, ResultStatement, RoundSummary
from medpanel.replay.mcc_text import (AGREED, BANNER, BODY_HEADER, BODY_HEADER_END, CHOICE_WORDS, CONSENSUS_LINE, DISAGREED, FINAL_LINE,
                                      GOLD_LINE, INITIAL_STATUS, LABEL, MAJORITY, MARKDOWN, MODEL_SPEAK, NO_CONSENSUS_END, NOT_A_CHOICE,
                                      RESULT_TITLE, RESULT_WORDS, ROUND_IN_TITLE, SEPARATOR, VERDICT_LINE, SeatNames, option_refs,
                                      round_number, verdict_of)


class Reader(LineKinds):
    """One pass over a log's lines after the header; each method handles one kind of line."""

    def __init__(self, lines: list[str], keys: list[str], names: SeatNames, word_answers: bool) -> None:
        super().__init__(keys, names, word_answers)
        self.lines = lines
        self.logged = LoggedResult()
        self.turns: list[Turn] = []
        self.warnings: list[str] = []
        self.current: Turn | None = None
        self.body_owner: Turn | None = None
        self.round_no = 0
        self.pending_summary: RoundSummary | None = None  # "No consensus yet." with the choices on the next lines
        self.majority_ending = False
        self.in_result = False  # under the "Final Debate Result" banner: lines restate the result, not a round's status
        self.skip_opening_row = False
        self.body_from = 0  # the first line of the open reasoning block

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
                if MODEL_SPEAK.search(key) or GOLD_LINE.match(key):
                    continue
                if (FINAL_LINE.search(key) or CONSENSUS_LINE.search(key) or VERDICT_LINE.search(key)
                        or (RESULT_WORDS.search(key) and (CHOICE_WORDS.search(key) or option_refs(key)))):
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
            if SEPARATOR.match(key):
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

    # --- what the log states, and the handlers: each reads one kind of line and says whether it did

    def statement(self, i: int, kind: str, found: bool, choice: str | None) -> None:
        self.logged.statements.append(ResultStatement(i + 1, self.lines[i].strip(), kind, choice, read=found and choice is not None))

    def unread_result(self, i: int, key: str) -> None:
        """A line outside every turn that names the result and a choice, which no handler read: counted as unread."""
        if MODEL_SPEAK.search(key) or GOLD_LINE.match(key) or VERDICT_LINE.search(key):
            return
        if RESULT_WORDS.search(key) and (CHOICE_WORDS.search(key) or option_refs(key)):
            self.statement(i, "unknown", False, None)

    def banner(self, i: int, key: str) -> bool:
        m = BANNER.match(key)
        if not m:
            return bool(SEPARATOR.match(key))
        title = m.group("title")
        rnd = ROUND_IN_TITLE.search(title)
        if rnd and not RESULT_TITLE.search(title):
            self.round_no = round_number(rnd)
            self.current = None
        elif RESULT_TITLE.search(title):
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
        self.current = Turn(seat=seat, phase=phase, round=self.round_no, line=i + 1)
        self.turns.append(self.current)
        self.pending_summary = None
        return True

    def body_header(self, i: int, key: str) -> bool:
        if not (BODY_HEADER.search(key) and BODY_HEADER_END.search(key)):
            return False
        mentioned = self.names.mentions(key)
        if not mentioned:
            return False
        seat = mentioned[0][1]
        owner = self.current if self.current is not None and self.current.seat == seat else None
        if owner is None:
            self.warnings.append(f"line {i + 1}: reasoning of {seat} outside its turn; ignored")
            owner = Turn(seat=seat, phase="orphan", round=self.round_no, line=i + 1)
        owner.in_body = True
        owner.closed = False
        self.body_owner = owner
        self.body_from = i + 1
        # the block opens with a row of '=' (on this line or the next), which must not be read as its end
        self.skip_opening_row = not key.endswith("=") and i + 1 < len(self.lines) and bool(SEPARATOR.match(self.keys[i + 1]))
        owner.fenced = key.endswith("=") or self.skip_opening_row
        return True

    def round_summary(self, i: int, key: str) -> bool:
        m = self.round_summary_match(key)
        if not m:
            return False
        summary = RoundSummary(round=round_number(m), consensus=bool(AGREED.search(key)) and not DISAGREED.search(key))
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
        if not VERDICT_LINE.search(key):
            return False
        verdict = verdict_of(key)
        if verdict is not None:
            self.logged.correct = verdict
        return True

    def final(self, i: int, key: str) -> bool:
        if not FINAL_LINE.search(key) or MODEL_SPEAK.search(key) or (self.current is not None and not self.current.in_body):
            return False
        found, choice = self.value(key)
        if not found:
            if LABEL.match(key) and self.current is None:  # "Final diagnosis: <something unreadable>": a result, unread
                self.statement(i, "final", False, None)
                return True
            return False
        self.statement(i, "final", found, choice)
        if choice is not None:
            self.logged.finals_seen.append(choice)
            self.logged.final = choice
        self.logged.method = "majority" if (MAJORITY.search(key) or self.majority_ending) else "consensus"
        self.current = None
        return True

    def consensus_reached(self, i: int, key: str) -> bool:
        """'Consensus reached: All models selected yes' closes the current round (or the initial answers)."""
        if not CONSENSUS_LINE.search(key):
            return False
        found, choice = self.value(key)
        if self.in_result:
            pass  # a restatement of the result under its banner: no round's or initial status
        elif self.round_no > 0:
            if not any(r.round == self.round_no for r in self.logged.rounds):  # the round's own summary line says it already
                self.logged.rounds.append(RoundSummary(round=self.round_no, consensus=True, choices={s: choice for s in self.names.seats}))
        else:
            self.logged.initial_consensus = True
        if found or CHOICE_WORDS.search(key):
            self.statement(i, "consensus", found, choice)
        if found and choice is not None:
            self.logged.final, self.logged.method = choice, "consensus"
            self.logged.finals_seen.append(choice)
        self.current = None
        return True

    def gold(self, i: int, key: str) -> bool:
        if not GOLD_LINE.match(key):
            return False
        found, choice = self.value(key)
        if found and choice is not None:
            self.logged.gold = choice
        return True

    def initial_status(self, i: int, key: str) -> bool:
        if not INITIAL_STATUS.search(key):
            return False
        if DISAGREED.search(key):
            self.logged.initial_consensus = False
        elif AGREED.search(key):
            self.logged.initial_consensus = True
            found, choice = self.value(key)
            if found or (self.word_answers and CHOICE_WORDS.search(key)):  # "... All models chose Option 2" states the result
                self.statement(i, "initial_consensus", found, choice)
            if found and choice is not None and self.word_answers:  # "Initial consensus: All models selected yes" is the result
                self.logged.final, self.logged.method = choice, "consensus"
                self.logged.finals_seen.append(choice)
        self.current = None
        return True

    def ending(self, i: int, key: str) -> bool:
        """'Maximum debate rounds reached' / 'did not reach a consensus': what follows is a vote."""
        if NO_CONSENSUS_END.search(key) or self.seats_did_not_agree(key):
            self.majority_ending = True
            self.current = None
            return True
        return False

    def choice_line(self, i: int, key: str) -> None:
        turn = self.current
        if turn is None:
            return
        if not turn.in_body and MARKDOWN.match(key):
            self.reasoning(turn, i)  # a model's own words, when the log has no '=' block around them
            return
        if self.is_notice(key):
            return
        if not turn.in_body and not turn.choice_line_found and self.is_choice_line(key):
            if NOT_A_CHOICE.search(key):
                turn.choice_line_found = True
            elif owned := [choice for seat, choice in self.attributions(key) if seat in (None, turn.seat)]:
                turn.choice_line_found, turn.choice_line = True, owned[0]
        if not turn.in_body and not turn.stated_found:
            # the seat's first statement of its choice (in word logs, the selection line after its reasoning)
            if NOT_A_CHOICE.search(key):
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

    def reasoning(self, turn: Turn, i: int) -> None:
        """A line of a model's own words outside any block: what follows is reasoning until structure says otherwise."""
        turn.loose.append(self.lines[i])
        turn.closed = False
