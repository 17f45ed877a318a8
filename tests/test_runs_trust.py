"""Numbers a reader can trust: each score's interval follows its declared kind (never its values), one
interval function behind `show`, `report` and `judge run`; a run whose items failed says so and exits
4 with the commonest error; a failed item keeps its partial transcript; the patient and judge models
are recorded with the run, shown, and a comparison across different ones warns."""

from __future__ import annotations

import json
import time

import pytest
import yaml
from typer.testing import CliRunner

from medpanel.cases import Case, Reference
from medpanel.cli import app
from medpanel.errors import ModelCallError
from medpanel.models import Runtime
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Panel, get_protocol
from medpanel.protocols.base import Outcome, ProtocolSpec
from medpanel.runs.report import build_report, render_markdown
from medpanel.runs.runner import RunConfig, run_benchmark
from medpanel.runs.summary import summarize
from medpanel.transcript import Transcript

ITEMS_FAILED_EXIT = 4  # documented in the README and `medpanel bench --help`

runner = CliRunner()


def cli(*args: str, store, code: int = 0):
    result = runner.invoke(app, [*args, "--store", str(store.path)], catch_exceptions=False)
    assert result.exit_code == code, f"{args} exited {result.exit_code}:\n{result.stdout}"
    return result


def stored_run(store, run_id: str, protocol: str, scores_by_item: list[dict], settings: dict | None = None, models=("m",)):
    """A finished run written straight into the store, so its scores are exactly the ones given."""
    config = RunConfig(dataset="inline", protocol=protocol, models=list(models), settings=settings or {})
    store.create_run(run_id, dataset="inline", protocol=protocol, models=list(models), settings=config.model_dump(mode="json"))
    for k, scores in enumerate(scores_by_item):
        store.write_item(run_id, f"c{k}", 0, status="done", outcome={"answer": "x", "data": {}}, events=[], scores=scores,
                         started_at=time.time())
    store.set_run_status(run_id, "done")


# ---------------------------------------------------------------- intervals follow the declaration


def test_the_declared_kind_decides_the_interval_not_the_values():
    from medpanel.runs.stats import metric_interval
    from medpanel.scoring.metrics import metric_kind

    # A count that is always 1, a 1-5 score that is always 1, a 0-5 score that happens to be 0/1.
    turns = metric_interval([1.0, 1.0, 1.0, 1.0], metric_kind("turns"))
    assert turns.method == "student-t" and (turns.low, turns.high) == (1.0, 1.0)
    ones = metric_interval([1.0, 1.0, 1.0, 1.0], metric_kind("clinical_equivalence"))
    assert ones.method == "student-t clipped to [1, 5]" and (ones.low, ones.high) == (1.0, 1.0)
    zero_one = metric_interval([0.0, 1.0, 0.0, 1.0], metric_kind("consistency"))
    # t(0.975, 3) = 3.182446, s/sqrt(4) = 0.288675: 0.5 -/+ 0.918693, the low end clipped at the scale's 0.
    assert zero_one.method == "student-t clipped to [0, 5]" and zero_one.low == 0.0
    assert zero_one.high == pytest.approx(1.418693, abs=1e-6) and "clipped" in zero_one.note
    # A proportion gets Wilson: 3 of 4 -> [0.300636, 0.954413].
    acc = metric_interval([1.0, 1.0, 0.0, 1.0], metric_kind("accuracy"))
    assert acc.method == "wilson" and acc.low == pytest.approx(0.300636, abs=1e-5)


def test_families_protocol_overrides_and_the_undeclared_fallback():
    from medpanel.runs.stats import metric_interval
    from medpanel.scoring.metrics import PROPORTION, metric_kind, scale

    assert metric_kind("decision_surgery") == scale(1, 5) and metric_kind("initial_accuracy.gpt") == PROPORTION
    assert metric_kind("chapter_jaccard") == scale(0, 1) and metric_kind("initial_gpt-4") == PROPORTION  # MCC replay's seats
    assert metric_kind("consensus") == PROPORTION and metric_kind("consensus", "longform") == scale(0, 1)
    unknown = metric_kind("brand_new_score")
    assert unknown.kind == "mean" and not unknown.declared and unknown.describe() == "undeclared (mean)"
    # an undeclared score is a Student t mean, said so in the note, whatever its values look like
    iv = metric_interval([0.0, 1.0, 1.0], unknown)
    assert iv.method == "student-t" and "undeclared" in iv.note


def test_every_score_the_scorers_name_is_declared():
    from medpanel.scoring.metrics import metric_kind
    from medpanel.scoring.icd10 import metric_names
    from medpanel.scoring.judges import SCORE_NAMES
    from medpanel.scoring.osce import osce_metrics

    names = [*(n for group in SCORE_NAMES.values() for n in group), "judge_failed", *metric_names(),
             "invalid_rate", "n_predicted", "n_gold", "empty",
             *osce_metrics({"details_total": 1, "details_captured": 1, "questions_asked": 1, "questions_relevant": 1})]
    undeclared = [n for n in names if not metric_kind(n).declared]
    assert undeclared == []


def test_values_that_contradict_the_declaration_are_flagged_not_hidden():
    from medpanel.runs.stats import metric_interval
    from medpanel.scoring.metrics import PROPORTION, scale

    half = metric_interval([1.0, 0.5, 0.0], PROPORTION)
    assert half.method == "student-t" and "declared a 0/1 proportion" in half.note
    out_of_range = metric_interval([0.0, 3.0, 6.0], scale(1, 5))
    assert out_of_range.method == "student-t" and out_of_range.low < 0 and "outside the declared range" in out_of_range.note


def test_show_and_report_give_a_count_and_a_scale_their_declared_intervals(store, tmp_path):
    # Four board items: one turn each, alignment 1 on every item, consistency 0/1, and a score nobody declared.
    rows = [{"turns": 1.0, "conclusion_alignment": 1.0, "consistency": float(k % 2), "mystery": float(k % 2)} for k in range(4)]
    stored_run(store, "board-a", "board", rows)
    shown = summarize(store, "board-a")["scores"]
    report = build_report(store, ["board-a"])["runs"][0]["scores"]
    for name in ("turns", "conclusion_alignment", "consistency", "mystery"):
        assert shown[name]["method"] != "wilson" and report[name]["overall"]["method"] != "wilson", name
        assert (shown[name]["low"], shown[name]["high"]) == (report[name]["overall"]["low"], report[name]["overall"]["high"]), name
    assert report["consistency"]["overall"]["low"] == 0.0 and report["consistency"]["kind"] == "scale 0-5"
    assert shown["turns"]["kind"] == "count" and shown["mystery"]["kind"] == "undeclared (mean)"
    markdown = render_markdown(build_report(store, ["board-a"]))
    assert "| mystery |" in markdown and "undeclared (mean) |" in markdown and "| scale 1-5 |" in markdown
    text = cli("show", "board-a", store=store).stdout
    assert "undeclared metric" in text and "t clipped to [1, 5]" in text


def test_show_report_and_judge_run_print_the_same_interval(store, tmp_path):
    # A specialist run (two items, one per question of the prostate example), then judged with scores 1 and 2.
    answer = "scripted:" + json.dumps({"answer": "SBRT alone; no ADT at favourable intermediate risk."})
    cli("bench", "examples/prostate", "--protocol", "specialist", "--models", answer, "--run-id", "spec", "--json", store=store)
    replies = tmp_path / "judge.yaml"
    replies.write_text(yaml.safe_dump([{"clinical_equivalence_score": s, "critical_error": False, "unsupported_claim": False,
                                        "rationale": "graded"} for s in (1, 2)]))
    judged = json.loads(cli("judge", "run", "spec", "--judge", f"scripted:{replies}", "--concurrency", "1", "--json", store=store).stdout)
    shown = json.loads(cli("show", "spec", "--json", store=store).stdout)["scores"]
    reported = json.loads(cli("report", "spec", "--no-plot", "--out", str(tmp_path / "r"), "--json", store=store).stdout)
    reported = reported["runs"][0]["scores"]
    for name in ("clinical_equivalence", "critical_error"):
        j, s, r = judged["summary"][name], shown[name], reported[name]["overall"]
        assert (j["mean"], j["low"], j["high"], j["method"]) == (s["mean"], s["low"], s["high"], s["method"]), name
        assert (r["estimate"], r["low"], r["high"]) == (s["mean"], s["low"], s["high"]), name
    # 1 and 2 on a 1-5 scale: 1.5 -/+ 12.706205 * 0.5 = [-4.85, 7.85] unclipped; the scale bounds it to [1, 5].
    assert (shown["clinical_equivalence"]["low"], shown["clinical_equivalence"]["high"]) == (1.0, 5.0)
    assert shown["critical_error"]["method"] == "wilson" and reported["critical_error"]["overall"]["method"] == "wilson"


# ---------------------------------------------------------------- failures that look like success


def test_an_all_failed_run_says_so_and_exits_4_with_the_commonest_error(store, tmp_path):
    # Every call is refused by the server (a parameter it does not take): every item fails, none is scored.
    from medpanel.testing import MockServer

    cases = tmp_path / "cases.jsonl"
    cases.write_text("".join(json.dumps({"id": f"case{k}", "question": f"Q{k}?", "options": {"A": "a", "B": "b"}}) + "\n" for k in range(3)))
    with MockServer(reject_params=["temperature"]) as srv:
        model = f"openai:m@{srv.base_url}"
        result = cli("bench", str(cases), "--models", model, "--run-id", "nothing", store=store, code=ITEMS_FAILED_EXIT)
        from medpanel.runs.runner import ITEMS_FAILED_EXIT as declared

        assert declared == ITEMS_FAILED_EXIT
        assert "3 of 3 items failed; commonest error: unsupported_parameter (3x)" in result.stderr and "temperature" in result.stderr
        assert "medpanel bench --resume nothing" in result.stderr
        assert store.get_run("nothing")["status"] == "done_with_failures"
        assert "done_with_failures" in result.stdout and "commonest error" in result.stdout
        shown = json.loads(cli("show", "nothing", "--json", store=store).stdout)
        assert shown["status"] == "done_with_failures" and shown["failures"]["failed"] == 3
        assert shown["failures"]["commonest_kind"] == "unsupported_parameter"
        # JSON output exits 4 too: a script reading it still learns that items failed
        cli("bench", str(cases), "--models", model, "--json", store=store, code=ITEMS_FAILED_EXIT)


async def test_a_run_with_some_failures_ends_done_with_failures_and_a_clean_resume_ends_done(store):
    cases = [Case(id=f"q{k}", question=f"Q{k}?", options={"A": "a", "B": "b"}, reference=Reference(answer="A")) for k in range(3)]
    runtime = Runtime(cache=store)
    flaky = ScriptedModel(["Answer: A", ModelCallError("refused", kind="bad_request"), "Answer: A"], runtime=runtime)
    config = RunConfig(dataset="inline", protocol="single", models=["s"], concurrency=1)
    first = await run_benchmark(store, config, runtime, panel=Panel.of([flaky]), cases=cases)
    assert first.status == "done_with_failures" and first.error.digest["failed"] == 1
    assert store.get_run(first.run_id)["message"].startswith("1 of 3 items failed; commonest error: bad_request (1x): refused")
    again = await run_benchmark(store, config, runtime, run_id=first.run_id, resume=True,
                                panel=Panel.of([ScriptedModel(["Answer: A"], runtime=runtime)]), cases=cases)
    assert again.status == "done" and store.get_run(first.run_id)["status"] == "done"


async def test_a_failed_item_keeps_the_transcript_it_had(store):
    async def two_turns_then_fail(case, panel, settings, context=None):
        transcript = Transcript()
        transcript.record("turn", "First, the history.", speaker="Doctor")
        transcript.record("turn", "Then the examination.", speaker="Doctor")
        raise ModelCallError("the server went away", kind="server_error")

    spec = ProtocolSpec(name="single", run=two_turns_then_fail, settings=get_protocol("single").settings,
                        scorers=(), description="fails midway")
    case = Case(id="q", question="Q?", options={"A": "a"})
    runtime = Runtime(cache=store)
    result = await run_benchmark(store, RunConfig(dataset="inline", protocol="single", models=["s"]), runtime,
                                 protocol=spec, panel=Panel.of([ScriptedModel(runtime=runtime)]), cases=[case])
    events = store.events(result.run_id, "q")
    assert [e["text"] for e in events] == ["First, the history.", "Then the examination.", "the server went away"]
    assert events[-1]["kind"] == "error" and events[-1]["data"]["error_kind"] == "server_error"


async def test_a_debate_failing_in_round_one_keeps_its_initial_answers(store):
    from medpanel.protocols.debate import SPEC

    case = Case(id="q1", question="Which drug?", options={"A": "alpha", "B": "beta"}, reference=Reference(answer="B"))
    runtime = Runtime(cache=store)
    seats = [ScriptedModel(["x thinks.\nAnswer: A", "x again.\nAnswer: A"], name="x", runtime=runtime),
             ScriptedModel(["y thinks.\nAnswer: B", ModelCallError("server refused the request", kind="bad_request")], name="y", runtime=runtime)]
    result = await run_benchmark(store, RunConfig(dataset="inline", protocol="debate", models=["x", "y"]), runtime,
                                 protocol=SPEC, panel=Panel.of(seats, names=["x", "y"]), cases=[case])
    assert store.items(result.run_id)[0]["status"] == "failed"
    events = store.events(result.run_id, "q1")
    initial = [e for e in events if e["kind"] == "turn" and e["phase"] == "initial"]
    assert [e["speaker"] for e in initial] == ["x", "y"] and "Answer: B" in initial[1]["text"]
    assert events[-1]["kind"] == "error" and "server refused" in events[-1]["text"]


# ---------------------------------------------------------------- the patient and judge in the panel record


def osce_run(store, run_id: str, patient: str, judge: str | None = None) -> None:
    settings = {"patient": patient, **({"judge": judge} if judge else {})}
    stored_run(store, run_id, "osce", [{"pda": 1.0, "picr": 0.5}, {"pda": 0.0, "picr": 0.25}], settings=settings, models=("doc-a",))


async def test_the_runner_records_the_patient_and_judge_it_was_given(store):
    from pydantic import BaseModel

    class NoRoles(BaseModel):
        pass

    built: dict = {}

    async def answer(case, panel, settings, context=None):
        built.update({role: model.id for role, model in panel.roles.items()})
        return Outcome(answer="A")

    # OSCE's defaults: the judge is the moderator, which is the first seat; the run names only the patient.
    spec = ProtocolSpec(name="osce", run=answer, settings=NoRoles, scorers=(), description="records roles",
                        role_defaults={"patient": "local", "moderator": "@seat", "judge": "@moderator"})
    runtime = Runtime(cache=store)
    config = RunConfig(dataset="inline", protocol="osce", models=["scripted"], roles={"patient": "scripted"})
    result = await run_benchmark(store, config, runtime, protocol=spec, cases=[Case(id="c", question="Q?")])
    assert store.get_run(result.run_id)["settings"]["roles"] == {"patient": "scripted", "moderator": "scripted", "judge": "scripted"}
    assert built == {"patient": "scripted:echo", "moderator": "scripted:echo", "judge": "scripted:echo"}  # the runner built them all
    # A config stored before roles were recorded apart (the judge inside the settings) reads as a role.
    old = RunConfig.model_validate({"dataset": "inline", "protocol": "board", "models": ["w"], "settings": {"judge": "openai:gpt-4o-mini"}})
    assert old.roles == {"judge": "openai:gpt-4o-mini"} and old.settings == {}
    # The long form named its moderator seat by position; the live board its seats and people by title.
    longform = RunConfig.model_validate({"dataset": "d", "protocol": "longform", "models": ["a", "b"], "settings": {"moderator": "2"}})
    assert longform.roles == {"moderator": "b"}
    live = RunConfig.model_validate({"dataset": "d", "protocol": "board-live", "models": ["a"],
                                     "settings": {"seats": {"Moderator": "m", "Urologist": "u"}, "humans": ["Pathologist"], "max_turns": 2}})
    assert live.roles == {"moderator": "m", "Urologist": "u", "Pathologist": "human:Pathologist"} and live.settings == {"max_turns": 2}


def test_show_and_report_name_the_patient_and_judge_and_warn_when_they_differ(store, tmp_path):
    osce_run(store, "osce-a", "scripted:patient-a.yaml", judge="openai:judge-1")
    osce_run(store, "osce-b", "local", judge="openai:judge-2")
    osce_run(store, "osce-c", "scripted:patient-a.yaml", judge="openai:judge-1")
    text = cli("show", "osce-a", store=store).stdout
    assert "patient scripted:patient-a.yaml" in text and "judge openai:judge-1" in text
    assert json.loads(cli("show", "osce-b", "--json", store=store).stdout)["roles"]["patient"] == "local"

    report = build_report(store, ["osce-a", "osce-b", "osce-c"])
    assert report["runs"][0]["roles"] == {"patient": "scripted:patient-a.yaml", "moderator": "doc-a", "judge": "openai:judge-1"}
    warnings = [n for n in report["notes"] if n.startswith("Warning")]
    assert any("osce-a and osce-b had different patients (scripted:patient-a.yaml vs local)" in w for w in warnings)
    assert any("osce-a and osce-b had different judges (openai:judge-1 vs openai:judge-2)" in w for w in warnings)
    assert not any("osce-a and osce-c" in w for w in warnings)  # same patient and judge: nothing to warn about
    markdown = render_markdown(report)
    assert "panel: doc-a · patient scripted:patient-a.yaml · moderator doc-a · judge openai:judge-1" in markdown
    printed = cli("report", "osce-a", "osce-b", "--no-plot", "--out", str(tmp_path / "r"), store=store).stdout
    assert "different patients" in printed and "different judges" in printed


def test_a_real_osce_consultation_records_and_shows_its_patient_and_judge(store, tmp_path):
    # One scripted doctor (who also moderates) and a scripted patient; a separate scripted judge.
    actor = {"Demographics": "56-year-old woman", "History": "Six weeks of thirst. She has lost 12 kg."}
    case = Case(id="thirst", chief_complaint="Excessive thirst", reference=Reference(answer_text="Pancreatic cancer"),
                metadata={"osce": {"patient_actor": actor}})
    case_file = tmp_path / "thirst.yaml"
    case_file.write_text(yaml.safe_dump(case.model_dump(mode="json", exclude_defaults=True), sort_keys=False))
    doc = tmp_path / "doc.yaml"
    doc.write_text(yaml.safe_dump([
        {"action": "history", "reply": ""},
        {"questions": ["How long have you been thirsty?"], "rationale": "duration"},
        {"primary_diagnosis": "Pancreatic cancer", "differentials": ["Type 2 diabetes"], "reasoning": "weight loss"}]))
    pat = tmp_path / "pat.yaml"
    pat.write_text(yaml.safe_dump(["Hello, I am always thirsty.", "Six weeks."]))
    judge = tmp_path / "judge.yaml"
    judge.write_text(yaml.safe_dump([{"captured": [1]}, {"relevant": [1]}, {"primary_matches": True, "acceptable_named": [1]}]))
    data = json.loads(cli("osce", str(case_file), "-m", f"scripted:{doc}", "--patient", f"scripted:{pat}", "--judge", f"scripted:{judge}",
                          "--max-exchanges", "1", "--json", store=store).stdout)
    assert data["status"] == "done", data["error"]
    roles = store.get_run(data["run_id"])["settings"]["roles"]
    assert roles == {"patient": f"scripted:{pat}", "moderator": f"scripted:{doc}", "judge": f"scripted:{judge}"}
    assert json.loads(cli("show", data["run_id"], "--json", store=store).stdout)["roles"] == roles
