"""A run's summary: counts, the panel, each score's mean with a 95% interval, tokens, dollars and calls."""

from __future__ import annotations

from collections import defaultdict

from medpanel.protocols import expands_cases
from medpanel.runs.stats import metric_interval
from medpanel.runs.runner import failure_digest, run_roles
from medpanel.runs.store import Store
from medpanel.runs.scoring import declared_kind
from medpanel.scoring.metrics import UNDECLARED


def mean_interval(values: list[float], name: str | None = None, *, protocol: str | None = None, confidence: float = 0.95) -> dict:
    """Mean with its interval, as its declared kind says (medpanel.scoring.metrics; an unnamed or
    unknown score is an undeclared mean, Student t). The maths is medpanel.runs.stats.metric_interval;
    this keeps the small dict shape `show`, `bench` and `judge run` print."""
    kind = declared_kind(name, protocol) if name is not None else UNDECLARED
    interval = metric_interval(values, kind, confidence)
    method = interval.method.replace("student-t", "t") if interval.n else None
    return {"n": interval.n, "mean": interval.estimate, "low": interval.low, "high": interval.high, "method": method,
            "kind": kind.describe(), "note": interval.note}


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
        "roles": run_roles(run),
        "items": {"done": len(done), "failed": len(failed), "expected": expected},
        "failures_by_kind": dict(errors),
        "failures": failure_digest(items),
        "scores": {name: mean_interval(vals, name, protocol=run["protocol"]) for name, vals in sorted(by_score.items())},
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
    if "finished" in scores and "code_f1" in scores:  # a consult run: say what its ICD-10 means count
        total, done = len(scores["finished"]), int(sum(scores["finished"]))
        notes.append(f"Consults: {done} finished, {total - done} unfinished; the ICD-10 means count {len(scores['code_f1'])} "
                     "(an unfinished consult counts as an empty prediction unless --set unfinished=exclude).")
    if "bertscore_f1" in scores:
        notes.append("BERTScore here uses the bundled all-MiniLM-L6-v2 model offline: it is not comparable to "
                     "published BERTScore (roberta-large, or OpenTumorBoard's deberta-xlarge-mnli).")
    return notes


def breakdown(store: Store, run_id: str, key: str) -> dict[str, dict[str, dict]]:
    """Each score's mean with its interval per value of `key`, read from an item's outcome data
    (e.g. qa_type, target_role for Specialist Turn; a case's cancer site)."""
    protocol = store.get_run(run_id)["protocol"]
    outcomes = {(i["item_id"], i["repeat"]): (i["outcome"] or {}).get("data", {}) for i in store.items(run_id) if i["status"] == "done"}
    groups: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in store.scores(run_id):
        data = outcomes.get((row["item_id"], row["repeat"]))
        if data is None or row["value"] is None:
            continue
        groups[str(data.get(key, "(none)"))][row["name"]].append(row["value"])
    return {group: {name: mean_interval(values, name, protocol=protocol) for name, values in sorted(scores.items())}
            for group, scores in sorted(groups.items())}
