"""Re-settle recorded multiple-choice debates from their turns, and compare with what the logs report.

`replay_debate` reads only the turn events of a Transcript (speaker, round, phase, data["choice"])
and hands them to `medpanel.protocols.settle.settle`, the function the live debate settles with: a
consensus after the initial answers ends the item; otherwise each debate turn updates that seat's
standing choice, consensus is checked after every response (sequential, as MCC ran) or after each
round (simultaneous), and a majority vote settles whatever is still open after the last round. Any
protocol that writes turns the same way can be re-settled with it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from collections.abc import Sequence

from medpanel.protocols.settle import Response, settle
from medpanel.replay.mcc_parse import SEATS, ParsedLog
from medpanel.replay.voting import MCC_RULES, VoteRules, vote
from medpanel.transcript import Event, Transcript


@dataclass(frozen=True)
class StanceShift:
    seat: str
    round: int
    from_choice: str | None
    to_choice: str | None


@dataclass
class DebateReplay:
    initial: dict[str, str | None]
    final: str | None
    method: str  # consensus | majority
    consensus_round: int | None  # 0 = the initial answers agreed
    tied: bool = False
    votes: dict[str, int] = field(default_factory=dict)  # the final vote's count, when one was held
    rounds_held: int = 0  # debate rounds the replay went through
    end_of_round: dict[int, dict[str, str | None]] = field(default_factory=dict)  # standing choices when each round closed
    shifts: list[StanceShift] = field(default_factory=list)
    unused_turns: int = 0  # turns recorded after the replay had already settled the item

    def decision_event(self) -> Event:
        data = {"choice": self.final, "method": self.method, "source": "replay"}
        if self.consensus_round is not None:
            data["round"] = self.consensus_round
        if self.votes:
            data["votes"] = self.votes
        if self.tied:
            data["tied"] = True
        return Event(kind="decision", text=self.final or "", speaker="panel", data=data)


def replay_debate(transcript: Transcript, seats: Sequence[str] = SEATS, rules: VoteRules = MCC_RULES, key: str = "") -> DebateReplay:
    """Settle one recorded debate from its turns alone (any logged decision event is ignored), with the
    live debate's own `settle`. `key` (the case id) seeds the ``random-seeded`` tie policy."""
    turns = [e for e in transcript.turns() if e.speaker in seats]
    initial: dict[str, str | None] = {seat: None for seat in seats}
    for e in turns:
        if e.phase == "initial":
            initial[e.speaker] = e.data.get("choice")
    responses = [Response(e.speaker, e.round, e.data.get("choice")) for e in turns if e.phase == "debate"]
    settled = settle(initial, responses, seats, order=rules.order, tie_policy=rules.tie, tie_seed=rules.tie_seed,  # type: ignore[arg-type]
                     key=key, max_rounds=rules.max_rounds)
    return DebateReplay(initial=settled.initial, final=settled.answer, method="consensus" if settled.consensus else "majority",
                        consensus_round=settled.consensus_round, tied=bool(settled.vote and settled.vote.tied),
                        votes=settled.vote.votes if settled.vote else {}, rounds_held=settled.rounds_held,
                        end_of_round=settled.end_of_round, shifts=[StanceShift(*shift) for shift in settled.shifts],
                        unused_turns=settled.unused)


# ---------------------------------------------------------------- summary over many items


def _correct(choice: str | None, gold: str | None) -> bool:
    return gold is not None and choice is not None and choice == gold


def summarize_replays(logs: Sequence[ParsedLog], replays: Sequence[DebateReplay], seats: Sequence[str] = SEATS,
                      rules: VoteRules = MCC_RULES) -> dict:
    """The figures MCC reports (initial consensus, per-model and majority-vote accuracy, per-round
    consensus, final accuracy, stance shifts) and how the replay agrees with each log's own result."""
    n = len(logs)
    golds = [log.case.reference.answer for log in logs]
    initial_correct = {seat: 0 for seat in seats}
    split = {"consensus": 0, "consensus_correct": 0}
    open_items = {"items": 0, "correct": {seat: 0 for seat in seats}, "majority_vote_correct": 0}
    initial_majority_correct = initial_majority_ties = 0
    by_round: dict[str, dict[str, int]] = {}
    voted = {"items": 0, "correct": 0, "ties": 0, "no_answer": 0}
    final_correct = 0
    seat_end = {seat: {"initially_correct": 0, "correct_at_end": 0} for seat in seats}
    shifts: list[dict] = []
    shift_counts: dict[str, dict[str, int]] = {seat: {} for seat in seats}
    to_correct = from_correct = 0
    agree = {"final_logged": 0, "final_agree": 0, "final_disagreements": [],
             "verdict_logged": 0, "verdict_agree": 0, "verdict_disagreements": [],
             "initial_status_logged": 0, "initial_status_agree": 0, "initial_status_disagreements": [],
             "round_summaries": 0, "round_summaries_agree": 0, "round_summary_disagreements": [],
             # every line where a log states its result (final, majority-vote, consensus lines), each checked on its own
             "results_logged": 0, "results_read": 0, "results_agree": 0, "result_disagreements": [], "results_unread": [],
             "turns_after_settlement": []}

    for log, rep, gold in zip(logs, replays, golds, strict=True):
        cid = log.id
        initially_agreed = rep.consensus_round == 0
        for seat in seats:
            ok = _correct(rep.initial.get(seat), gold)
            initial_correct[seat] += ok
            seat_end[seat]["initially_correct"] += ok
            if not initially_agreed:
                open_items["correct"][seat] += ok
        ballot = vote(rep.initial, seats, rules, cid)
        initial_majority_correct += _correct(ballot.answer, gold)
        initial_majority_ties += bool(ballot.tied)
        if initially_agreed:
            split["consensus"] += 1
            split["consensus_correct"] += _correct(rep.final, gold)
        else:
            open_items["items"] += 1
            open_items["majority_vote_correct"] += _correct(ballot.answer, gold)

        final_ok = _correct(rep.final, gold)
        final_correct += final_ok
        if rep.method == "consensus":
            slot = by_round.setdefault(str(rep.consensus_round), {"consensus": 0, "correct": 0})
            slot["consensus"] += 1
            slot["correct"] += final_ok
        else:
            voted["items"] += 1
            voted["correct"] += final_ok
            voted["ties"] += rep.tied
            voted["no_answer"] += rep.final is None
        last = rep.end_of_round[max(rep.end_of_round)] if rep.end_of_round else rep.initial
        for seat in seats:
            seat_end[seat]["correct_at_end"] += _correct(last.get(seat), gold)
        for s in rep.shifts:
            shifts.append({"case": cid, "seat": s.seat, "round": s.round, "from": s.from_choice, "to": s.to_choice,
                           "gold": gold})
            shift_counts[s.seat][str(s.round)] = shift_counts[s.seat].get(str(s.round), 0) + 1
            to_correct += _correct(s.to_choice, gold)
            from_correct += _correct(s.from_choice, gold)

        logged = log.logged
        if logged.final is not None:
            agree["final_logged"] += 1
            if logged.final == rep.final:
                agree["final_agree"] += 1
            else:
                agree["final_disagreements"].append({"case": cid, "replayed": rep.final, "logged": logged.final,
                                                     "method": rep.method, "logged_method": logged.method})
        for st in logged.statements:
            agree["results_logged"] += 1
            if not st.read:
                agree["results_unread"].append({"case": cid, "line": st.line, "text": st.text})
                continue
            agree["results_read"] += 1
            if st.choice == rep.final:
                agree["results_agree"] += 1
            else:
                agree["result_disagreements"].append({"case": cid, "line": st.line, "kind": st.kind, "logged": st.choice, "replayed": rep.final})
        if logged.correct is not None:
            agree["verdict_logged"] += 1
            if logged.correct == final_ok:
                agree["verdict_agree"] += 1
            else:
                agree["verdict_disagreements"].append({"case": cid, "replayed_correct": final_ok, "logged_correct": logged.correct,
                                                       "final": rep.final, "gold": gold})
        if logged.initial_consensus is not None:
            agree["initial_status_logged"] += 1
            if logged.initial_consensus == initially_agreed:
                agree["initial_status_agree"] += 1
            else:
                agree["initial_status_disagreements"].append({"case": cid, "replayed": initially_agreed, "logged": logged.initial_consensus})
        for summary in logged.rounds:
            agree["round_summaries"] += 1
            problem = _summary_mismatch(summary, rep)
            if problem is None:
                agree["round_summaries_agree"] += 1
            else:
                agree["round_summary_disagreements"].append({"case": cid, "round": summary.round, "problem": problem})
        if rep.unused_turns:
            agree["turns_after_settlement"].append({"case": cid, "turns": rep.unused_turns})

    warnings = [{"case": log.id, "warning": w} for log in logs for w in log.warnings]
    return {
        "items": n,
        "gold_known": sum(g is not None for g in golds),
        "rules": asdict(rules),
        "initial": {
            "consensus": split["consensus"],
            "consensus_correct": split["consensus_correct"],
            "correct": initial_correct,
            "majority_vote_correct": initial_majority_correct,
            "majority_vote_ties": initial_majority_ties,
            "without_consensus": open_items,
        },
        "final": {"correct": final_correct, "accuracy": final_correct / n if n else None,
                  "settled_by_consensus": sum(r["consensus"] for r in by_round.values()), "settled_by_vote": voted["items"]},
        "consensus_by_round": dict(sorted(by_round.items(), key=lambda kv: int(kv[0]))),
        "majority_vote": voted,
        "seats": seat_end,
        "stance_shifts": {"total": len(shifts), "by_seat_round": shift_counts, "to_correct": to_correct,
                          "from_correct": from_correct, "shifts": shifts},
        "agreement_with_logs": agree,
        "warnings": warnings,
    }


def _summary_mismatch(summary, rep: DebateReplay) -> str | None:
    """None when the log's "Debate Round r: ..." line says what the replay found at the end of round r."""
    if summary.consensus:
        if rep.consensus_round != summary.round:
            return f"log says consensus in round {summary.round}, replay found {rep.consensus_round}"
        wanted = next(iter(summary.choices.values()), None)
        if wanted is not None and wanted != rep.final:
            return f"log consensus on {wanted}, replay on {rep.final}"
        return None
    state = rep.end_of_round.get(summary.round)
    if state is None:
        return f"log has no consensus after round {summary.round}, but the replay had settled before it"
    diffs = [f"{seat} {letter} (replay {state.get(seat)})" for seat, letter in summary.choices.items() if letter is not None and state.get(seat) != letter]
    return "log says " + ", ".join(diffs) if diffs else None


__all__ = ["DebateReplay", "StanceShift", "replay_debate", "summarize_replays"]
