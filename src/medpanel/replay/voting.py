"""Consensus and majority-vote rules for a multiple-choice panel, shared by replays and live debates.

A consensus means every seat gave a parseable choice and all the choices are the same: a seat whose
answer could not be read never counts as agreeing.

A majority vote counts the parseable choices. When several options share the most votes the tie
policy decides:

- ``first_seat`` (default): the tied option named first in seat order wins. This is what MCC's
  logged runs did: in MedQA case_31 the three models ended on options 2 / 4 / 1 (GPT / Qwen /
  DeepSeek) and the log's "Final choice (majority vote)" is option 2, GPT's choice. It matches
  counting votes in seat order and taking the first most-common option (Python's Counter).
- ``none``: no answer (scored as wrong). MCC's released code does this ("tied votes, invalid
  debate"), although the published logs show the ``first_seat`` behaviour.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

from medpanel.errors import UsageError

TiePolicy = Literal["first_seat", "none"]
TIE_POLICIES: tuple[str, ...] = ("first_seat", "none")
Order = Literal["sequential", "simultaneous"]
ORDERS: tuple[str, ...] = ("sequential", "simultaneous")


@dataclass(frozen=True)
class VoteRules:
    """How a debate is settled.

    order: ``sequential`` checks for consensus after every single response (MCC's code: each model
    sees its peers' answers from the same round); ``simultaneous`` checks only when a round is over.
    max_rounds: debate rounds taken into account; None means all that were held.
    """

    order: Order = "sequential"
    max_rounds: int | None = None
    tie: TiePolicy = "first_seat"

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise UsageError(f"Unknown debate order '{self.order}'.", f"Use one of: {', '.join(ORDERS)}.")
        if self.tie not in TIE_POLICIES:
            raise UsageError(f"Unknown tie policy '{self.tie}'.", f"Use one of: {', '.join(TIE_POLICIES)}.")
        if self.max_rounds is not None and self.max_rounds < 0:
            raise UsageError(f"max_rounds must be 0 or more, got {self.max_rounds}.", "Pass a non-negative number of rounds.")


def is_consensus(choices: Mapping[str, str | None], seats: Sequence[str]) -> bool:
    """True when every seat has a parseable choice and they are all the same."""
    picked = [choices.get(seat) for seat in seats]
    return bool(picked) and all(c is not None for c in picked) and len(set(picked)) == 1


def majority_vote(choices: Mapping[str, str | None], seats: Sequence[str], tie: TiePolicy = "first_seat") -> tuple[str | None, bool]:
    """(winning choice, whether the top was tied). None when nobody answered, or on a tie under ``none``."""
    votes = Counter(c for seat in seats if (c := choices.get(seat)) is not None)  # counted in seat order
    if not votes:
        return None, False
    top = max(votes.values())
    leaders = [option for option, n in votes.items() if n == top]  # Counter keeps first-seen order
    if len(leaders) == 1:
        return leaders[0], False
    return (leaders[0] if tie == "first_seat" else None), True


__all__ = ["ORDERS", "TIE_POLICIES", "Order", "TiePolicy", "VoteRules", "is_consensus", "majority_vote"]
