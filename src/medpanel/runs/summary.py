"""A run's summary: counts, each score's mean with a 95% interval, tokens, dollars and calls."""

from __future__ import annotations

from collections import defaultdict

from medpanel.protocols import expands_cases
from medpanel.runs.stats import mean_t_interval, wilson
from medpanel.runs.store import Store


# Scores that count things (turns, rounds, codes). A column of them can happen to be all 0s and 1s,
# and must still get a t-interval: Wilson's interval is for proportions only.
COUNT_SCORES = frozenset({"turns", "rounds", "rounds_used", "shifts", "stance_shifts", "questions", "n_predicted", "exchanges"})


def mean_interval(values: list[float], confidence: float = 0.95, *, count: bool = False) -> dict:
    """Mean with its interval: Wilson for 0/1 scores (honest near 0 and 1), Student t otherwise or for counts.

    The maths lives in medpanel.runs.stats; this keeps the small dict shape the summaries print.
    """
    if values and not count and all(v in (0.0, 1.0) for v in values):
        interval = wilson(int(sum(values)), len(values), confidence)
    else:
        interval = mean_t_interval(values, confidence)
    method = {"wilson": "wilson", "student-t": "t"}[interval.method] if interval.n else None
    return {"n": interval.n, "mean": interval.estimate, "low": interval.low, "high": interval.high, "method": method}


def summarize(store: Store, run_id: str) -> dict:
    run = store.get_run(run_id)
    items = store.items(run_id)
    config = run["settings"]
    by_score: dict[str, list[float]] = defaultdict(list)
    for row in store.scores(run_id):
        if row["value"] is not None:
            by_score[row["name"]].append(row["value"])
    done = [i for i in items if i["status"] == "done"]
    failed = [i for i in items if i["status"] == "failed"]
    expected = None
    if config.get("limit") is not None and not expands_cases(run["protocol"]):  # --limit counts cases, not expanded items
        expected = config["limit"] * config.get("repeats", 1)
    errors: dict[str, int] = defaultdict(int)
    for i in failed:
        errors[i["error_kind"] or "error"] += 1
    n_done = max(len(done), 1)
    return {
        "run_id": run_id,
        "status": run["status"],
        "dataset": run["dataset"],
        "protocol": run["protocol"],
        "models": run["models"],
        "items": {"done": len(done), "failed": len(failed), "expected": expected},
        "failures_by_kind": dict(errors),
        "scores": {name: mean_interval(vals, count=name in COUNT_SCORES) for name, vals in sorted(by_score.items())},
        "tokens": {"input": sum(i["input_tokens"] for i in items), "output": sum(i["output_tokens"] for i in items)},
        "cost_usd": round(sum(i["cost_usd"] for i in items), 6),
        "cost_per_item_usd": round(sum(i["cost_usd"] for i in done) / n_done, 8),
        "calls": store.call_counts(run_id),
        "mean_item_seconds": round(sum((i["finished_at"] or 0) - (i["started_at"] or 0) for i in done) / n_done, 3),
        "message": run["message"],
        "notes": score_notes(by_score),
    }


def score_notes(scores: dict) -> list[str]:
    """Caveats a reader must see next to certain scores."""
    notes = []
    if "bertscore_f1" in scores:
        notes.append("BERTScore here uses the bundled all-MiniLM-L6-v2 model offline: it is not comparable to "
                     "published BERTScore (roberta-large, or OpenTumorBoard's deberta-xlarge-mnli).")
    return notes


def breakdown(store: Store, run_id: str, key: str) -> dict[str, dict[str, dict]]:
    """Each score's mean with its interval per value of `key`, read from an item's outcome data
    (e.g. qa_type, target_role for Specialist Turn; a case's cancer site)."""
    outcomes = {(i["item_id"], i["repeat"]): (i["outcome"] or {}).get("data", {}) for i in store.items(run_id) if i["status"] == "done"}
    groups: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in store.scores(run_id):
        data = outcomes.get((row["item_id"], row["repeat"]))
        if data is None or row["value"] is None:
            continue
        groups[str(data.get(key, "(none)"))][row["name"]].append(row["value"])
    return {group: {name: mean_interval(values, count=name in COUNT_SCORES) for name, values in sorted(scores.items())}
            for group, scores in sorted(groups.items())}
