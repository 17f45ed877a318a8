"""The first run (issue 11): on the embedded model every protocol must be short, coherent and finish.

    .venv/bin/python bench/bench_first_run.py [--quick] [--model local] [--only board,consult] [--store PATH]

Runs greedily, through the benchmark runner into one store, one item at a time (so an item's wall time
is its own):

  board        the written tumor board, every case in examples/
  board-live   the live tumor board (max_turns=4), every case in examples/
  consult      the MedSyn consult, the first 20 CodiEsp dev cases
  debate       three seats of the model (local,local,local), the first 5 MedQA items

`--quick` runs one case per protocol. The transcripts are read back from the store and judged with
medpanel.scoring.form_checks; printed per protocol, each acceptance point as passed/items:

  board, board-live   finished; >= 4 turns; >= 3 distinct specialists (Moderator not counted); no turn
                      repeating an 8-word sequence of an earlier turn; no turn mostly reciting the case
                      (> 50% of its words in runs of >= 12 words copied from it); a conclusion of 2-4 sentences
  consult             finished (submitted a discharge); no message repeating an earlier one of its seat
                      (same words or an 8-word sequence); none holding text of the schemas it was sent;
                      every ask a question; at least one valid ICD-10-CM code in the discharge
  debate              finished with an answer; every seat's answer parsed in every round; no answer
                      looping on itself (an 8-word sequence twice)
  every protocol      no reply cut by its token budget (reported, "not_truncated")

plus the median wall time per item (the model is loaded and warmed up first) and the prompt tokens
each call evaluated (the local model's own accounting: tokens not served from a kept KV state).
Writes JSON to bench/results/first_run_<stamp>.json. The bench reports; it does not tune prompts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from medpanel.cases import Case, load_dataset
from medpanel.models import Runtime, build_model
from medpanel.runs.runner import RunConfig, build_panel, run_benchmark
from medpanel.runs.store import Store
from medpanel.scoring.form_checks import FormChecks, board_checks, consult_checks, loops, spoken_text
from medpanel.scoring.icd10 import code_table

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
EXAMPLES = ROOT / "examples"

# protocol -> (dataset, items, items with --quick, seats, settings)
PLAN: dict[str, tuple[str, int | None, int, int, dict[str, Any]]] = {
    "board": (str(EXAMPLES), None, 1, 1, {}),
    "board-live": (str(EXAMPLES), None, 1, 1, {"max_turns": 4}),
    "consult": ("codiesp", 20, 1, 1, {}),
    "debate": ("medqa", 5, 1, 3, {"max_rounds": 3}),
}


def prompt_records() -> list:
    """The local model's per-call prompt accounting, if it was used (empty for other providers)."""
    try:
        from medpanel.models.local import prompt_records as records
    except ImportError:
        return []
    return records()


async def warm_up(spec: str) -> float:
    """Load the weights and build the grammar tokenizer before anything is timed; returns the seconds it took."""
    from pydantic import BaseModel

    class Ping(BaseModel):
        ok: bool

    runtime = Runtime()
    model = build_model(spec, runtime)
    started = time.perf_counter()
    await model.complete("Say hello.", max_tokens=4)
    await model.complete("Are you ready?", schema=Ping, max_tokens=8)
    await model.aclose()
    return time.perf_counter() - started


# ---------------------------------------------------------------------------- reading a stored item


def case_text(case: Case) -> str:
    return "\n".join(part for part in (case.summary, case.slide_text(), case.question, case.chief_complaint) if part)


def judge_item(protocol: str, item: dict, events: list[dict], case: Case, schemas: list[dict]) -> FormChecks:
    outcome = item.get("outcome") or {}
    finished = item["status"] == "done" and outcome.get("status", "ok") == "ok"
    replies = [e for e in events if e.get("kind") in ("turn", "decision") and e.get("model")]
    truncated = [e for e in events if (e.get("data") or {}).get("truncated")]
    if protocol in ("board", "board-live"):
        turns = [(e.get("role") or e.get("speaker") or "", e.get("text") or "") for e in events
                 if e.get("kind") == "turn" and e.get("phase") not in ("simulation", "conclusion")]
        decisions = [e.get("text") or "" for e in events if e.get("kind") == "decision"]
        conclusion = decisions[-1] if decisions else (outcome.get("answer") or "")
        checks = board_checks(turns, conclusion, case_text(case))
    elif protocol == "consult":
        messages = [(e.get("speaker") or "", spoken_text(e.get("text") or "")) for e in replies]
        checks = consult_checks(messages, schemas)
        asks = [e.get("text") or "" for e in events if e.get("kind") == "turn" and e.get("phase") == "question"]
        checks.check("asks_are_questions", all(a.rstrip().endswith("?") for a in asks), "; ".join(a for a in asks if not a.rstrip().endswith("?")))
        codes = (outcome.get("data") or {}).get("codes") or []
        checks.check("valid_code", any(code_table().info(c).valid for c in codes), f"no valid ICD-10-CM code in {codes}")
    else:
        checks = FormChecks()
        looping = [f"{e.get('speaker')} round {e.get('round')}" for e in replies if loops(e.get("text") or "")]
        unread = [f"{e.get('speaker')} round {e.get('round')}" for e in events if e.get("kind") == "turn" and not (e.get("data") or {}).get("parsed")]
        checks.check("answered", bool(outcome.get("answer")), "no answer")
        checks.check("every_seat_parsed", not unread, "not parsed: " + "; ".join(unread))
        checks.check("no_loops", not looping, "; ".join(looping))
    checks.passed = {"finished": finished, **checks.passed}
    if not finished:
        checks.details["finished"] = item.get("error") or f"outcome {outcome.get('status')}"
    checks.check("not_truncated", not truncated, f"{len(truncated)} repl{'y' if len(truncated) == 1 else 'ies'} cut by the budget")
    return checks


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


# ---------------------------------------------------------------------------- running


async def run_protocol(store: Store, protocol: str, spec: str, quick: bool, debate_temperature: float) -> dict:
    dataset, limit, quick_limit, seats, settings = PLAN[protocol]
    limit = quick_limit if quick else limit
    settings = dict(settings)
    if protocol == "debate" and debate_temperature > 0:
        settings |= {"temperature": debate_temperature, "seeds": list(range(1, seats + 1))}
    report: dict[str, Any] = {"protocol": protocol, "dataset": dataset if dataset != str(EXAMPLES) else "examples/",
                              "settings": settings, "models": [spec] * seats}
    try:
        cases = load_dataset(dataset, limit)
    except Exception as exc:  # data missing: say so, run the rest
        return report | {"error": f"{type(exc).__name__}: {exc}"}
    runtime = Runtime(cache=store, use_cache=False)  # every call made now, so the times are real
    calls_before = len(prompt_records())
    started = time.perf_counter()
    try:
        panel = build_panel([spec] * seats, runtime)
        config = RunConfig(dataset=dataset, protocol=protocol, models=[spec] * seats, limit=limit, concurrency=1, settings=settings)
        result = await run_benchmark(store, config, runtime, panel=panel, cases=cases, on_progress=progress(protocol))
    except Exception as exc:  # a protocol broken mid-refactor: report it and move on
        return report | {"error": f"{type(exc).__name__}: {exc}", "wall_s": round(time.perf_counter() - started, 1)}
    report |= {"run_id": result.run_id, "status": result.status, "wall_s": round(result.wall_s, 1)}
    if result.error is not None:
        report["error"] = str(result.error)
    by_id = {c.id: c for c in cases}
    calls = [r for r in prompt_records()[calls_before:] if r.scope and r.scope[0] == result.run_id]
    rows = []
    for item in store.items(result.run_id):
        events = store.events(result.run_id, item["item_id"], item["repeat"])
        schemas = store.request_schemas(result.run_id, item["item_id"])
        checks = judge_item(protocol, item, events, by_id[item["item_id"]], schemas)
        mine = [r for r in calls if r.scope[1] == item["item_id"]]
        rows.append({"item": item["item_id"], "status": item["status"], "error": item["error"],
                     "seconds": round((item["finished_at"] or 0) - (item["started_at"] or 0), 2),
                     "calls": len(mine), "prompt_tokens": sum(r.prompt for r in mine), "evaluated_tokens": sum(r.evaluated for r in mine),
                     **checks.as_dict()})
    points = list(dict.fromkeys(p for r in rows for p in r["passed"]))
    report |= {
        "items": len(rows),
        "points": {p: sum(1 for r in rows if r["passed"].get(p)) for p in points},
        "all_passed": sum(1 for r in rows if r["ok"]),
        "median_s_per_item": median([r["seconds"] for r in rows]),
        "calls": len(calls),
        "median_prompt_tokens_per_call": median([r.prompt for r in calls]),
        "median_evaluated_tokens_per_call": median([r.evaluated for r in calls]),
        "mean_evaluated_tokens_per_call": round(statistics.fmean([r.evaluated for r in calls]), 1) if calls else None,
        "reused_share": round(1 - sum(r.evaluated for r in calls) / max(1, sum(r.prompt for r in calls)), 3) if calls else None,
        "rows": rows,
    }
    return report


def progress(label: str):
    def hook(p, runtime) -> None:
        print(f"[{label}] {p.done + p.failed + p.skipped}/{p.total} items ({p.failed} failed)", file=sys.stderr, flush=True)

    return hook


async def run_bench(store: Store, protocols: list[str], spec: str, quick: bool, debate_temperature: float) -> dict:
    warm = await warm_up(spec)
    reports = []
    for protocol in protocols:
        print(f"[{protocol}] starting", file=sys.stderr, flush=True)
        reports.append(await run_protocol(store, protocol, spec, quick, debate_temperature))
    return {"bench": "first_run", "model": spec, "quick": quick, "warm_up_s": round(warm, 2), "protocols": reports}


def _num(value: Any, fmt: str = ".0f") -> str:
    return "-" if value is None else format(value, fmt)


def print_summary(result: dict) -> None:
    print(f"first run on {result['model']}{' (--quick)' if result['quick'] else ''}; warm-up {result['warm_up_s']} s (not counted)")
    print(f"{'protocol':11} {'items':>5} {'all ok':>6} {'s/item':>8} {'calls':>6} {'prompt/call':>11} {'evaluated/call':>14} {'reused':>7}")
    for r in result["protocols"]:
        if "items" not in r:
            print(f"{r['protocol']:11} FAILED TO RUN: {r.get('error')}")
            continue
        print(f"{r['protocol']:11} {r['items']:5} {r['all_passed']:6} {_num(r['median_s_per_item'], '.1f'):>8} {r['calls']:6} "
              f"{_num(r['median_prompt_tokens_per_call']):>11} {_num(r['median_evaluated_tokens_per_call']):>14} "
              f"{_num(r['reused_share'] and 100 * r['reused_share']):>6}%")
    print("(s/item, prompt/call and evaluated/call are medians; evaluated = prompt tokens not served from a kept KV state)")
    for r in result["protocols"]:
        if "items" not in r:
            continue
        line = "  ".join(f"{p} {n}/{r['items']}" for p, n in r["points"].items())
        print(f"{r['protocol']:11} {line}" + (f"  [run {r['status']}: {r['error']}]" if r.get("error") else ""))
        for row in r["rows"]:
            for point, detail in row["details"].items():
                print(f"    {row['item']}: {point}: {detail[:160]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one case per protocol")
    parser.add_argument("--model", default="local", help="the model spec in every seat (default: local, the embedded model)")
    parser.add_argument("--only", default=",".join(PLAN), help=f"protocols to run, comma-separated (default: {','.join(PLAN)})")
    parser.add_argument("--debate-temperature", type=float, default=0.0,
                        help="sample the debate's replicas at this temperature, one seed per seat (default 0: greedy, as every protocol here)")
    parser.add_argument("--store", type=Path, default=None, help="SQLite store (default: a fresh file in bench/results/)")
    args = parser.parse_args(argv)
    protocols = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = [p for p in protocols if p not in PLAN]
    if unknown:
        parser.error(f"unknown protocol(s) {', '.join(unknown)}; choose from {', '.join(PLAN)}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    store = Store(args.store or RESULTS / f"first_run_{stamp}.db")
    try:
        result = asyncio.run(run_bench(store, protocols, args.model, args.quick, args.debate_temperature))
    finally:
        store.close()
    result["store"] = str(store.path)
    out = RESULTS / f"first_run_{stamp}.json"
    out.write_text(json.dumps(result, indent=2))
    print_summary(result)
    print(f"written: {out} (store {store.path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
