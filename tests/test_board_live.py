"""The live board with scripted agents: turn order, the moderator's closing, the turn bound, a human seat;
a small moderator, whose floor is given by code; each seat's token budget on either path."""

from __future__ import annotations

import io
import json
import subprocess

import pytest

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


def chair(floor_order: list[str], specialists=("Radiologist", "Urologist", "Radiation Oncologist"), **flags):
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
    return ScriptedModel(responder=respond, runtime=Runtime(), **flags)


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


# ---------------------------------------------------------------- a small moderator: the floor by code

from medpanel.models.base import REASONING_ALLOWANCE  # noqa: E402
from medpanel.protocols import board_small  # noqa: E402
from medpanel.scoring.form_checks import board_checks, conclusion_ok  # noqa: E402
from test_board import PLAN, asked_role, case_text, own_sentence, small_board  # noqa: E402


def spoken(outcome) -> list[tuple[str, str]]:
    """The turns the content checks read: the opening and the specialists, not the closing."""
    return [(e.role, e.text) for e in outcome.transcript if e.kind == "turn" and e.phase != "conclusion"]


async def test_a_small_moderator_gives_the_floor_by_code_to_the_case_s_specialists():
    model = small_board()
    outcome = await get_protocol("board-live").run(CASE, Panel.of([model]), LiveBoardSettings(max_turns=6))
    roles = board_small.board_roles(CASE)
    turns = spoken(outcome)
    assert [r for r, _ in turns] == ["Moderator", *roles] and outcome.data["roles"] == roles
    assert all(a != b for a, b in zip(turns, turns[1:]))  # no one twice in a row
    floor = [e for e in outcome.transcript if e.phase == "floor"]
    assert [e.data["next_speaker"] for e in floor] == [*roles, CLOSE] and all(e.data["by"] == "code" for e in floor)
    assert not any(e.phase == "bound" for e in outcome.transcript)  # everyone heard: closed before the bound
    exact = await get_protocol("board-live").run(CASE, Panel.of([small_board()]), LiveBoardSettings(max_turns=len(roles)))
    assert not any(e.phase == "bound" for e in exact.transcript)  # the last turn allowed heard the last specialist
    # No Opening or Floor call: the model answered the turns and stated the plan, all under one schema and one prefix.
    assert {r.schema_name for r in model.history} == {"BoardSay"} and len(model.history) == len(roles) + 1
    assert len({r.messages[0].content for r in model.history}) == 1
    assert outcome.answer == PLAN and conclusion_ok(outcome.answer) and outcome.data["parse_status"] == "parsed"
    assert board_checks(turns, outcome.answer, case_text(CASE)).ok


async def test_a_small_moderator_keeps_the_turn_bound_and_leaves_out_a_repeating_specialist():
    def answer(role, request):
        return ["The lesion sits at the right base with no sign of spread beyond the gland."] if role != "Urologist" else [own_sentence(role)]

    outcome = await get_protocol("board-live").run(CASE, Panel.of([small_board(answer)]), LiveBoardSettings(max_turns=3))
    turns = spoken(outcome)
    # The Pathologist repeats the Radiologist twice over and is left out; the floor moves on, never back.
    assert [r for r, _ in turns] == ["Moderator", "Radiologist", "Urologist"]
    assert [e.data["next_speaker"] for e in outcome.transcript if e.phase == "floor"] == ["Radiologist", "Pathologist", "Urologist"]
    assert any(e.phase == "bound" for e in outcome.transcript) and outcome.answer == PLAN


async def test_a_person_answers_the_small_moderator_s_question_in_free_text():
    typed, shown = io.StringIO("Surgery is reasonable if he prefers it.\n\n"), io.StringIO()
    person = HumanModel("Urologist", io=TerminalIO(typed, shown), runtime=Runtime())
    model = small_board()
    outcome = await get_protocol("board-live").run(CASE, Panel.of([model], roles={"Urologist": person}), LiveBoardSettings())
    said = dict(spoken(outcome))
    assert said["Urologist"] == "Surgery is reasonable if he prefers it." and outcome.data["humans"] == ["Urologist"]
    assert "Urologist, what are the surgical options?" in shown.getvalue()
    assert outcome.data["roles"][0] == "Urologist" and not any(asked_role(r) == "Urologist" for r in model.history)


@pytest.mark.parametrize(("flags", "settings", "expected"), [
    ({"small": True}, {}, {"BoardSay": {160, 200}}),
    ({"small": True}, {"turn_tokens": 40, "conclusion_tokens": 47}, {"BoardSay": {40, 47}}),
    ({}, {}, {"Opening": {2048}, "Floor": {1024}, "text": {1024}, "Closing": {1024}}),
    ({"reasoning": True}, {}, {"Opening": {2048 + REASONING_ALLOWANCE}, "Floor": {1024 + REASONING_ALLOWANCE},
                               "text": {1024 + REASONING_ALLOWANCE}, "Closing": {1024 + REASONING_ALLOWANCE}}),
    ({}, {"turn_tokens": 40, "conclusion_tokens": 47}, {"Opening": {80}, "Floor": {40}, "text": {40}, "Closing": {47}}),
])
async def test_the_live_board_budget_fits_each_seat(flags, settings, expected):
    """Unset, each call's budget fits its seat (small, other, reasoning); a setting always wins."""
    model = small_board() if flags.get("small") else chair(["Radiologist", CLOSE], **flags)
    await get_protocol("board-live").run(CASE, Panel.of([model]), LiveBoardSettings(**settings))
    sent: dict[str, set[int]] = {}
    for request in model.history:
        sent.setdefault(request.schema_name if request.schema else "text", set()).add(request.max_tokens)
    assert sent == expected
