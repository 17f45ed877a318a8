"""The start form read into the runner's terms: the seat a person takes becomes the same role or seat spec the
CLI gives (`human:<Title>`), and a person's seat, role or chair, is built by the context's `human_seat`."""

from __future__ import annotations

from pathlib import Path

import pytest

from medpanel.cases import load_case
from medpanel.context import RunContext
from medpanel.errors import UsageError
from medpanel.models import Runtime
from medpanel.models.scripted import ScriptedModel
from medpanel.runs.panel import build_panel
from medpanel.web.plans import make_plan, model_list, seat_choices, seat_models

ROOT = Path(__file__).resolve().parents[1]
CASE = load_case(ROOT / "examples" / "prostate")


def plan(protocol: str, models: list[str], seat: str = "", seats: str = "", turns: int = 6):
    return make_plan(CASE, "examples/prostate", protocol, models, seat, seats, turns)


def test_each_protocol_seats_the_person_where_the_cli_would():
    board = plan("board-live", ["local"], "Radiologist", "Urologist=scripted:echo\nmoderator = local")
    assert board.roles == {"Urologist": "scripted:echo", "moderator": "local", "Radiologist": "human:Radiologist"}
    assert board.settings == {"max_turns": 6} and board.models == ["local"]
    assert plan("board-live", ["local"], "Moderator").roles == {"moderator": "human:Moderator"}
    assert plan("consult", ["m1"], "Physician").models == ["human:Physician", "m1"]  # the assistant keeps the model
    assert plan("consult", ["m1", "m2"], "Physician").models == ["human:Physician", "m2"]
    assert plan("consult", ["m1"], "Assistant").models == ["m1", "human:Assistant"]
    assert plan("osce", ["m1", "m2"], "Patient").roles == {"patient": "human:Patient"}
    doctor = plan("osce", ["m1", "m2"], "Doctor")  # the person doctors; triage and grading stay with a model (never the gold to them)
    assert doctor.models == ["human:Doctor"] and doctor.roles == {"moderator": "m1", "judge": "m1"}
    assert plan("debate", ["a", "b", "c"]).models == ["a", "b", "c"] and plan("debate", ["a"]).roles == {}
    assert plan("board", ["local"]).settings == {}  # the written board has no turns to bound


def test_bad_plans_say_what_to_fix():
    with pytest.raises(UsageError, match="no seat 'Patient' in board-live"):
        plan("board-live", ["local"], "Patient")
    with pytest.raises(UsageError, match="none \\(only models deliberate\\)"):
        plan("debate", ["a"], "Moderator")
    with pytest.raises(UsageError, match="not ROLE=MODEL"):
        seat_models("Radiologist local")
    with pytest.raises(UsageError, match="outside 1 to 12"):
        plan("board-live", ["local"], turns=0)
    assert model_list(" a, b\nc ,", "local") == ["a", "b", "c"] and model_list("  ", "local") == ["local"]
    assert "Moderator" in seat_choices("board-live") and seat_choices("single") == []


def test_a_persons_chair_among_the_seats_is_built_by_the_context():
    """Before, only roles went through `human_seat`: a person in a consult chair (a seat) got the terminal."""
    built: list[str] = []

    def seat(title: str, runtime) -> ScriptedModel:
        built.append(title)
        return ScriptedModel(["from the page"], name=f"person:{title}")

    panel = build_panel(["human:Physician", "scripted:echo"], Runtime(), {"patient": "human:Patient"}, RunContext(human_seat=seat))
    assert built == ["Physician", "Patient"]
    assert [m.name for m in panel.seats.values()] == ["person:Physician", "echo"]
    assert panel.roles["patient"].name == "person:Patient"


async def test_a_persons_seat_is_shown_its_brief_and_each_question_apart():
    """The person sees the seat's instructions (an OSCE patient's case, a consult assistant's note: the system
    messages) and the conversation so far; two open questions to seats of one name are answered apart."""
    import asyncio

    from medpanel.models.base import Request
    from medpanel.models.messages import Message
    from medpanel.web.config import WebConfig
    from medpanel.web.live import Deliberation
    from medpanel.web.seat import WebSeat

    d = Deliberation("d1", plan("board-live", ["local"]), "Dr Lee", WebConfig(seat_timeout_s=30))
    first, second = WebSeat("Patient", d, "Dr Lee"), WebSeat("Patient", d, "Dr Lee")
    talk = [Message(role="system", content="You are the patient: 34, fever and flank pain."),
            Message(role="assistant", content="Hello, what brings you in?"), Message(role="user", content="How long have you had it?")]
    one = asyncio.create_task(first.generate(Request(messages=talk)))
    two = asyncio.create_task(second.generate(Request(messages=[Message(role="user", content="Any allergies?")])))
    for _ in range(100):
        if len(d.questions) == 2:
            break
        await asyncio.sleep(0.01)
    asked = sorted(d.questions.values(), key=lambda q: q.id)
    assert asked[0].ask == "How long have you had it?" and "34, fever and flank pain" in asked[0].brief
    assert "assistant: Hello, what brings you in?" in asked[0].brief and asked[1].brief == ""
    assert d.answer(asked[1].id, "Dr Lee", "None known.") == "Patient"
    assert (await two).text == "None known." and not one.done()
    with pytest.raises(UsageError, match="not open any more"):
        d.answer(asked[1].id, "Dr Lee", "again")
    d.answer(asked[0].id, "Dr Lee", "Three days.")
    assert (await one).text == "Three days."


def test_colleagues_are_seated_as_the_starter_is():
    both = make_plan(CASE, "x", "consult", ["m1"], "Physician", "", 6, "Assistant=Dr Kim", me="Dr Lee")
    assert both.models == ["human:Physician", "human:Assistant"] and both.people == {"Physician": "Dr Lee", "Assistant": "Dr Kim"}
    board = make_plan(CASE, "x", "board-live", ["local"], "", "", 6, "Moderator=Dr Kim\nUrologist=Dr Lee")
    assert board.roles == {"moderator": "human:Moderator", "Urologist": "human:Urologist"}
    osce = make_plan(CASE, "x", "osce", ["m1"], "Doctor", "", 6, "Patient=Dr Kim", me="Dr Lee")
    assert osce.models == ["human:Doctor"] and osce.roles == {"moderator": "m1", "judge": "m1", "patient": "human:Patient"}
    with pytest.raises(UsageError, match="both your seat and Dr Kim's"):
        make_plan(CASE, "x", "consult", ["m1"], "Physician", "", 6, "Physician=Dr Kim")
    with pytest.raises(UsageError, match="not SEAT=PERSON"):
        make_plan(CASE, "x", "consult", ["m1"], "", "", 6, "Physician Dr Kim")
