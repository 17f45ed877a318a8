"""The rules a recorded multiple-choice debate is re-settled by: the debate protocol's own.

A replay is settled by `medpanel.protocols.settle.settle`, the very function the live debate calls:
consensus means every seat gave a parseable choice and all the choices are the same (a seat whose
answer could not be read never counts as agreeing); the vote is a plurality over parsed choices, in
seat order. VoteRules only carries the settings; ties are settled by its policy:

- ``first-model`` (the replay default): the tied option named first in seat order wins. This is what
  MCC's logged runs did: in MedQA case_31 the models ended on options 2 / 4 / 1 (GPT / Qwen /
  DeepSeek) and the log's "Final choice (majority vote)" is option 2, GPT's.
- ``abstain``: no answer, scored as wrong. MCC's released code does this ("tied votes, invalid
  debate"), although its published logs show ``first-model``.
- ``random-seeded``: a draw seeded by (tie_seed, case id).
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping, Sequence
from typing import get_args

from medpanel.errors import UsageError
from medpanel.protocols.settle import TiePolicy, VoteResult, agreed_choice, majority_vote

TIE_POLICIES: tuple[str, ...] = get_args(TiePolicy)
ORDERS: tuple[str, ...] = ("sequential", "simultaneous")


@dataclass(frozen=True)
class VoteRules:
    """How a recorded debate is settled.

    order: ``sequential`` checks for consensus after every single response (MCC's code: each model
    sees its peers' answers from the same round); ``simultaneous`` checks only when a round is over.
    max_rounds: debate rounds taken into account; None means all that were held.
    """

    order: str = "sequential"
    max_rounds: int | None = None
    tie: str = "first-model"
    tie_seed: int = 0

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise UsageError(f"Unknown debate order '{self.order}'.", f"Use one of: {', '.join(ORDERS)}.")
        if self.tie not in TIE_POLICIES:
            raise UsageError(f"Unknown tie policy '{self.tie}'.", f"Use one of: {', '.join(TIE_POLICIES)}.")
        if self.max_rounds is not None and self.max_rounds < 0:
            raise UsageError(f"max_rounds must be 0 or more, got {self.max_rounds}.", "Pass a non-negative number of rounds.")


MCC_RULES = VoteRules()  # how MCC's logged runs were settled: sequential, every round held, first-model ties


def is_consensus(choices: Mapping[str, str | None], seats: Sequence[str]) -> bool:
    """True when every seat has a parseable choice and they are all the same."""
    return agreed_choice(choices, seats) is not None


def vote(choices: Mapping[str, str | None], seats: Sequence[str], rules: VoteRules, key: str = "") -> VoteResult:
    """The debate protocol's plurality vote over the seats' standing choices, in seat order."""
    return majority_vote([choices.get(seat) for seat in seats], rules.tie, seed=rules.tie_seed, key=key)  # type: ignore[arg-type]


__all__ = ["MCC_RULES", "ORDERS", "TIE_POLICIES", "VoteRules", "is_consensus", "vote"]
