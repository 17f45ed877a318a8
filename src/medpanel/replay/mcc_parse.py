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

This module is the parser's entry point and keeps its public names; the parts live beside it:
`mcc_text` (the line patterns and text helpers), `mcc_header` (id, question, options, gold),
`mcc_lines` (what a body line is), `mcc_reader` (the pass over the body), `mcc_choices` (a turn's
choice under either reading) and `mcc_model` (the ParsedLog and LoggedResult types).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

from medpanel.cases.model import Case, Reference
from medpanel.errors import UsageError
from medpanel.replay.mcc_choices import initial_choice_mcc, settle_choice
from medpanel.replay.mcc_header import parse_header
from medpanel.replay.mcc_model import LoggedResult, ParsedLog, ResultStatement, RoundSummary
from medpanel.replay.mcc_reader import Reader
from medpanel.replay.mcc_text import TURN_START, SeatNames, norm, option_letter
from medpanel.transcript import Transcript

SEATS: tuple[str, ...] = ("GPT", "Qwen", "DeepSeek")
ChoiceReading = Literal["mcc", "lenient"]
CHOICE_READINGS: tuple[str, ...] = get_args(ChoiceReading)
# The models behind the seats in the MCC paper (GPT-o1 was run as o1-mini).
SEAT_MODELS = {"GPT": "o1-mini", "Qwen": "QwQ-32B", "DeepSeek": "DeepSeek-R1"}


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
    keys = [norm(line) for line in lines]
    first_turn = next((i for i, key in enumerate(keys) if (m := TURN_START.match(key)) and names(m.group("seat"))), len(lines))
    head = parse_header(lines[:first_turn])
    word_answers = not head.options
    reader = Reader(lines, keys, names, word_answers)
    reader.run(first_turn)
    warnings = reader.warnings
    logged = reader.logged

    transcript = Transcript()
    for turn in reader.turns:
        if choice_reading == "mcc" and turn.phase == "initial":
            choice, data = initial_choice_mcc(turn, word_answers, warnings)
        else:
            choice, data = settle_choice(turn, word_answers, warnings)
        if choice is not None and head.options and choice not in head.options:
            warnings.append(f"line {turn.line}: {turn.seat} chose option {choice}, which the header does not list")
        transcript.record("turn", "\n".join(turn.body or turn.loose).strip(), speaker=turn.seat, model=SEAT_MODELS.get(turn.seat, ""),
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
        transcript.record("decision", logged.final, speaker="panel", data=data)

    answer_text = head.options.get(gold) if gold and head.options else (head.gold_text or None)
    case = Case(id=head.case_id or path.stem, source=str(path), question=head.question, options=head.options,
                reference=Reference(answer=gold, answer_text=answer_text), metadata={"log": path.name, **head.metadata})
    return ParsedLog(path=path, case=case, transcript=transcript, logged=logged, warnings=warnings, ends_mid_debate=bool(ends_mid_debate))


def _ends_mid_debate(reader: Reader) -> str:
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
