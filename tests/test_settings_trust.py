"""Protocol settings a researcher can trust (issue 8, points 6, 8 and 9):

- a key that names no setting is an error listing the real ones, never stored and ignored;
- every stored setting changes what its protocol does;
- prompts call seats "Panelist N", never by their spec (a server URL), so moving the server changes no prompt;
- an unset token budget fits the seat (small, other, reasoning) and an explicit one always wins.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from typer.testing import CliRunner

from conftest import MEDPANEL

from medpanel.cases import Case, Reference
from medpanel.cli import app
from medpanel.errors import UsageError
from medpanel.models import Runtime
from medpanel.models.base import REASONING_ALLOWANCE
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import PROTOCOLS, Panel, get_protocol
from medpanel.protocols.summary import summarize_debate
from medpanel.runs.runner import protocol_settings
from medpanel.runs.scoring import score_outcome
from medpanel.testing.mock_server import fake_from_schema

# ---------------------------------------------------------------- cases and seats

MCQ = Case(id="mcq", question="Which drug first for uncomplicated hypertension?", options={"A": "Thiazide", "B": "Minoxidil"},
           reference=Reference(answer="A"))
OPEN = Case(id="open", question="What is losing balance a symptom of?")
BOARD = Case(id="board", summary="A 67-year-old man with a PSA of 14 and a Gleason 4+3 biopsy.")
CONSULT = Case(id="consult", chief_complaint="Excessive thirst",
               note={"history of present illness": "Three weeks of thirst and weight loss.", "pertinent results": "Glucose 22 mmol/L."})
OSCE = Case(id="osce", chief_complaint="Excessive thirst", reference=Reference(answer_text="Type 2 diabetes"),
            metadata={"osce": {"patient_actor": {"Demographics": "55-year-old man", "History": "Thirst for three weeks",
                                                 "Symptoms": {"Primary": "Thirst", "Secondary": ["Weight loss"]}},
                               "physical_exam": {"General": "Dry mucous membranes"}, "test_results": {"Glucose": "22 mmol/L"}}})

MEETING = ("<discussion>\n<turn 1> Moderator: We review the case.\n<turn 2> Urologist: Surgery is an option.\n"
           "<turn 3> Radiation Oncologist: So is radiotherapy.\n</discussion>\n"
           "<conclusion>Offer prostatectomy. Discuss radiotherapy. Review at clinic.</conclusion>")


def responder(letter: str):
    """Valid replies for every protocol: a structured request gets what its schema allows (its values drawn
    from the seat's letter, so seats' reviews differ), free text a letter inside a well-formed meeting. Each
    seat has its own letter, so the debate goes to rounds; a seeded request answers by its seed's parity."""

    def reply(request):
        if request.schema_name == "Discharge":
            return {"diagnosis": "Type 2 diabetes mellitus", "codes": ["E11.9"]}
        if request.schema_name == "PhysicianTurn":
            return {"action": "submit", "message": "I know enough."}
        if request.schema_name == "Opening":
            return {"presentation": "A man with prostate cancer.", "specialists": ["Urologist", "Radiologist", "Pathologist"]}
        if request.schema_name == "Floor":  # give the floor to the first specialist offered: the meeting goes on
            return {"next_speaker": request.schema["properties"]["next_speaker"]["enum"][0], "question": "Your view?"}
        if request.schema is not None:
            return fake_from_schema(request.schema, letter)
        choice = "AB"[request.seed % 2] if request.seed is not None else letter
        return f"{MEETING}\nAnswer: {choice}"

    return reply


def setting_names(settings) -> list[str]:
    """The keys a run may store: every field but the live hooks (excluded from the stored settings)."""
    return [name for name, info in settings.model_fields.items() if not info.exclude]


def fake(name: str, letter: str = "A", **flags) -> ScriptedModel:
    return ScriptedModel(name=name, responder=responder(letter), runtime=Runtime(), **flags)


def spec_of(port: int, i: int) -> str:
    return f"openai:m{i}@http://127.0.0.1:{port}/v1?key_env=PANEL_KEY"


def panel_at(port: int, n: int = 2, **flags) -> tuple[Panel, list[ScriptedModel]]:
    """Seats named as the runner names them (their spec strings), served by fakes named the same."""
    specs = [spec_of(port, i) for i in range(n)]
    models = [fake(spec.split(":", 1)[1], "AB"[i % 2], **flags) for i, spec in enumerate(specs)]
    return Panel.of(models, names=specs), models


def extras(protocol: str, port: int, **flags) -> tuple[dict, dict, list[ScriptedModel]]:
    """(settings, roles, role models) a protocol needs besides its seats (OSCE: patient, moderator, judge)."""
    if protocol != "osce":
        return {}, {}, []
    people = {role: fake(f"{role}@http://127.0.0.1:{port}/v1", **flags) for role in ("patient", "moderator", "judge")}
    return {"max_exchanges": 1, "max_diagnosis_rounds": 1}, people, list(people.values())


async def run_and_score(spec, case, panel: Panel, settings):
    """The protocol, then its scorers, as the runner calls them (the OSCE's judge scores after the run)."""
    outcome = await spec.run(case, panel, settings)
    scores = await score_outcome(spec, case, outcome, panel.roles, settings)
    return outcome, scores


RUNS = {  # protocol -> (case, seats)
    "single": (MCQ, 1), "debate": (MCQ, 2), "vote": (MCQ, 2), "self-consistency": (MCQ, 1), "longform": (OPEN, 2),
    "osce": (OSCE, 2), "board": (BOARD, 1), "board-live": (BOARD, 1), "consult": (CONSULT, 2),
    "baseline": (CONSULT, 1), "baseline-note": (CONSULT, 1),
}


async def run_protocol(protocol: str, port: int, values: dict | None = None, **flags):
    spec = get_protocol(protocol)
    case, n = RUNS[protocol]
    pan, seats = panel_at(port, n, **flags)
    more, roles, others = extras(protocol, port, **flags)
    pan.roles.update(roles)
    settings = spec.settings.model_validate({**more, **(values or {})})
    outcome, _ = await run_and_score(spec, case, pan, settings)
    return outcome, seats + others


def prompts(models: list[ScriptedModel]) -> list[str]:
    return [f"{m.role}: {m.content}" for model in models for request in model.history for m in request.messages]


# ---------------------------------------------------------------- 6: no setting silently ignored


def test_every_protocol_is_covered_here():
    assert set(RUNS) == set(PROTOCOLS) - {"specialist"}  # specialist: its settings are checked by name below


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_an_unknown_key_is_a_usage_error_listing_the_settings(protocol):
    spec = get_protocol(protocol)
    with pytest.raises(UsageError) as info:
        protocol_settings(spec, {"rounds": 1})
    assert "'rounds'" in info.value.problem and protocol in info.value.problem
    assert all(name in info.value.fix for name in setting_names(spec.settings))
    assert "on_event" not in setting_names(spec.settings)  # live hooks are no stored setting


def test_the_issue_s_two_settings_are_rejected_with_the_close_match():
    debate = get_protocol("debate")
    for key in ("rounds", "max_round"):
        with pytest.raises(UsageError, match=rf"no setting '{key}' \(did you mean max_rounds"):
            protocol_settings(debate, {key: 0})
    with pytest.raises(UsageError, match=r"did you mean (min_rounds or max_rounds|max_rounds or min_rounds)"):
        protocol_settings(get_protocol("longform"), {"rounds": 1})
    with pytest.raises(UsageError, match="no setting 'on_event'"):  # a hook cannot come from --set
        protocol_settings(debate, {"on_event": "print"})


@pytest.mark.parametrize("protocol", [p for p in PROTOCOLS if p != "specialist"])
def test_settings_classes_themselves_refuse_unknown_keys(protocol):
    from medpanel.protocols.base import Settings

    settings = get_protocol(protocol).settings
    assert issubclass(settings, Settings)
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        settings.model_validate({"rounds": 1})


def medpanel(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([MEDPANEL, *args], env=env, capture_output=True, text=True, timeout=120)


def test_cli_debate_rejects_the_issue_s_settings_with_exit_2(cli_env):
    base = ["debate", "--question", "Which first?", "--option", "A=Thiazide", "--option", "B=Minoxidil",
            "--models", "scripted:Answer: A,scripted:Answer: B", "--json"]
    for pair in ("rounds=1", "max_round=0"):
        result = medpanel(*base, "--set", pair, env=cli_env)
        assert result.returncode == 2, result.stdout + result.stderr
        assert f"no setting '{pair.split('=')[0]}' (did you mean max_rounds" in result.stderr and "Traceback" not in result.stderr
    accepted = medpanel(*base, "--set", "max_rounds=1", env=cli_env)
    assert accepted.returncode == 0, accepted.stderr
    assert json.loads(accepted.stdout)["item"]["outcome"]["data"]["rounds_used"] == 1  # the real name is used


def test_cli_bench_rejects_an_unknown_setting_with_exit_2(cli_env):
    result = medpanel("bench", "examples", "--protocol", "board", "--models", "scripted:x", "--set", "max_token=100", env=cli_env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no setting 'max_token' (did you mean max_tokens" in result.stderr


# Settings that send a run down the paths where each budget is spent (a long-form debate that revises...).
PATHS = {
    "longform": {"min_rounds": 2, "max_rounds": 2},
    "osce": {"max_rounds": 1},
    "self-consistency": {"k": 2},
}


# Every setting changes what a run does. Each entry: a value other than the default, and the settings it
# needs to matter (a tie-break seed matters only for the seeded tie policy). The trace compared is every
# request the models received, the outcome, its transcript and its scores.
CHANGES: dict[str, dict[str, tuple]] = {
    "single": {"temperature": (0.5,), "max_tokens": (64,)},
    "debate": {"temperature": (0.5,), "max_tokens": (64,), "seeds": ([7, 8],), "tie_policy": ("first-model",),
               "tie_seed": (2, {"tie_policy": "random-seeded"}), "max_rounds": (1,), "order": ("sequential",),
               "peer_context": ("choice",), "peer_max_chars": (200,)},
    "vote": {"temperature": (0.5,), "max_tokens": (64,), "seeds": ([7, 8],), "tie_policy": ("first-model",),
             "tie_seed": (2, {"tie_policy": "random-seeded"})},
    "self-consistency": {"k": (3,), "temperature": (0.5,), "max_tokens": (64,), "seeds": ([7, 8, 9, 10, 11],),
                         "tie_policy": ("first-model", {"k": 2, "seeds": [1, 2]}),
                         "tie_seed": (2, {"tie_policy": "random-seeded", "k": 2, "seeds": [1, 2]})},  # seed 0 draws B, 2 draws A
    "longform": {"threshold": (0.1,), "min_rounds": (2, {"max_rounds": 3, "threshold": 0.1}), "max_rounds": (2, {"threshold": 1.0, "min_rounds": 1}),
                 "temperature": (0.5,), "max_tokens": (64,), "review_max_tokens": (64,)},
    "osce": {"threshold": (0.1,), "min_rounds": (2, {"max_rounds": 3, "threshold": 0.1}), "max_rounds": (2, {"threshold": 1.0}),
             "temperature": (0.5,), "max_tokens": (64,), "review_max_tokens": (64,), "patient_max_tokens": (64,),
             "max_exchanges": (2,), "max_direct_replies": (0,), "max_questions": (1,), "max_diagnosis_rounds": (0,),
             "max_differentials": (1,), "reveal_findings": (True,)},
    "board": {"temperature": (0.5,), "max_tokens": (64,), "structured": ("always",), "frequency_penalty": (0.5,)},
    "board-live": {"max_turns": (1,), "max_specialists": (1, {"roles": ["Urologist", "Radiologist"]}), "roles": (["Geriatrician"],),
                   "turn_tokens": (64,), "conclusion_tokens": (64,), "temperature": (0.5,)},
    "consult": {"max_turns": (3,), "min_questions": (2,), "temperature": (0.5,), "max_tokens": (64,),
                "discharge_max_tokens": (64,), "frequency_penalty": (0.5,), "empty_prediction": ("exclude", {"max_turns": 3}),
                "unfinished": ("exclude", {"max_turns": 3})},
    # A baseline's discharge always has a code (its schema asks for one), so its empty_prediction policy
    # only reaches the stored outcome: it matters where a consult ends without a discharge (above).
    "baseline": {"temperature": (0.5,), "discharge_max_tokens": (64,), "frequency_penalty": (0.5,), "empty_prediction": ("exclude",)},
    "baseline-note": {"temperature": (0.5,), "discharge_max_tokens": (64,), "frequency_penalty": (0.5,), "empty_prediction": ("exclude",)},
}
# The board's judges run only with a judge model configured, which a judge-free run cannot exercise: their
# settings are tested with the judges (tests/test_judges.py, tests/test_board.py).
JUDGE_SETTINGS = {"judge_mode", "judge_prompt_files", "judge_max_tokens", "bertscore", "reward"}  # scoring: tests of each scorer
# Likewise HealthBench's rubric grader (single, longform): its settings are tested in tests/test_healthbench.py.
GRADER_SETTINGS = {"grader_concurrency", "grader_max_tokens"}

# Every role changes what a run does too (roles are not settings: the runner builds them). Each entry:
# the roles of the changed run; the base run has the protocol's usual ones (OSCE: its own three models).
ROLE_CHANGES: dict[str, dict[str, dict]] = {
    "longform": {"moderator": {"moderator": "scripted:One consolidated answer [Panelist 1]."}},
    "osce": {"patient": {"patient": "scripted:I feel fine."}, "moderator": {"moderator": None}, "judge": {"judge": None}},
    "board-live": {"a seat's own model": {"Urologist": "scripted:Surgery is an option."}, "a person's seat": {"Urologist": "person"}},
}


def changes(protocol: str):
    return [(protocol, name, *entry) for name, entry in CHANGES[protocol].items()]


def _moderator_triage_first_direct():
    """The OSCE moderator for the change runs: answers the greeting itself once, then sends the panel to work."""
    said = []

    def reply(request):
        if request.schema_name == "Triage":
            said.append(1)
            return {"action": "direct", "reply": "Hello, come in."} if len(said) == 1 else {"action": "history", "reply": ""}
        return fake_from_schema(request.schema, "fixed") if request.schema is not None else "Fine."

    return ScriptedModel(name="moderator", responder=reply, runtime=Runtime())


async def traced(protocol: str, values: dict, roles: dict | None = None) -> str:
    """Everything a run did: every request its models received, the outcome, its transcript and its scores.
    `roles` changes the panel's roles: a spec (a scripted model of that text), "person" (a person's seat as
    the web app would build it) or None (the role left out: the first seat sits there)."""
    spec = get_protocol(protocol)
    case, n = RUNS[protocol]
    pan, seats = panel_at(8001, n)
    people: dict[str, ScriptedModel] = {}
    if protocol == "osce":
        people = {"patient": fake("patient"), "moderator": _moderator_triage_first_direct(), "judge": fake("judge")}
        values = {"max_exchanges": 1, "max_diagnosis_rounds": 1, **values}
    for role, value in (roles or {}).items():
        if value is None:
            people.pop(role, None)
        elif value == "person":
            people[role] = fake("person")
        else:
            people[role] = ScriptedModel(name=role, responder=lambda r, text=value.partition(":")[2]: text, runtime=Runtime())
    if protocol == "osce":  # unset, the first doctor moderates, and the moderator judges
        people.setdefault("moderator", pan.first()[1])
        people.setdefault("judge", people["moderator"])
    pan.roles.update(people)
    if protocol == "consult":
        values = {"min_questions": 1, **values}
    settings = spec.settings.model_validate(values)
    outcome, scores = await run_and_score(spec, case, pan, settings)
    calls = [r.model_dump(mode="json", exclude={"timeout_s"}) for m in dict.fromkeys([*seats, *people.values()]) for r in m.history]
    events = [e.model_dump(mode="json", exclude={"at", "latency_s"}) for e in outcome.transcript.events]
    return json.dumps([calls, outcome.answer, outcome.status, outcome.data, events, scores], sort_keys=True, default=str)


@pytest.mark.parametrize(("protocol", "change"), [(p, c) for p in ROLE_CHANGES for c in ROLE_CHANGES[p]])
async def test_every_role_changes_what_the_run_does(protocol, change):
    base = {"roles": ["Urologist"]} if protocol == "board-live" else {}
    assert await traced(protocol, base) != await traced(protocol, base, ROLE_CHANGES[protocol][change]), f"{protocol}: {change} changed nothing"


def test_the_change_table_names_every_setting():
    for protocol in RUNS:
        names = set(setting_names(get_protocol(protocol).settings)) - (JUDGE_SETTINGS if protocol.startswith("board") else set()) - GRADER_SETTINGS
        assert names == set(CHANGES[protocol]), (protocol, names ^ set(CHANGES[protocol]))


@pytest.mark.parametrize(("protocol", "name", "value", "base"),
                         [(p, n, v, b[0] if b else {}) for p in CHANGES for p, n, v, *b in changes(p)])
async def test_every_setting_changes_what_the_run_does(protocol, name, value, base):
    default = {k: v for k, v in base.items() if k != name}
    assert await traced(protocol, default) != await traced(protocol, {**default, name: value}), f"{protocol}: {name}={value!r} changed nothing"


# ---------------------------------------------------------------- 8: seats anonymised in every prompt

LEAKS = re.compile(r"127\.0\.0\.1|https?://|key_env|openai:|PANEL_KEY|m[01]@")


@pytest.mark.parametrize("protocol", list(RUNS))
async def test_no_prompt_shows_a_seat_spec_and_moving_the_server_changes_no_prompt(protocol):
    outcome_a, models_a = await run_protocol(protocol, 8001)
    outcome_b, models_b = await run_protocol(protocol, 9002)
    seen = prompts(models_a)
    assert seen, "the run made no call"
    leaked = [p for p in seen if LEAKS.search(p)]
    assert not leaked, leaked[0][:300]
    assert seen == prompts(models_b)
    # The transcript keeps who really sat there, in its metadata.
    assert any(e.model == f"scripted:{spec_of(8001, 0).split(':', 1)[1]}" for e in outcome_a.transcript.events)


async def test_longform_labels_map_back_to_seats():
    outcome, _ = await run_protocol("longform", 8001)
    assert outcome.data["labels"] == {spec_of(8001, 0): "Panelist 1", spec_of(8001, 1): "Panelist 2"}
    assert set(outcome.data["attributions"]) == {spec_of(8001, 0), spec_of(8001, 1)}


async def test_the_summary_prompt_is_anonymised_too():
    outcome, _ = await run_protocol("debate", 8001)
    writers = [fake("w") for _ in range(2)]
    await summarize_debate(outcome.transcript, writers[0])
    moved, _ = await run_protocol("debate", 9002)
    await summarize_debate(moved.transcript, writers[1])
    [a], [b] = writers[0].history, writers[1].history
    text = a.messages[-1].content
    assert not LEAKS.search(text) and "Panelist 1" in text and "Panelist 2" in text
    assert [m.content for m in a.messages] == [m.content for m in b.messages]


# ---------------------------------------------------------------- 9: budgets that fit the seat

# protocol -> {call kind: (small model, other model)}; a reasoning model gets the other's + REASONING_ALLOWANCE.
# A call kind is the reply schema's name, or "text" for a free-text call.
BUDGETS = {
    "single": {"text": (512, 2048)},
    "debate": {"text": (512, 2048)},
    "vote": {"text": (512, 2048)},
    "self-consistency": {"text": (512, 2048)},
    "longform": {"text": (1024, 2048), "AnswerReview": (512, 1024), "RevisedAnswer": (1024, 2048)},
    "osce": {"QuestionSet": (600, 1024), "Triage": (512, 1024), "QuestionsReview": (512, 1024), "text": (200, 512),
             "DiagnosisOpinion": (600, 1024), "CapturedDetails": (512, 1024)},
    # The boards send other calls to a small seat (a meeting turn by turn) than to any other: their budgets
    # are checked per path in tests/test_board.py and tests/test_board_live.py.
    "consult": {"Question": (256, 1024), "text": (256, 1024), "Discharge": (256, 1024)},
    "baseline": {"Discharge": (256, 1024)},
    "baseline-note": {"Discharge": (256, 1024)},
}
# The setting behind each kind, to check that an explicit value wins.
EXPLICIT = {
    "longform": {"max_tokens": ("text", "RevisedAnswer"), "review_max_tokens": ("AnswerReview",)},
    "osce": {"max_tokens": ("QuestionSet", "DiagnosisOpinion"), "review_max_tokens": ("Triage", "CapturedDetails"),
             "patient_max_tokens": ("text",)},
    "consult": {"max_tokens": ("Question", "text"), "discharge_max_tokens": ("Discharge",)},
    "baseline": {"discharge_max_tokens": ("Discharge",)},
    "baseline-note": {"discharge_max_tokens": ("Discharge",)},
}


def budgets_sent(models: list[ScriptedModel]) -> dict[str, set[int]]:
    """max_tokens sent, by call kind; the written board's small-model JSON meeting counts as its text call."""
    sent: dict[str, set[int]] = {}
    for model in models:
        for request in model.history:
            kind = request.schema_name if request.schema is not None else "text"
            sent.setdefault("text" if kind == "WrittenMeeting" else kind, set()).add(request.max_tokens)
    return sent


@pytest.mark.parametrize("kind", ["small", "other", "reasoning"])
@pytest.mark.parametrize("protocol", list(BUDGETS))
async def test_an_unset_budget_fits_the_seat(protocol, kind):
    flags = {"small": {"small": True}, "other": {}, "reasoning": {"reasoning": True}}[kind]
    _, models = await run_protocol(protocol, 8001, PATHS.get(protocol, {}), **flags)
    sent = budgets_sent(models)
    for call, (small, full) in BUDGETS[protocol].items():
        expected = {"small": small, "other": full, "reasoning": full + REASONING_ALLOWANCE}[kind]
        assert sent.get(call) == {expected}, (call, sent)


@pytest.mark.parametrize("protocol", list(BUDGETS))
async def test_an_explicit_budget_always_wins(protocol):
    settings = setting_names(get_protocol(protocol).settings)
    explicit = EXPLICIT.get(protocol, {"max_tokens": tuple(BUDGETS[protocol])})
    values = {name: 40 + 7 * i for i, name in enumerate(explicit)}
    assert set(values) <= set(settings)
    for flags in ({"small": True}, {"reasoning": True}):
        _, models = await run_protocol(protocol, 8001, {**PATHS.get(protocol, {}), **values}, **flags)
        sent = budgets_sent(models)
        for name, calls in explicit.items():
            for call in calls:
                want = values[name] * (2 if call == "Opening" else 1)
                assert sent.get(call) == {want}, (name, call, sent)


def test_the_budget_tables_cover_every_token_setting():
    """Every `*tokens` setting of every protocol is None by default (fit the seat) and has its budgets."""
    from medpanel.protocols.base import Settings

    for protocol in PROTOCOLS:
        settings = get_protocol(protocol).settings
        if not issubclass(settings, Settings):
            continue
        # A judge's budget is the size of its verdict, whoever sits at the table: it is not fitted to the seat.
        token_fields = [n for n in setting_names(settings) if n.endswith("tokens") and n not in JUDGE_SETTINGS | GRADER_SETTINGS]
        assert token_fields, protocol
        for name in token_fields:
            assert settings.model_fields[name].default is None, (protocol, name)
            assert name in settings.budgets, (protocol, name)


class Cut(ScriptedModel):
    """Answers as the fakes do, but every reply says it stopped at its token limit."""

    async def generate(self, request):
        generation = await super().generate(request)
        return generation.model_copy(update={"finish_reason": "length"})


@pytest.mark.parametrize("protocol", list(RUNS))
async def test_a_reply_cut_by_its_budget_is_marked_truncated(protocol):
    spec = get_protocol(protocol)
    case, n = RUNS[protocol]
    seats = [Cut(name=f"cut{i}", responder=responder("AB"[i % 2]), runtime=Runtime()) for i in range(n)]
    more, roles, _ = extras(protocol, 8001)
    outcome, _ = await run_and_score(spec, case, Panel.of(seats, roles=roles), spec.settings.model_validate({**more, **PATHS.get(protocol, {})}))
    marked = [e for e in outcome.transcript.events if e.data.get("truncated") is True]
    calls = sum(len(s.history) for s in seats)
    assert calls and len(marked) == calls  # one marked event per cut reply, whatever the phase
    assert all(e.model.startswith("scripted:cut") for e in marked)


def test_cli_max_tokens_help_names_the_defaults():
    for command in ("board", "debate", "osce", "consult"):
        result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"})
        assert "fit the seat" in " ".join(result.output.split()), command


def test_build_settings_is_plain_data_in_and_out():
    from medpanel.protocols.base import build_settings

    spec = get_protocol("debate")
    settings = build_settings(spec.settings, {"max_rounds": 1, "max_tokens": 64}, "debate")
    assert json.loads(settings.model_dump_json()) == {**json.loads(spec.settings().model_dump_json()), "max_rounds": 1, "max_tokens": 64}
