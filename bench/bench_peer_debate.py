"""The peer comparison (issue 15, acceptance 6): medpanel's debate against the papers' plain debate loop.

The same N synthetic multiple-choice items, the same three seats (models a, b, c) and the same mock
OpenAI-compatible server, in its own process, at a fixed latency L per call (LLM calls take seconds):

- medpanel: `medpanel bench DATASET --protocol debate --models openai:a@URL,openai:b@URL,openai:c@URL`
  run as a user runs it (a subprocess, a fresh MEDPANEL_STORE, no --concurrency: the default settings
  are the point; `--medpanel-args` adds options). Wall time of the command -> items/hour. The store is
  read afterwards for the calls each item made (the call log) and the mock's in-flight count is sampled
  from its /_stats while the command runs.
- the baseline: a sequential three-agent debate written as the released research code does it (Du et
  al.'s llm_multiagent_debate, MCC's scripts): the `openai` SDK's synchronous client, one blocking
  chat-completion call after another, one item at a time, each agent's answer put in the others'
  context for the next round. For each item it makes exactly as many calls as medpanel's store says
  that item made (a first round of 3, then rounds of 3 while the item needed more), so both sides do
  the same work. It runs an evenly spaced sample of the items (`--baseline-items`) and extrapolates:
  its seconds per call times medpanel's mean calls per item is its seconds per item.

The mock answers a letter fixed by the question and the model name (`--reply choice`), so seats that
disagree on their first answers keep disagreeing: such an item is debated for every round (12 calls at
the default three rounds), an item whose seats agree at once takes 3. The dataset is built so that a
share `--agree` of the items agree at once (questions are varied until the mock's answers fit).

Goal: medpanel's items/hour >= 30x the baseline's at the default settings.

    .venv/bin/python bench/bench_peer_debate.py [--items 200] [--latency 1.0] [--baseline-items 12] [--agree 0.25]
    .venv/bin/python bench/bench_peer_debate.py --medpanel-args "--concurrency 8"

Writes bench/results/peer_debate.json (`--out`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import openai

from medpanel.cases.model import Case, Reference
from medpanel.protocols.single import question_prompt
from medpanel.runs.store import Store
from medpanel.testing.mock_replies import choice_for
from medpanel.testing.process import MockProcess, mock_server_process

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("a", "b", "c")  # the three seats; the mock's answer depends on the model name
OPTIONS = {"A": "Observation", "B": "Antibiotics", "C": "Surgery", "D": "Imaging", "E": "Referral"}  # the mock answers A-E


# ---------------------------------------------------------------------------------------------- the items


def first_answers(case: Case) -> tuple[str, ...]:
    """What the mock will answer each seat on its first call (a pure function of the question and model)."""
    prompt = question_prompt(case)
    return tuple(choice_for({"model": m, "messages": [{"role": "user", "content": prompt}]}) for m in MODELS)


def make_cases(n: int, agree: float) -> list[Case]:
    """N items; a share `agree` of them (spread evenly) get a question the three seats answer alike."""
    cases = []
    for i in range(n):
        wanted = math.floor((i + 1) * agree) > math.floor(i * agree)
        for form in range(10_000):
            case = Case(id=f"peer-{i:04d}", source="synthetic", synthetic=True, options=OPTIONS, reference=Reference(answer="B"),
                        question=f"Item {i} (form {form}): a 54-year-old presents with two days of fever and flank pain. What next?")
            if (len(set(first_answers(case))) == 1) == wanted:
                break
        cases.append(case)
    return cases


def write_dataset(cases: list[Case], path: Path) -> None:
    path.write_text("".join(json.dumps(c.model_dump(mode="json", exclude_defaults=True)) + "\n" for c in cases))


# ---------------------------------------------------------------------------------------------- medpanel


class InFlight:
    """Samples the mock's /_stats in a thread: requests received minus those answered (ok, fault or error)."""

    def __init__(self, mock: MockProcess, every_s: float = 0.05) -> None:
        self.mock, self.every_s = mock, every_s
        self.peak, self.samples = 0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            s = self.mock.stats()
            now = s["requests"] - s["successes"] - sum(s["faults"].values()) - sum(s["errors"].values())
            self.peak = max(self.peak, now)
            self.samples.append(now)
            self._stop.wait(self.every_s)

    def __enter__(self) -> "InFlight":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def medpanel_exe() -> str:
    beside = Path(sys.executable).parent / "medpanel"
    found = beside if beside.exists() else ROOT / ".venv" / "bin" / "medpanel"
    return str(found) if found.exists() else (shutil.which("medpanel") or "medpanel")


def peak_from_store(store: Store, run_id: str) -> int:
    """Most calls open at once by the client's own clock: each made call spans [at - latency, at], its latency
    as the model layer measured it, so waiting for a connection or a pacing gate counts (the mock's peak does not)."""
    rows = store._query("SELECT l.at AS at, c.record AS record FROM call_log l JOIN calls c ON c.key = l.key "
                        "WHERE l.run_id = ? AND l.cached = 0 AND l.error IS NULL", (run_id,))
    edges = []
    for r in rows:
        edges += [(r["at"] - json.loads(r["record"]).get("latency_s", 0.0), 1), (r["at"], -1)]
    peak = now = 0
    for _, step in sorted(edges):  # an end sorts before a start at the same instant
        now += step
        peak = max(peak, now)
    return peak


def run_medpanel(mock: MockProcess, dataset: Path, store_path: Path, extra: list[str]) -> dict:
    models = ",".join(f"openai:{m}@{mock.base_url}" for m in MODELS)
    command = [medpanel_exe(), "bench", str(dataset), "--protocol", "debate", "--models", models, *extra]
    env = {**os.environ, "MEDPANEL_STORE": str(store_path)}
    before = mock.stats()["requests"]
    with InFlight(mock) as inflight:
        started = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
    after = mock.stats()
    requests = after["requests"] - before
    if done.returncode != 0:
        raise SystemExit(f"medpanel bench exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    store = Store(store_path, create=False)
    (run,) = store.list_runs()
    config = store.get_run(run["id"])["settings"]  # the run's config as medpanel recorded it (its concurrency)
    items = store.items(run["id"])
    log = store.call_log(run["id"])
    made = [c for c in log if not c["cached"] and not c["error"]]
    calls = Counter(c["item_id"] for c in made)
    result = {
        "command": shlex.join(command), "exit_status": done.returncode, "run_id": run["id"],
        "concurrency": config.get("concurrency"),
        "wall_s": round(wall, 2), "run_s_in_store": round(run["finished_at"] - run["created_at"], 2) if run.get("finished_at") else None,
        "items_done": sum(i["status"] == "done" for i in items), "items_failed": sum(i["status"] == "failed" for i in items),
        "calls": len(made), "calls_cached": sum(1 for c in log if c["cached"]), "calls_failed": sum(1 for c in log if c["error"]),
        "mock_requests": requests,  # retries and re-asks would make this exceed the logged calls
        # the mock's own peak where its /_stats reports one (this mock process served only this run so far), else sampled
        "peak_in_flight_mock": after.get("peak_in_flight", inflight.peak), "peak_in_flight_sampled": inflight.peak,
        "peak_in_flight_client": peak_from_store(store, run["id"]),
        "per_item_calls": {i["item_id"]: calls.get(i["item_id"], 0) for i in items},
        "stdout_tail": done.stdout[-400:],
    }
    store.close()
    return result


# ---------------------------------------------------------------------------------------------- the baseline


def construct_message(others: list[list[dict]], round: int) -> dict:
    """The other agents' answers from the previous round, as the next user turn (Du et al.'s shape)."""
    text = "These are the solutions to the problem from other agents: "
    for context in others:
        text += f"\n\n One agent solution: ```{context[2 * round - 1]['content']}```"
    text += ("\n\n Using the reasoning from other agents as additional advice, can you give an updated answer? "
             "Examine your solution and that of the other agents step by step. Finish with a final line 'Answer: X'.")
    return {"role": "user", "content": text}


def baseline_item(client: openai.OpenAI, question: str, calls: int) -> None:
    """One item's debate, one blocking call after another: round 0, then rounds of 3 until `calls` are made."""
    agent_contexts = [[{"role": "user", "content": question}] for _ in MODELS]
    made, round = 0, 0
    while made < calls:
        for i, agent_context in enumerate(agent_contexts):
            if made == calls:
                break
            if round != 0:
                agent_context.append(construct_message(agent_contexts[:i] + agent_contexts[i + 1:], round))
            completion = client.chat.completions.create(model=MODELS[i], messages=agent_context, temperature=0, max_tokens=2048)
            agent_context.append({"role": "assistant", "content": completion.choices[0].message.content})
            made += 1
        round += 1


def run_baseline(mock: MockProcess, cases: list[Case], per_item_calls: dict[str, int], sample: int) -> dict:
    picks = sorted({round(j * (len(cases) - 1) / max(1, sample - 1)) for j in range(min(sample, len(cases)))})
    client = openai.OpenAI(base_url=mock.base_url, api_key="not-needed", timeout=120)
    before = mock.stats()["requests"]
    rows = []
    for index in picks:
        case = cases[index]
        calls = per_item_calls[case.id]
        started = time.perf_counter()
        baseline_item(client, question_prompt(case), calls)
        rows.append({"item_id": case.id, "calls": calls, "seconds": round(time.perf_counter() - started, 3)})
    requests = mock.stats()["requests"] - before
    total_s, total_calls = sum(r["seconds"] for r in rows), sum(r["calls"] for r in rows)
    return {"sample_items": len(rows), "sample_calls": total_calls, "mock_requests": requests, "sample_s": round(total_s, 2),
            "s_per_call": round(total_s / total_calls, 4), "sample_mean_s_per_item": round(total_s / len(rows), 3), "items": rows}


# ---------------------------------------------------------------------------------------------- main


def ideal_wall(counts: list[int], latency: float, concurrency: int) -> float:
    """A run with no overhead: each item's rounds (3 calls at once each) back to back, the items spread over
    `concurrency` slots; never under the longest item. With no concurrency recorded, every item at once."""
    rounds = [math.ceil(c / len(MODELS)) for c in counts]
    return round(max(sum(rounds) / concurrency, max(rounds, default=0)) * latency, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=200, help="items in the dataset medpanel runs")
    ap.add_argument("--latency", type=float, default=1.0, help="seconds per call at the mock (LLM calls take seconds)")
    ap.add_argument("--agree", type=float, default=0.25, help="share of items whose seats agree on their first answers (no debate)")
    ap.add_argument("--baseline-items", type=int, default=12, help="items the sequential baseline runs (an even sample); it extrapolates")
    ap.add_argument("--medpanel-args", default="", help="extra options for medpanel bench, e.g. \"--concurrency 8\" (default: none)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "peer_debate.json")
    args = ap.parse_args()
    if not 0 <= args.agree <= 1:
        ap.error("--agree is a share between 0 and 1")

    cases = make_cases(args.items, args.agree)
    predicted = sum(len(set(first_answers(c))) == 1 for c in cases)
    with tempfile.TemporaryDirectory() as tmp, mock_server_process("--latency", str(args.latency), "--reply", "choice") as mock:
        dataset = Path(tmp) / "peer_items.jsonl"
        write_dataset(cases, dataset)
        med = run_medpanel(mock, dataset, Path(tmp) / "store.db", shlex.split(args.medpanel_args))
        per_item = med.pop("per_item_calls")
        base = run_baseline(mock, cases, per_item, args.baseline_items)

    counts = list(per_item.values())
    mean_calls = statistics.fmean(counts)
    med_per_hour = med["items_done"] / med["wall_s"] * 3600
    base_s_per_item = base["s_per_call"] * mean_calls  # the baseline is strictly sequential: its time is its calls x per-call time
    base_per_hour = 3600 / base_s_per_item
    ratio = med_per_hour / base_per_hour
    report = {
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "latency_s": args.latency,
        "items": args.items,
        "items_agreeing_at_once": {"designed": predicted, "medpanel_3_calls": sum(1 for c in counts if c == 3)},
        "calls_per_item": {"mean": round(mean_calls, 3), "distribution": {str(k): v for k, v in sorted(Counter(counts).items())},
                           "total": sum(counts)},
        "medpanel": {**med, "items_per_hour": round(med_per_hour, 1),
                     "cli_overhead_s": round(med["wall_s"] - med["run_s_in_store"], 2) if med["run_s_in_store"] else None,  # start-up, load, report
                     "ideal_wall_s": ideal_wall(counts, args.latency, med["concurrency"] or len(counts)),
                     "mean_in_flight": round(med["calls"] * args.latency / med["wall_s"], 2)},  # calls x L / wall: effective concurrency
        "baseline": {**base, "s_per_item": round(base_s_per_item, 3), "items_per_hour": round(base_per_hour, 1),
                     "extrapolated": f"ran {base['sample_items']} of {args.items} items; s/item = its s/call x medpanel's mean calls/item"},
        "ratio": round(ratio, 2),
        "goal": ">= 30x at the default settings",
        "meets_goal": ratio >= 30,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))

    m, b = report["medpanel"], report["baseline"]
    print(f"mock latency {args.latency:g} s/call; {args.items} items, calls/item mean {mean_calls:.2f} {report['calls_per_item']['distribution']}")
    print(f"medpanel  {m['command'].replace(str(ROOT) + '/', '')}")
    chosen = m["concurrency"] if m["concurrency"] is not None else "not recorded (medpanel picks)"
    print(f"  concurrency {chosen} (the run's config); wall {m['wall_s']:.1f} s ({m['run_s_in_store']} s in the store, "
          f"ideal {m['ideal_wall_s']} s), {m['items_done']} done / {m['items_failed']} failed, "
          f"{m['calls']} calls ({m['mock_requests']} at the mock); {m['items_per_hour']:,.0f} items/hour")
    print(f"  calls in flight at the mock: peak {m['peak_in_flight_mock']} (sampled {m['peak_in_flight_sampled']}, "
          f"open by the client's clock {m['peak_in_flight_client']}), mean {m['mean_in_flight']}; CLI start-up and report {m['cli_overhead_s']} s")
    print(f"baseline  sequential openai SDK loop, {b['sample_items']} sampled items ({b['sample_calls']} calls, {b['sample_s']:.1f} s): "
          f"{b['s_per_call']:.3f} s/call -> {b['s_per_item']:.2f} s/item at {mean_calls:.2f} calls/item; {b['items_per_hour']:,.0f} items/hour "
          f"(extrapolated)")
    print(f"ratio     {ratio:.1f}x (goal >= 30x at the defaults{'' if not args.medpanel_args else '; these are not the defaults: ' + args.medpanel_args})")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
