"""How a multiple-choice debate is settled: one function for the live debate and for replayed logs.

    settle(initial, responses, seats, order=..., tie_policy=...) -> Settlement

- consensus: every seat has a parseable choice and all are the same (an unread answer never agrees);
  the initial answers are checked first, then each debate response updates its seat's standing choice;
- order "sequential" checks consensus after every single response (MCC's released code), "simultaneous"
  only when a round is over (the paper's rounds);
- no consensus after the last round: a plurality vote over the standing choices, in seat order, a tie
  settled by the tie policy ("abstain": no answer; "first-model": the earliest seat among the tied;
  "random-seeded": a draw seeded by (seed, key)).

The live debate (`medpanel.protocols.debate`) asks its seats until `agreed_choice` says they agree, then
hands what they said to `settle`; a replay (`medpanel.replay`) hands over what a log recorded. Identical
inputs are therefore settled identically, whichever of the two recorded them.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

TiePolicy = Literal["abstain", "first-model", "random-seeded"]
Order = Literal["simultaneous", "sequential"]


@dataclass
class VoteResult:
    answer: str | None
    method: str  # unanimous | majority | tie-broken | tie | no-votes
    votes: dict[str, int]
    tied: list[str]

    def as_dict(self, policy: str) -> dict[str, Any]:
        return {"answer": self.answer, "method": self.method, "votes": self.votes, "tied": self.tied, "tie_policy": policy}


def majority_vote(choices: Sequence[str | None], policy: TiePolicy = "abstain", *, seed: int = 0, key: str = "") -> VoteResult:
    """Plurality over the parsed choices, in voter order; unparsed answers cast no vote.

    A tie for the most votes is settled by `policy`: "abstain" gives no answer, "first-model" the earliest
    voter's choice among the tied, "random-seeded" a draw seeded by (seed, key) so reruns agree.
    """
    cast = [c for c in choices if c is not None]
    votes = dict(sorted(Counter(cast).items()))
    if not cast:
        return VoteResult(None, "no-votes", {}, [])
    top = max(votes.values())
    tied = sorted(c for c, n in votes.items() if n == top)
    if len(tied) == 1:
        method = "unanimous" if len(votes) == 1 and len(cast) == len(choices) else "majority"
        return VoteResult(tied[0], method, votes, [])
    if policy == "abstain":
        return VoteResult(None, "tie", votes, tied)
    if policy == "first-model":
        return VoteResult(next(c for c in cast if c in tied), "tie-broken", votes, tied)
    return VoteResult(random.Random(f"{seed}:{key}").choice(tied), "tie-broken", votes, tied)


def agreed_choice(choices: Mapping[str, str | None], seats: Sequence[str]) -> str | None:
    """The choice every seat gave, or None when one is unparsed or any two differ."""
    picked = {choices.get(seat) for seat in seats}
    return picked.pop() if seats and len(picked) == 1 and None not in picked else None


@dataclass(frozen=True)
class Response:
    """One debate response: the seat, its round (1, 2, ...) and the choice read from it (None if unread)."""

    seat: str
    round: int
    choice: str | None


@dataclass
class Settlement:
    answer: str | None
    method: str  # "consensus", or the vote's method: unanimous | majority | tie-broken | tie | no-votes
    consensus_round: int | None  # 0 = the initial answers agreed; None = settled by vote
    initial: dict[str, str | None]
    standing: dict[str, str | None]  # every seat's choice when the debate was settled
    rounds_held: int = 0  # debate rounds taken into account
    end_of_round: dict[int, dict[str, str | None]] = field(default_factory=dict)  # standing choices as each round closed
    shifts: list[tuple[str, int, str | None, str | None]] = field(default_factory=list)  # (seat, round, from, to)
    unused: int = 0  # responses given after the debate was settled (or past max_rounds): they change nothing
    vote: VoteResult | None = None  # the final vote, when one was held

    @property
    def consensus(self) -> bool:
        return self.consensus_round is not None

    def decision(self, policy: str) -> dict[str, Any]:
        """The decision record a debate writes: answer, method, votes, tied, tie policy and round."""
        if self.vote is not None:
            return {**self.vote.as_dict(policy), "round": self.rounds_held}
        return {"answer": self.answer, "method": "consensus", "votes": dict(Counter(self.standing.values())), "tied": [],
                "tie_policy": policy, "round": self.consensus_round}


def settle(initial: Mapping[str, str | None], responses: Sequence[Response], seats: Sequence[str], *,
           order: Order = "sequential", tie_policy: TiePolicy = "abstain", tie_seed: int = 0, key: str = "",
           max_rounds: int | None = None) -> Settlement:
    """Settle one debate from the initial choices and the debate responses in the order they were given.
    `key` (the case id) seeds the random-seeded tie policy; `max_rounds` ignores responses of later rounds."""
    seats = list(seats)
    start = {seat: initial.get(seat) for seat in seats}
    taken = [r for r in responses if r.seat in start and (max_rounds is None or r.round <= max_rounds)]
    ignored = len(responses) - len(taken)
    standing = dict(start)
    result = Settlement(answer=None, method="", consensus_round=None, initial=dict(start), standing=standing)
    agreed = agreed_choice(standing, seats)
    if agreed is not None:
        return _agreed(result, agreed, 0, unused=len(responses))
    rounds = sorted({r.round for r in taken})
    used = 0
    for index, rnd in enumerate(rounds):
        for r in (r for r in taken if r.round == rnd):
            used += 1
            if r.choice != standing[r.seat]:
                result.shifts.append((r.seat, rnd, standing[r.seat], r.choice))
            standing[r.seat] = r.choice
            if order == "sequential" and (agreed := agreed_choice(standing, seats)) is not None:
                break
        result.end_of_round[rnd] = dict(standing)
        result.rounds_held = index + 1
        if agreed is None and order == "simultaneous":
            agreed = agreed_choice(standing, seats)
        if agreed is not None:
            return _agreed(result, agreed, rnd, unused=len(responses) - used)
    result.vote = majority_vote([standing[s] for s in seats], tie_policy, seed=tie_seed, key=key)
    result.answer, result.method, result.unused = result.vote.answer, result.vote.method, ignored
    return result


def _agreed(result: Settlement, choice: str, rnd: int, unused: int) -> Settlement:
    result.answer, result.method, result.consensus_round, result.unused = choice, "consensus", rnd, unused
    return result


__all__ = ["Order", "Response", "Settlement", "TiePolicy", "VoteResult", "agreed_choice", "majority_vote", "settle"]
