"""The live board with scripted agents: turn order, the moderator's closing, the turn bound, a human seat."""

from __future__ import annotations

import io
import json
import subprocess

from medpanel.cases import load_case
from medpanel.context import RunContext
from medpanel.models import Runtime, build_model
from medpanel.models.human import HumanModel, TerminalIO
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Panel, get_protocol
from medpanel.protocols.board_live import CLOSE, LiveBoardSettings
from medpanel.scoring.board_format import parse_board_response

from conftest import MEDPANEL, ROOT

CASE = load_case(ROOT / "examples" / "prostate")


def chair(floor_order: list[str], specialists=("Radiologist", "Urologist", "Radiation Oncologist")):
    """A scripted moderator and specialists in one model: answers by the schema asked for, or by role."""
    floor = list(floor_order)

    def respond(request):
        if request.schema_name == "Opening":
            return {"presentation": "69-year-old man, Grade Group 2 at the right base.", "specialists": list(specialists)}
        if request.schema_name == "Floor":
            speaker = floor.pop(0) if floor else CLOSE
            if speaker == "FIRST OFFERED":
                speaker = request.schema["properties"]["next_speaker"]["enum"][0]
            return {"next_speaker": speaker, "question": f"{speaker}, your view?"}
        if request.schema_name == "Closing":
            return {"conclusion": "Offer radiotherapy or surgery. Discuss with the patient."}
        role = request.messages[0].content.split("You are the ")[1].split(" at a")[0]
        return f"As the {role}, I have a view."
    return ScriptedModel(responder=respond, runtime=Runtime())


async def test_turn_order_follows_the_moderator_and_ends_with_the_conclusion():
    model = chair(["Radiologist", "Urologist", CLOSE])
    outcome = await get_protocol("board-live").run(CASE, Panel.of([model]), LiveBoardSettings(max_turns=6))
    turns = [(e.speaker, e.phase) for e in outcome.transcript if e.kind == "turn"]
    assert turns == [("Moderator", "opening"), ("Radiologist", "discussion"), ("Urologist", "discussion"), ("Moderator", "conclusion")]
    assert outcome.answer == "Offer radiotherapy or surgery. Discuss with the patient."
    assert outcome.transcript.events[-1].kind == "decision"
    # Calls: opening, 3 floor decisions (the third closes), 2 specialist turns, closing = 7.
    assert len(model.history) == 7
    # The same tagged format as Board Simulation, so its scorers apply unchanged.
    parsed = parse_board_response(outcome.data["raw"])
    assert parsed.status == "parsed" and [t.role for t in parsed.turns] == ["Moderator", "Radiologist", "Urologist"]
    # The floor schema only offers seated roles or closing.
    floor_request = next(r for r in model.history if r.schema_name == "Floor")
    assert set(floor_request.schema["properties"]["next_speaker"]["enum"]) == {"Radiologist", "Urologist", "Radiation Oncologist", CLOSE}
    # A specialist sees the discussion so far.
    urologist = next(r for r in model.history if r.messages[0].content.startswith("You are the Urologist"))
    assert "Radiologist: As the Radiologist, I have a view." in urologist.messages[-1].content


async def test_turn_bound_is_enforced_and_recorded():
    model = chair(["FIRST OFFERED"] * 50)  # a moderator that never closes
    outcome = await get_protocol("board-live").run(CASE, Panel.of([model]), LiveBoardSettings(max_turns=3))
    spoken = [e for e in outcome.transcript if e.kind == "turn" and e.phase == "discussion"]
    assert len(spoken) == 3
    assert any(e.phase == "bound" for e in outcome.transcript)
    assert outcome.answer  # the moderator still closes with a conclusion


async def test_each_seat_can_have_its_own_model_and_events_stream():
    seen = []
    model = chair(["Radiation Oncologist", CLOSE])
    panel = Panel.of([model], roles={"Radiation Oncologist": build_model("scripted:Radiotherapy alone.", Runtime())})
    outcome = await get_protocol("board-live").run(CASE, panel, LiveBoardSettings(), RunContext(on_event=seen.append))
    ro_turn = next(e for e in outcome.transcript if e.speaker == "Radiation Oncologist")
    assert ro_turn.text == "Radiotherapy alone." and ro_turn.model == "scripted:constant"
    # The context hears every event as it is recorded (floor notes and the decision too); the spoken turns:
    assert [e.speaker for e in seen if e.kind == "turn"] == ["Moderator", "Radiation Oncologist", "Moderator"]
    assert outcome.data["seats"]["Radiation Oncologist"] == "scripted:constant"


async def test_a_person_takes_a_seat_through_the_same_interface():
    typed = io.StringIO("From the medical oncology side, no systemic therapy is needed.\n\n")
    shown = io.StringIO()
    model = chair(["Medical Oncologist", CLOSE], specialists=("Radiologist",))
    person = HumanModel("Medical Oncologist", io=TerminalIO(typed, shown), runtime=Runtime())  # built by the runner in a run
    outcome = await get_protocol("board-live").run(CASE, Panel.of([model], roles={"Medical Oncologist": person}), LiveBoardSettings())
    person = next(e for e in outcome.transcript if e.speaker == "Medical Oncologist")
    assert person.text == "From the medical oncology side, no systemic therapy is needed." and person.model == "human"
    assert "Your turn as Medical Oncologist" in shown.getvalue()
    assert "Medical Oncologist" in outcome.data["roles"]  # a human seat is always seated


def test_a_seat_with_both_a_model_and_a_person_is_refused(cli_env):
    # A seat is one panel role with one model, so the conflict can only be written where roles are named: the CLI.
    proc = subprocess.run([MEDPANEL, "board", "examples/prostate", "--model", "scripted:x", "--seat", "Urologist=scripted:y",
                           "--human", "Urologist"], env=cli_env, cwd=ROOT, input="", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "both a model" in proc.stderr


def test_settings_round_trip_without_the_callback():
    settings = LiveBoardSettings(roles=["Radiologist"])
    assert "on_event" not in settings.model_dump()
    assert json.loads(settings.model_dump_json())["roles"] == ["Radiologist"]


async def test_everyone_is_heard_before_anyone_speaks_twice_and_run_on_turns_are_trimmed():
    model = chair(["Radiologist", "Urologist", "Radiation Oncologist", "Urologist", CLOSE])
    await get_protocol("board-live").run(CASE, Panel.of([model]), LiveBoardSettings(max_turns=6))
    offered = [r.schema["properties"]["next_speaker"]["enum"] for r in model.history if r.schema_name == "Floor"]
    assert offered[0] == ["Radiologist", "Urologist", "Radiation Oncologist", CLOSE]
    assert offered[1] == ["Urologist", "Radiation Oncologist", CLOSE]  # the Radiologist has been heard
    assert offered[3] == ["Radiologist", "Urologist", CLOSE]  # all heard; not the last speaker again
    from medpanel.protocols.board_live import first_sentences

    assert first_sentences("One. Two! Three? Four. Five.", 3) == ("One. Two! Three?", True)
    assert first_sentences("Dose 36.25 Gy in 5 fractions. Fine.", 3) == ("Dose 36.25 Gy in 5 fractions. Fine.", False)
