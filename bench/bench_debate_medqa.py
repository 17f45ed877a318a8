"""Debate vs vote vs single models on MedQA, end to end through the benchmark runner (acceptance 3).

Five runs over the first N MedQA items (default 50) into one store: the MCC debate of three seats, the
majority vote of their first answers, and each seat alone (`single`). Reported: accuracy with its 95%
interval, tokens and dollars per item, paired tests of the debate against every other run (exact
McNemar, from medpanel.runs.report), and the debate's flows (the paper's Figure 2: where consensus
was reached, right or wrong; stance shifts).

Seats, by default: three *simulated* clinicians (ScriptedModels). These measure the machinery, not
medicine: each is right on a seeded share of items (its accuracy), otherwise picks a wrong option
(often the item's one tempting distractor, so wrong seats tend to agree, as real models do); in debate
it goes along with two peers who agree with each other, and a wrong seat is won over by a right peer
with probability `persuadable`. Made-up prices per 1K tokens make the cost non-zero.

    .venv/bin/python bench/bench_debate_medqa.py                      # 50 items, simulated seats
    .venv/bin/python bench/bench_debate_medqa.py --models local,local,local --limit 3   # the embedded model

With `--models`, the specs are seated as given (replicas of one model debate at temperature 0.7 with
one seed per seat, since greedy replicas would always agree). Results go to bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from medpanel.cases import Case, load_dataset
from medpanel.models import Runtime
from medpanel.models.base import Request
from medpanel.models.pricing import PriceTable
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Panel
from medpanel.protocols.debate import flow_counts
from medpanel.testing.debate_prompts import PEER_CHOICE
from medpanel.protocols.single import question_prompt
from medpanel.runs.report import build_report, headline
from medpanel.runs.runner import RunConfig, build_panel, run_benchmark
from medpanel.runs.store import Store
from medpanel.scoring.exact import parse_choice

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Clinician:
    name: str
    accuracy: float  # share of items it answers right on its own
    persuadable: float  # chance a right peer wins it over in a debate round
    price_in: float  # made-up USD per 1K tokens
    price_out: float


CLINICIANS = (
    Clinician("sim-strong", 0.80, 0.30, 0.0030, 0.0120),
    Clinician("sim-mid", 0.65, 0.50, 0.0010, 0.0040),
    Clinician("sim-weak", 0.50, 0.60, 0.0002, 0.0008),
)
DISTRACTOR_PULL = 0.6  # a wrong seat picks the item's tempting distractor this often, else any wrong option


def _draw(*parts: object) -> random.Random:
    return random.Random("|".join(map(str, parts)))


def simulated_responder(clinician: Clinician, cases: list[Case], seed: int):
    """A ScriptedModel responder playing `clinician` on these cases (found by their question text)."""
    by_prompt = {question_prompt(c): c for c in cases}

    def first_answer(case: Case) -> str:
        gold = case.reference.answer
        wrong = sorted(k for k in case.options if k != gold)
        if _draw(seed, clinician.name, case.id).random() < clinician.accuracy:
            return gold
        distractor = _draw(seed, case.id, "distractor").choice(wrong)
        pick = _draw(seed, clinician.name, case.id, "wrong")
        return distractor if pick.random() < DISTRACTOR_PULL else pick.choice(wrong)

    def respond(request: Request) -> str:
        case = by_prompt[request.messages[1].content]
        if len(request.messages) == 2:
            choice = first_answer(case)
            return f"{clinician.name} weighs the history, the findings and each option in turn.\nAnswer: {choice}"
        own = parse_choice(request.messages[2].content, case.options)
        peers = PEER_CHOICE.findall(request.messages[3].content)
        roll = _draw(seed, clinician.name, case.id, hashlib.sha256(request.messages[3].content.encode()).hexdigest()).random()
        if peers and len(set(peers)) == 1 and peers[0] != own:
            choice, why = peers[0], "Both colleagues make the same case and I now agree with them."
        elif own != case.reference.answer and case.reference.answer in peers and roll < clinician.persuadable:
            choice, why = case.reference.answer, "Upon reevaluation a colleague's argument is the stronger one."
        else:
            choice, why = own, "I still maintain my answer after reading my colleagues."
        return f"{clinician.name} reviews the other answers. {why}\nAnswer: {choice}"

    return respond


def simulated_panel(cases: list[Case], runtime: Runtime, seed: int) -> Panel:
    models = [ScriptedModel(name=c.name, responder=simulated_responder(c, cases, seed), runtime=runtime) for c in CLINICIANS]
    return Panel.of(models, names=[c.name for c in CLINICIANS])


def simulated_prices() -> PriceTable:
    table = PriceTable.default()
    for c in CLINICIANS:
        table.prices[c.name] = (c.price_in, c.price_out)
    return table


def plan(specs: list[str] | None, max_tokens: int) -> tuple[list[tuple[str, list[int], dict]], list[str]]:
    """The runs: (protocol, seat indexes, settings). Replicas debate and vote at temperature 0.7 with one seed per seat."""
    n = len(specs) if specs else len(CLINICIANS)
    names = specs or [c.name for c in CLINICIANS]
    replicas = bool(specs) and len(set(specs)) < len(specs)
    shared: dict = {"max_tokens": max_tokens, "tie_policy": "abstain"}
    if replicas:
        shared |= {"temperature": 0.7, "seeds": list(range(1, n + 1))}
    debate = {**shared, "max_rounds": 3, "order": "simultaneous", "peer_context": "full"}
    if specs:
        debate["peer_max_chars"] = 600  # small local contexts
    runs = [("debate", list(range(n)), debate), ("vote", list(range(n)), shared)]
    singles = sorted({names.index(s) for s in names})  # each distinct model once
    runs += [("single", [i], {"max_tokens": max_tokens}) for i in singles]
    return runs, names


def progress_printer(label: str, every_s: float = 5.0):
    """A runner progress hook: one stderr line at most every `every_s` seconds, and the last one."""
    last = [0.0]

    def hook(progress, runtime) -> None:
        now = time.perf_counter()
        finished = progress.done + progress.failed + progress.skipped
        if now - last[0] >= every_s or finished >= progress.total:
            last[0] = now
            print(f"[{label}] {finished}/{progress.total} items ({progress.failed} failed), {progress.rate:.1f}/s",
                  file=sys.stderr, flush=True)

    return hook


async def run_bench(store: Store, *, limit: int = 50, specs: list[str] | None = None, seed: int = 0,
                    concurrency: int = 8, max_tokens: int = 512) -> dict:
    cases = load_dataset("medqa", limit)
    runs, names = plan(specs, max_tokens)
    run_ids = []
    started = time.perf_counter()
    for protocol, seats, settings in runs:
        # No cache: every protocol pays for its own calls, so cost per item compares fairly.
        runtime = Runtime(cache=store, use_cache=False, prices=simulated_prices() if specs is None else PriceTable.default())
        if specs is None:
            full = simulated_panel(cases, runtime, seed)
            panel = Panel({n: full.seats[n] for n in (names[i] for i in seats)})
        else:
            panel = build_panel([names[i] for i in seats], runtime)
        config = RunConfig(dataset="medqa", protocol=protocol, models=[names[i] for i in seats], limit=limit,
                           concurrency=concurrency, settings=settings)
        result = await run_benchmark(store, config, runtime, panel=panel, cases=cases, on_progress=progress_printer(protocol))
        if result.status not in ("done", "done_with_failures"):  # failed items are counted in the report
            raise RuntimeError(f"{protocol} run stopped: {result.status} {result.error}")
        run_ids.append(result.run_id)
    wall = time.perf_counter() - started

    report = build_report(store, run_ids, score="accuracy", resamples=2000, seed=seed)
    debate_id = run_ids[0]
    rows = []
    for r in report["runs"]:
        acc = headline(r["scores"]["accuracy"]) if "accuracy" in r["scores"] else None
        rows.append({"run_id": r["run_id"], "label": r["label"], "done": r["items"]["done"], "failed": r["items"]["failed"],
                     "accuracy": acc, "tokens_per_item": (r["tokens"]["input_per_item"] or 0) + (r["tokens"]["output_per_item"] or 0),
                     "cost_per_item_usd": r["cost_usd"]["per_item"], "wall_s_per_item": r["wall_s"]["per_item"]})
    paired = [c for c in report["comparisons"] if c["score"] == "accuracy" and debate_id in (c["a"], c["b"])]
    golds = {c.id: c.reference.answer for c in cases}
    debate_items = [i for i in store.items(debate_id) if i["status"] == "done"]
    flows = flow_counts([(i["outcome"]["data"], golds[i["item_id"]]) for i in debate_items])
    return {"bench": "debate_medqa", "items": len(cases), "seats": names, "simulated": specs is None, "seed": seed,
            "wall_s": round(wall, 3), "runs": rows, "paired_vs_debate": paired, "debate_flows": flows, "run_ids": run_ids}


def _fmt_acc(acc: dict | None) -> str:
    if not acc or acc.get("estimate") is None:
        return "n/a"
    low, high = acc.get("low"), acc.get("high")
    return f"{acc['estimate']:.3f} [{low:.3f}, {high:.3f}]" if low is not None else f"{acc['estimate']:.3f}"


def print_summary(result: dict) -> None:
    print(f"MedQA, first {result['items']} items; seats: {', '.join(result['seats'])}"
          f"{' (simulated)' if result['simulated'] else ''}; {result['wall_s']} s")
    print(f"{'run':44} {'accuracy [95% CI]':26} {'tokens/item':>12} {'$/item':>10}")
    for r in result["runs"]:
        print(f"{r['label'][:44]:44} {_fmt_acc(r['accuracy']):26} {r['tokens_per_item']:12.1f} {r['cost_per_item_usd'] or 0:10.6f}")
    print("paired tests, debate against each (accuracy):")
    for c in result["paired_vs_debate"]:
        other = c["b_label"] if c["a"] == result["run_ids"][0] else c["a_label"]
        for t in c["tests"]:
            d = t.get("details", {})
            print(f"  vs {other[:40]:40} {t['method']}: p = {t['p_value']:.4g} "
                  f"(only debate right {d.get('only_a_right' if c['a'] == result['run_ids'][0] else 'only_b_right')}, "
                  f"only other right {d.get('only_b_right' if c['a'] == result['run_ids'][0] else 'only_a_right')})")
    print("debate flows:", json.dumps(result["debate_flows"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=50, help="MedQA items (default 50)")
    parser.add_argument("--models", default=None, help="seat specs, e.g. local,local,local (default: three simulated clinicians)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--store", type=Path, default=None, help="SQLite store (default: a fresh file in bench/results/)")
    args = parser.parse_args(argv)
    specs = [s.strip() for s in args.models.split(",") if s.strip()] if args.models else None
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    store = Store(args.store or RESULTS / f"debate_medqa_{stamp}.db")
    try:
        result = asyncio.run(run_bench(store, limit=args.limit, specs=specs, seed=args.seed,
                                       concurrency=args.concurrency, max_tokens=args.max_tokens))
    finally:
        store.close()
    result["store"] = str(store.path)
    out = RESULTS / f"debate_medqa_{stamp}.json"
    out.write_text(json.dumps(result, indent=2))
    print_summary(result)
    print(f"written: {out} (store {store.path}; `medpanel report {' '.join(result['run_ids'])} --store {store.path}`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
