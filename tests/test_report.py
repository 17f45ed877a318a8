"""The run report on runs made by the real runner with scripted models whose right answers we choose,
so every number below is worked by hand."""

from __future__ import annotations

import asyncio
import json
import math
import struct
import subprocess
import sys
from collections import defaultdict

import pytest
from conftest import MEDPANEL
from scipy import stats as sps

from medpanel.cases import Case, Reference
from medpanel.errors import ModelCallError
from medpanel.models import Runtime
from medpanel.models.pricing import PriceTable
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Panel
from medpanel.protocols.single import SYSTEM, question_prompt
from medpanel.runs.report import build_report, write_report
from medpanel.runs.runner import RunConfig, run_benchmark
from medpanel.runs.store import Store

# USD per 1K tokens (input, output), looked up by the scripted model's name.
PRICES = {"good": (1.0, 2.0), "weak": (0.5, 1.0), "flaky": (1.0, 2.0), "poor": (0.1, 0.1), "learner": (1.0, 1.0), "guesser": (1.0, 1.0)}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def cases(n: int = 10) -> list[Case]:
    """q1..qn, every reference answer A."""
    return [Case(id=f"q{i:02d}", question=f"Question {i}?", options={"A": "yes", "B": "no"}, reference=Reference(answer="A"))
            for i in range(1, n + 1)]


def number(request) -> int:
    return int(request.messages[-1].content.split("?")[0].split()[-1])


def right_on(numbers, fail_on=()):
    """Answers A (right) on the given question numbers, B elsewhere; fails for good on `fail_on`."""
    def respond(request):
        if number(request) in fail_on:
            raise ModelCallError("the server refused the request", kind="refused")
        return "Answer: A" if number(request) in numbers else "Answer: B"
    return respond


def right_in_repeats(wrong: dict[int, set[int]], right_only_in: set[int] | None = None):
    """Per question, counts its calls (= its repeat index when run with concurrency 1): wrong in the
    repeats listed in `wrong[question]`, or right only in the repeats `right_only_in`."""
    calls: dict[int, int] = defaultdict(int)

    def respond(request):
        q = number(request)
        repeat = calls[q]
        calls[q] += 1
        ok = repeat in right_only_in if right_only_in is not None else repeat not in wrong.get(q, set())
        return "Answer: A" if ok else "Answer: B"
    return respond


async def bench(store, run_id, name, responder, *, n=10, repeats=1, concurrency=4, dataset="inline"):
    runtime = Runtime(cache=store, prices=PriceTable(dict(PRICES)))
    model = ScriptedModel(name=name, responder=responder, runtime=runtime)
    config = RunConfig(dataset=dataset, protocol="single", models=[f"scripted:{name}"], repeats=repeats, concurrency=concurrency)
    result = await run_benchmark(store, config, runtime, run_id=run_id, panel=Panel.of([model]), cases=cases(n))
    failed = any(i["status"] == "failed" for i in store.items(result.run_id))
    assert result.status == ("done_with_failures" if failed else "done")
    return result


def comparison(report, a, b, score="accuracy"):
    (found,) = [c for c in report["comparisons"] if (c["a"], c["b"], c["score"]) == (a, b, score)]
    return found


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


async def test_two_runs_scores_costs_and_mcnemar_by_hand(store, tmp_path):
    await bench(store, "run-a", "good", right_on(range(1, 9)))   # right on q1..q8
    await bench(store, "run-b", "weak", right_on(range(1, 6)))   # right on q1..q5
    report = build_report(store, ["run-a", "run-b"])
    a, b = report["runs"]
    assert (a["label"], b["label"]) == ("single: scripted:good", "single: scripted:weak")

    # Wilson 8/10: denom 1 + 3.841459/10 = 1.3841459; centre (0.8 + 0.1920730)/denom = 0.716740;
    # half 1.959964·√(0.016 + 0.0096036)/denom = 1.959964·0.160011/1.3841459 = 0.226578 -> [0.490162, 0.943318]
    acc_a = a["scores"]["accuracy"]["overall"]
    assert acc_a["estimate"] == 0.8 and acc_a["n"] == 10 and acc_a["method"] == "wilson"
    assert acc_a["low"] == pytest.approx(0.490162, abs=2e-6) and acc_a["high"] == pytest.approx(0.943318, abs=2e-6)
    # Wilson 5/10: centre (0.5 + 0.1920730)/1.3841459 = 0.5; half 1.959964·√(0.025 + 0.0096036)/1.3841459 = 0.263407
    # -> [0.236593, 0.763407]
    acc_b = b["scores"]["accuracy"]["overall"]
    assert acc_b["low"] == pytest.approx(0.236593, abs=2e-6) and acc_b["high"] == pytest.approx(0.763407, abs=2e-6)
    assert a["scores"]["accuracy"]["across_repeats"] is None and a["repeats"] == 1

    # Tokens: the scripted model counts prompt words in and reply words out ("Answer: A" = 2 words).
    words_in = len(SYSTEM.split()) + len(question_prompt(cases(1)[0]).split())
    assert a["tokens"]["input_per_item"] == words_in and a["tokens"]["output_per_item"] == 2
    assert a["tokens"]["input_total"] == 10 * words_in
    # Dollars: good costs $1 per 1K in and $2 per 1K out; weak half that.
    per_item_a = words_in / 1000 * 1.0 + 2 / 1000 * 2.0
    assert a["cost_usd"]["per_item"] == pytest.approx(per_item_a, rel=1e-6)
    assert a["cost_usd"]["total"] == pytest.approx(10 * per_item_a, rel=1e-6)
    assert b["cost_usd"]["per_item"] == pytest.approx(per_item_a / 2, rel=1e-6)
    assert a["wall_s"]["per_item"] >= 0 and a["failures"]["by_kind"] == {} and a["failures"]["items"] == []

    # A right on 1-8, B on 1-5: b = 3 (q6..q8), c = 0 -> p = 2·P(X ≤ 0), X ~ Bin(3, ½) = 2/8 = 0.25
    cmp = comparison(report, "run-a", "run-b")
    assert cmp["shared_items"] == 10 and cmp["kind"] == "proportion" and not cmp["repeats"]
    (mcnemar,) = cmp["tests"]
    assert mcnemar["method"].startswith("McNemar exact") and mcnemar["p_value"] == pytest.approx(0.25)
    assert mcnemar["details"] == {"both_right": 5, "only_a_right": 3, "only_b_right": 0, "both_wrong": 2}
    assert cmp["difference"]["estimate"] == pytest.approx(0.3)  # 0.8 - 0.5
    assert cmp["difference"]["low"] <= 0.3 <= cmp["difference"]["high"]
    assert report["friedman"] == [] and report["plot_score"] == "accuracy"

    written = write_report(report, tmp_path / "out")
    width, height = png_size(tmp_path / "out" / "accuracy_vs_cost.png")
    assert width > 100 and height > 100
    assert json.loads((tmp_path / "out" / "report.json").read_text()) == json.loads(json.dumps(written))
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "McNemar exact p=0.2500" in markdown and "| accuracy | 0.800 [0.490, 0.943] (wilson, n=10) |" in markdown


async def test_failed_items_are_reported_and_left_out_never_scored_wrong(store):
    await bench(store, "run-a", "good", right_on(range(1, 9)))
    await bench(store, "run-c", "flaky", right_on(range(1, 9), fail_on={9}))
    await bench(store, "run-other", "good", right_on(range(1, 9)), dataset="another-dataset")
    report = build_report(store, ["run-a", "run-c", "run-other"])
    c = report["runs"][1]
    assert c["items"] == {"recorded": 10, "done": 9, "failed": 1, "expected": None}
    assert c["failures"]["by_kind"] == {"refused": 1}
    assert c["failures"]["items"] == [{"item": "q09", "repeat": 0, "kind": "refused", "error": "the server refused the request"}]
    # 8 right of the 9 that finished (q10 answered wrong); q9 is neither right nor wrong.
    acc = c["scores"]["accuracy"]["overall"]
    assert acc["n"] == 9 and acc["estimate"] == pytest.approx(8 / 9)
    # Compared on the 9 shared items: both right on q1..q8, both wrong on q10 -> no discordant pair, p = 1.
    cmp = comparison(report, "run-a", "run-c")
    assert cmp["shared_items"] == 9 and cmp["tests"][0]["p_value"] == 1.0
    # The run over another dataset is reported but not compared.
    assert not [x for x in report["comparisons"] if "run-other" in (x["a"], x["b"])]
    assert report["notes"] and "different datasets" in report["notes"][0]


async def test_repeats_give_across_repeat_interval_and_clustered_tests(store):
    # 6 items x 3 repeats, run one item at a time so each question's n-th call is its repeat n.
    # learner: all right in repeat 0; wrong on q1 in repeat 1; wrong on q1, q2 in repeat 2.
    await bench(store, "run-x", "learner", right_in_repeats({1: {1, 2}, 2: {2}}), n=6, repeats=3, concurrency=1)
    # guesser: right on every item in repeat 0 only.
    await bench(store, "run-y", "guesser", right_in_repeats({}, right_only_in={0}), n=6, repeats=3, concurrency=1)
    report = build_report(store, ["run-x", "run-y"])
    x = report["runs"][0]["scores"]["accuracy"]
    assert [r["estimate"] for r in x["per_repeat"]] == pytest.approx([1.0, 5 / 6, 4 / 6])
    # Per-repeat means 1, 0.8333, 0.6667: mean 0.8333, s = 0.166667, s/√3 = 0.096225, t(0.975, 2) = 4.302653
    # half = 0.414023 -> [0.419310, 1.247356], clipped to accuracy's range [0, 1]: [0.419310, 1].
    across = x["across_repeats"]
    assert across["method"] == "student-t clipped to [0, 1]" and across["n"] == 3 and across["estimate"] == pytest.approx(5 / 6)
    assert across["low"] == pytest.approx(0.419310, abs=2e-6) and across["high"] == 1.0 and "clipped" in across["note"]
    assert x["overall"]["n"] == 18 and "as if independent" in x["overall"]["note"]

    cmp = comparison(report, "run-x", "run-y")
    assert cmp["repeats"] and cmp["shared_items"] == 6
    tests = {t["method"].split(" (")[0]: t for t in cmp["tests"]}
    assert set(tests) == {"paired t-test", "Wilcoxon signed-rank", "clustered sign-flip permutation test", "paired t-test across repeats"}
    # Cluster sums of x - y: q1 1-1 = 0, q2 2-1 = 1, q3..q6 3-1 = 2. Of the 2^6 = 64 sign patterns, the two
    # that leave q2..q6 positive (q1's sign changes nothing) reach the observed mean: P(T* ≥ T) = 2/64,
    # two-sided p = 2·2/64 = 0.0625.
    assert tests["clustered sign-flip permutation test"]["p_value"] == pytest.approx(0.0625)
    assert tests["clustered sign-flip permutation test"]["statistic"] == pytest.approx(0.5)  # (0 + 1 + 4·2)/18
    # MCC's comparison: each repeat's accuracy, matched by repeat index: [1, 5/6, 4/6] against [1, 0, 0].
    assert tests["paired t-test across repeats"]["p_value"] == pytest.approx(sps.ttest_rel([1, 5 / 6, 4 / 6], [1, 0, 0]).pvalue)
    # Item means: x [1/3, 2/3, 1, 1, 1, 1], y [1/3] * 6.
    item_x, item_y = [1 / 3, 2 / 3, 1, 1, 1, 1], [1 / 3] * 6
    assert tests["paired t-test"]["p_value"] == pytest.approx(sps.ttest_rel(item_x, item_y).pvalue)
    assert tests["Wilcoxon signed-rank"]["p_value"] == pytest.approx(sps.wilcoxon(item_x, item_y).pvalue)
    assert cmp["difference"]["estimate"] == pytest.approx(0.5)  # mean of item-mean differences


async def test_three_runs_friedman_with_bonferroni_by_hand(store, tmp_path):
    await bench(store, "run-a", "good", right_on(range(1, 9)))   # q1..q8
    await bench(store, "run-b", "weak", right_on(range(1, 6)))   # q1..q5
    await bench(store, "run-p", "poor", right_on({1, 2}))        # q1, q2
    report = build_report(store, ["run-a", "run-b", "run-p"])
    (block,) = [f for f in report["friedman"] if f["score"] == "accuracy"]
    # Ranks per item (a, b, p): q1,q2 and q9,q10 all tied (2, 2, 2); q3..q5 (2.5, 2.5, 1); q6..q8 (3, 1.5, 1.5).
    # Rank sums 24.5, 20, 15.5; 12/(n·k·(k+1))·ΣR² − 3n(k+1) = 0.1·1240.5 − 120 = 4.05.
    # Tie correction 1 − Σ(t³−t)/(n(k³−k)) = 1 − (4·24 + 6·6)/240 = 0.45, so chi² = 4.05/0.45 = 9.0,
    # p = P(chi²₂ ≥ 9) = e^(−4.5) = 0.011109.
    assert block["shared_items"] == 10
    assert block["overall"]["statistic"] == pytest.approx(9.0)
    assert block["overall"]["p_value"] == pytest.approx(math.exp(-4.5))
    assert len(block["pairwise"]) == 3
    for pair in block["pairwise"]:
        assert pair["p_adjusted"] == pytest.approx(min(1.0, 3 * pair["p_value"]))
    # Every pair is also compared on its own: 3 pairs x 2 scores (accuracy, parsed).
    assert len(report["comparisons"]) == 6
    assert comparison(report, "run-b", "run-p")["tests"][0]["p_value"] == pytest.approx(0.25)  # b = 3, c = 0 again
    write_report(report, tmp_path)
    assert "## Friedman test on accuracy" in (tmp_path / "report.md").read_text()


# ---------------------------------------------------------------- the command line


def cli(args, env, cwd):
    return subprocess.run([MEDPANEL, *args], env=env, capture_output=True, text=True, timeout=120, check=False, cwd=cwd)


async def make_cli_runs(path):
    db = Store(path)
    try:
        await bench(db, "run-a", "good", right_on(range(1, 9)))
        await bench(db, "run-b", "weak", right_on(range(1, 6)))
    finally:
        db.close()


def test_cli_report_json_and_default_folder(cli_env, tmp_path):
    asyncio.run(make_cli_runs(cli_env["MEDPANEL_STORE"]))
    proc = cli(["report", "run-a", "run-b", "--json"], cli_env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [r["run_id"] for r in data["runs"]] == ["run-a", "run-b"]
    assert comparison(data, "run-a", "run-b")["tests"][0]["p_value"] == pytest.approx(0.25)
    folder = tmp_path / "run-a"  # default: a folder named after the first run, under the current directory
    assert data["files"] == {"json": str(folder / "report.json"), "markdown": str(folder / "report.md"),
                             "plot": str(folder / "accuracy_vs_cost.png")}
    assert png_size(folder / "accuracy_vs_cost.png")[0] > 0
    assert json.loads((folder / "report.json").read_text())["runs"][1]["scores"]["accuracy"]["overall"]["estimate"] == 0.5

    text = cli(["report", "run-a", "--out", str(tmp_path / "elsewhere")], cli_env, tmp_path)
    assert text.returncode == 0 and "single: scripted:good" in text.stdout
    assert (tmp_path / "elsewhere" / "report.md").exists()


@pytest.mark.parametrize("args, message", [
    (["report", "nope"], "No run matches"),
    (["report", "run-a", "--score", "nosuch"], "No run has a score named 'nosuch'"),
    (["report", "run-a", "run-a"], "given more than once"),
])
def test_cli_bad_input_exits_2(cli_env, tmp_path, args, message):
    asyncio.run(make_cli_runs(cli_env["MEDPANEL_STORE"]))
    proc = cli(args, cli_env, tmp_path)
    assert proc.returncode == 2 and message in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_missing_matplotlib_names_the_extra(cli_env, tmp_path):
    asyncio.run(make_cli_runs(cli_env["MEDPANEL_STORE"]))
    # A None entry in sys.modules makes `import matplotlib` fail as it would were it not installed.
    block = "import sys; sys.modules['matplotlib'] = None; "
    library = block + ("from medpanel.errors import MissingExtraError; from medpanel.runs.report import build_report, write_report; "
                       "from medpanel.runs.store import Store; from pathlib import Path\n"
                       "try:\n    write_report(build_report(Store(), ['run-a']), Path('lib'))\n"
                       "except MissingExtraError as exc:\n    print(exc.problem); print(exc.fix)")
    proc = subprocess.run([sys.executable, "-c", library], env=cli_env, capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)
    assert proc.stdout.splitlines() == ["The accuracy-vs-cost plot needs the 'matplotlib' package, which is not installed.",
                                        "Install it with: pip install 'medpanel[report]'"], proc.stderr
    assert not (tmp_path / "lib" / "report.json").exists()  # the plot comes first: nothing half-written

    command = block + "from medpanel.cli import main; sys.argv[0] = 'medpanel'; main()"
    proc = subprocess.run([sys.executable, "-c", command, "report", "run-a", "--out", "r"], env=cli_env, capture_output=True,
                          text=True, timeout=120, check=False, cwd=tmp_path)
    # The CLI writes the report without the plot and says how to get it, so the README's tour runs on the first install.
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "it needs matplotlib (pip install 'medpanel[report]')" in " ".join(proc.stderr.split())
    assert json.loads((tmp_path / "r" / "report.json").read_text())["files"]["plot"] is None
    proc = subprocess.run([sys.executable, "-c", command, "report", "run-a", "--out", "r", "--no-plot", "--json"], env=cli_env,
                          capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["files"]["plot"] is None and (tmp_path / "r" / "report.md").exists()
