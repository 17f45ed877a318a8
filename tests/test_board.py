"""Board Simulation (basic form): the meeting parser on hand-written responses, and the protocol end to end."""

from __future__ import annotations

from medpanel.cases import load_case
from medpanel.models import Runtime
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Panel, get_protocol
from medpanel.protocols.board import BoardSettings, parse_meeting

WELL_FORMED = """<discussion>
<turn 1> Moderator: A 69-year-old man with Grade Group 2 disease at the right base.
<turn 2> Urologist: He is a candidate for surgery.
<turn 3> Radiation Oncologist: Radiotherapy with short ADT is equivalent.
</discussion>
<conclusion>Offer prostatectomy or radiotherapy. Discuss with the patient.</conclusion>"""


def test_parses_well_formed_meeting():
    turns, conclusion, status = parse_meeting(WELL_FORMED)
    assert [(n, r) for n, r, _ in turns] == [(1, "Moderator"), (2, "Urologist"), (3, "Radiation Oncologist")]
    assert turns[2][2] == "Radiotherapy with short ADT is equivalent."
    assert conclusion == "Offer prostatectomy or radiotherapy. Discuss with the patient."
    assert status == "parsed"


def test_lenient_parse_warns_on_bad_numbering_and_missing_closers():
    text = "<think>plan</think><discussion><turn 1> Moderator: Hi\n<turn 3> Urologist: Surgery\n<conclusion>Operate. Soon."
    turns, conclusion, status = parse_meeting(text)
    assert [n for n, _, _ in turns] == [1, 3]
    assert conclusion == "Operate. Soon."
    assert status == "parsed_with_warnings"
    assert parse_meeting("Just some prose.") == ([], None, "raw_fallback")


async def test_board_protocol_records_turns_and_conclusion(tmp_path):
    case_file = tmp_path / "case.yaml"
    case_file.write_text("summary: A 69-year-old man with prostate cancer.\nslides: []\n")
    model = ScriptedModel([WELL_FORMED], runtime=Runtime())
    spec = get_protocol("board")
    outcome = await spec.run(load_case(case_file), Panel.of([model]), BoardSettings())
    assert outcome.answer.startswith("Offer prostatectomy")
    speakers = [e.speaker for e in outcome.transcript if e.kind == "turn" and e.phase == "discussion"]
    assert speakers == ["Moderator", "Urologist", "Radiation Oncologist"]
    # A text-only model is shown the slides as captions in the prompt.
    assert "No slide descriptions are available." in model.history[0].messages[-1].content
    assert spec.score(load_case(case_file), outcome) == {"has_conclusion": 1.0, "turns": 3.0}


async def test_structured_mode_renders_json_into_the_tag_format(tmp_path):
    case_file = tmp_path / "case.yaml"
    case_file.write_text("summary: A 61-year-old with stage IIIA lung adenocarcinoma.\n")
    meeting = {"turns": [{"role": "Moderator", "text": "Stage IIIA, N2."}, {"role": "Thoracic Surgeon", "text": "Resectable after induction."},
                         {"role": "Medical Oncologist", "text": "Chemo-immunotherapy first."}],
               "conclusion": "Give neoadjuvant chemo-immunotherapy. Restage, then lobectomy."}
    model = ScriptedModel([meeting], runtime=Runtime())
    outcome = await get_protocol("board").run(load_case(case_file), Panel.of([model]), BoardSettings(structured="always", frequency_penalty=0.2))
    assert outcome.data["parse_status"] == "parsed"
    assert outcome.answer == "Give neoadjuvant chemo-immunotherapy. Restage, then lobectomy."
    assert [e.speaker for e in outcome.transcript if e.phase == "discussion"] == ["Moderator", "Thoracic Surgeon", "Medical Oncologist"]
    request = model.history[0]
    assert request.schema["properties"]["turns"]["maxItems"] == 7 and request.frequency_penalty == 0.2
    # "auto" leaves a non-local model on the paper's tag format.
    plain = ScriptedModel([WELL_FORMED], runtime=Runtime())
    await get_protocol("board").run(load_case(case_file), Panel.of([plain]), BoardSettings())
    assert plain.history[0].schema is None
