"""How one turn of an MCC debate log becomes a choice, from what the log says about it: the statement
before its reasoning, its choice line, the status line after it, and the reasoning's own "final
selection". Settling is kept apart from the reader's pass because it runs after the pass, on finished
turns, and is where the two `choice_reading` settings differ (see `mcc_parse`): the pass collects every
witness the same way under both, and only this module decides which one counts, warning wherever the
witnesses disagree.
"""

from __future__ import annotations

from medpanel.replay.mcc_lines import Turn
from medpanel.replay.mcc_text import FINAL_SELECTION_IN_TEXT, FINAL_WORD_IN_TEXT, norm, option_letter


def _where(turn: Turn) -> str:
    return f"line {turn.line}: {turn.seat}'s {turn.phase} turn" + (f" (round {turn.round})" if turn.phase == "debate" else "")


def initial_choice_mcc(turn: Turn, word_answers: bool, warnings: list[str]) -> tuple[str | None, dict]:
    """An initial turn read as MCC's tooling read it: its choice line, or unparsed. A note says what the
    lenient reading would have taken instead, so no departure goes unseen."""
    lenient, _ = settle_choice(turn, word_answers, [])
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


def settle_choice(turn: Turn, word_answers: bool, warnings: list[str]) -> tuple[str | None, dict]:
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
        reasoning = norm("\n".join(turn.body or turn.loose))
        if word_answers:
            if hits := [w.casefold() for w in FINAL_WORD_IN_TEXT.findall(reasoning)]:
                witnesses["reasoning"] = hits[-1]
        elif hits := FINAL_SELECTION_IN_TEXT.findall(reasoning):
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
