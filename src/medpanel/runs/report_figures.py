"""What the HTML report's figures show: the counting (pure, on plain records) and the readers that turn a
run's stored items, events and scores into those records.

The counting functions are tested on hand-worked examples (tests/test_report_html.py); the readers hold
everything that knows how a protocol lays out its transcript. Failed items are left out, as in every score.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from medpanel.runs.report import RunData, headline
from medpanel.runs.store import Store
from medpanel.scoring.icd10 import LEVELS, METRICS

# ---------------------------------------------------------------- pure: debate flows and stance shifts

SHIFT_KINDS = ("wrong_to_right", "right_to_wrong", "wrong_to_wrong", "unscored")


@dataclass(frozen=True)
class Truth:
    """What an item's scores tell of its key: the key itself when some choice scored 1, else the choices
    known to be wrong (scored 0). No answer is always wrong."""

    gold: str | None = None
    wrong: frozenset[str] = frozenset()

    def of(self, choice: str | None) -> bool | None:
        if choice is None:
            return False
        if self.gold is not None:  # compared as exact_match scores an answer: case and spaces aside
            return choice.strip().upper() == self.gold.strip().upper()
        return False if choice in self.wrong else None


def dataset_keys(run: dict) -> dict[str, str] | None:
    """Each item's answer key read from the run's dataset (item id -> reference answer), or None where the
    dataset cannot be loaded here (a file moved or deleted, a dataset not installed, any other failure): the
    figures then fall back on infer_truth. A protocol that expands cases gets its items as the runner made them."""
    try:
        from medpanel.cases import load_dataset
        from medpanel.protocols import get_protocol
        from medpanel.runs.runner import expand_items

        cases = expand_items(get_protocol(run["protocol"]), load_dataset(run["dataset"]))
        return {case.id: case.reference.answer for case in cases if case.reference is not None and case.reference.answer}
    except Exception:  # noqa: BLE001 - whatever stops the dataset loading, the scores still tell most of the key
        return None


def infer_truth(observed: Iterable[tuple[str | None, float | None]]) -> Truth:
    """(choice, its 0/1 score) pairs -> Truth. The key is not stored with a run, only whether each answer was
    right, so a debate item's key is read from its final answer's accuracy and each seat's initial accuracy."""
    gold, wrong = None, set()
    for choice, value in observed:
        if choice is None or value is None:
            continue
        if value >= 1.0 and gold is None:
            gold = choice
        elif value <= 0.0:
            wrong.add(choice)
    return Truth(gold, frozenset(wrong))


def shift_kind(before: str | None, after: str | None, truth: Truth) -> str:
    """A changed answer as debate.flow_counts names it; 'unscored' where the scores cannot tell."""
    was, now = truth.of(before), truth.of(after)
    if was is False and now is True:
        return "wrong_to_right"
    if was is True and now is False:
        return "right_to_wrong"
    if was is False and now is False:
        return "wrong_to_wrong"
    return "unscored"


@dataclass(frozen=True)
class DebateEnd:
    """How one debate item was settled: by 'consensus' at `round` (0 = the first answers), or by 'vote'
    after `round` debate rounds; `correct` None where the item has no accuracy score."""

    method: str
    round: int
    correct: bool | None
    answered: bool = True


def _verdict(correct: bool | None) -> str:
    return "unscored" if correct is None else ("correct" if correct else "incorrect")


def debate_flow(ends: Iterable[DebateEnd]) -> dict:
    """Per round r: the items reaching consensus at r (correct / incorrect / unscored) and those still without
    consensus after r ('open': they debate on, or after the last round go to the vote); then the vote's outcome.
    Each round's bar sums to the items still in the debate when it began."""
    ends = list(ends)
    last = max((e.round for e in ends), default=0)
    rounds = [{"round": r, "correct": 0, "incorrect": 0, "unscored": 0, "open": 0} for r in range(last + 1)]
    vote = {"correct": 0, "incorrect": 0, "unscored": 0, "no_answer": 0}
    for end in ends:
        if end.method == "consensus":
            for r in range(end.round):
                rounds[r]["open"] += 1
            rounds[end.round][_verdict(end.correct)] += 1
        else:
            for r in range(end.round + 1):
                rounds[r]["open"] += 1
            vote["no_answer" if not end.answered else _verdict(end.correct)] += 1
    return {"rounds": rounds, "vote": vote, "items": len(ends)}


@dataclass(frozen=True)
class DebateTurn:
    """One debate-round answer of a seat: its model, and its choice before and after."""

    model: str
    before: str | None
    after: str | None


def stance_shifts(turns: Iterable[tuple[DebateTurn, Truth]]) -> dict[str, dict[str, int]]:
    """Per model: its debate turns, how many changed its answer, and each change by kind."""
    out: dict[str, dict[str, int]] = {}
    for turn, truth in turns:
        row = out.setdefault(turn.model, {"turns": 0, "changed": 0, **dict.fromkeys(SHIFT_KINDS, 0)})
        row["turns"] += 1
        if turn.after != turn.before:
            row["changed"] += 1
            row[shift_kind(turn.before, turn.after, truth)] += 1
    return out  # in the order the models first spoke: the seat order


# ---------------------------------------------------------------- pure: turns and types

# A basic board writes the whole meeting in one reply (phase "simulation") and records each discussion turn
# read from it: counting both would count the meeting twice.
NOT_A_TURN = ("simulation",)


def count_turns(events: Iterable[dict]) -> int:
    return sum(1 for e in events if e.get("kind") == "turn" and e.get("phase") not in NOT_A_TURN)


def histogram(values: Iterable[int]) -> dict[int, int]:
    return dict(sorted(Counter(values).items()))


# Outcome-data keys that name an item's question type (Specialist Turn's qa_type, MedXpertQA's question_type
# carried as a case group, HealthBench's theme), in the order they are looked for.
TYPE_KEYS = ("qa_type", "question_type", "theme")


def type_key(outcomes: Iterable[dict]) -> str | None:
    """The first TYPE_KEYS entry some outcome holds a value for."""
    outcomes = list(outcomes)
    return next((k for k in TYPE_KEYS if any(o.get(k) not in (None, "") for o in outcomes)), None)


def values_by_type(pairs: Iterable[tuple[str | None, float]]) -> dict[str, list[float]]:
    groups: dict[str, list[float]] = defaultdict(list)
    for kind, value in pairs:
        groups["(none)" if kind in (None, "") else str(kind)].append(value)
    return dict(sorted(groups.items()))


def item_means(by_key: dict[tuple[str, int], float], outcomes: dict[tuple[str, int], dict],
               type_key: str | None = None) -> dict[str, tuple[str | None, float, int]]:
    """item id -> (its type, the mean of its repeats' values, how many repeats): an item's repeats are not
    independent items, so a figure per type counts each item once. Only (item, repeat)s in `outcomes` count."""
    values: dict[str, list[float]] = defaultdict(list)
    kinds: dict[str, str | None] = {}
    for key, value in sorted(by_key.items()):
        if key in outcomes:
            values[key[0]].append(value)
            kinds.setdefault(key[0], outcomes[key].get(type_key) if type_key else None)
    return {item: (kinds[item], sum(v) / len(v), len(v)) for item, v in values.items()}


def icd10_levels(report_run: dict) -> dict[str, dict[str, dict]]:
    """A run report's ICD-10 scores as level -> metric -> its headline interval (levels and metrics present only)."""
    out: dict[str, dict[str, dict]] = {}
    for level in LEVELS:
        for metric in METRICS:
            score = report_run["scores"].get(f"{level}_{metric}")
            if score is not None and headline(score)["estimate"] is not None:
                out.setdefault(level, {})[metric] = headline(score)
    return out


# ---------------------------------------------------------------- reading the store

DEBATE_PROTOCOLS = ("debate",)


@dataclass
class RunFigures:
    """One run's figure data, read from its finished items."""

    label: str
    protocol: str
    turns: list[int] = field(default_factory=list)  # per finished item
    flow: dict | None = None  # debate_flow, for debate runs
    shifts: dict[str, dict[str, int]] | None = None  # stance_shifts, for debate runs
    type_key: str | None = None  # the outcome-data key naming each item's question type
    type_score: str | None = None  # the score by_type holds (see type_score)
    by_type: dict[str, list[float]] | None = None  # one value per item: the mean of its repeats
    repeats_averaged: bool = False  # some item in by_type had more than one repeat
    key_source: str | None = None  # debate runs: 'dataset' (the key read from it), 'scores' (inferred), 'mixed'


def debate_item(events: list[dict], scores: dict[str, float], key: str | None = None) -> tuple[DebateEnd | None, list[DebateTurn], Truth]:
    """One debate item's ending, debate-round turns and its key: `key` where the dataset gave it, else what its
    scores tell of it, from its events."""
    decision = next((e for e in reversed(events) if e.get("kind") == "decision" and "method" in (e.get("data") or {})), None)
    initial = {e.get("speaker"): (e.get("data") or {}).get("choice") for e in events if e.get("kind") == "turn" and e.get("phase") == "initial"}
    answer = (decision or {}).get("data", {}).get("answer")
    observed = [(answer, scores.get("accuracy"))] + [(choice, scores.get(f"initial_accuracy.{seat}")) for seat, choice in initial.items()]
    truth = Truth(gold=key) if key else infer_truth(observed)
    end = None
    if decision is not None:
        data = decision["data"]
        accuracy = scores.get("accuracy")
        end = DebateEnd("consensus" if data["method"] == "consensus" else "vote", int(data.get("round") or 0),
                        None if accuracy is None else accuracy >= 1.0, answer is not None)
    turns = [DebateTurn(e.get("model") or e.get("speaker") or "?", (e.get("data") or {}).get("previous_choice"), (e.get("data") or {}).get("choice"))
             for e in events if e.get("kind") == "turn" and e.get("phase") == "debate"]
    return end, turns, truth


def type_score(typed: list[RunData], score: str | None) -> str | None:
    """The score shown per question type: the report's, where a run with types has it; else the typed runs' own
    default (accuracy, or their first score), so a Specialist Turn run beside MCQ runs still gets its figure."""
    if score is not None and any(score in r.scores for r in typed):
        return score
    names = sorted({n for r in typed for n in r.scores})
    return "accuracy" if "accuracy" in names else (names[0] if names else None)


def gather(store: Store, runs: list[RunData], score: str | None) -> list[RunFigures]:
    """Each run's figure data: turns per item, debate flows and shifts, a score per question type."""
    out, outcomes = [], {}
    key_books: dict[tuple[str, str], dict[str, str] | None] = {}  # one reading of each dataset, however many runs use it
    for data in runs:
        figures = RunFigures(data.label, data.run["protocol"])
        done = [i for i in data.items if i["status"] == "done"]
        debate = figures.protocol in DEBATE_PROTOCOLS
        ends, turns = [], []
        keys = None
        if debate and done:
            book = (data.run["dataset"], data.run["protocol"])
            if book not in key_books:
                key_books[book] = dataset_keys(data.run)
            keys = key_books[book]
        keyed = Counter()
        for item in done:
            events = store.events(data.id, item["item_id"], item["repeat"])
            figures.turns.append(count_turns(events))
            if debate:
                key = (item["item_id"], item["repeat"])
                scores = {name: by_key[key] for name, by_key in data.scores.items() if key in by_key}
                gold = (keys or {}).get(item["item_id"])
                keyed["dataset" if gold else "scores"] += 1
                end, item_turns, truth = debate_item(events, scores, gold)
                if end is not None:
                    ends.append(end)
                turns += [(t, truth) for t in item_turns]
        if debate and ends:
            figures.flow, figures.shifts = debate_flow(ends), stance_shifts(turns)
            figures.key_source = "mixed" if len(keyed) > 1 else next(iter(keyed))
        outcomes[data.id] = {(i["item_id"], i["repeat"]): ((i["outcome"] or {}).get("data") or {}) for i in done}
        figures.type_key = type_key(outcomes[data.id].values())
        out.append(figures)
    typed = [r for r, f in zip(runs, out) if f.type_key]
    name = type_score(typed, score)
    for data, figures in zip(runs, out):
        if figures.type_key and name in data.scores:
            by_item = outcomes[data.id]
            figures.type_score = name
            means = item_means(data.scores[name], by_item, figures.type_key)
            figures.repeats_averaged = any(n > 1 for _, _, n in means.values())
            figures.by_type = values_by_type((kind, value) for kind, value, _ in means.values())
    return out
