"""A run's summary: counts, each score's mean with a 95% interval, tokens, dollars and calls."""

from __future__ import annotations

import math
from collections import defaultdict

from scipy import stats

from medpanel.runs.store import Store


def mean_interval(values: list[float], confidence: float = 0.95) -> dict:
    """Mean with its interval: Wilson for 0/1 scores (honest near 0 and 1), Student t otherwise."""
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "low": None, "high": None, "method": None}
    mean = sum(values) / n
    if all(v in (0.0, 1.0) for v in values):
        z = stats.norm.ppf(0.5 + confidence / 2)
        denom = 1 + z * z / n
        centre = (mean + z * z / (2 * n)) / denom
        half = z * math.sqrt(mean * (1 - mean) / n + z * z / (4 * n * n)) / denom
        return {"n": n, "mean": mean, "low": max(0.0, centre - half), "high": min(1.0, centre + half), "method": "wilson"}
    if n == 1:
        return {"n": 1, "mean": mean, "low": None, "high": None, "method": "t"}
    sem = stats.sem(values)
    if sem == 0:
        return {"n": n, "mean": mean, "low": mean, "high": mean, "method": "t"}
    low, high = stats.t.interval(confidence, n - 1, loc=mean, scale=sem)
    return {"n": n, "mean": mean, "low": float(low), "high": float(high), "method": "t"}


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
    if config.get("limit") is not None:
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
        "scores": {name: mean_interval(vals) for name, vals in sorted(by_score.items())},
        "tokens": {"input": sum(i["input_tokens"] for i in items), "output": sum(i["output_tokens"] for i in items)},
        "cost_usd": round(sum(i["cost_usd"] for i in items), 6),
        "cost_per_item_usd": round(sum(i["cost_usd"] for i in done) / n_done, 8),
        "calls": store.call_counts(run_id),
        "mean_item_seconds": round(sum((i["finished_at"] or 0) - (i["started_at"] or 0) for i in done) / n_done, 3),
        "message": run["message"],
    }
