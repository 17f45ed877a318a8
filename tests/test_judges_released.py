"""Judge fidelity (issue 8): Specialist Turn records are scored, `released` mode sends the benchmark's
own requests and aggregates as its summary does, and the training reward's decision scale is 0-5."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest
from conftest import ROOT

from medpanel.cases import Case, Reference
from medpanel.cases.model import Slide, Turn
from medpanel.cases.opentumorboard import load_otb_records, write_otb_predictions
from medpanel.errors import UsageError
from medpanel.models import Runtime
from medpanel.models.openai_compat import OpenAIModel
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols.specialist import SpecialistSettings, answer_text
from medpanel.scoring import judges
from medpanel.scoring.judges import judge_board, judge_equivalence
from medpanel.scoring.reward import JudgeScores, board_reward

SUMMARY = "A 69-year-old man has Grade Group 2 prostate adenocarcinoma at the right base; PSMA PET shows focal uptake only."
SLIDES = "<image> PSA trend and a PI-RADS 4 right-base lesion.\n<image> PSMA PET/CT with focal right-base uptake."
TURN_RECORD = {
    "schema_version": 1, "benchmark_version": "1.0", "qa_id": "qa_000007", "video_uid": "vid01", "video_dir": "videos/vid01",
    "case_id": "case_1", "qa_index": 2, "qa_type": "treatment_recommendation", "qa_type_candidates": ["treatment_recommendation"],
    "utterance_id": "u9", "target_specialist_role": "surgeon", "case_summary": SUMMARY, "slides": SLIDES,
    "question": "Would you consider focal therapy?", "reference_answer": "Yes: focal therapy, with counselling on recurrence.",
    "source_task": "task2", "source_aliases": [{"source_task": "task2", "qa_index": 2, "qa_type": "treatment_recommendation"}],
}
BOARD = Case(id="sim_000001", summary=SUMMARY, slides=[Slide(caption="PSA trend."), Slide(caption="PSMA PET/CT.")],
             metadata={"slides_text": SLIDES},
             reference=Reference(conclusion="Offer focal therapy to the right base. No surgery. Repeat MRI at 12 months.",
                                 discussion=[Turn(role="Moderator", text="Focal therapy?"), Turn(role="Urologist", text="Yes.")]))
MEETING = ("<discussion>\n<turn 1> Moderator: Focal therapy for the right base?\n<turn 2> Urologist: Yes, then MRI.\n</discussion>\n"
           "<conclusion>Offer focal therapy. Repeat MRI in a year.</conclusion>")
EQUIVALENT = {"clinical_equivalence_score": 4, "critical_error": False, "unsupported_claim": True, "rationale": "Same plan."}
ALIGNED = {"conclusion_alignment": {"score": 4, "rationale": "Same plan."}}


def scripted(*replies, vision: bool = False) -> ScriptedModel:
    model = ScriptedModel(list(replies), name="judge", runtime=Runtime(max_reasks=2))
    model.supports_vision = vision
    return model


def by_schema(**replies) -> ScriptedModel:
    """Answers by the schema name it is asked for (released names: opentumorboard_*, otb_*)."""
    return ScriptedModel(responder=lambda r: replies[r.schema_name], name="judge", runtime=Runtime(max_reasks=2))


def wire(request, vision: bool = False) -> dict:
    """What the OpenAI-compatible provider would put on the wire for this request."""
    model = OpenAIModel("judge", base_url="http://127.0.0.1:9/v1", runtime=Runtime())
    model.supports_vision = vision
    return model.request_args(request)


# ---------------------------------------------------------------- Specialist Turn records are scored

async def test_specialist_turn_record_in_the_released_shape_is_judged(tmp_path):
    path = tmp_path / "task2_test.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(json.dumps(TURN_RECORD) + "\n")
    (case,) = load_otb_records(path)
    judge = scripted(EQUIVALENT)
    result = await judge_equivalence(judge, case, "Focal therapy, with counselling.")
    assert result.status == "ok", result.error  # it was "no reference answer to judge against"
    assert result.scores["clinical_equivalence"] == 4.0
    assert TURN_RECORD["reference_answer"] in judge.history[0].messages[1].content


# ---------------------------------------------------------------- released mode: the request

async def test_released_equivalence_sends_the_benchmarks_request():
    (case,) = [c for c in [Case(id="qa", summary=SUMMARY, question="Focal?", target_role="surgeon",
                                slides=[Slide(caption="a"), Slide(caption="b")], metadata={"slides_text": SLIDES},
                                reference=Reference(answer="Yes, focal."))]]
    judge = scripted(EQUIVALENT)
    result = await judge_equivalence(judge, case, "  Focal therapy.  ", mode="released", max_tokens=64)
    assert result.status == "ok" and result.mode == "released"
    request = judge.history[0]
    assert (request.temperature, request.top_p, request.seed, request.max_tokens) == (0.0, 1.0, 0, 1024)  # the release's budget
    assert request.messages[1].content == (
        "<TARGET_SPECIALIST_ROLE>\nsurgeon\n</TARGET_SPECIALIST_ROLE>\n\n<CASE_SUMMARY>\n" + SUMMARY + "\n</CASE_SUMMARY>\n\n"
        "<SLIDE_DESCRIPTIONS>\n" + SLIDES + "\n</SLIDE_DESCRIPTIONS>\n\n<QUESTION>\nFocal?\n</QUESTION>\n\n"
        "<REFERENCE_EXPERT_ANSWER>\nYes, focal.\n</REFERENCE_EXPERT_ANSWER>\n\n<CANDIDATE_ANSWER>\nFocal therapy.\n</CANDIDATE_ANSWER>")
    args = wire(request)
    assert args["response_format"]["json_schema"]["name"] == "opentumorboard_clinical_equivalence"
    assert args["response_format"]["json_schema"]["strict"] is True
    assert args["messages"][0]["content"] == request.messages[0].content  # no schema note appended in released mode
    assert (args["temperature"], args["top_p"], args["seed"], args["max_tokens"]) == (0.0, 1.0, 0, 1024)


async def test_released_slides_go_beside_their_markers_for_a_vision_judge(tmp_path):
    images = []
    for name in ("one.png", "two.png"):
        (tmp_path / name).write_bytes(b"\x89PNG\r\n\x1a\n" + name.encode())
        images.append(str(tmp_path / name))
    case = BOARD.model_copy(update={"slides": [Slide(caption="PSA trend.", image=images[0]), Slide(caption="PSMA.", image=images[1])]})
    judge = scripted(ALIGNED, {"therapy": 5, "surgery": 5, "next_action": 4, "clinical_trial": -1, "rationale": "ok"}, vision=True)
    await judges.release_mode.judge_alignment(judge, case, "Offer focal therapy.")
    message = judge.history[0].messages[1]
    parts = wire(judge.history[0], vision=True)["messages"][1]["content"]
    kinds = [p["type"] for p in parts]
    assert kinds == ["text", "image_url", "text", "image_url", "text"]
    assert parts[0]["text"].endswith("<SLIDE_DESCRIPTIONS>\n") and parts[2]["text"] == " PSA trend and a PI-RADS 4 right-base lesion.\n"
    assert parts[4]["text"].startswith(" PSMA PET/CT with focal right-base uptake.\n</SLIDE_DESCRIPTIONS>")
    assert "<image>" not in message.content and len(message.images) == 2
    # A text-only judge reads the raw string, markers included.
    text_judge = scripted(ALIGNED)
    await judges.release_mode.judge_alignment(text_judge, case, "Offer focal therapy.")
    assert SLIDES in text_judge.history[0].messages[1].content and not text_judge.history[0].messages[1].images


async def test_released_invalid_reply_is_a_counted_failure_never_reasked():
    judge = scripted(dict(EQUIVALENT, clinical_equivalence_score=7), EQUIVALENT)
    result = await judge_equivalence(judge, BOARD.model_copy(update={"question": "Q?", "target_role": "surgeon",
                                                                      "reference": Reference(answer="Yes.")}), "Yes.", mode="released")
    assert result.status == "failed" and result.calls == 1 and len(judge.history) == 1
    assert result.scores["clinical_equivalence"] is None and "not re-asked" in result.error
    fenced = scripted("```json\n" + json.dumps(EQUIVALENT) + "\n```")  # the release reads replies with json.loads
    result = await judge_equivalence(fenced, BOARD.model_copy(update={"question": "Q?", "target_role": "surgeon",
                                                                       "reference": Reference(answer="Yes.")}), "Yes.", mode="released")
    assert result.status == "failed"


# ---------------------------------------------------------------- released mode: four decisions and format failures

async def test_released_four_decisions_one_call_and_means_over_scored_cases_only(store):
    replies = [
        {"therapy": 5, "surgery": -1, "next_action": 3, "clinical_trial": -1, "rationale": "a"},
        {"therapy": 2, "surgery": 4, "next_action": -1, "clinical_trial": -1, "rationale": "b"},
        {"therapy": 9, "surgery": 4, "next_action": 1, "clinical_trial": -1, "rationale": "out of range: a judge failure"},
    ]
    rows = []
    for reply in replies:
        judge = by_schema(opentumorboard_conclusion_alignment=ALIGNED, opentumorboard_four_decisions=reply)
        results = await judge_board(judge, BOARD.model_copy(update={"reference": Reference(conclusion=BOARD.reference.conclusion)}),
                                    MEETING, mode="released")
        assert sorted(r.schema_name for r in judge.history) == ["opentumorboard_conclusion_alignment", "opentumorboard_four_decisions"]
        assert "consistency" not in results  # no reference discussion: the training judge has nothing to read
        rows.append(judges.merged_scores(results))
    # A response with no conclusion: alignment floored at 1, every decision dimension left out.
    judge = by_schema()
    results = await judge_board(judge, BOARD, "<discussion>\n<turn 1> Moderator: hi\n</discussion>", mode="released")
    assert judge.history == [] and results["four_decisions"].status == "format_failure"
    assert results["conclusion_alignment"].scores == {"conclusion_alignment": 1.0}
    assert all(results["four_decisions"].scores[f"decision_{d}"] is None for d in ("therapy", "surgery", "next_action"))
    rows.append(judges.merged_scores({k: v for k, v in results.items() if k != "consistency"}))

    # The project's own aggregation: the rows stored as a run's item scores, then the run summary's means.
    import time

    from medpanel.runs.summary import summarize

    store.create_run("released-board", dataset="inline", protocol="board", models=["m"], settings={"dataset": "inline"})
    for k, row in enumerate(rows):
        store.write_item("released-board", f"c{k}", 0, status="done", outcome={"answer": "x", "data": {}}, events=[],
                         scores=row, started_at=time.time())
    means = {name: s["mean"] for name, s in summarize(store, "released-board")["scores"].items()}
    assert means["decision_therapy"] == 3.5 and means["decision_surgery"] == 4.0 and means["decision_next_action"] == 3.0
    assert "decision_clinical_trial" not in means and means["conclusion_alignment"] == 13 / 4
    assert summarize(store, "released-board")["scores"]["decision_therapy"]["n"] == 2  # failures and format failures left out
    assert [r["judge_failed"] for r in rows] == [0.0, 0.0, 1.0, 0.0]


async def test_medpanel_mode_still_floors_a_format_failure_but_released_leaves_the_flags_out():
    case = BOARD.model_copy(update={"question": "Q?", "target_role": "surgeon", "reference": Reference(answer="Yes.")})
    ours = await judge_equivalence(scripted(), case, "   ")
    released = await judge_equivalence(scripted(), case, "   ", mode="released")
    assert ours.scores == {"clinical_equivalence": 1.0, "critical_error": 0.0, "unsupported_claim": 0.0}
    assert released.scores == {"clinical_equivalence": 1.0, "critical_error": None, "unsupported_claim": None}


# ---------------------------------------------------------------- consistency and the training reward

SCOPE = {"therapy": "positive", "surgery": "negative", "next_action": "positive", "clinical_trial": "absent", "rationale": "r"}
CONSISTENT = {"therapy": 5, "surgery": 4, "next_action": 3, "clinical_trial": 2, "discussion_quality": 4,
              "discussion_conclusion_consistency": 5, "grounding_and_safety": 4, "major_contradiction": False,
              "unsafe_addition": False, "rationale": "r"}


async def test_released_consistency_reads_the_reference_discussion_with_a_frozen_scope():
    judge = by_schema(opentumorboard_conclusion_alignment=ALIGNED, otb_reference_scope=SCOPE, otb_consistency=CONSISTENT,
                      opentumorboard_four_decisions={"therapy": 5, "surgery": 5, "next_action": 4, "clinical_trial": -1, "rationale": "r"})
    results = await judge_board(judge, BOARD, MEETING, mode="released")
    request = next(r for r in judge.history if r.schema_name == "otb_consistency")
    user = request.messages[1].content
    assert "<REFERENCE_DISCUSSION>\n<turn 1> Moderator: Focal therapy?\n<turn 2> Urologist: Yes.\n</REFERENCE_DISCUSSION>" in user
    assert '<SCOPE>\n{"therapy":"positive","surgery":"negative","next_action":"positive","clinical_trial":"absent"}\n</SCOPE>' in user
    assert user.startswith("<CASE_EVIDENCE>\nCASE SUMMARY:\n" + SUMMARY + "\n\nSLIDES:\n" + SLIDES + "\n</CASE_EVIDENCE>")
    assert request.schema["properties"]["clinical_trial"] == {"type": "integer", "enum": [-1]} and request.max_tokens == 768
    scope_request = next(r for r in judge.history if r.schema_name == "otb_reference_scope")
    assert "<CANDIDATE" not in scope_request.messages[1].content and scope_request.max_tokens == 384
    assert results["consistency"].scores == {"consistency": 5.0}
    assert results["consistency"].verdict["clinical_trial"] == -1  # out of scope: corrected to -1, as the release does


async def test_training_reward_scores_a_reversed_decision_zero():
    reversed_therapy = {"therapy": 0, "surgery": 5, "next_action": 5, "clinical_trial": -1, "rationale": "therapy reversed"}
    judge = by_schema(otb_conclusion_alignment=ALIGNED, otb_reference_scope=SCOPE, otb_consistency=CONSISTENT,
                      otb_four_decisions=reversed_therapy)
    results = await judges.release_mode.reward_judgements(judge, BOARD, MEETING)
    assert all(r.status == "ok" for r in results.values()), {k: r.error for k, r in results.items()}
    decisions = next(r for r in judge.history if r.schema_name == "otb_four_decisions")
    assert decisions.schema["properties"]["therapy"] == {"type": "integer", "minimum": 0, "maximum": 5}
    assert decisions.max_tokens == 768 and results["four_decisions"].scores["decision_therapy"] == 0.0
    scores = JudgeScores.from_judgements(results)
    weights = {"therapy": 1.00, "surgery": 1.25, "next_action": 1.15}
    assert scores.decisions == pytest.approx((0 * 1.00 + 5 * 1.25 + 5 * 1.15) / sum(weights.values()))
    only_therapy = dict(SCOPE, surgery="absent", next_action="absent")
    judge = by_schema(otb_conclusion_alignment=ALIGNED, otb_reference_scope=only_therapy, otb_consistency=CONSISTENT,
                      otb_four_decisions=dict(reversed_therapy, surgery=-1, next_action=-1))
    reward = board_reward(MEETING, JudgeScores.from_judgements(await judges.release_mode.reward_judgements(judge, BOARD, MEETING)))
    assert reward.decisions == 0.0 and reward.support == 0.0  # a reversed decision adds nothing (an evaluation rubric gave 0.2)
    medpanel_mode = await judge_board(by_schema(), BOARD.model_copy(update={"reference": Reference()}), MEETING)
    with pytest.raises(UsageError, match="0-5"):
        JudgeScores.from_judgements(medpanel_mode)


# ---------------------------------------------------------------- settings, CLI, readers

def test_judge_mode_is_a_setting():
    from medpanel.protocols.board import BoardSettings

    assert SpecialistSettings(judge_mode="released").judge_mode == "released"
    assert BoardSettings(judge_mode="released").judge_mode == "released" and BoardSettings().judge_mode == "medpanel"
    with pytest.raises(ValueError):
        SpecialistSettings(judge_mode="paper")


def test_cli_judge_mode_released_and_a_bad_mode(cli_env):
    cli = [sys.executable, "-c", "import medpanel.cli.judge, medpanel.cli as c; c.main()"]
    judge = "scripted:" + json.dumps(EQUIVALENT)
    args = ["judge", "equivalence", "--case", "examples/prostate", "--candidate", "SBRT alone.", "--judge", judge, "--json"]
    proc = subprocess.run([*cli, *args, "--judge-mode", "released"], env=cli_env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["results"]["clinical_equivalence"]["mode"] == "released"
    proc = subprocess.run([*cli, *args, "--judge-mode", "paper"], env=cli_env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "Unknown judge mode" in proc.stderr and "Traceback" not in proc.stderr


def test_answer_readers_use_the_shared_stripper(tmp_path):
    assert answer_text("<think>a</think><think>b</think>Restage first.") == "Restage first."
    assert answer_text("<think>still thinking, cut off") == ""
    case = next(iter(load_otb_records(_write(tmp_path, TURN_RECORD))))
    written = write_otb_predictions(tmp_path / "responses.jsonl", [case],
                                    {case.id: '<think>hm</think>```json\n{"answer": "Focal therapy."}\n```'}, model="m")
    row = json.loads((tmp_path / "responses.jsonl").read_text())
    assert written.written == 1 and row["parsed_output"] == {"answer": "Focal therapy."} and row["parse_status"] == "parsed_after_cleanup"
    write_otb_predictions(tmp_path / "cut.jsonl", [case], {case.id: "<think>never closes"}, model="m")
    row = json.loads((tmp_path / "cut.jsonl").read_text())
    assert row["parsed_output"] is None and "never closed" in row["parse_error"]


def _write(tmp_path, record):
    path = tmp_path / "task2.jsonl"
    path.write_text(json.dumps(record) + "\n")
    return path


async def test_specialist_reasoning_cut_off_is_recorded_as_no_answer():
    from medpanel.protocols import Panel
    from medpanel.protocols.specialist import SPEC

    case = Case(id="qa", summary=SUMMARY, question="Focal?", target_role="surgeon", reference=Reference(answer="Yes."))
    from medpanel.runs.scoring import score_outcome

    model = ScriptedModel(["<think>The PSA rose, so maybe focal ther"], name="spec", runtime=Runtime(max_reasks=0))
    outcome = await SPEC.run(case, Panel.of([model]), SpecialistSettings())
    assert outcome.answer is None and outcome.data["no_answer"] == "the reasoning never closed"
    assert (await score_outcome(SPEC, case, outcome, {}, SpecialistSettings()))["answered"] == 0.0


# ---------------------------------------------------------------- released mode reads the conclusion as the release does

@pytest.mark.parametrize("response, conclusion", [
    ("| Role | Response |\n|---|---|\n| Surgeon | cut |\nConclusion: Do surgery.", "Do surgery."),
    ("<think>unclosed reasoning <conclusion>fake</conclusion>", "fake"),
])
async def test_released_board_judges_the_conclusion_the_release_reader_finds(response, conclusion):
    from medpanel.scoring.board_reader import extract_conclusion

    assert judges.split_response(response)[0] is None  # medpanel's reader finds none: its mode keeps that
    assert extract_conclusion(response, reader="released")[0] == conclusion
    judge = by_schema(opentumorboard_conclusion_alignment=ALIGNED,
                      opentumorboard_four_decisions={"therapy": -1, "surgery": 5, "next_action": -1, "clinical_trial": -1, "rationale": "r"})
    case = BOARD.model_copy(update={"reference": Reference(conclusion="Offer surgery.")})
    results = await judge_board(judge, case, response, mode="released")
    assert {r.status for r in results.values()} == {"ok"} and len(judge.history) == 2
    assert all(conclusion in str(r.messages[-1].content) for r in judge.history)


# ---------------------------------------------------------------- released mode reads the specialist's answer as the release does

@pytest.mark.parametrize("raw, expected", [
    ('{"answer": "Yes."}', "Yes."), ('{"response": "Yes focal."}', None), ('{"answer": 5}', None), ('["Yes"]', None),
    ('""', None), ("", None), ('{"answer": ""}', None), ('{"answer": "Yes, focal ther', "Yes, focal ther"),
    ('{"Answer": "caps"}', "caps"), ('Here: {"answer": "X."}', 'Here: {"answer": "X."}'),
    ('```json\n{"answer": "Y."}\n```', "Y."), ('{"answer": "A"} trailing', 'A"} trailing'),
    ('{"answer": "He said \\"no\\"', 'He said "no\\'), ("Plain answer.", "Plain answer."),
    ('<think>x</think>{"answer": "Z"}', "Z"), ("<think>cut off", None),
])
def test_released_answer_reader_matches_the_release(raw, expected):
    from medpanel.protocols.specialist import released_answer_text

    assert released_answer_text(raw) == expected


@pytest.mark.parametrize("reply, judged", [
    ('{"response": "Yes, focal therapy."}', None),  # medpanel reads the whole text; the release: a format failure
    ('{"answer": "Yes, focal ther', "Yes, focal ther"),  # cut at max_tokens: medpanel keeps the raw JSON text
    ('Here: {"answer": "Focal therapy."}', 'Here: {"answer": "Focal therapy."}'),  # medpanel takes the object's answer
])
async def test_specialist_released_judge_mode_judges_the_release_reading(reply, judged, monkeypatch):
    from medpanel.models import build_model
    from medpanel.protocols import Panel
    from medpanel.protocols.specialist import SPEC
    from medpanel.runs.scoring import score_outcome
    from medpanel.scoring.judges import scorers

    seen, real = [], judges.judge_equivalence

    async def spy(judge, case, candidate, *args, **kwargs):
        seen.append(candidate)
        return await real(judge, case, candidate, *args, **kwargs)

    monkeypatch.setattr(scorers, "judge_equivalence", spy)  # the judge scorer's call

    case = Case(id="qa", summary=SUMMARY, question="Focal?", target_role="surgeon", reference=Reference(answer="Yes."))
    model = ScriptedModel([reply], name="spec", runtime=Runtime(max_reasks=0))
    judge = build_model("scripted:" + json.dumps(EQUIVALENT), Runtime())
    settings = SpecialistSettings(judge_mode="released")
    outcome = await SPEC.run(case, Panel.of([model], roles={"judge": judge}), settings)
    await score_outcome(SPEC, case, outcome, {"judge": judge}, settings)
    assert outcome.answer != judged  # medpanel's own reading differs
    verdict = next(e.data for e in outcome.transcript if e.kind == "score")
    assert outcome.data["released_answer"] == judged and seen == [judged]
    if judged is None:
        assert verdict["status"] == "format_failure" and verdict["calls"] == 0
    else:
        assert verdict["status"] == "ok" and verdict["scores"]["clinical_equivalence"] == 4.0


# ---------------------------------------------------------------- the default prompts are in medpanel's own words

def _prompt_texts() -> dict[str, str]:
    """Every default prompt the judges and the Specialist Turn send, and the string constants they are built from."""
    from medpanel.protocols import specialist
    from medpanel.scoring.judges import prompts
    from medpanel.scoring.judges import released as R

    texts = {f"released.DEFAULT_PROMPTS[{k}]": v for k, v in R.DEFAULT_PROMPTS.items()}
    for module in (prompts, R, specialist):
        texts |= {f"{module.__name__}.{k}": v for k, v in vars(module).items() if isinstance(v, str) and not k.startswith("__")}
    for tags in (R.BOARD_TAGS, R.EQUIVALENCE_TAGS, R.SCOPE_TAGS, R.CONSISTENCY_TAGS):
        texts |= {"equivalence": prompts.equivalence(tags), "alignment": prompts.alignment(tags), "scope": prompts.scope(tags),
                  "scope+evidence": prompts.scope(tags, with_evidence=True), "one_call": prompts.decisions_one_call(tags),
                  "locked": prompts.decisions_locked(tags), "locked0": prompts.decisions_locked(tags, floor=0, scope_in="schema"),
                  "consistency": prompts.consistency(tags), "consistency_full": prompts.consistency_full(tags)}
    texts["specialist.SYSTEM+VISION_NOTE"] = specialist.SYSTEM + specialist.VISION_NOTE
    return texts


def test_no_six_word_run_of_the_papers_is_in_a_default_prompt():
    import re

    seeds = (ROOT / ".." / "shared" / "seeds").resolve()
    papers = sorted(seeds.glob("*.txt")) if seeds.is_dir() else []
    if not papers:
        pytest.skip(f"the papers' text ({seeds}) is not here: nothing to compare the prompts with")
    words = lambda text: re.findall(r"[a-z0-9]+", text.lower())
    grams = set()
    for paper in papers:
        w = words(paper.read_text(encoding="utf-8", errors="replace"))
        grams |= {tuple(w[i:i + 6]) for i in range(len(w) - 5)}
    copied = {}
    for name, text in _prompt_texts().items():
        w = words(text)
        runs = [" ".join(w[i:i + 6]) for i in range(len(w) - 5) if tuple(w[i:i + 6]) in grams]
        if runs:
            copied[name] = runs
    assert copied == {}, f"six-word runs from the papers in default prompts: {copied}"


async def test_judging_a_stored_specialist_run_in_released_mode_reads_the_raw_reply(store, tmp_path):
    from medpanel.models.runtime import Runtime as _Runtime
    from medpanel.protocols import Panel
    from medpanel.runs.runner import RunConfig, run_benchmark

    case = Case(id="qa", summary=SUMMARY, question="Focal?", target_role="surgeon", reference=Reference(answer="Yes."))
    case_file = tmp_path / "case.yaml"
    case_file.write_text(json.dumps(case.model_dump(exclude={"source"})))
    runtime = _Runtime(cache=store, max_reasks=0)
    answerer = ScriptedModel(['{"answer": "Yes, focal ther'], runtime=runtime)  # cut off at the token limit
    result = await run_benchmark(store, RunConfig(dataset=str(case_file), protocol="specialist", models=["scripted:x"]),
                                 runtime, panel=Panel.of([answerer]))
    assert store.items(result.run_id)[0]["outcome"]["answer"] == '{"answer": "Yes, focal ther'  # medpanel's lenient reading
    judge = scripted(EQUIVALENT)
    from medpanel.runs.judging import judge_stored_run

    [row] = await judge_stored_run(store, result.run_id, judge, settings_update={"judge_mode": "released"})
    assert row["results"]["clinical_equivalence"]["status"] == "ok"
    assert "<CANDIDATE_ANSWER>\nYes, focal ther\n</CANDIDATE_ANSWER>" in str(judge.history[0].messages[-1].content)
