"""Consult vs its two baselines on CodiEsp dev cases (MedSyn's comparison, on public data).

    .venv/bin/python bench/bench_consult_codiesp.py [--model local] [--assistant M] [--limit 25]
        [--max-turns 5] [--max-tokens 64] [--discharge-max-tokens 96] [--store PATH]

Runs, on the first `limit` CodiEsp dev cases, with the same model(s):

  consult        physician (chief complaint only) questions the assistant (whole report), then submits
  baseline       the physician alone, from the chief complaint            (MedSyn's "phy w/complaint")
  baseline-note  the physician alone, from the whole report               (MedSyn's "phy w/full_note")

and reports every ICD-10 metric (precision, recall, F1, Jaccard at code, category and chapter
level, and the invalid-code rate) as a mean over cases with its 95% interval, the consult's mean
turns, and how many consults ended unfinished. Two views of the consult, since an unfinished
consult has no discharge:

  finished only           means over consults that submitted (what `medpanel show` reports)
  unfinished as empty     every case counts; an unfinished consult scores as an empty prediction (0)

Writes JSON and the turn-count histogram (PNG with matplotlib, else a text histogram in the JSON)
to bench/results/. Runs are stored (default a fresh store under bench/results/), so a rerun with the
same store is served from the model-call cache.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import time
from collections import Counter
from pathlib import Path

from medpanel.cases import load_dataset
from medpanel.models import Runtime
from medpanel.runs.runner import RunConfig, build_panel, run_benchmark
from medpanel.runs.store import Store
from medpanel.runs.summary import mean_interval
from medpanel.scoring.icd10 import icd10_scores, metric_names

PROTOCOLS = ("consult", "baseline", "baseline-note")
RESULTS = Path(__file__).resolve().parent / "results"
METRICS = [*metric_names(), "invalid_rate"]


def collect(store: Store, run_id: str, gold: dict[str, list[str]]) -> dict:
    """Per-case rows from a stored run: status, turns, scores as stored, and scores with unfinished as empty."""
    scores: dict[str, dict[str, float | None]] = {}
    for row in store.scores(run_id):
        scores.setdefault(row["item_id"], {})[row["name"]] = row["value"]
    rows = []
    for item in store.items(run_id):
        outcome = item["outcome"] or {}
        status = outcome.get("status") if item["status"] == "done" else "failed"
        stored = scores.get(item["item_id"], {})
        as_empty = stored
        if status == "unfinished":
            as_empty = stored | icd10_scores([], gold[item["item_id"]], empty="zero")  # no discharge = nothing predicted
        rows.append({"case": item["item_id"], "status": status, "turns": (outcome.get("data") or {}).get("turns"),
                     "codes": (outcome.get("data") or {}).get("codes"), "diagnosis": outcome.get("answer"),
                     "scores": stored, "scores_unfinished_as_empty": as_empty, "error": item["error"],
                     "seconds": round((item["finished_at"] or 0) - (item["started_at"] or 0), 2)})
    return {"rows": rows}


def count_interval(values: list[float]) -> dict:
    """Mean turns with a Student-t interval (mean_interval would take all-ones turn counts for 0/1 scores)."""
    from scipy import stats

    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "low": None, "high": None, "method": None}
    mean = sum(values) / n
    if n == 1 or len(set(values)) == 1:
        return {"n": n, "mean": mean, "low": mean if n > 1 else None, "high": mean if n > 1 else None, "method": "t"}
    low, high = stats.t.interval(0.95, n - 1, loc=mean, scale=stats.sem(values))
    return {"n": n, "mean": mean, "low": float(low), "high": float(high), "method": "t"}


def summarise(rows: list[dict], key: str) -> dict:
    out = {}
    for name in METRICS:
        values = [r[key].get(name) for r in rows if r["status"] != "failed" and r[key].get(name) is not None]
        out[name] = mean_interval(values, name, protocol="consult")
    return out


def turn_histogram(rows: list[dict]) -> dict[str, dict[int, int]]:
    hist: dict[str, Counter] = {"finished": Counter(), "unfinished": Counter()}
    for r in rows:
        if r["status"] in ("ok", "unfinished"):
            hist["finished" if r["status"] == "ok" else "unfinished"][r["turns"]] += 1
    return {k: dict(sorted(v.items())) for k, v in hist.items()}


def plot_turns(hist: dict[str, dict[int, int]], path: Path, title: str, max_turns: int) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        lines = [f"{t:>3} turns | {'#' * (hist['finished'].get(t, 0))}{'.' * hist['unfinished'].get(t, 0)}"
                 for t in sorted(set(hist["finished"]) | set(hist["unfinished"]))]
        return "text histogram (# finished, . unfinished):\n" + "\n".join(lines)
    turns = list(range(3, max_turns + 1))  # every possible length, empty bars included: the shortest consult has 3 turns
    finished = [hist["finished"].get(t, 0) for t in turns]
    unfinished = [hist["unfinished"].get(t, 0) for t in turns]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(turns, finished, label="submitted a discharge", color="#3b7dd8")
    ax.bar(turns, unfinished, bottom=finished, label="unfinished (turn bound)", color="#d8893b")
    ax.set_xlabel("turns per consult (questions, answers and the discharge)")
    ax.set_ylabel("consults")
    ax.set_xticks(turns)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="local", help="the physician (and, without --assistant, the assistant)")
    parser.add_argument("--assistant", default=None)
    parser.add_argument("--limit", type=int, default=25)
    parser.add_argument("--max-turns", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=64, help="per question or answer")
    parser.add_argument("--discharge-max-tokens", type=int, default=96)
    parser.add_argument("--concurrency", type=int, default=1, help="the local model serves one call at a time anyway")
    parser.add_argument("--store", type=Path, default=None)
    args = parser.parse_args()

    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    store = Store(args.store or RESULTS / f"consult_codiesp_{stamp}.db")
    runtime = Runtime(cache=store)
    models = [args.model] + ([args.assistant] if args.assistant else [])
    cases = load_dataset("codiesp", limit=args.limit)
    gold = {c.id: c.reference.codes for c in cases}
    panel = build_panel(models, runtime)
    report: dict = {"machine": platform.platform(), "model": args.model, "assistant": args.assistant or args.model,
                    "cases": len(cases), "dataset": "codiesp dev (first cases in file order)",
                    "settings": {"max_turns": args.max_turns, "max_tokens": args.max_tokens, "discharge_max_tokens": args.discharge_max_tokens,
                                 "temperature": 0.0, "empty_prediction": "zero"},
                    "chief_complaint_rules": dict(Counter(c.metadata["chief_complaint_rule"] for c in cases)),
                    "protocols": {}}
    for protocol in PROTOCOLS:
        settings = {"discharge_max_tokens": args.discharge_max_tokens}
        if protocol == "consult":
            # Stored scores leave unfinished consults out ("finished only"); collect() adds the unfinished-as-empty view.
            settings |= {"max_turns": args.max_turns, "max_tokens": args.max_tokens, "unfinished": "exclude"}
        config = RunConfig(dataset="codiesp", protocol=protocol, models=models, limit=args.limit, concurrency=args.concurrency, settings=settings)
        started = time.perf_counter()

        def progress(p, _rt, protocol=protocol, started=started):
            print(f"  {protocol}: {p.done + p.failed}/{p.total} ({time.perf_counter() - started:.0f}s)", flush=True)

        result = await run_benchmark(store, config, runtime, panel=panel, cases=cases, on_progress=progress)
        rows = collect(store, result.run_id, gold)["rows"]
        statuses = Counter(r["status"] for r in rows)
        entry = {
            "run_id": result.run_id, "wall_s": round(time.perf_counter() - started, 1),
            "seconds_per_case": round((time.perf_counter() - started) / max(len(rows), 1), 1),
            "status": dict(statuses),
            "turns": count_interval([float(r["turns"]) for r in rows if r["turns"] is not None]),
            "scores_finished_only": summarise(rows, "scores"),
            "rows": rows,
        }
        if protocol == "consult":
            entry["scores_unfinished_as_empty"] = summarise(rows, "scores_unfinished_as_empty")
            entry["turn_histogram"] = turn_histogram(rows)
            entry["turn_plot"] = plot_turns(entry["turn_histogram"], RESULTS / f"consult_turns_{stamp}.png",
                                            f"Consult turns on {len(cases)} CodiEsp dev cases ({args.model}, bound {args.max_turns})", args.max_turns)
        report["protocols"][protocol] = entry
        print(f"{protocol}: {dict(statuses)} in {entry['wall_s']}s", flush=True)

    out = RESULTS / f"consult_codiesp_{stamp}.json"
    out.write_text(json.dumps(report, indent=2, default=str))
    print_table(report)
    print(f"\nwrote {out}")


def fmt(stat: dict) -> str:
    if stat["mean"] is None:
        return "n/a"
    interval = f" [{stat['low']:.2f}, {stat['high']:.2f}]" if stat["low"] is not None else ""
    return f"{stat['mean']:.3f}{interval}"


def print_table(report: dict) -> None:
    columns = [("consult (finished)", "consult", "scores_finished_only"), ("consult (unfinished=0)", "consult", "scores_unfinished_as_empty"),
               ("baseline", "baseline", "scores_finished_only"), ("baseline-note", "baseline-note", "scores_finished_only")]
    print(f"\n{'metric':<20}" + "".join(f"{c[0]:>26}" for c in columns))
    for name in METRICS:
        print(f"{name:<20}" + "".join(f"{fmt(report['protocols'][p][k][name]):>26}" for _, p, k in columns))
    for p in PROTOCOLS:
        e = report["protocols"][p]
        print(f"{p}: status {e['status']}, mean turns {fmt(e['turns'])}, {e['seconds_per_case']} s/case")
    if "turn_plot" in report["protocols"]["consult"]:
        print(f"turn histogram: {report['protocols']['consult']['turn_histogram']} -> {report['protocols']['consult']['turn_plot']}")


if __name__ == "__main__":
    asyncio.run(main())
