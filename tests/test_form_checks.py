"""The form checks of a deliberation (medpanel.scoring.form_checks), on hand-made texts."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from medpanel.scoring.form_checks import (board_checks, conclusion_ok, consult_checks, contains_schema_text, loops, recites_case,
                                          repeated_phrase, repeats_earlier, schema_parts, sentence_count, spoken_text, stops_mid_phrase, words)

EARLIER = "The CT shows a spiculated mass in the right upper lobe with no nodal disease."


# ---------------------------------------------------------------- words and repeats


def test_words_are_lowercased_without_punctuation():
    assert words("Non-small-cell, T2N0!") == ["non", "small", "cell", "t2n0"]
    assert words("  ") == [] and words("") == []


def test_an_eight_word_sequence_of_an_earlier_turn_is_a_repeat():
    text = "I agree: a spiculated mass in the right upper lobe needs a biopsy."
    assert repeats_earlier(text, [EARLIER])
    assert repeated_phrase(text, [EARLIER]) == "a spiculated mass in the right upper lobe"


def test_seven_shared_words_are_not_a_repeat():
    text = "Yes, spiculated mass in the right upper lobe, so we biopsy."  # 7 words in a row: spiculated .. lobe
    assert not repeats_earlier(text, [EARLIER])
    assert repeats_earlier(text, [EARLIER], n=7)


def test_repeats_ignore_case_and_punctuation():
    text = "A SPICULATED mass -- in the right, upper lobe: with NO nodal disease"
    assert repeats_earlier(text, [EARLIER])


def test_repeats_need_an_earlier_text_and_a_long_enough_text():
    assert not repeats_earlier(EARLIER, [])
    assert not repeats_earlier("right upper lobe", [EARLIER])  # shorter than n words
    assert not repeats_earlier("", [EARLIER])
    assert repeats_earlier(EARLIER, ["something else", EARLIER])  # any earlier text counts


def test_a_text_that_repeats_itself_loops():
    assert loops("We should biopsy the mass now. We should biopsy the mass now. Then stage.", n=6)
    assert not loops(EARLIER)
    assert not loops("")


# ---------------------------------------------------------------- reciting the case

CASE = ("A 64-year-old former smoker presented with a persistent cough and weight loss of 5 kg over three "
        "months. CT of the chest showed a 3.1 cm spiculated mass in the right upper lobe and an enlarged "
        "subcarinal lymph node. PET-CT showed uptake in both.")


def test_a_text_copied_from_the_case_recites_it_wholly():
    copied = "CT of the chest showed a 3.1 cm spiculated mass in the right upper lobe and an enlarged subcarinal lymph node."
    assert recites_case(copied, CASE) == 1.0
    assert recites_case(copied.upper().replace(",", ""), CASE) == 1.0  # case and punctuation do not matter


def test_a_text_in_its_own_words_recites_nothing():
    own = "The mass is suspicious; with the node involved we should stage the mediastinum before any surgery."
    assert recites_case(own, CASE) == 0.0
    assert recites_case("", CASE) == 0.0


def test_recitation_is_the_share_of_words_in_long_copied_runs():
    copied = "CT of the chest showed a 3.1 cm spiculated mass in the right upper lobe"  # 16 words from the case ("3.1" is two)
    own = "so I recommend an EBUS staging procedure next week before deciding anything else at all today"  # 16 own words
    share = recites_case(copied + " " + own, CASE)
    assert share == pytest.approx(16 / 32)
    assert not share > 0.5  # half is not "mostly"
    # 11 copied words are below the 12-word run: not recitation at all
    assert recites_case("a 3.1 cm spiculated mass in the right upper lobe", CASE) == 0.0
    assert recites_case("a 3.1 cm spiculated mass in the right upper lobe", CASE, run=11) == 1.0
    # copied runs from two places of the case, each long enough, both count
    both = "a persistent cough and weight loss of 5 kg over three months; and an enlarged subcarinal lymph node PET-CT showed uptake in both"
    assert recites_case(both, CASE) == 1.0
    assert recites_case("Seen today: " + both, CASE) == pytest.approx(24 / 26)


# ---------------------------------------------------------------- sentences and the conclusion


@pytest.mark.parametrize("text, n", [
    ("Surgery is recommended.", 1),
    ("Surgery is recommended. Adjuvant chemotherapy follows.", 2),
    ("Stage with EBUS first! Then decide. Dr. Lee will call the patient. Follow up in 2 weeks.", 4),
    ("Proceed to lobectomy, e.g. by VATS, then review", 1),  # an abbreviation and no final stop
    ("", 0),
])
def test_sentence_count(text, n):
    assert sentence_count(text) == n


def test_a_conclusion_has_two_to_four_sentences():
    assert not conclusion_ok("Lobectomy.")
    assert conclusion_ok("Lobectomy. Then adjuvant chemotherapy.")
    assert conclusion_ok("One. Two. Three. Four.")
    assert not conclusion_ok("One. Two. Three. Four. Five.")
    assert not conclusion_ok("")


# ---------------------------------------------------------------- schema text


class PhysicianTurn(BaseModel):
    action: str = Field(description="ask: put a question to the assistant; submit: end the consult and write the discharge")
    message: str = Field(description="your question (ask), or one line on why you are ready (submit)")


class Floor(BaseModel):
    next_speaker: str
    question: str = Field(default="", description="what they say")


def test_schema_parts_reads_descriptions_and_names_from_a_model_or_a_dict():
    descriptions, names = schema_parts(PhysicianTurn)
    assert names == ["action", "message"]
    assert "your question (ask), or one line on why you are ready (submit)" in descriptions
    assert schema_parts(PhysicianTurn.model_json_schema()) == (descriptions, names)
    nested = {"type": "object", "properties": {"turns": {"type": "array", "items": {"$ref": "#/$defs/T"}}},
              "$defs": {"T": {"type": "object", "properties": {"role": {"type": "string", "description": "the speaker's specialty"}}}}}
    assert schema_parts(nested) == (["the speaker's specialty"], ["turns", "role"])


def test_a_copied_field_description_is_schema_text():
    assert contains_schema_text("Your question (ask), or one line on why you are ready (submit)", PhysicianTurn)
    assert contains_schema_text("My QUESTION: ask, or one line on why you are ready", PhysicianTurn)  # six words of it
    assert contains_schema_text("OK - end the consult and write the discharge.", PhysicianTurn.model_json_schema())


def test_ordinary_prose_is_not_schema_text():
    assert not contains_schema_text("What did the chest CT show? I am ready to submit soon.", PhysicianTurn)
    assert not contains_schema_text("I agree with what they say about the margins.", Floor)  # a three-word description is prose
    assert not contains_schema_text("", PhysicianTurn)


def test_field_names_count_when_written_as_keys_or_with_underscores():
    assert contains_schema_text('{"message": "What are the labs?"}', PhysicianTurn)
    assert contains_schema_text("next_speaker: Radiologist", Floor)
    assert not contains_schema_text("My message is short: what are the labs?", PhysicianTurn)
    assert not contains_schema_text("Who is the next speaker?", Floor)


# ---------------------------------------------------------------- a board


GOOD_BOARD = [
    ("Moderator", "We discuss a 64-year-old with a right upper lobe mass and a subcarinal node."),
    ("Radiologist", "The PET uptake in the node makes N2 disease likely; mediastinal staging comes first."),
    ("Pathologist", "We need tissue from the node as well as the mass to confirm the histology."),
    ("Thoracic Surgeon", "If the node is positive, I would not operate upfront."),
]
GOOD_CONCLUSION = "The board recommends EBUS staging of the subcarinal node. Treatment is decided once the result is back."


def test_a_good_board_passes_every_point():
    checks = board_checks(GOOD_BOARD, GOOD_CONCLUSION, CASE)
    assert checks.ok, checks.details
    assert set(checks.passed) == {"turns", "specialists", "no_repeats", "no_recitation", "conclusion"}
    assert checks.as_dict()["ok"] is True


def test_a_short_board_fails_on_turns_and_specialists():
    checks = board_checks(GOOD_BOARD[:3], GOOD_CONCLUSION, CASE)
    assert not checks.passed["turns"] and not checks.passed["specialists"]
    assert "3 turns" in checks.details["turns"]
    assert checks.passed["no_repeats"] and checks.passed["conclusion"]


def test_the_moderator_and_role_spelling_do_not_make_specialists():
    turns = [("Moderator", "Opening the meeting today."), ("moderator", "Next, imaging please."),
             ("Radiologist", "The mass is suspicious."), ("radiologist ", "The node is suspicious too."),
             ("Pathologist", "Tissue is needed.")]
    checks = board_checks(turns, GOOD_CONCLUSION, CASE)
    assert checks.passed["turns"]
    assert not checks.passed["specialists"]  # radiologist and pathologist: two
    assert checks.details["specialists"].startswith("2 specialist")
    assert board_checks(turns, GOOD_CONCLUSION, CASE, specialists=2).passed["specialists"]


def test_a_board_repeating_or_reciting_fails_those_points():
    repeating = GOOD_BOARD + [("Medical Oncologist", "I agree, the PET uptake in the node makes N2 disease likely here.")]
    checks = board_checks(repeating, GOOD_CONCLUSION, CASE)
    assert not checks.passed["no_repeats"] and "turn 5 (Medical Oncologist)" in checks.details["no_repeats"]
    reciting = GOOD_BOARD + [("Medical Oncologist", "CT of the chest showed a 3.1 cm spiculated mass in the right upper lobe and an enlarged node.")]
    checks = board_checks(reciting, GOOD_CONCLUSION, CASE)
    assert checks.passed["no_repeats"] and not checks.passed["no_recitation"]
    assert "turn 5" in checks.details["no_recitation"]


def test_a_board_conclusion_must_have_two_to_four_sentences():
    assert not board_checks(GOOD_BOARD, "EBUS.", CASE).passed["conclusion"]
    assert not board_checks(GOOD_BOARD, "", CASE).passed["conclusion"]
    assert not board_checks(GOOD_BOARD, "A. B. C. D. E.", CASE).passed["conclusion"]


# ---------------------------------------------------------------- a consult


def test_a_consult_without_repeats_or_schema_text_passes():
    messages = [("Physician", "Please give me your initial evaluation."), ("Assistant", "Fever and cough for a week; likely pneumonia."),
                ("Physician", "What did the chest X-ray show?"), ("Assistant", "A right lower lobe consolidation.")]
    checks = consult_checks(messages, [PhysicianTurn])
    assert checks.ok, checks.details


def test_a_consult_repeating_a_question_fails():
    messages = [("Physician", "What did the chest X-ray show?"), ("Assistant", "Consolidation."),
                ("Physician", "what did the chest x-ray show")]  # the same words, other case and punctuation
    checks = consult_checks(messages)
    assert not checks.passed["no_repeats"] and "message 3 (Physician)" in checks.details["no_repeats"]
    long = "Could you tell me the results of the blood tests taken on admission please"
    assert not consult_checks([("Physician", long), ("Assistant", "Normal."), ("Physician", "Again: " + long)]).passed["no_repeats"]


def test_a_consult_compares_each_seat_with_itself():
    # The assistant's answer may echo the question's words; that is not a repeat.
    messages = [("Physician", "What was the blood pressure on admission today?"),
                ("Assistant", "What was the blood pressure on admission today? It was 150/90.")]
    assert consult_checks(messages).passed["no_repeats"]
    assert not consult_checks([text for _, text in messages]).passed["no_repeats"]  # bare texts: one speaker


def test_a_consult_leaking_schema_text_fails():
    messages = [("Physician", "Please evaluate the patient."), ("Assistant", "Stable."),
                ("Physician", "Your question (ask), or one line on why you are ready (submit)")]
    checks = consult_checks(messages, [PhysicianTurn])
    assert checks.passed["no_repeats"] and not checks.passed["no_schema_text"]
    assert "message 3" in checks.details["no_schema_text"]
    assert consult_checks(messages).passed["no_schema_text"]  # without schemas nothing can leak


@pytest.mark.parametrize(("text", "said"), [
    ('{"question": "What did the scan show?"}', "What did the scan show?"),
    ('{"answer": ["One.", "Two."], "n": 2}', "One. Two."),  # a key is never what a reply said
    ('{"plan": {"first": "Operate.", "then": ["Review."]}}', "Operate. Review."),
    ("Plain words, not JSON.", "Plain words, not JSON."),
    ('["a list", "is text"]', '["a list", "is text"]'),
    ("", ""),
])
def test_what_a_reply_says_is_its_json_values_or_its_text(text, said):
    assert spoken_text(text) == said


@pytest.mark.parametrize(("text", "stop"), [
    ("The patient is now on radiotherapy, and the next step is.", "is"), ("Benign testicular mass, diagnosis of", "of"),
    ("The board recommends surgery.", None), ("", None),
])
def test_a_sentence_that_stops_on_a_word_that_leads_on_stops_mid_phrase(text, stop):
    assert stops_mid_phrase(text) == stop
