"""The board and specialist judges as scorers: what they declare, what they record, and that they read
the same text during a run and afterwards; the live board seats only the panel's models; the written
board's path (turn by turn, or the tags) follows the model's declared `small` capability."""

from __future__ import annotations

import inspect
import io

import pytest

from medpanel.cases import Case, Reference, load_case
from medpanel.models import Runtime
from medpanel.models.human import HumanModel, TerminalIO
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Outcome, Panel, get_protocol
from medpanel.protocols.board import BoardSettings
from medpanel.protocols.board_live import CLOSE, LiveBoardSettings
from medpanel.protocols.specialist import SpecialistSettings
from medpanel.runs.scoring import score_outcome
from medpanel.scoring import judges
from medpanel.scoring.judges import BOARD_JUDGE, BOARD_REWARD, SPECIALIST_JUDGE, response_text
from medpanel.scoring.scorer import ScoreContext

from conftest import ROOT
from test_board_live import chair  # one scripted moderator for every live-board test

CASE = Case(id="pca", summary="A 69-year-old man with Grade Group 2 prostate cancer at the right base.",
            question="Does he need ADT with radiotherapy?", target_role="Radiation Oncologist",
            reference=Reference(answer="No ADT; offer hypofractionated radiotherapy.",
                                conclusion="Offer radiotherapy without ADT. Surgery is not recommended."))
MEETING = ("<discussion>\n<turn 1> Moderator: Radiotherapy?\n<turn 2> Radiation Oncologist: Yes, SBRT without ADT.\n</discussion>\n"
           "<conclusion>The board recommends SBRT without ADT. Surgery is not advised.</conclusion>")
SCOPE = {"therapy": "positive", "surgery": "negative", "next_action": "absent", "clinical_trial": "absent", "rationale": "r"}
VERDICTS = {
    "AlignmentVerdict": {"conclusion_alignment": {"score": 4, "rationale": "Close."}},
    "DecisionScope": SCOPE,
    "FourDecisions": {"therapy": 5, "surgery": 4, "next_action": -1, "clinical_trial": -1, "rationale": "r"},
    "ConsistencyVerdict": {"consistency": 5, "rationale": "Follows."},
    "EquivalenceVerdict": {"clinical_equivalence_score": 4, "critical_error": False, "unsupported_claim": False, "rationale": "Same."},
    "opentumorboard_conclusion_alignment": {"conclusion_alignment": {"score": 3, "rationale": "r"}},
    "opentumorboard_four_decisions": {"therapy": 5, "surgery": -1, "next_action": -1, "clinical_trial": -1, "rationale": "r"},
    "opentumorboard_clinical_equivalence": {"clinical_equivalence_score": 2, "critical_error": True, "unsupported_claim": False,
                                            "rationale": "r"},
}


def judge(verdicts: dict | None = None) -> ScriptedModel:
    """A scripted judge answering by the schema it is asked for; an unknown schema gets prose (a judge failure)."""
    replies = VERDICTS if verdicts is None else verdicts
    return ScriptedModel(responder=lambda r: replies.get(r.schema_name, "no json"), name="judge", runtime=Runtime(max_reasks=0))


async def written(text: str = MEETING, **settings) -> tuple[Outcome, BoardSettings]:
    board = BoardSettings(structured="never", **settings)
    return await get_protocol("board").run(CASE, Panel.of([ScriptedModel([text], runtime=Runtime())]), board), board


# ---------------------------------------------------------------- the judge scorers declare what they return

@pytest.mark.parametrize("mode", ["medpanel", "released"])
@pytest.mark.parametrize("verdicts", [None, {}], ids=["valid", "always-invalid"])
async def test_judge_scorers_declare_every_score_they_return(mode, verdicts):
    board_case = CASE.model_copy(update={"reference": CASE.reference.model_copy(update={"discussion": []})})
    board = await get_protocol("board").run(board_case, Panel.of([ScriptedModel([MEETING], runtime=Runtime())]), BoardSettings())
    for spec, case, outcome, settings in (
        (get_protocol("board"), board_case, board, BoardSettings(judge_mode=mode, reward="released_code")),
        (get_protocol("board"), board_case, board.model_copy(update={"answer": None, "data": {"raw": "no blocks"}}),
         BoardSettings(judge_mode=mode, reward="paper")),
        (get_protocol("specialist"), CASE, await get_protocol("specialist").run(
            CASE, Panel.of([ScriptedModel([{"answer": "SBRT alone."}], runtime=Runtime())]), SpecialistSettings()),
         SpecialistSettings(judge_mode=mode)),
    ):
        for scorer in spec.scorers:
            if scorer.role != "judge" or not scorer.wanted(settings):
                continue
            transcript_before = len(outcome.transcript)
            roles = {"judge": judge(verdicts)}
            scores = await scorer.score(case, outcome, ScoreContext(settings=settings, roles=roles, transcript=outcome.transcript.model_copy(deep=True)))
            assert scores and any(name.endswith("judge_failed") for name in scores)
            undeclared = [name for name in scores if scorer.declares(name) is None]
            assert undeclared == [], f"{scorer.name} returns undeclared {undeclared}"
            assert len(outcome.transcript) == transcript_before  # it recorded into the context's transcript, nothing else
    assert {BOARD_JUDGE.name, SPECIALIST_JUDGE.name, BOARD_REWARD.name} == {"board_judge", "specialist_judge", "board_reward"}


async def test_board_judge_records_each_result_as_judges_record_does_and_reads_the_scope_book_of_the_run():
    from medpanel.context import RunContext

    outcome, settings = await written()
    model = judge()
    run = RunContext()
    scores = await score_outcome(get_protocol("board"), CASE, outcome, {"judge": model}, settings, run)
    events = [e for e in outcome.transcript if e.kind == "score"]
    assert [e.role for e in events] == ["conclusion_alignment", "four_decisions", "consistency"]
    for event in events:
        result = judges.JudgeResult.model_validate(event.data)
        assert (event.speaker, event.phase, event.model, event.text) == ("Judge", "judge", result.judge, result.rationale)
        assert (event.input_tokens, event.cost_usd) == (result.input_tokens, result.cost_usd) and event.data["scorer"] == "board_judge"
    assert scores["conclusion_alignment"] == 4.0 and scores["judge_failed"] == 0.0
    # (5*1.00 + 4*1.25) / 2.25: next action and trial are out of the frozen scope
    assert scores["four_decisions"] == pytest.approx(10.0 / 2.25) and scores["decision_next_action"] is None
    # The run's scope book is shared: a second item on the same reference makes no new scope call.
    again, _ = await written()
    await score_outcome(get_protocol("board"), CASE, again, {"judge": model}, settings, run)
    assert [r.schema_name for r in model.history].count("DecisionScope") == 1 and len(run.caches["scope_book"]) == 1


async def test_judging_afterwards_reads_what_the_run_read():
    """A stored outcome (its data and events, as the store keeps them) is judged on the same text."""
    board, settings = await written()
    stored = Outcome.model_validate(board.model_dump(mode="json"))
    now, later = judge(), judge()
    first = await score_outcome(get_protocol("board"), CASE, board, {"judge": now}, settings)
    second = await score_outcome(get_protocol("board"), CASE, stored, {"judge": later}, settings)
    assert first == second and [r.messages for r in now.history] == [r.messages for r in later.history]
    # A run stored without its raw text: the meeting is rebuilt from its turns, in the tagged format.
    events = [e.model_dump() for e in board.transcript]
    rebuilt = response_text({"answer": board.answer, "data": {}}, events)
    assert rebuilt.startswith("<discussion>\n<turn 1> Moderator: Radiotherapy?\n<turn 2> Radiation Oncologist:")
    assert rebuilt.endswith(f"<conclusion>{board.answer}</conclusion>")
    assert response_text({"answer": None, "data": {}}, events).endswith("</discussion>\n")


async def test_the_specialist_released_candidate_comes_from_the_transcript_during_a_run_and_afterwards():
    spec = get_protocol("specialist")
    settings = SpecialistSettings(judge_mode="released")
    outcome = await spec.run(CASE, Panel.of([ScriptedModel(['{"answer": "SBRT alone, no ADT', ], runtime=Runtime(max_reasks=0))]), settings)
    stored = Outcome.model_validate({**outcome.model_dump(mode="json"), "data": {}})  # no side channel to read
    now, later = judge(), judge()
    during = await score_outcome(spec, CASE, outcome, {"judge": now}, settings, only=["judge"])
    assert during == await score_outcome(spec, CASE, stored, {"judge": later}, settings, only=["judge"])
    assert during["clinical_equivalence"] == 2.0  # the release's reading judged: the cut-off JSON's text, not a format failure
    assert "<CANDIDATE_ANSWER>\nSBRT alone, no ADT\n</CANDIDATE_ANSWER>" in now.history[0].messages[-1].content
    assert [r.messages for r in now.history] == [r.messages for r in later.history]


# ---------------------------------------------------------------- the live board seats only the panel's models

async def test_the_live_board_never_builds_a_model(monkeypatch):
    import medpanel.models as models_package
    import medpanel.models.registry as registry
    from medpanel.protocols import board_live

    assert "build_model" not in inspect.getsource(board_live)

    def refuse(*args, **kwargs):
        raise AssertionError("the live board built a model")

    monkeypatch.setattr(registry, "build_model", refuse)
    monkeypatch.setattr(models_package, "build_model", refuse)
    urologist = ScriptedModel(["Surgery is an option."], name="urologist", runtime=Runtime())
    typed, shown = io.StringIO("As the radiologist: the lesion is at the right base.\n\n"), io.StringIO()
    person = HumanModel("Radiologist", io=TerminalIO(typed, shown), runtime=Runtime())
    moderator = chair(["Radiologist", "Urologist", CLOSE], specialists=("Radiologist",))
    seat = ScriptedModel(["The first seat."], name="seat", runtime=Runtime())
    panel = Panel.of([seat], roles={"moderator": moderator, "Urologist": urologist, "Radiologist": person})
    outcome = await get_protocol("board-live").run(load_case(ROOT / "examples" / "prostate"), panel, LiveBoardSettings())
    spoke = {e.speaker: e for e in outcome.transcript if e.kind == "turn" and e.phase == "discussion"}
    assert spoke["Urologist"].text == "Surgery is an option." and spoke["Urologist"].model == urologist.id and len(urologist.history) == 1
    assert spoke["Radiologist"].model == "human" and "Your turn as Radiologist" in shown.getvalue()
    assert seat.history == [] and all(r.schema_name in ("Opening", "Floor", "Closing") for r in moderator.history)
    assert outcome.data["humans"] == ["Radiologist"] and {"Urologist", "Radiologist"} <= set(outcome.data["roles"])
    assert outcome.data["seats"] == {"Moderator": moderator.id, "Radiologist": "human", "Urologist": urologist.id}


async def test_a_live_board_stops_between_turns_when_cancelled():
    from medpanel.context import Cancelled, RunContext

    context = RunContext()
    calls = []

    def respond(request):
        calls.append(request.schema_name)
        if request.schema_name == "Opening":
            context.cancel()  # the stop button, pressed while the moderator opens
            return {"presentation": "A case.", "specialists": ["Radiologist"]}
        return {"next_speaker": CLOSE, "question": ""}

    with pytest.raises(Cancelled):
        await get_protocol("board-live").run(load_case(ROOT / "examples" / "prostate"),
                                             Panel.of([ScriptedModel(responder=respond, runtime=Runtime())]), LiveBoardSettings(), context)
    assert calls == ["Opening"]


# ---------------------------------------------------------------- the written board's path follows `small`

async def test_a_small_model_writes_the_meeting_turn_by_turn_and_another_the_tags():
    from test_board import PLAN, small_board

    small = small_board()
    outcome = await get_protocol("board").run(CASE, Panel.of([small]), BoardSettings())
    assert {r.schema_name for r in small.history} == {"BoardSay"} and len(small.history) == 5  # four specialists, the plan
    assert outcome.data["structured"] == "turns" and outcome.transcript.events[0].data["by"] == "code"
    assert outcome.answer == PLAN and outcome.data["parse_status"] == "parsed"
    full = ScriptedModel([MEETING], runtime=Runtime())
    assert not full.small
    outcome = await get_protocol("board").run(CASE, Panel.of([full]), BoardSettings())
    assert full.history[0].schema is None and outcome.transcript.events[0].data["structured"] is False
    assert outcome.answer == "The board recommends SBRT without ADT. Surgery is not advised."
