"""One shape for every protocol (issue 10): `run(case, panel, settings, context)`, settings that are plain
data, one recorder whose every event reaches the run context's listener as it is recorded, scorers that
declare their metrics, and the OSCE scored by its judge role after the run, never inside it."""

from __future__ import annotations

import collections.abc
import inspect
import typing

import pytest

from medpanel.cases import Case, Reference
from medpanel.context import Cancelled, RunContext
from medpanel.errors import UsageError
from medpanel.models.base import Model
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import PROTOCOLS, Panel, get_protocol
from medpanel.runs.scoring import score_outcome
from medpanel.scoring.metrics import metric_kind

MCQ = Case(id="q1", question="Which drug?", options={"A": "alpha", "B": "beta", "C": "gamma"}, reference=Reference(answer="B"))


# ---------------------------------------------------------------- every protocol


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_run_takes_a_context(name):
    parameters = inspect.signature(get_protocol(name).run).parameters
    assert list(parameters)[:3] == ["case", "panel", "settings"]
    assert "context" in parameters and parameters["context"].default is None  # a quiet run when called without one


def _held_types(annotation) -> list:
    """Every type an annotation can hold (unions, containers and Annotated unwrapped)."""
    found, todo = [], [annotation]
    while todo:
        hint = todo.pop()
        origin = typing.get_origin(hint)
        if origin is typing.Annotated:
            todo.append(typing.get_args(hint)[0])
        elif origin is not None:
            found.append(origin)
            todo.extend(a for a in typing.get_args(hint) if a is not Ellipsis and not isinstance(a, list))
        else:
            found.append(hint)
    return found


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_settings_are_plain_data(name):
    settings = get_protocol(name).settings
    hints = typing.get_type_hints(settings, include_extras=True)
    for field in settings.model_fields:
        for held in _held_types(hints[field]):
            assert held is not collections.abc.Callable and held is not typing.Callable, f"{settings.__name__}.{field} holds a callable"
            assert not (isinstance(held, type) and issubclass(held, Model)), f"{settings.__name__}.{field} holds a model"
    assert not {"on_event", "human_seat", "patient", "moderator", "judge"} & set(settings.model_fields)
    assert not settings.__private_attributes__, f"{settings.__name__} keeps run state: {list(settings.__private_attributes__)}"
    defaults = settings()  # every field has a default: a run may set none of them
    assert not any(callable(value) for value in defaults.model_dump().values())


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_scorers_declare_the_kinds_the_metrics_table_gives(name):
    spec = get_protocol(name)
    for scorer in spec.scorers:
        for metric, kind in scorer.metrics.items():
            if not metric.endswith("*"):
                assert kind == metric_kind(metric, spec.name), f"{spec.name}: {metric} declared {kind.describe()}"


# ---------------------------------------------------------------- one recorder, live


class Listener:
    """Keeps every event it is handed, with how many model calls had been made at that moment."""

    def __init__(self, models: list[ScriptedModel]) -> None:
        self.models, self.events, self.calls_then = models, [], []

    def __call__(self, event) -> None:
        self.events.append(event)
        self.calls_then.append(self.calls())

    def calls(self) -> int:
        return sum(len(m.history) for m in self.models)


def assert_streamed_live(listener: Listener, outcome) -> None:
    # every event of the transcript, the same objects in the same order: nothing recorded past the listener
    assert [id(e) for e in listener.events] == [id(e) for e in outcome.transcript.events]
    # live: the first events arrived while the protocol still had calls to make, not in one batch at the end
    assert listener.calls_then[0] < listener.calls() and listener.calls_then == sorted(listener.calls_then)


async def assert_declared(spec, case: Case, outcome) -> None:
    """Every score the protocol's scorers give is one they declare."""
    scores = await score_outcome(spec, case, outcome, {}, spec.settings())
    assert scores and all(spec.metric_kind(name) is not None for name in scores), scores


def answering(name: str, *letters: str) -> ScriptedModel:
    return ScriptedModel([f"{name} thinks.\nAnswer: {x}" for x in letters], name=name)


async def test_debate_streams_every_event_live():
    seats = [answering("x", "B", "B"), answering("y", "C", "B"), answering("z", "B", "B")]
    listener = Listener(seats)
    outcome = await get_protocol("debate").run(MCQ, Panel.of(seats, ["x", "y", "z"]), get_protocol("debate").settings(), RunContext(on_event=listener))
    assert_streamed_live(listener, outcome)
    assert [e.kind for e in listener.events] == ["turn"] * 6 + ["note", "decision"]
    await assert_declared(get_protocol("debate"), MCQ, outcome)


@pytest.mark.parametrize("name", ["single", "vote", "self-consistency"])
async def test_the_multiple_choice_baselines_stream_every_event(name):
    seats = [ScriptedModel(responder=lambda r: "Answer: B", name="a"), ScriptedModel(responder=lambda r: "Answer: B", name="b")]
    events: list = []
    spec = get_protocol(name)
    outcome = await spec.run(MCQ, Panel.of(seats), spec.settings(), RunContext(on_event=events.append))
    assert events == outcome.transcript.events and events[-1].kind == "decision"
    await assert_declared(spec, MCQ, outcome)


async def test_longform_streams_every_event_live():
    review = {f"{d}_{part}": (9 if part == "score" else "ok") for d in ("factual_accuracy", "completeness", "safety")
              for part in ("score", "reason", "suggestion")}
    seats = [ScriptedModel(["My answer.", review, "Merged [Panelist 1, Panelist 2]."], name="a"), ScriptedModel(["Mine.", review], name="b")]
    listener = Listener(seats)
    spec = get_protocol("longform")
    outcome = await spec.run(Case(id="open", question="Why?"), Panel.of(seats), spec.settings(), RunContext(on_event=listener))
    assert_streamed_live(listener, outcome)
    assert outcome.answer.startswith("Merged") and [e.phase for e in listener.events][-2:] == ["consolidation", "conclusion"]
    await assert_declared(spec, Case(id="open", question="Why?"), outcome)


async def test_consult_streams_every_event_live():
    physician = ScriptedModel([{"message": "Your evaluation?"}, {"action": "submit", "message": "Ready."},
                               {"diagnosis": "Pyelonephritis", "codes": ["N10"]}], name="physician")
    assistant = ScriptedModel(["Fever and flank pain: pyelonephritis."], name="assistant")
    case = Case(id="c", chief_complaint="Flank pain", note={"history": "Fever, dysuria."}, reference=Reference(codes=["N10"]))
    listener = Listener([physician, assistant])
    spec = get_protocol("consult")
    outcome = await spec.run(case, Panel.of([physician, assistant]), spec.settings(), RunContext(on_event=listener))
    assert_streamed_live(listener, outcome)
    assert [e.kind for e in listener.events] == ["turn", "turn", "turn", "decision"]
    await assert_declared(spec, case, outcome)


# ---------------------------------------------------------------- the OSCE: roles, and judged by its judge role

OSCE_CASE = Case(id="thirst", chief_complaint="Thirst", reference=Reference(answer_text="Diabetes mellitus"),
                 metadata={"osce": {"patient_actor": {"History": "Six weeks of thirst. She has lost weight."}}})


def osce_panel(with_judge: bool = True) -> tuple[Panel, dict[str, ScriptedModel]]:
    doctor = ScriptedModel([{"questions": ["How long have you been thirsty?"], "rationale": "duration"},
                            {"primary_diagnosis": "Diabetes mellitus", "differentials": [], "reasoning": "thirst, weight loss"}], name="doctor")
    roles = {"patient": ScriptedModel(["Hello, I am always thirsty.", "Six weeks."], name="patient"),
             "moderator": ScriptedModel([{"action": "history", "reply": ""}], name="moderator")}
    if with_judge:
        roles["judge"] = ScriptedModel(responder=lambda r: {
            "CapturedDetails": {"captured": [1]}, "RelevantQuestions": {"relevant": [1]},
            "DiagnosisMatch": {"primary_matches": True, "acceptable_named": [1]}}[r.schema_name], name="judge")
    return Panel.of([doctor], ["doctor"], roles=roles), {"doctor": doctor, **roles}


def test_osce_declares_its_roles_and_a_judging_scorer():
    spec = get_protocol("osce")
    assert spec.role_defaults == {"patient": "local", "moderator": "@seat", "judge": "@moderator"}
    assert [s.role for s in spec.scorers if s.role] == ["judge"]
    assert {"picr", "prqr", "pda", "sda"} <= set(next(s for s in spec.scorers if s.role == "judge").metrics)


async def test_osce_streams_live_and_its_judge_role_scores_it_after_the_run():
    spec = get_protocol("osce")
    panel, models = osce_panel()
    listener = Listener(list(models.values()))
    context = RunContext(on_event=listener)
    settings = spec.settings(max_exchanges=1)
    outcome = await spec.run(OSCE_CASE, panel, settings, context)
    assert_streamed_live(listener, outcome)
    assert models["judge"].history == []  # the protocol itself never judges
    assert not [e for e in outcome.transcript if e.kind == "score" and e.speaker == "Judge"]
    assert "judged" not in outcome.data

    scores = await score_outcome(spec, OSCE_CASE, outcome, panel.roles, settings, context)
    # three checks by the judge: details captured, questions relevant, diagnosis matched
    assert sorted(r.schema_name for r in models["judge"].history) == ["CapturedDetails", "DiagnosisMatch", "RelevantQuestions"]
    # the checklist is the two sentences of the history; the judge named the first of them
    assert (scores["picr"], scores["prqr"], scores["pda"], scores["sda"]) == (0.5, 1.0, 1.0, 1.0)
    assert all(spec.metric_kind(name) is not None for name in scores)
    verdicts = [e for e in outcome.transcript if e.kind == "score" and e.speaker == "Judge"]
    assert len(verdicts) == 4 and verdicts[-1].data["judged"]["details_captured"] == 1
    assert all(e.model == models["judge"].id for e in verdicts[:3])  # each check carries its call's model and usage
    assert listener.events[-4:] == verdicts  # the judge's verdicts reach the listener too, as they are recorded

    # without a judge role the dialogue runs the same and the judge's metrics are simply not produced
    unjudged, _ = osce_panel(with_judge=False)
    outcome = await spec.run(OSCE_CASE, unjudged, settings)
    assert set(await score_outcome(spec, OSCE_CASE, outcome, unjudged.roles, settings)) == {"diagnosis_consensus"}


async def test_osce_needs_a_patient_role_and_stops_when_cancelled():
    spec = get_protocol("osce")
    panel, _ = osce_panel()
    with pytest.raises(UsageError, match="no 'patient' role"):
        await spec.run(OSCE_CASE, Panel(panel.seats, {}), spec.settings())
    context = RunContext()
    context.cancel()
    panel, models = osce_panel()
    with pytest.raises(Cancelled):
        await spec.run(OSCE_CASE, panel, spec.settings(), context)
    assert len(models["patient"].history) == 1  # the opening only: stopped before the first turn of history taking
