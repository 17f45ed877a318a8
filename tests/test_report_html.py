"""The HTML report on real runs made by the runner with scripted models (a debate that disagrees across rounds,
a consult, a board meeting, two single-model runs with question types and a failure), every figure's counts
worked by hand, and the page checked for what makes it safe to open: no URL, no script, everything escaped."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from html.parser import HTMLParser

import pytest
from conftest import MEDPANEL

from medpanel.cases import Case, Reference, data_dir
from medpanel.errors import ModelCallError
from medpanel.models import Runtime
from medpanel.models.pricing import PriceTable
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Panel
from medpanel.protocols.debate import flow_counts
from medpanel.runs import plots
from medpanel.runs import report_figures as rf
from medpanel.runs.report import load_runs
from medpanel.runs.report_html import render_report_body, render_report_html
from medpanel.runs.runner import RunConfig, run_benchmark
from medpanel.runs.store import Store
from test_board import WELL_FORMED  # the well-formed meeting the board tests read

XSS = "<script>alert(1)</script>"
RUNS = ["debate-run", "consult-run", "board-run", "specialist-run", "mcq-good", "mcq-weak"]
ALL_FIGURES = {"fig-score", "fig-cost", "fig-debate-flow", "fig-stance-shifts", "fig-by-type", "fig-icd10", "fig-turns"}

# ---------------------------------------------------------------- the runs

# Five debate items, key B, two rounds at most; each seat's queue holds its answers item after item:
#   d0: B B B                      -> consensus at the first answers, right
#   d1: B C B | B B B              -> y C→B (wrong→right); consensus in round 1, right
#   d2: A A B | A A A              -> z B→A (right→wrong); consensus in round 1, wrong
#   d3: B C D | B D D | D D D      -> y C→D (wrong→wrong), x B→D (right→wrong); consensus in round 2, wrong
#   d4: B C D | B C D | B B C      -> y C→B (wrong→right), z D→C (wrong→wrong); no consensus: vote B 2:1, right
DEBATE_SCRIPTS = {
    "x": ["B", "B", "B", "A", "A", "B", "B", "D", "B", "B", "B"],
    "y": ["B", "C", "B", "A", "A", "C", "D", "D", "C", "C", "B"],
    XSS: ["B", "B", "B", "B", "A", "D", "D", "D", "D", "D", "C"],
}
SHORT_MEETING = """<discussion>
<turn 1> Moderator: A 55-year-old woman with a 2 cm breast mass.
<turn 2> Surgeon: Lumpectomy with sentinel node biopsy.
</discussion>
<conclusion>Offer breast-conserving surgery.</conclusion>"""
PRICES = {"good": (1.0, 2.0), "weak": (0.5, 1.0)}  # USD per 1K tokens in, out


def debate_cases() -> list[Case]:
    return [Case(id=f"d{i}", question="Which drug?", options={"A": "alpha", "B": "beta", "C": "gamma", "D": "delta"},
                 reference=Reference(answer="B")) for i in range(5)]


def mcq_cases() -> list[Case]:
    """m1..m6, key A."""
    return [Case(id=f"m{i}", question=f"Question {i}?", options={"A": "yes", "B": "no"}, reference=Reference(answer="A")) for i in range(1, 7)]


def specialist_cases() -> list[Case]:
    """Specialist Turn questions of two types (qa_type, as the benchmark's questions carry it)."""
    return [Case(id=f"s{i}", summary="A 61-year-old man with a rectal adenocarcinoma.", question=f"Question {i} for you?",
                 target_role="Radiologist", metadata={"qa_type": "imaging" if i <= 2 else "treatment"}) for i in range(1, 5)]


def mcq_responder(right, fail=()):
    def respond(request):
        number = int(request.messages[-1].content.split("?")[0].split()[-1])
        if number in fail:
            raise ModelCallError(f"{XSS} the server refused the request", kind="refused")
        return "Answer: A" if number in right else "Answer: B"
    return respond


async def make_runs(store: Store) -> None:
    seats = [ScriptedModel([f"{name} weighs the options.\nAnswer: {c}" for c in script], name=name) for name, script in DEBATE_SCRIPTS.items()]
    config = RunConfig(dataset="debate-cases", protocol="debate", models=[m.id for m in seats], concurrency=1, settings={"max_rounds": 2})
    await run_benchmark(store, config, Runtime(cache=store), run_id="debate-run", panel=Panel.of(seats, names=list(DEBATE_SCRIPTS)),
                        cases=debate_cases())

    # Consults (MedSyn), one at a time: the first submits N10 against N10 + N39.0, the second reaches the turn bound.
    physician = ScriptedModel([{"message": "Evaluation?"}, {"action": "submit", "message": "Ready."},
                               {"diagnosis": "Pyelonephritis", "codes": ["N10"]},
                               {"message": "Evaluation?"}, {"action": "ask", "message": "More?"}], name="physician")
    assistant = ScriptedModel(responder=lambda r: "Answer.", name="assistant")
    consults = [Case(id=cid, chief_complaint="Fever and right flank pain", reference=Reference(codes=["N10", "N39.0"]),
                     note={"history of present illness": "Three days of fever, dysuria and flank pain."}) for cid in ("done", "endless")]
    config = RunConfig(dataset="consult-cases", protocol="consult", models=["scripted:physician", "scripted:assistant"], concurrency=1,
                       settings={"max_turns": 4})
    await run_benchmark(store, config, Runtime(cache=store), run_id="consult-run", panel=Panel.of([physician, assistant]), cases=consults)

    board = ScriptedModel([WELL_FORMED, SHORT_MEETING], name="board")
    boards = [Case(id=f"b{i}", summary=f"Tumour board case {i}.", reference=Reference(conclusion="Offer surgery.")) for i in (1, 2)]
    config = RunConfig(dataset="board-cases", protocol="board", models=["scripted:board"], concurrency=1, settings={"structured": "never"})
    await run_benchmark(store, config, Runtime(cache=store), run_id="board-run", panel=Panel.of([board]), cases=boards)

    # Specialist Turn: s2's answer is empty (not answered); the others answer.
    specialist = ScriptedModel([{"answer": "T3 on MRI."}, {"answer": ""}, {"answer": "Short-course radiotherapy."}, {"answer": "Surgery."}],
                               name="specialist")
    config = RunConfig(dataset="specialist-cases", protocol="specialist", models=["scripted:specialist"], concurrency=1)
    await run_benchmark(store, config, Runtime(cache=store), run_id="specialist-run", panel=Panel.of([specialist]), cases=specialist_cases())

    runtime = Runtime(cache=store, prices=PriceTable(dict(PRICES)))
    for run_id, name, respond in (("mcq-good", "good", mcq_responder({1, 2, 3, 4}, fail={6})), ("mcq-weak", "weak", mcq_responder({1, 4}))):
        model = ScriptedModel(name=name, responder=respond, runtime=runtime)
        config = RunConfig(dataset="mcq-cases", protocol="single", models=[f"scripted:{name}"], concurrency=2)
        await run_benchmark(store, config, runtime, run_id=run_id, panel=Panel.of([model]), cases=mcq_cases())


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    if not (data_dir() / "icd10cm").is_dir():
        pytest.skip(f"the ICD-10 table {data_dir() / 'icd10cm'} is not there: set MEDPANEL_DATA_DIR to run this test")
    path = tmp_path_factory.mktemp("html") / "runs.db"
    store = Store(path)
    try:
        asyncio.run(make_runs(store))
    finally:
        store.close()
    return path


@pytest.fixture
def runs_store(store_path):
    store = Store(store_path)
    yield store
    store.close()


def gathered(store) -> dict[str, rf.RunFigures]:
    runs = load_runs(store, RUNS)
    return {run.id: figures for run, figures in zip(runs, rf.gather(store, runs, "accuracy"))}


# ---------------------------------------------------------------- the figures' counts, by hand


def test_debate_flow_and_stance_shifts_read_from_the_transcripts(runs_store):
    debate = gathered(runs_store)["debate-run"]
    # Rounds: first answers 5 items (d0 agrees, right; 4 go on); round 1: d1 right, d2 wrong, 2 go on;
    # round 2: d3 wrong, d4 still open; the vote: d4 right.
    assert debate.flow == {"items": 5, "vote": {"correct": 1, "incorrect": 0, "unscored": 0, "no_answer": 0}, "rounds": [
        {"round": 0, "correct": 1, "incorrect": 0, "unscored": 0, "open": 4},
        {"round": 1, "correct": 1, "incorrect": 1, "unscored": 0, "open": 2},
        {"round": 2, "correct": 0, "incorrect": 1, "unscored": 0, "open": 1}]}
    # Debate turns per seat: d1 1, d2 1, d3 2, d4 2 = 6. x: d3 B→D right→wrong; y: d1 C→B and d4 C→B wrong→right,
    # d3 C→D wrong→wrong; z: d2 B→A right→wrong, d4 D→C wrong→wrong.
    zero = dict.fromkeys(rf.SHIFT_KINDS, 0)
    assert debate.shifts == {
        "scripted:x": {**zero, "turns": 6, "changed": 1, "right_to_wrong": 1},
        "scripted:y": {**zero, "turns": 6, "changed": 3, "wrong_to_right": 2, "wrong_to_wrong": 1},
        f"scripted:{XSS}": {**zero, "turns": 6, "changed": 2, "right_to_wrong": 1, "wrong_to_wrong": 1},
    }
    # The protocol's own flow count, from the outcomes and the key, agrees on the shifts.
    outcomes = [(i["outcome"]["data"], "B") for i in runs_store.items("debate-run")]
    assert flow_counts(outcomes)["shifts"] == {"wrong_to_right": 2, "right_to_wrong": 2, "wrong_to_wrong": 2}
    assert debate.turns == [3, 6, 6, 9, 9] and rf.histogram(debate.turns) == {3: 1, 6: 2, 9: 2}


def test_turns_types_and_icd10_levels(runs_store):
    figures = gathered(runs_store)
    # Consult: ask, evaluation, submit (3); ask, evaluation, ask, answer at the bound (4). Board: the discussion
    # turns read from the written meeting (3 and 2), not the reply they came in. Single: one answer each.
    assert figures["consult-run"].turns == [3, 4]
    assert figures["board-run"].turns == [3, 2]
    assert figures["mcq-good"].turns == [1] * 5  # m6 failed: left out
    # Per question type: only the specialist run's items carry one (qa_type). It has no accuracy, so its own first
    # score is shown: answered, 1 on s1, s3, s4 and 0 on s2 (the empty answer).
    assert figures["specialist-run"].type_key == "qa_type" and figures["specialist-run"].type_score == "answered"
    assert figures["specialist-run"].by_type == {"imaging": [1.0, 0.0], "treatment": [1.0, 1.0]}
    assert figures["mcq-good"].type_key is None and figures["mcq-good"].by_type is None
    assert figures["debate-run"].by_type is None and figures["board-run"].flow is None
    # ICD-10: 'done' predicts {N10} against {N10, N39.0}: code and category P 1, R 1/2, F1 2/3, J 1/2; chapter
    # {14} vs {14}: all 1. 'endless' predicts nothing: 0 everywhere. Means over the two.
    from medpanel.runs.report import build_report

    report = build_report(runs_store, ["consult-run"])
    levels = rf.icd10_levels(report["runs"][0])
    means = {lv: {m: iv["estimate"] for m, iv in by.items()} for lv, by in levels.items()}
    assert means["code"] == pytest.approx({"precision": 0.5, "recall": 0.25, "f1": 1 / 3, "jaccard": 0.25})
    assert means["category"] == pytest.approx(means["code"])
    assert means["chapter"] == pytest.approx({"precision": 0.5, "recall": 0.5, "f1": 0.5, "jaccard": 0.5})


def test_debate_flow_counts_by_hand():
    ends = [rf.DebateEnd("consensus", 0, True), rf.DebateEnd("consensus", 2, False), rf.DebateEnd("consensus", 1, None),
            rf.DebateEnd("vote", 2, None, answered=False), rf.DebateEnd("vote", 2, False)]
    flow = rf.debate_flow(ends)
    # round 0: 1 right, 4 open; round 1: 1 unscored, 3 open; round 2: 1 wrong, 2 open (to the vote: a tie, one wrong)
    assert [(r["correct"], r["incorrect"], r["unscored"], r["open"]) for r in flow["rounds"]] == [(1, 0, 0, 4), (0, 0, 1, 3), (0, 1, 0, 2)]
    assert flow["vote"] == {"correct": 0, "incorrect": 1, "unscored": 0, "no_answer": 1}
    # every bar sums to the items still debating when its round began
    assert [sum(v for k, v in r.items() if k != "round") for r in flow["rounds"]] == [5, 4, 3]
    assert rf.debate_flow([]) == {"rounds": [{"round": 0, "correct": 0, "incorrect": 0, "unscored": 0, "open": 0}],
                                  "vote": {"correct": 0, "incorrect": 0, "unscored": 0, "no_answer": 0}, "items": 0}


def test_the_key_is_read_from_scores_and_shifts_it_cannot_judge_stay_unscored():
    known = rf.infer_truth([("D", 0.0), ("B", 1.0), ("C", 0.0)])
    assert known.gold == "B" and rf.shift_kind("C", "B", known) == "wrong_to_right" and rf.shift_kind("B", None, known) == "right_to_wrong"
    # Every seat wrong at first and the final answer wrong: the key is one of the other letters, not known which.
    unknown = rf.infer_truth([("A", 0.0), ("C", 0.0), (None, None)])
    assert unknown.gold is None and unknown.wrong == {"A", "C"}
    assert rf.shift_kind("A", "C", unknown) == "wrong_to_wrong" and rf.shift_kind(None, "A", unknown) == "wrong_to_wrong"
    assert rf.shift_kind("A", "B", unknown) == "unscored"
    turns = [(rf.DebateTurn("m1", "A", "C"), unknown), (rf.DebateTurn("m1", "A", "A"), unknown), (rf.DebateTurn("m2", "C", "B"), known)]
    assert rf.stance_shifts(turns) == {"m1": {"turns": 2, "changed": 1, "wrong_to_right": 0, "right_to_wrong": 0, "wrong_to_wrong": 1, "unscored": 0},
                                       "m2": {"turns": 1, "changed": 1, "wrong_to_right": 1, "right_to_wrong": 0, "wrong_to_wrong": 0, "unscored": 0}}


def test_turns_and_types_by_hand():
    events = [{"kind": "turn", "phase": "simulation"}, {"kind": "turn", "phase": "discussion"}, {"kind": "note"},
              {"kind": "turn", "phase": "discussion"}]
    assert rf.count_turns(events) == 2 and rf.histogram([3, 1, 3]) == {1: 1, 3: 2}
    assert rf.type_key([{"theme": "x"}, {"qa_type": ""}]) == "theme" and rf.type_key([{}]) is None
    assert rf.values_by_type([("b", 1.0), (None, 0.0), ("a", 0.5), ("b", 0.0)]) == {"(none)": [0.0], "a": [0.5], "b": [1.0, 0.0]}


# ---------------------------------------------------------------- the page


class Page(HTMLParser):
    """The tags of a page: which figures hold an <svg>, every id, every start tag's name."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.ids: list[str] = []
        self.figures_with_svg: set[str] = set()
        self._figure: str | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.append(attrs["id"])
        if tag == "figure":
            self._figure = attrs.get("id")
        elif tag == "svg" and self._figure:
            self.figures_with_svg.add(self._figure)

    def handle_endtag(self, tag):
        if tag == "figure":
            self._figure = None


def cli(args, env, cwd):
    return subprocess.run([MEDPANEL, *args], env=env, capture_output=True, text=True, timeout=180, check=False, cwd=cwd)


def test_cli_html_has_every_plot_no_url_and_escapes_what_runs_said(store_path, cli_env, tmp_path):
    env = dict(cli_env, MEDPANEL_STORE=str(store_path))
    out = tmp_path / "reports" / "all.html"
    proc = cli(["report", *RUNS, "--html", str(out)], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out)
    assert not (tmp_path / "debate-run").exists()  # --html alone writes only the page
    text = out.read_text()
    page = Page(text)
    assert page.figures_with_svg == ALL_FIGURES
    assert len(page.ids) == len(set(page.ids)), "an id is used twice on the page"
    # offline: no URL of any kind, no script, no web font
    assert not re.search(r"(?i)https?:|//[a-z0-9.-]+\.[a-z]{2,}/|@import|@font-face", text)
    assert "script" not in page.tags
    # what a model, a case or a run said is text, never a tag: the seat's model name, the failed item's error
    assert XSS not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; the server refused the request" in text
    assert "scripted:&lt;script&gt;alert(1)&lt;/script&gt;" in text
    svg = text[text.index("id='fig-stance-shifts'"):]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in svg[:svg.index("</figure>")]  # the model's name in the plot, escaped too
    # the fragment is embeddable: one root with class mp-report, every CSS rule scoped under it
    body = text[text.index("<body>") + 6:text.index("</body>")]
    assert body.startswith("<div class='mp-report'>") and body.endswith("</div>")
    css = body[body.index("<style>") + 7:body.index("</style>")]
    assert all(rule.strip().startswith(".mp-report") for rule in re.findall(r"(?:^|})([^{}]+){", css) for rule in rule.split(","))


def test_the_html_file_opens_offline_in_a_browser_with_its_plots(store_path, cli_env, tmp_path):
    """Acceptance: the file `report --html` writes, opened from disk in headless Chromium (which this machine's
    closed network would stop from fetching anything), shows every plot drawn at a legible size."""
    from web_support import browser_page, screenshot

    env = dict(cli_env, MEDPANEL_STORE=str(store_path))
    out = tmp_path / "offline.html"
    assert cli(["report", *RUNS, "--html", str(out)], env, tmp_path).returncode == 0
    with browser_page() as page:
        fetched: list[str] = []
        page.on("request", lambda request: fetched.append(request.url))
        page.goto(out.as_uri())
        figures = page.locator(".mp-report figure")
        assert figures.count() == len(ALL_FIGURES)
        for i in range(figures.count()):
            box = figures.nth(i).locator("svg").bounding_box()
            assert box and box["width"] > 300 and box["height"] > 100, i
        screenshot(page, "report_html_file")
    assert fetched == [out.as_uri()]  # nothing but the file itself


def test_cli_html_with_out_writes_both_and_bad_input_exits_2(store_path, cli_env, tmp_path):
    env = dict(cli_env, MEDPANEL_STORE=str(store_path))
    proc = cli(["report", "mcq-good", "mcq-weak", "--html", "r.html", "--out", "folder"], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r.html").exists() and (tmp_path / "folder" / "report.md").exists()
    page = Page((tmp_path / "r.html").read_text())
    assert page.figures_with_svg == {"fig-score", "fig-cost"}  # no debate, consult, question type or multi-turn item here
    for args, message in ((["report", "no-such-run", "--html", "x.html"], "No run matches"),
                          (["report", "mcq-good", "--html", str(tmp_path)], "is a folder"),
                          (["report", "mcq-good", "--score", "nosuch", "--html", "x.html"], "No run has a score named 'nosuch'")):
        proc = cli(args, env, tmp_path)
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "x.html").exists()


def test_the_fragment_and_the_document(runs_store):
    body = render_report_body(runs_store, ["mcq-good", "mcq-weak"])
    assert body.startswith("<div class='mp-report'>") and "<html" not in body
    assert "McNemar exact" in body and "Failed items: 1 (refused 1)" in body
    doc = render_report_html(runs_store, ["mcq-good"], plots=False)
    assert doc.startswith("<!DOCTYPE html>") and "<svg" not in doc and "plots were left out" in doc


def test_without_matplotlib_the_page_is_written_with_a_note(store_path, tmp_path):
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from medpanel.runs.store import Store; from medpanel.runs.report_html import render_report_html\n"
            f"print(render_report_html(Store({str(store_path)!r}), ['debate-run']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "<svg" not in proc.stdout and "pip install &#x27;medpanel[report]&#x27;" in proc.stdout
    assert "debate-run" in proc.stdout and "<table" in proc.stdout


def test_each_plot_is_an_inline_svg_with_its_title():
    svg = plots.score_intervals([{"label": "a $x$ model", "estimate": 0.5, "low": 0.2, "high": 0.8, "n": 10}], "accuracy", 0.95, (0, 1))
    assert svg.startswith("<svg") and "accuracy by system" in svg and "xmlns" not in svg and "http" not in svg
    assert "a $x$ model" in svg  # a '$' is shown, not read as mathtext
    flow = rf.debate_flow([rf.DebateEnd("consensus", 1, True), rf.DebateEnd("vote", 1, False)])
    assert "Debate flow per round" in plots.debate_flows([("run", flow)])
    assert "Turns per item" in plots.turn_counts([("run", {1: 2, 4: 1})])


def test_a_multiple_choice_run_is_broken_down_by_the_datasets_question_type(tmp_path):
    """MedXpertQA carries a question type per case; single, debate and vote runs keep it with each outcome, so the
    report draws accuracy per type (and `show --by question_type` groups by it). Before, only a case's `groups`
    were kept, on the conversation path alone."""
    from medpanel.runs.store import Store

    store = Store(tmp_path / "types.db")
    kinds = ["Reasoning", "Understanding", "Reasoning", "Reasoning"]
    cases = [Case(id=f"x{i}", question=f"Q{i}?", options={"A": "a", "B": "b"}, reference=Reference(answer="AB"[i % 2]),
                  metadata={"question_type": kind, "medical_task": "Diagnosis"}) for i, kind in enumerate(kinds)]
    for protocol, models in (("single", ["scripted:Answer: A"]), ("vote", ["scripted:Answer: A"] * 3), ("debate", ["scripted:Answer: A"] * 2)):
        config = RunConfig(dataset="mini", protocol=protocol, models=models)
        asyncio.run(run_benchmark(store, config, Runtime(cache=store, use_cache=False), cases=cases, run_id=protocol))
        assert {i["outcome"]["data"]["question_type"] for i in store.items(protocol)} == {"Reasoning", "Understanding"}
    figures = dict(zip(["single", "vote", "debate"], rf.gather(store, load_runs(store, ["single", "vote", "debate"]), "accuracy")))
    # answer A is right on x0 and x2 (both Reasoning), wrong on x1 (Understanding) and x3 (Reasoning)
    for run_id in ("single", "vote", "debate"):
        assert figures[run_id].type_key == "question_type"
        assert figures[run_id].by_type == {"Reasoning": [1.0, 1.0, 0.0], "Understanding": [0.0]}


# ---------------------------------------------------------------- the key from the dataset; repeats per type


def write_cases(path, cases: list[Case]) -> None:
    path.write_text("".join(case.model_dump_json() + "\n" for case in cases))


def test_stance_shifts_read_the_key_from_the_dataset_and_fall_back_on_the_scores(tmp_path):
    """A lone seat switching to the right answer that no seat gave first and that lost the vote: the scores
    never name that letter right, so only the dataset's key can count the shift wrong → right."""
    from medpanel.runs.report_html import figures, prepare_report

    # k1, key C: first answers A A B; round 1 A A C (z: B→C, wrong → right); the vote: A 2:1, wrong.
    # k2, key C: all C at first, consensus, no debate turn.
    cases_file = tmp_path / "cases.jsonl"
    write_cases(cases_file, [Case(id=f"k{i}", question="Which drug?", options={"A": "alpha", "B": "beta", "C": "gamma"},
                                  reference=Reference(answer="C")) for i in (1, 2)])
    scripts = {"x": ["A", "A", "C"], "y": ["A", "A", "C"], "z": ["B", "C", "C"]}
    seats = [ScriptedModel([f"{name} weighs it.\nAnswer: {c}" for c in script], name=name) for name, script in scripts.items()]
    store = Store(tmp_path / "runs.db")
    try:
        config = RunConfig(dataset=str(cases_file), protocol="debate", models=[m.id for m in seats], concurrency=1,
                           settings={"max_rounds": 1})
        asyncio.run(run_benchmark(store, config, Runtime(cache=store, use_cache=False), run_id="lone",
                                  panel=Panel.of(seats, names=list(scripts))))
        zero = dict.fromkeys(rf.SHIFT_KINDS, 0)
        debate = rf.gather(store, load_runs(store, ["lone"]), "accuracy")[0]
        assert debate.shifts["scripted:z"] == {**zero, "turns": 1, "changed": 1, "wrong_to_right": 1}
        assert debate.key_source == "dataset"
        assert debate.shifts["scripted:x"] == {**zero, "turns": 1, "changed": 0}
        report, gathered_figures = prepare_report(store, ["lone"])
        caption = dict((fid, cap) for fid, cap, _ in figures(report, gathered_figures))["fig-stance-shifts"]
        assert "dataset's answer key" in caption

        cases_file.unlink()  # the dataset gone: the key is inferred from the scores, and C was never scored
        debate = rf.gather(store, load_runs(store, ["lone"]), "accuracy")[0]
        assert debate.key_source == "scores"
        assert debate.shifts["scripted:z"] == {**zero, "turns": 1, "changed": 1, "unscored": 1}
        report, gathered_figures = prepare_report(store, ["lone"])
        caption = dict((fid, cap) for fid, cap, _ in figures(report, gathered_figures))["fig-stance-shifts"]
        assert "inferred from the item's scores" in caption and "dataset's answer key" not in caption
    finally:
        store.close()


def test_the_score_per_question_type_counts_each_item_once_over_its_repeats(tmp_path):
    """10 items x 5 repeats: one value per item (the mean of its repeats), so n is 5 per type, not 25."""
    from medpanel.runs.report_html import figures, prepare_report

    cases = [Case(id=f"q{i}", question=f"Question {i}?", options={"A": "yes", "B": "no"}, reference=Reference(answer="A"),
                  metadata={"question_type": "Reasoning" if i <= 5 else "Understanding"}) for i in range(1, 11)]
    calls: dict[int, int] = {}

    def respond(request):  # q1-q5 always right; q6-q10 right on their 1st, 3rd and 5th call: 3 of 5 repeats
        number = int(request.messages[-1].content.split("?")[0].split()[-1])
        calls[number] = calls.get(number, 0) + 1
        return "Answer: A" if number <= 5 or calls[number] % 2 else "Answer: B"

    store = Store(tmp_path / "runs.db")
    try:
        model = ScriptedModel(name="m", responder=respond)
        config = RunConfig(dataset="typed", protocol="single", models=["scripted:m"], repeats=5, concurrency=1)
        asyncio.run(run_benchmark(store, config, Runtime(cache=store, use_cache=False), run_id="rep", panel=Panel.of([model]), cases=cases))
        assert len(store.items("rep")) == 50
        got = rf.gather(store, load_runs(store, ["rep"]), "accuracy")[0]
        assert got.by_type == {"Reasoning": [1.0] * 5, "Understanding": pytest.approx([0.6] * 5)}
        assert got.repeats_averaged
        report, gathered_figures = prepare_report(store, ["rep"])
        fid, caption, svg = next(f for f in figures(report, gathered_figures) if f[0] == "fig-by-type")
        assert "mean of its repeats" in caption and "n is the items" in caption
        assert "n=5" in svg and "n=25" not in svg
    finally:
        store.close()
