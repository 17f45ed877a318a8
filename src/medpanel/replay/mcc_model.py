"""What reading one MCC debate log gives: the `ParsedLog` (its Case, its Transcript, its warnings) and
the `LoggedResult` holding what the log itself reports, round by round and at the end. The types have
their own module because the body reader fills them in while the replay and the folder tools only
consume them, and a consumer needs the shapes, not the parser; the logged result stays apart from the
Transcript on purpose, so a replay can set what it recomputes beside what the log claims.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from medpanel.cases.model import Case
from medpanel.transcript import Transcript


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
