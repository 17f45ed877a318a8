"""The web app's speed: how long its pages take on a large run, and what the live page adds to a deliberation.

1. Pages: a store with one `single` run of N items (scripted model, real SQLite), served by uvicorn on
   loopback; the median of R requests for /runs, the run page, an item page and the report page.
2. Live: the same scripted live board run K times through the runner directly, then K times started from
   the page with the event stream read to its end; the difference of the medians is what the web adds to a
   deliberation (goal: under 0.25 s; the scripted board itself takes milliseconds, so this is the app's
   whole overhead: the form, the redirect, the stream, rendering each turn).

    .venv/bin/python bench/bench_web.py [--items 2000] [--requests 7] [--boards 7]

Writes bench/results/web.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from web_support import serving  # noqa: E402

from medpanel.cases import Case, load_case  # noqa: E402
from medpanel.models import Runtime  # noqa: E402
from medpanel.runs.runner import RunConfig, run_benchmark  # noqa: E402
from medpanel.runs.store import Store  # noqa: E402
from medpanel.web.app import create_app  # noqa: E402
from medpanel.web.config import WebConfig  # noqa: E402

BOARD = [
    {"presentation": "A 69-year-old man with Grade Group 2 prostate cancer.", "specialists": ["Radiologist", "Urologist"]},
    {"next_speaker": "Radiologist", "question": "What does the MRI show?"},
    "An 11 mm PI-RADS 4 lesion at the right base.",
    {"next_speaker": "Urologist", "question": "Which treatment?"},
    "Active surveillance is reasonable.",
    {"next_speaker": "close the discussion", "question": ""},
    {"conclusion": "The board recommends active surveillance."},
]


def big_run(store: Store, n: int) -> str:
    cases = [Case(id=f"q{i:05d}", question=f"Question {i}?", options={"A": "yes", "B": "no"}, reference={"answer": "AB"[i % 2]})
             for i in range(n)]
    config = RunConfig(dataset="synthetic", protocol="single", models=["scripted:Answer: A"], concurrency=16)
    result = asyncio.run(run_benchmark(store, config, Runtime(cache=store), cases=cases, run_id="big"))
    return result.run_id


def median_ms(client: httpx.Client, path: str, times: int) -> float:
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        response = client.get(path)
        samples.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (path, response.status_code)
    return statistics.median(samples)


def direct_board(store: Store, model: str) -> float:
    case = load_case(ROOT / "examples" / "prostate")
    config = RunConfig(dataset="examples/prostate", protocol="board-live", models=[model], settings={"max_turns": 4})
    started = time.perf_counter()
    asyncio.run(run_benchmark(store, config, Runtime(cache=store), cases=[case]))
    return time.perf_counter() - started


def web_board(client: httpx.Client, base: str, model: str) -> float:
    started = time.perf_counter()
    where = client.post("/deliberations", data={"folder": "prostate", "protocol": "board-live", "models": model, "max_turns": "4"}).headers["location"]
    with httpx.stream("GET", base + where + "/stream", timeout=60) as response:
        for line in response.iter_lines():
            if line == "event: end":
                break
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=7)
    parser.add_argument("--boards", type=int, default=7)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    store = Store(folder / "bench.db")
    replies = folder / "board.yaml"
    replies.write_text(yaml.safe_dump(BOARD))
    model = f"scripted:{replies}"
    started = time.perf_counter()
    run_id = big_run(store, args.items)
    stored_s = time.perf_counter() - started
    app = create_app(WebConfig(store_path=store.path, cases_dir=ROOT / "examples", allowed_models=(model,)), store)
    results: dict = {"items": args.items, "requests": args.requests, "boards": args.boards, "store_run_s": round(stored_s, 2)}
    with serving(app) as base, httpx.Client(base_url=base, timeout=120) as client:
        pages = {"runs list": "/runs", "run page": f"/runs/{run_id}", "item page": f"/runs/{run_id}/items/q01000",
                 "report page": f"/runs/{run_id}/report"}
        results["page_ms_median"] = {name: round(median_ms(client, path, args.requests), 1) for name, path in pages.items()}
        direct = [direct_board(store, model) for _ in range(args.boards)]
        web = [web_board(client, base, model) for _ in range(args.boards)]
    results["board_direct_s_median"] = round(statistics.median(direct), 4)
    results["board_web_s_median"] = round(statistics.median(web), 4)
    results["web_adds_s"] = round(statistics.median(web) - statistics.median(direct), 4)
    out = ROOT / "bench" / "results" / "web.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
