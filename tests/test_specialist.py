"""Specialist Turn: the prompt, the JSON answer, the three-sentence limit, insufficient-context answers,
prompt files, lenient reading of invalid JSON, the judge at the end of the protocol, and `medpanel ask`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT

from medpanel.cases import Case, Reference, Slide, load_case
from medpanel.errors import UsageError
from medpanel.models import Runtime
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Panel, get_protocol
from medpanel.protocols.specialist import (
    SpecialistSettings,
    answer_text,
    count_sentences,
    first_sentences,
    says_insufficient,
    specialist_item,
    specialist_items,
)
from medpanel.runs.runner import RunConfig, run_benchmark
from medpanel.runs.scoring import score_outcome

SPEC = get_protocol("specialist")
CASE = Case(
    id="lung-q1", summary="A 61-year-old woman with stage IIIA lung adenocarcinoma, EGFR and ALK negative, PD-L1 55%.",
    question="What would you give before surgery?", target_role="Medical Oncologist",
    reference=Reference(answer="Three cycles of neoadjuvant nivolumab with platinum chemotherapy, then restaging."),
    metadata={"qa_type": "treatment_recommendation"},
)
JUDGE_OK = "scripted:" + json.dumps({"clinical_equivalence_score": 5, "critical_error": False, "unsupported_claim": False, "rationale": "Same."})


async def scored(case, outcome, settings=None, roles=None):
    """The runner's scorer path after `run`: the turn's own scores, and the judge's when a judge role is given."""
    return await score_outcome(SPEC, case, outcome, roles or {}, settings or SpecialistSettings())


def answering(*answers) -> ScriptedModel:
    return ScriptedModel([{"answer": a} if isinstance(a, str) else a for a in answers], runtime=Runtime(max_reasks=1))


# ---------------------------------------------------------------- pure helpers

@pytest.mark.parametrize("text, n", [
    ("Give SBRT (36.25 Gy in 5 fractions). ADT is not needed, e.g. for favourable risk. Dr. Smith agrees at 4.4 ng/mL.", 3),
    ("The answer is no. He needs a PET scan!", 2),  # "no." ends a sentence; "4.4" and "e.g." do not
    ("One. Two. Three. Four.", 4),
    ("No full stop at the end", 1),
    ("", 0),
])
def test_count_sentences(text, n):
    assert count_sentences(text) == n


def test_first_sentences_keeps_the_original_text_of_the_first_three():
    assert first_sentences("One, i.e. first. Two? Three! Four.", 3) == ("One, i.e. first. Two? Three!", True)
    assert first_sentences("Only one.", 3) == ("Only one.", False)


def test_answer_text_reads_json_fences_and_think_blocks_leniently():
    assert answer_text('<think>hmm</think>```json\n{"answer": " Restage first. "}\n```') == "Restage first."
    assert answer_text("Plain prose answer.") == "Plain prose answer."
    assert answer_text('{"verdict": "x"}') == '{"verdict": "x"}'  # no answer key: the text itself


def test_says_insufficient():
    assert says_insufficient("The information is insufficient: the genomic classifier result is missing.")
    assert says_insufficient("I cannot determine eligibility without the DLCO.")
    assert not says_insufficient("Give three cycles of nivolumab with chemotherapy.")


def test_specialist_items_from_the_example_case():
    case = load_case(ROOT / "examples" / "lung")
    items = specialist_items(case)
    assert [(c.id, c.target_role, c.metadata["qa_type"]) for c in items] == [
        ("lung-adeno-iiia-n2-q1", "Medical Oncologist", "treatment_recommendation"),
        ("lung-adeno-iiia-n2-q2", "Thoracic Surgeon", "eligibility_assessment")]
    assert items[1].reference.answer.startswith("Probably, but it is not yet proven")
    assert "specialist_questions" not in items[0].metadata
    # A question the case holds brings its reference; a new one has none unless given.
    asked = specialist_item(case, "  Is her lung function adequate for a right upper lobectomy? ", "Thoracic Surgeon")
    assert asked.reference.answer == items[1].reference.answer and asked.metadata["qa_type"] == "eligibility_assessment"
    new = specialist_item(case, "Should she see a dietitian?", "Nurse Navigator")
    assert new.reference.answer is None and new.target_role == "Nurse Navigator"
    assert specialist_item(case, "Should she see a dietitian?", "Nurse Navigator", "Yes.").reference.answer == "Yes."


# ---------------------------------------------------------------- the protocol

async def test_prompt_layout_json_schema_and_breakdown_fields():
    model = answering("Neoadjuvant nivolumab with platinum doublet for three cycles, then restage.")
    model.supports_vision = False  # a text-only model: slides as captions
    case = CASE.model_copy(update={"slides": [Slide(caption="PET: 4R node avid")]})
    outcome = await SPEC.run(case, Panel.of([model]), SpecialistSettings())
    request = model.history[0]
    user = request.messages[-1]
    assert user.content == ("TARGET SPECIALIST ROLE:\nMedical Oncologist\n\nCASE SUMMARY:\n" + CASE.summary +
                            "\n\nSLIDE DESCRIPTIONS:\nSlide 1: PET: 4R node avid\n\nQUESTION:\nWhat would you give before surgery?")
    assert user.images == [] and request.schema_name == "SpecialistAnswer" and request.temperature == 0.0
    assert "insufficient" in request.messages[0].content and "three sentences" in request.messages[0].content
    assert outcome.answer.startswith("Neoadjuvant nivolumab")
    assert outcome.data["qa_type"] == "treatment_recommendation" and outcome.data["target_role"] == "Medical Oncologist"
    assert await scored(case, outcome) == {"answered": 1.0, "format_ok": 1.0, "within_three_sentences": 1.0, "insufficient_context": 0.0}


async def test_vision_model_gets_the_slide_images(tmp_path):
    case = load_case(ROOT / "examples" / "prostate")
    model = answering("Offer SBRT without ADT.")  # the scripted model declares vision
    await SPEC.run(case, Panel.of([model]), SpecialistSettings())
    request = model.history[0]
    assert len(request.messages[-1].images) == 4 and "go by the image" in request.messages[0].content


LONG = "Give nivolumab with chemotherapy. Three cycles. Then restage with CT and PET. Operate if she stays fit."


async def test_over_three_sentences_is_scored_by_default_and_kept_whole():
    outcome = await SPEC.run(CASE, Panel.of([answering(LONG)]), SpecialistSettings())
    assert outcome.answer == LONG and outcome.data["sentences"] == 4 and not outcome.data["trimmed"]
    assert (await scored(CASE, outcome))["within_three_sentences"] == 0.0


async def test_trim_policy_keeps_three_sentences_and_records_it():
    outcome = await SPEC.run(CASE, Panel.of([answering(LONG)]), SpecialistSettings(sentence_limit="trim"))
    assert outcome.answer == "Give nivolumab with chemotherapy. Three cycles. Then restage with CT and PET."
    assert outcome.data["trimmed"] and outcome.data["untrimmed_answer"] == LONG
    assert (await scored(CASE, outcome))["within_three_sentences"] == 0.0  # the model still ran over


async def test_insufficient_context_answer_is_flagged():
    outcome = await SPEC.run(CASE, Panel.of([answering("The information is insufficient: her DLCO is not provided.")]), SpecialistSettings())
    assert outcome.data["insufficient_context"] and (await scored(CASE, outcome))["insufficient_context"] == 1.0


async def test_invalid_json_is_read_leniently_not_dropped():
    model = ScriptedModel(["Nivolumab and chemotherapy first.", "Still prose, then restage."], runtime=Runtime(max_reasks=1))  # never JSON
    outcome = await SPEC.run(CASE, Panel.of([model]), SpecialistSettings())
    assert len(model.history) == 2
    assert outcome.answer == "Still prose, then restage." and outcome.data["format_ok"] is False
    assert (await scored(CASE, outcome))["format_ok"] == 0.0


async def test_prompt_file_is_the_system_prompt_and_must_exist(tmp_path):
    prompt = tmp_path / "specialist_turn.txt"
    prompt.write_text("You are participating as the specified specialist. (the paper's prompt)")
    model = answering("Nivolumab with chemotherapy.")
    await SPEC.run(CASE, Panel.of([model]), SpecialistSettings(prompt_file=prompt))
    assert model.history[0].messages[0].content == prompt.read_text()
    with pytest.raises(UsageError, match="does not exist"):
        SpecialistSettings.model_validate({"prompt_file": str(tmp_path / "missing.txt")})
    from medpanel.models.registry import parse_spec

    with pytest.raises(UsageError, match="Unknown model provider"):  # the judge is a role now: its spec is checked where roles are built
        parse_spec("nosuch:judge")


async def test_judge_runs_at_the_end_and_score_reads_it():
    from medpanel.models import build_model

    judge = build_model(JUDGE_OK, Runtime())
    outcome = await SPEC.run(CASE, Panel.of([answering("Nivolumab with platinum chemotherapy, then restage.")], roles={"judge": judge}),
                             SpecialistSettings())
    scores = await scored(CASE, outcome, roles={"judge": judge})
    verdict = next(e.data for e in outcome.transcript if e.kind == "score")
    assert verdict["status"] == "ok" and verdict["judge"] == "scripted:constant"
    assert (scores["clinical_equivalence"], scores["critical_error"], scores["unsupported_claim"], scores["judge_failed"]) == (5.0, 0.0, 0.0, 0.0)
    judged = [e for e in outcome.transcript if e.kind == "score"]
    assert len(judged) == 1 and judged[0].phase == "judge" and judged[0].text == "Same."


async def test_failing_judge_leaves_the_item_done_but_unscored(store):
    runtime = Runtime(cache=store, max_reasks=1)
    from medpanel.models import build_model

    panel = Panel.of([ScriptedModel(responder=lambda r: {"answer": "Nivolumab first."}, runtime=runtime)],
                     roles={"judge": build_model("scripted:not json", runtime)})
    result = await run_benchmark(store, RunConfig(dataset="inline", protocol="specialist", models=["s"], roles={"judge": "scripted:not json"}),
                                 runtime, panel=panel, cases=[CASE])
    item = store.items(result.run_id)[0]
    verdict = next(e["data"] for e in store.events(result.run_id, item["item_id"], item["repeat"]) if e["kind"] == "score")
    assert item["status"] == "done" and verdict["status"] == "failed"
    scores = {s["name"]: s["value"] for s in store.scores(result.run_id)}
    assert scores["clinical_equivalence"] is None and scores["judge_failed"] == 1.0 and scores["answered"] == 1.0


async def test_bad_prompt_file_fails_before_the_run_starts(store, tmp_path):
    runtime = Runtime(cache=store)
    panel = Panel.of([ScriptedModel(responder=lambda r: {"answer": "x"}, runtime=runtime)])
    config = RunConfig(dataset="inline", protocol="specialist", models=["s"], settings={"prompt_file": str(tmp_path / "nope.txt")})
    with pytest.raises(UsageError, match="does not exist"):
        await run_benchmark(store, config, runtime, panel=panel, cases=[CASE])
    assert store.list_runs() == []


async def test_case_without_a_question_is_rejected_with_a_fix():
    with pytest.raises(UsageError, match="has no question, target_role"):
        await SPEC.run(CASE.model_copy(update={"question": "", "target_role": ""}), Panel.of([answering("x")]), SpecialistSettings())


# ---------------------------------------------------------------- medpanel ask

CLI = [sys.executable, "-c", "import medpanel.cli.judge, medpanel.cli as c; c.main()"]


def test_cli_ask_answers_and_judges(cli_env):
    question = "Is her lung function adequate for a right upper lobectomy?"
    answer = "scripted:" + json.dumps({"answer": "Probably: ppoFEV1 66% is fine, but DLCO 54% needs a stair-climb test first."})
    proc = subprocess.run([*CLI, "ask", "examples/lung", "--role", "Thoracic Surgeon", question, "--model", answer, "--judge", JUDGE_OK, "--json"],
                          env=cli_env, capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["answer"].startswith("Probably") and data["data"]["qa_type"] == "eligibility_assessment"
    assert data["scores"]["clinical_equivalence"] == 5.0
    # Judging a question the case does not hold, without --reference, is refused with the fix.
    proc = subprocess.run([*CLI, "ask", "examples/lung", "--role", "Nurse Navigator", "Diet?", "--model", answer, "--judge", JUDGE_OK],
                          env=cli_env, capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert proc.returncode == 2 and "--reference" in proc.stderr


async def test_bench_expands_specialist_questions_and_breaks_scores_down_by_type_and_role(store):
    """Each example case yields one item per specialist question; a judge behind real HTTP grades them."""
    from medpanel.models import Runtime
    from medpanel.runs.runner import RunConfig, build_panel, run_benchmark
    from medpanel.runs.summary import breakdown
    from medpanel.testing import MockServer

    with MockServer(reply="choice") as srv:
        runtime = Runtime(cache=store)
        config = RunConfig(dataset=str(ROOT / "examples"), protocol="specialist", models=['scripted:{"answer": "Radiotherapy alone."}'],
                           roles={"judge": f"openai:judge@{srv.base_url}"})
        result = await run_benchmark(store, config, runtime, panel=build_panel(config.models, runtime, config.roles))
    items = store.items(result.run_id)
    from medpanel.cases import load_dataset

    expected = [f"{case.id}-q{i}" for case in load_dataset(str(ROOT / "examples"))
                for i in range(1, len(case.metadata["specialist_questions"]) + 1)]
    assert {"lung-adeno-iiia-n2-q1", "lung-adeno-iiia-n2-q2", "prostate-gg2-right-base-q1", "prostate-gg2-right-base-q2"} <= set(expected)
    assert sorted(i["item_id"] for i in items) == sorted(expected)
    by_type = breakdown(store, result.run_id, "qa_type")
    assert set(by_type) == {"findings_interpretation", "treatment_recommendation", "eligibility_assessment"}
    assert all({"clinical_equivalence", "critical_error", "unsupported_claim"} <= set(scores) for scores in by_type.values())
    by_role = breakdown(store, result.run_id, "target_role")
    assert sum(s["clinical_equivalence"]["n"] for s in by_role.values()) == len(expected)
