"""The consult protocol (MedSyn) and its two baselines, with scripted physicians and assistants."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from medpanel.cases.model import Case, Reference
from medpanel.context import RunContext
from medpanel.errors import UsageError
from medpanel.models.runtime import Runtime
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Outcome, Panel, get_protocol
from medpanel.protocols.consult import (ASSISTANT_SYSTEM, PHYSICIAN_SYSTEM, BaselineSettings, ConsultSettings, Discharge, score)
from medpanel.runs.runner import RunConfig, run_benchmark
from medpanel.runs.summary import summarize

SECRET = "Urinalysis showed 80 leukocytes per field and nitrites."  # only in the note


def make_case(codes=("N10", "N39.0")) -> Case:
    return Case(
        id="pyelo",
        chief_complaint="Fever and right flank pain",
        note={"history of present illness": "A 34-year-old woman with three days of fever, dysuria and right flank pain.",
              "pertinent results": SECRET},
        reference=Reference(codes=list(codes)),
    )


def physician_script(*extra_questions: str, codes=("N10", "R50.9")) -> ScriptedModel:
    replies = [{"message": "Please give me your initial evaluation."}]
    replies += [{"action": "ask", "message": q} for q in extra_questions]
    replies += [{"action": "submit", "message": "I have what I need."}, {"diagnosis": "Acute pyelonephritis", "codes": list(codes)}]
    return ScriptedModel(replies, name="physician")


def schema_titles(model: ScriptedModel) -> list[str | None]:
    return [r.schema["title"] if r.schema else None for r in model.history]


def contents(request) -> str:
    return "\n".join(m.content for m in request.messages)


async def test_a_consult_asks_answers_and_submits():
    physician = physician_script("Any urine findings?")
    assistant = ScriptedModel(["Likely pyelonephritis: fever, flank pain, dysuria.", "Yes: " + SECRET], name="assistant")
    events = []
    outcome = await get_protocol("consult").run(make_case(), Panel.of([physician, assistant], ["phys", "asst"]),
                                                ConsultSettings(max_turns=10), RunContext(on_event=events.append))

    assert outcome.status == "ok"
    assert outcome.answer == "Acute pyelonephritis"
    assert outcome.data["codes"] == ["N10", "R50.9"]
    # turns: 1 ask, 2 evaluation, 3 ask, 4 answer, 5 submit (with the discharge)
    assert (outcome.data["turns"], outcome.data["questions"]) == (5, 2)
    turns = [(e.round, e.speaker, e.phase) for e in outcome.transcript.turns()]
    assert turns == [(1, "Physician", "question"), (2, "Assistant", "evaluation"), (3, "Physician", "question"),
                     (4, "Assistant", "answer"), (5, "Physician", "submit")]
    assert [e.kind for e in outcome.transcript][-1] == "decision"
    assert [e.kind for e in events] == [e.kind for e in outcome.transcript]  # the live hook saw every event, in order

    # The physician: asked first (no way to submit), then chose, then wrote the discharge.
    assert schema_titles(physician) == ["Question", "PhysicianTurn", "PhysicianTurn", "Discharge"]
    assert physician.history[0].messages[0].content == PHYSICIAN_SYSTEM
    assert "Fever and right flank pain" in contents(physician.history[0])
    assert "Likely pyelonephritis" in contents(physician.history[1])  # it hears the evaluation
    # It never sees the note, only what the assistant said: the secret reaches it through the answer.
    assert SECRET not in contents(physician.history[1]) and "three days of fever" not in contents(physician.history[-1])
    assert ("Yes: " + SECRET) in contents(physician.history[2])

    # The assistant: the note in its system prompt, the physician's questions as they were asked, no schema ever.
    assert schema_titles(assistant) == [None, None]
    # The chief complaint heads the note, then its sections in order.
    assert assistant.history[0].messages[0].content == ASSISTANT_SYSTEM.format(
        note="CHIEF COMPLAINT\nFever and right flank pain\n\nHISTORY OF PRESENT ILLNESS\nA 34-year-old woman with three days "
             "of fever, dysuria and right flank pain.\n\nPERTINENT RESULTS\n" + SECRET)
    assert [r.messages[-1].content for r in assistant.history] == ["Please give me your initial evaluation.", "Any urine findings?"]
    assert "discharge" not in " ".join(r.messages[-1].content.lower() for r in assistant.history)


async def test_the_assistant_never_writes_the_discharge_even_in_both_chairs():
    # One model sits in both chairs: every Discharge request must come with the physician's prompt.
    one = ScriptedModel([{"message": "Evaluation please."}, "Pyelonephritis likely.",
                         {"action": "submit", "message": "Ready."}, {"diagnosis": "Pyelonephritis", "codes": ["N10"]}])
    outcome = await get_protocol("consult").run(make_case(), Panel.of([one], ["solo"]), ConsultSettings())
    assert outcome.status == "ok" and outcome.data["turns"] == 3
    discharge_requests = [r for r in one.history if r.schema and r.schema["title"] == "Discharge"]
    assert len(discharge_requests) == 1
    assert discharge_requests[0].messages[0].content == PHYSICIAN_SYSTEM
    assistant_requests = [r for r in one.history if r.messages[0].content.startswith(ASSISTANT_SYSTEM[:40])]
    assert len(assistant_requests) == 1 and assistant_requests[0].schema is None


async def test_reaching_the_turn_bound_is_an_unfinished_consult(shared_data):
    asks = [{"message": "Evaluation please."}] + [{"action": "ask", "message": f"Question {i}?"} for i in range(2, 4)]
    physician = ScriptedModel(asks, name="physician")
    assistant = ScriptedModel(responder=lambda r: "Answer.", name="assistant")
    outcome = await get_protocol("consult").run(make_case(), Panel.of([physician, assistant]), ConsultSettings(max_turns=5))
    # turns 1 ask, 2 answer, 3 ask, 4 answer, 5 ask -> the bound: the last question gets no answer, no discharge.
    assert outcome.status == "unfinished" and outcome.answer is None
    assert (outcome.data["turns"], outcome.data["questions"], outcome.data["codes"]) == (5, 3, [])
    assert len(assistant.history) == 2
    assert "Discharge" not in schema_titles(physician)
    assert outcome.transcript.events[-1].kind == "note" and "bound of 5 turns" in outcome.transcript.events[-1].text
    # The physician was told how many turns were left; on its last turn, plainly.
    assert "(4 turns left" not in contents(physician.history[0]) and "(5 turns left" in contents(physician.history[0])
    assert "Submit now: a question now leaves no turn" in contents(physician.history[2])

    scores = score(make_case(), outcome)
    assert scores["finished"] == 0.0 and scores["turns"] == 5.0
    # Scored as an empty prediction (the default, issue 8 point 4); there is no predicted code to be invalid.
    assert scores["code_f1"] == 0.0 and scores["chapter_precision"] == 0.0 and scores["invalid_rate"] is None


async def test_an_even_bound_ends_on_an_answer():
    physician = ScriptedModel([{"message": "Evaluation?"}, {"action": "ask", "message": "More?"}, {"action": "ask", "message": "More?"}])
    assistant = ScriptedModel(responder=lambda r: "Answer.")
    outcome = await get_protocol("consult").run(make_case(), Panel.of([physician, assistant]), ConsultSettings(max_turns=6))
    assert outcome.status == "unfinished" and outcome.data["turns"] == 6 and len(assistant.history) == 3


async def test_min_questions_keeps_the_physician_asking():
    physician = physician_script("Second question?")
    assistant = ScriptedModel(responder=lambda r: "Answer.")
    await get_protocol("consult").run(make_case(), Panel.of([physician, assistant]), ConsultSettings(min_questions=2))
    assert schema_titles(physician) == ["Question", "Question", "PhysicianTurn", "Discharge"]


def test_settings_leave_room_to_submit():
    with pytest.raises(ValidationError, match="leaves no turn to submit"):
        ConsultSettings(max_turns=4, min_questions=2)  # ask, answer, ask, answer: no fifth turn
    assert ConsultSettings(max_turns=5, min_questions=2).max_turns == 5
    assert "on_event" not in ConsultSettings.model_fields  # the hook is never stored: it travels in the run context


def test_discharge_codes_typed_loosely_are_split_and_junk_is_refused():
    assert Discharge.model_validate({"diagnosis": "x", "codes": ["N10 R50.9", "e11.9 (diabetes)"]}).codes == ["N10", "R50.9", "E11.9"]
    assert Discharge.model_validate({"diagnosis": "x", "codes": "N10, I10"}).codes == ["N10", "I10"]
    for bad in (["none"], [], ["ICD10CM"]):
        with pytest.raises(ValidationError):
            Discharge.model_validate({"diagnosis": "x", "codes": bad})
    with pytest.raises(ValidationError):
        Discharge.model_validate({"diagnosis": "", "codes": ["N10"]})


async def test_an_invalid_discharge_is_asked_again():
    physician = ScriptedModel([{"message": "Evaluation?"}, {"action": "submit", "message": "Ready."},
                               {"diagnosis": "Pyelonephritis", "codes": ["unknown"]}, {"diagnosis": "Pyelonephritis", "codes": ["N10"]}])
    assistant = ScriptedModel(["Pyelonephritis."])
    outcome = await get_protocol("consult").run(make_case(), Panel.of([physician, assistant]), ConsultSettings())
    assert outcome.data["codes"] == ["N10"]
    assert "could not be used" in physician.history[-1].messages[-1].content  # the re-ask said why


async def test_baseline_sees_only_the_chief_complaint():
    physician = ScriptedModel([{"diagnosis": "Pyelonephritis", "codes": ["N10"]}])
    outcome = await get_protocol("baseline").run(make_case(), Panel.of([physician]), BaselineSettings())
    (request,) = physician.history
    assert request.schema["title"] == "Discharge"
    assert "Chief complaint: Fever and right flank pain" in contents(request)
    assert SECRET not in contents(request) and "three days of fever" not in contents(request)
    assert (outcome.status, outcome.data["turns"], outcome.data["codes"]) == ("ok", 1, ["N10"])


async def test_full_note_baseline_sees_the_note():
    physician = ScriptedModel([{"diagnosis": "Pyelonephritis", "codes": ["N10"]}])
    await get_protocol("baseline-note").run(make_case(), Panel.of([physician]), BaselineSettings())
    (request,) = physician.history
    assert SECRET in contents(request) and "three days of fever" in contents(request)
    assert "CHIEF COMPLAINT\nFever and right flank pain" in contents(request)


async def test_protocols_name_what_a_case_lacks():
    bare = Case(id="bare", chief_complaint="Cough")
    with pytest.raises(UsageError, match="no note"):
        await get_protocol("consult").run(bare, Panel.of([ScriptedModel()]), ConsultSettings())
    with pytest.raises(UsageError, match="no note"):
        await get_protocol("baseline-note").run(bare, Panel.of([ScriptedModel()]), BaselineSettings())


def test_scores_of_a_finished_consult(shared_data):
    done = Outcome(status="ok", answer="Pyelonephritis", data={"codes": ["N10", "R50.9"], "turns": 5})
    scores = score(make_case(codes=("N10", "N39.0")), done)
    # code: {N10, R50.9} vs {N10, N39.0}: P 1/2, R 1/2, F1 1/2, J 1/3; categories {N10, R50} vs {N10, N39}: the same.
    assert (scores["code_precision"], scores["code_recall"], scores["code_f1"]) == (0.5, 0.5, 0.5)
    assert scores["category_jaccard"] == pytest.approx(1 / 3)
    # chapters {14, 18} vs {14}: P 1/2, R 1, F1 2/3, J 1/2
    assert (scores["chapter_precision"], scores["chapter_recall"], scores["chapter_jaccard"]) == (0.5, 1.0, 0.5)
    assert scores["chapter_f1"] == pytest.approx(2 / 3)
    assert (scores["finished"], scores["turns"], scores["invalid_rate"], scores["empty"]) == (1.0, 5.0, 0.0, 0.0)


async def test_runs_record_turns_and_unfinished_consults(store, shared_data):
    cases = [make_case().model_copy(update={"id": "done"}), make_case().model_copy(update={"id": "endless"})]

    # Items run one at a time, so the script follows call order: the first consult submits, the second never does.
    physician = ScriptedModel([{"message": "Evaluation?"}, {"action": "submit", "message": "Ready."},
                               {"diagnosis": "Pyelonephritis", "codes": ["N10"]},
                               {"message": "Evaluation?"}, {"action": "ask", "message": "More?"}], name="physician")
    assistant = ScriptedModel(responder=lambda r: "Answer.", name="assistant")
    config = RunConfig(dataset="inline", protocol="consult", models=["physician", "assistant"], concurrency=1, settings={"max_turns": 4})
    result = await run_benchmark(store, config, Runtime(), panel=Panel.of([physician, assistant]), cases=cases)
    summary = summarize(store, result.run_id)
    assert summary["items"]["done"] == 2  # an unfinished consult is a finished item, not a failure
    assert summary["scores"]["finished"]["mean"] == 0.5
    assert summary["scores"]["turns"]["mean"] == 3.5  # 3 (ask, answer, submit) and 4 (the bound)
    assert summary["scores"]["code_f1"]["n"] == 2  # the unfinished consult counts, as an empty prediction
    # N10 vs {N10, N39.0}: P 1, R 1/2, F1 2/3; the unfinished consult 0
    assert summary["scores"]["code_f1"]["mean"] == pytest.approx(1 / 3)
    statuses = {i["item_id"]: i["outcome"]["status"] for i in store.items(result.run_id)}
    assert statuses == {"done": "ok", "endless": "unfinished"}


# ---------------------------------------------------------------- the cases consults run on


@pytest.mark.parametrize("report, complaint, rule", [
    ("A 29-year-old woman with a history of duodenal ulcer complaining of pain in the right renal fossa.\nNo fever.",
     "pain in the right renal fossa", "complaining of"),
    ("A 45-year-old woman presented to the urology department with voiding syndrome and recurrent infections.",
     "voiding syndrome and recurrent infections", "presented with"),
    ("A 52-year-old woman with hypertension.\nShe was admitted to hospital due to metrorrhagia and abdominal pain.",
     "metrorrhagia and abdominal pain", "admitted for"),  # the cue may sit in a later sentence
    ("A 27-year-old patient without allergies.\nUltrasound showed a bladder image.", "A 27-year-old patient without allergies", "first sentence"),
    ("A man " + "with a very long story " * 10 + "complaining of " + "pain " * 50 + ".", " ".join(["pain"] * 40) + " ...", "complaining of"),
])
def test_codiesp_chief_complaint_rule(report, complaint, rule):
    from medpanel.cases.notes import codiesp_chief_complaint

    assert codiesp_chief_complaint(report) == (complaint, rule)


def test_codiesp_and_aci_bench_cases(shared_data):
    from medpanel.cases import load_dataset
    from medpanel.cases.notes import find_codiesp_case

    dev = load_dataset("codiesp")
    assert len(dev) == 250 and len(load_dataset("codiesp-test")) == 250
    first = dev[0]
    assert first.id == "codiesp-S0004-06142005000900016-1"
    assert first.chief_complaint == "pain in the right renal fossa compatible with renoureteral crisis"
    assert first.metadata["chief_complaint_rule"] == "complaining of"
    assert first.reference.codes[:3] == ["Q62.11", "N28.89", "N39.0"] and len(first.reference.codes) == 12
    assert list(first.note) == ["clinical case"] and first.note["clinical case"].startswith("A 29-year-old woman")
    assert find_codiesp_case("0") == first and find_codiesp_case("S0004-06142005000900016-1") == first
    with pytest.raises(UsageError, match="no index 250"):
        find_codiesp_case("250")

    aci = load_dataset("aci-bench")
    assert len(aci) == 207 and aci[0].id == "aci-D2N001" and aci[0].chief_complaint == "annual exam"
    assert "history of present illness" in aci[0].note and "assessment and plan" not in aci[0].note
    assert aci[0].reference.conclusion.startswith("ASSESSMENT AND PLAN")
