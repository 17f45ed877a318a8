"""The MCC debate with one ScriptedModel per seat: each seat's queue holds its answer for round 0, 1, 2, ...

A seat asked more often than its script allows raises (the scripted model has no replies left), so
every test also pins down exactly how many calls the debate made.
"""

from __future__ import annotations

import pytest
from conftest import load_bench

from medpanel.cases import Case, Reference
from medpanel.errors import ModelCallError, UsageError
from medpanel.models import Runtime
from medpanel.models.scripted import ScriptedModel
from medpanel.context import RunContext
from medpanel.protocols import Panel, get_protocol
from medpanel.protocols.debate import DebateSettings, flow_counts
from medpanel.runs.runner import RunConfig, run_benchmark
from medpanel.runs.scoring import score_outcome
from medpanel.runs.summary import summarize
from medpanel.testing.debate_prompts import PEER_CHOICE

SPEC = get_protocol("debate")
CASE = Case(id="q1", question="Which drug?", options={"A": "alpha", "B": "beta", "C": "gamma", "D": "delta"}, reference=Reference(answer="B"))


def seat(name: str, *script) -> ScriptedModel:
    """A seat answering round by round: a letter becomes a short rationale ending 'Answer: X'; longer text
    and exceptions are used as they are."""
    replies = [f"{name} reasons about round {i}.\nAnswer: {s}" if isinstance(s, str) and len(s) == 1 else s for i, s in enumerate(script)]
    return ScriptedModel(replies, name=name)


def panel(*seats: ScriptedModel) -> Panel:
    return Panel.of(list(seats), names=[m.name for m in seats])


async def debate(p: Panel, case: Case = CASE, context: RunContext | None = None, **settings):
    return await SPEC.run(case, p, DebateSettings(**settings), context)


async def score(out, case: Case = CASE) -> dict:
    """The debate's scores, as the runner gives them (its scorers need no model)."""
    return await score_outcome(SPEC, case, out, {}, DebateSettings())


def calls(p: Panel) -> int:
    return sum(len(m.history) for m in p.seats.values())


async def test_unanimous_start_needs_no_debate():
    p = panel(seat("x", "B"), seat("y", "B"), seat("z", "B"))
    out = await debate(p)
    assert calls(p) == 3
    assert out.answer == "B"
    assert out.data["decision"]["method"] == "consensus" and out.data["consensus_round"] == 0 and out.data["rounds_used"] == 0
    assert [e.kind for e in out.transcript] == ["turn", "turn", "turn", "decision"]
    scores = await score(out)
    assert scores["accuracy"] == 1.0 and scores["initial_consensus"] == 1.0 and scores["rounds_used"] == 0.0
    assert scores["stance_shifts"] == 0.0


async def test_consensus_in_round_two_records_the_shifts():
    # round 0: B C C; round 1: B B C (y moves); round 2: B B B (z moves) -> consensus in round 2
    p = panel(seat("x", "B", "B", "B"), seat("y", "C", "B", "B"), seat("z", "C", "C", "B"))
    out = await debate(p)
    assert calls(p) == 9
    assert out.answer == "B" and out.data["consensus_round"] == 2 and out.data["rounds_used"] == 2
    assert out.data["shifts"] == [
        {"seat": "y", "model": "scripted:y", "round": 1, "from": "C", "to": "B"},
        {"seat": "z", "model": "scripted:z", "round": 2, "from": "C", "to": "B"},
    ]
    notes = [e for e in out.transcript if e.kind == "note"]
    assert [n.data["shift"]["seat"] for n in notes] == ["y", "z"]
    assert [r["consensus"] for r in out.data["rounds"]] == [False, False, True]
    assert out.data["rounds"][1]["choices"] == {"x": "B", "y": "B", "z": "C"}
    y_round1 = next(e for e in out.transcript.turns("y") if e.round == 1)
    assert y_round1.data["previous_choice"] == "C" and y_round1.data["changed"] is True
    scores = await score(out)
    # initial: x right, y and z wrong; the initial vote (C 2 : B 1) would have been wrong
    assert scores["initial_accuracy.x"] == 1.0 and scores["initial_accuracy.y"] == 0.0 and scores["initial_accuracy.z"] == 0.0
    assert scores["initial_vote_accuracy"] == 0.0 and scores["accuracy"] == 1.0
    assert scores["initial_consensus"] == 0.0 and scores["consensus"] == 1.0 and scores["stance_shifts"] == 2.0


async def test_no_consensus_ends_in_a_majority_vote():
    # z flip-flops C -> B -> C -> B; x holds B, y holds C; after round 3: B C B -> B by 2 votes to 1
    p = panel(seat("x", "B", "B", "B", "B"), seat("y", "C", "C", "C", "C"), seat("z", "C", "B", "C", "B"))
    out = await debate(p)
    assert calls(p) == 12  # 3 initial + 3 rounds x 3 seats, and not one more
    decision = out.data["decision"]
    assert out.answer == "B" and decision["method"] == "majority" and decision["votes"] == {"B": 2, "C": 1}
    assert decision["round"] == 3 and out.data["consensus"] is False and out.data["consensus_round"] is None
    assert [e.data["choice"] for e in out.transcript if e.kind == "vote"] == ["B", "C", "B"]
    assert [(s["round"], s["from"], s["to"]) for s in out.data["shifts"]] == [(1, "C", "B"), (2, "B", "C"), (3, "C", "B")]
    assert (await score(out))["tie"] == 0.0


@pytest.mark.parametrize("policy", ["abstain", "first-model", "random-seeded"])
async def test_three_way_tie_applies_and_records_the_policy(policy):
    p = panel(seat("x", "B", "B", "B", "B"), seat("y", "C", "C", "C", "C"), seat("z", "D", "D", "D", "D"))
    out = await debate(p, tie_policy=policy, tie_seed=7)
    decision = out.data["decision"]
    assert decision["tied"] == ["B", "C", "D"] and decision["votes"] == {"B": 1, "C": 1, "D": 1}
    assert decision["tie_policy"] == policy
    if policy == "abstain":
        assert out.answer is None and decision["method"] == "tie"
    elif policy == "first-model":
        assert out.answer == "B" and decision["method"] == "tie-broken"  # x, the first seat, chose B
    else:
        assert out.answer in {"B", "C", "D"} and decision["method"] == "tie-broken"
        again = panel(seat("x", "B", "B", "B", "B"), seat("y", "C", "C", "C", "C"), seat("z", "D", "D", "D", "D"))
        assert (await debate(again, tie_policy=policy, tie_seed=7)).answer == out.answer  # seeded: reruns agree
    scores = await score(out)
    assert scores["tie"] == 1.0
    # MCC's conservative credit: the tie holds the right answer (B), so 0.5, whatever was picked
    assert scores["accuracy_tie_half"] == 0.5
    assert scores["accuracy"] == (1.0 if out.answer == "B" else 0.0)


async def test_random_tie_break_depends_on_the_case():
    """Seeded per case: across twelve cases the draws are not all the same letter."""
    picks = set()
    for i in range(12):
        case = CASE.model_copy(update={"id": f"case-{i}"})
        p = panel(seat("x", "B", "B"), seat("y", "C", "C"), seat("z", "D", "D"))
        picks.add((await debate(p, case, max_rounds=1, tie_policy="random-seeded")).answer)
    assert picks <= {"B", "C", "D"} and len(picks) > 1


async def test_unparseable_answer_never_agrees():
    # x gives no letter in round 0, so B B (and nothing) is not a consensus; x then says B -> consensus in round 1
    p = panel(seat("x", "I would need more information.", "B"), seat("y", "B", "B"), seat("z", "B", "B"))
    out = await debate(p)
    assert calls(p) == 6
    assert out.data["initial_choices"] == {"x": None, "y": "B", "z": "B"}
    assert out.data["rounds"][0]["consensus"] is False and out.data["consensus_round"] == 1
    assert out.data["shifts"] == [{"seat": "x", "model": "scripted:x", "round": 1, "from": None, "to": "B"}]
    # what the peers were told about x: no clear choice
    assert "Panelist 1 (round 0) answered with no clear choice" in p.seats["y"].history[1].messages[-1].content


async def test_all_unparseable_gives_no_answer():
    p = panel(seat("x", "hmm", "hmm"), seat("y", "unsure", "unsure"), seat("z", "no idea", "no idea"))
    out = await debate(p, max_rounds=1)
    assert out.answer is None and out.data["decision"]["method"] == "no-votes"
    assert (await score(out))["parsed"] == 0.0 and (await score(out))["accuracy"] == 0.0


async def test_a_seat_error_fails_the_item_naming_the_seat(store):
    # y's model fails for good in round 1; x and z still finish their round-1 calls (nothing left running)
    failing = seat("y", "C", ModelCallError("server refused the request", kind="bad_request"))
    p = panel(seat("x", "B", "B"), failing, seat("z", "B", "B"))
    with pytest.raises(ModelCallError, match=r"Seat 'y' \(scripted:y\) failed in debate round 1: server refused") as info:
        await debate(p)
    assert info.value.kind == "bad_request"
    assert [len(m.history) for m in p.seats.values()] == [2, 2, 2]

    # through the runner: the item is recorded as failed, with no score (never counted as wrong)
    runtime = Runtime(cache=store)
    p2 = panel(seat("x", "B", "B"), seat("y", "C", ModelCallError("server refused the request", kind="bad_request")), seat("z", "B", "B"))
    config = RunConfig(dataset="inline", protocol="debate", models=["x", "y", "z"])
    result = await run_benchmark(store, config, runtime, panel=p2, cases=[CASE])
    item = store.items(result.run_id)[0]
    assert item["status"] == "failed" and item["error_kind"] == "bad_request" and "Seat 'y'" in item["error"]
    assert summarize(store, result.run_id)["scores"] == {}


async def test_simultaneous_rounds_show_only_the_previous_round():
    p = panel(seat("x", "B", "C", "C"), seat("y", "C", "C", "C"), seat("z", "D", "D", "C"))
    out = await debate(p, order="simultaneous")
    assert out.data["consensus_round"] == 2 and calls(p) == 9
    y_round1 = p.seats["y"].history[1].messages
    # y sees its own previous answer as its turn, and both peers as they stood after round 0
    assert y_round1[2].role == "assistant" and y_round1[2].content.endswith("Answer: C")
    assert PEER_CHOICE.findall(y_round1[3].content) == ["B", "D"]
    assert "Panelist 1 (round 0) answered B (beta)" in y_round1[3].content
    assert "Panelist 3 (round 0) answered D (delta)" in y_round1[3].content
    z_round2 = p.seats["z"].history[2].messages[3].content
    assert "Panelist 1 (round 1) answered C" in z_round2 and "Panelist 2 (round 1) answered C" in z_round2
    assert [e.data["saw"] for e in out.transcript.turns("y") if e.phase == "debate"] == [
        {"Panelist 1": 0, "Panelist 3": 0}, {"Panelist 1": 1, "Panelist 3": 1}]


async def test_sequential_order_shows_this_rounds_answers_of_earlier_seats():
    p = panel(seat("x", "B", "C"), seat("y", "C", "C"), seat("z", "D", "C"))
    out = await debate(p, order="sequential")
    assert out.data["consensus_round"] == 1 and calls(p) == 6
    y_saw = p.seats["y"].history[1].messages[3].content
    assert "Panelist 1 (round 1) answered C" in y_saw  # x already spoke in this round
    assert "Panelist 3 (round 0) answered D" in y_saw  # z has not yet
    z_saw = p.seats["z"].history[1].messages[3].content
    assert "Panelist 1 (round 1) answered C" in z_saw and "Panelist 2 (round 1) answered C" in z_saw
    # turns are recorded in speaking order within the round
    assert [e.speaker for e in out.transcript.turns() if e.round == 1] == ["x", "y", "z"]


async def test_sequential_checks_consensus_after_every_answer():
    # round 0: B C C; in round 1 x (first to speak) moves to C -> all agree: y and z are not asked again
    p = panel(seat("x", "B", "C"), seat("y", "C"), seat("z", "C"))
    out = await debate(p, order="sequential")
    assert calls(p) == 4
    assert out.answer == "C" and out.data["consensus_round"] == 1
    assert out.data["rounds"][-1] == {"round": 1, "choices": {"x": "C", "y": "C", "z": "C"}, "consensus": True,
                                      "consensus_choice": "C", "after_seat": "x"}
    # the same scripts in simultaneous order would ask y and z again in round 1 (and run out)
    p2 = panel(seat("x", "B", "C"), seat("y", "C"), seat("z", "C"))
    with pytest.raises(UsageError, match="no replies left"):
        await debate(p2, order="simultaneous")


async def test_peer_context_choice_only_hides_the_rationale():
    p = panel(seat("x", "B", "B"), seat("y", "C", "B"), seat("z", "B", "B"))
    await debate(p, peer_context="choice")
    shown = p.seats["y"].history[1].messages[3].content
    assert "Panelist 1 (round 0) answered B (beta)" in shown
    assert "x reasons about round 0" not in shown  # no rationale
    p_full = panel(seat("x", "B", "B"), seat("y", "C", "B"), seat("z", "B", "B"))
    await debate(p_full, peer_context="full")
    assert "x reasons about round 0" in p_full.seats["y"].history[1].messages[3].content


async def test_events_stream_as_they_happen():
    seen = []
    p = panel(seat("x", "B", "B"), seat("y", "C", "B"), seat("z", "B", "B"))
    out = await debate(p, context=RunContext(on_event=seen.append))
    assert [(e.kind, e.speaker, e.round) for e in seen] == [
        ("turn", "x", 0), ("turn", "y", 0), ("turn", "z", 0),
        ("turn", "x", 1), ("turn", "y", 1), ("turn", "z", 1), ("note", "y", 1), ("decision", "Panel", 1)]
    assert len(out.transcript) == len(seen)
    assert "on_event" not in DebateSettings.model_fields  # the listener travels in the run context, never in settings


async def test_seeds_and_temperature_reach_each_seat():
    p = panel(seat("x", "B"), seat("y", "B"), seat("z", "B"))
    await debate(p, temperature=0.7, seeds=[11, 12, 13])
    assert [m.history[0].seed for m in p.seats.values()] == [11, 12, 13]
    assert all(m.history[0].temperature == 0.7 for m in p.seats.values())
    with pytest.raises(UsageError, match="seeds has 2 entries; 3 are needed"):
        await debate(panel(seat("x", "B"), seat("y", "B"), seat("z", "B")), seeds=[1, 2])


async def test_replicas_share_the_cache_at_temperature_zero_and_not_when_sampling(store):
    """One model in three seats (local,local,local): greedy calls are one request, so they are identical;
    sampled calls carry each seat's sample index, so each seat gets its own draw."""
    runtime = Runtime(cache=store)
    model = ScriptedModel(responder=lambda r: "Answer: B", name="replica", cacheable=True, runtime=runtime)
    replicas = Panel.of([model, model, model])
    assert list(replicas.seats) == ["scripted:replica", "scripted:replica#2", "scripted:replica#3"]
    await SPEC.run(CASE, replicas, DebateSettings(temperature=0.0))
    greedy = [row["key"] for row in store.call_log()]
    assert len(greedy) == 3 and len(set(greedy)) == 1
    await SPEC.run(CASE, replicas, DebateSettings(temperature=0.7))
    sampled = [row["key"] for row in store.call_log()][3:]
    assert len(sampled) == 3 and len(set(sampled)) == 3 and not set(sampled) & set(greedy)


async def test_needs_two_seats_and_an_mcq_case():
    with pytest.raises(UsageError, match="at least two seats"):
        await debate(panel(seat("x", "B")))
    with pytest.raises(UsageError, match="no options"):
        await debate(panel(seat("x", "B"), seat("y", "B")), Case(id="open", question="Why?"))


async def test_runner_stores_debate_transcripts_and_flows(store):
    cases = [CASE.model_copy(update={"id": f"q{i}"}) for i in range(3)]
    # q0: unanimous B (right); q1: y moves to B in round 1 (right); q2: B C D tie throughout, abstain
    scripts = {"x": ["B"] * 7, "y": ["B", "C", "B", "C", "C", "C", "C"], "z": ["B", "B", "B", "D", "D", "D", "D"]}
    # The queues are shared across items, so run one item at a time, in order.
    p = panel(*(seat(n, *s) for n, s in scripts.items()))
    runtime = Runtime(cache=store)
    config = RunConfig(dataset="inline", protocol="debate", models=["x", "y", "z"], concurrency=1)
    result = await run_benchmark(store, config, runtime, panel=p, cases=cases)
    items = {i["item_id"]: i for i in store.items(result.run_id)}
    assert all(i["status"] == "done" for i in items.values())
    assert len(store.events(result.run_id, "q1")) == 3 + 3 + 1 + 1  # 6 turns, 1 shift note, 1 decision
    summary = summarize(store, result.run_id)
    assert summary["scores"]["accuracy"]["mean"] == pytest.approx(2 / 3)
    assert summary["scores"]["initial_consensus"]["mean"] == pytest.approx(1 / 3)
    flows = flow_counts([(items[k]["outcome"]["data"], "B") for k in ("q0", "q1", "q2")])
    assert flows["stages"] == {"consensus_round_0": {"correct": 1}, "consensus_round_1": {"correct": 1}, "vote_tie": {"no_answer": 1}}
    assert flows["shifts"] == {"wrong_to_right": 1}


# ---------------------------------------------------------------- the benchmark script (acceptance 3), kept honest


async def test_bench_debate_vs_single_vs_vote_on_ten_items(store, shared_data):
    bench = load_bench("bench_debate_medqa")
    result = await bench.run_bench(store, limit=10, seed=3)
    runs = {r["label"]: r for r in result["runs"]}
    assert set(runs) == {"debate: sim-strong, sim-mid, sim-weak", "vote: sim-strong, sim-mid, sim-weak",
                         "single: sim-strong", "single: sim-mid", "single: sim-weak"}
    for r in runs.values():
        acc = r["accuracy"]
        assert r["done"] == 10 and r["failed"] == 0
        assert acc["low"] <= acc["estimate"] <= acc["high"] and acc["method"].lower().startswith("wilson")
        assert r["tokens_per_item"] > 0 and r["cost_per_item_usd"] > 0
    # transcripts stored: every debate item has its turns and a decision
    debate_id = result["run_ids"][0]
    for item in store.items(debate_id):
        kinds = [e["kind"] for e in store.events(debate_id, item["item_id"])]
        assert kinds.count("turn") >= 3 and kinds[-1] == "decision"
    # the baselines agree with the debate's own first round: each single run is that seat's first answer,
    # and the vote run is the vote of those answers (same prompts, same deterministic seats)
    summary = {r["label"]: {} for r in result["runs"]}
    for run_id, label in zip(result["run_ids"], [r["label"] for r in result["runs"]], strict=True):
        for row in store.scores(run_id):
            summary[label].setdefault(row["name"], []).append(row["value"])
    debate_scores = summary["debate: sim-strong, sim-mid, sim-weak"]
    for name in ("sim-strong", "sim-mid", "sim-weak"):
        assert summary[f"single: {name}"]["accuracy"] == debate_scores[f"initial_accuracy.{name}"]
    assert summary["vote: sim-strong, sim-mid, sim-weak"]["accuracy"] == debate_scores["initial_vote_accuracy"]
    # cost per item is the price table applied to the tokens: single sim-mid at $0.0010 / $0.0040 per 1K
    single_mid = store.items(result["run_ids"][3])
    tokens_in, tokens_out = sum(i["input_tokens"] for i in single_mid), sum(i["output_tokens"] for i in single_mid)
    assert runs["single: sim-mid"]["cost_per_item_usd"] == pytest.approx((tokens_in * 0.0010 + tokens_out * 0.0040) / 1000 / 10)
    # paired exact McNemar of the debate against each of the four others
    assert len(result["paired_vs_debate"]) == 4
    for comparison in result["paired_vs_debate"]:
        (test,) = comparison["tests"]
        assert test["method"].startswith("McNemar exact") and 0.0 <= test["p_value"] <= 1.0 and test["n"] == 10
    assert sum(sum(v.values()) for v in result["debate_flows"]["stages"].values()) == 10


# ---------------------------------------------------------------- the command line


def _cli(args, env, check=True):
    import subprocess

    from conftest import MEDPANEL, ROOT

    proc = subprocess.run([MEDPANEL, *args], check=False, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"medpanel {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def test_cli_debate_streams_turns_and_stores_the_run(cli_env):
    import json

    args = ["debate", "--question", "Which vitamin deficiency causes scurvy?", "--option", "A=Vitamin A", "--option", "B=Vitamin C",
            "--option", "C=Vitamin D", "--models", "scripted:Answer: B,scripted:Answer: C,scripted:Answer: B", "--rounds", "1", "--answer", "B"]
    proc = _cli(args, cli_env)
    lines = proc.stdout
    # 3 first answers, 3 in round 1, then the vote (B 2 : C 1)
    assert lines.count("round 0 · initial") == 3 and lines.count("round 1 · debate") == 3
    assert "Decision majority: B. Vitamin C" in lines and "correct" in lines
    assert lines.index("round 0 · initial") < lines.index("round 1 · debate") < lines.index("Decision")
    shown = json.loads(_cli(["show", "last", "--json"], cli_env).stdout)
    assert shown["protocol"] == "debate" and shown["scores"]["accuracy"]["mean"] == 1.0
    data = json.loads(_cli([*args, "--order", "sequential", "--json"], cli_env).stdout)
    assert data["item"]["outcome"]["data"]["order"] == "sequential" and data["item"]["outcome"]["answer"] == "B"
    assert [e["kind"] for e in data["events"]].count("turn") == 6


def test_cli_debate_from_a_case_file_with_env_options(cli_env, tmp_path):
    import json

    case = tmp_path / "case.yaml"
    case.write_text("question: Which drug?\noptions: {A: alpha, B: beta}\nreference: {answer: A}\n")
    # a list option from the environment splits on spaces (click), so these specs have none
    env = dict(cli_env, MEDPANEL_MODELS="scripted:Answer:A,scripted:Answer:A,scripted:Answer:A", MEDPANEL_TIE_POLICY="first-model")
    data = json.loads(_cli(["debate", str(case), "--json"], env).stdout)
    outcome = data["item"]["outcome"]
    assert outcome["answer"] == "A" and outcome["data"]["consensus_round"] == 0
    assert len(data["events"]) == 4  # three agreeing first answers and the decision


def test_cli_debate_longform_mode_uses_the_longform_protocol(cli_env, tmp_path):
    import json

    from medpanel.protocols.longform import AnswerReview

    # a valid review built from the long-form protocol's own schema (owned elsewhere; its shape may change): every score 8
    schema = AnswerReview.model_json_schema()

    def example(node: dict):
        node = schema["$defs"][node["$ref"].split("/")[-1]] if "$ref" in node else node
        if node.get("type") == "object":
            return {k: example(v) for k, v in node["properties"].items()}
        return 8 if node.get("type") == "integer" else "sound"

    review = example(schema)
    script = tmp_path / "seat.yaml"
    # each seat: its answer, its review of the other seat; the first seat (moderator) then consolidates
    script.write_text(json.dumps(["Rest, ice, compression and elevation.", review, "Rest, ice and elevation [scripted:seat, scripted:seat#2]."]))
    proc = _cli(["debate", "--mode", "longform", "--question", "How do I treat a mild ankle sprain?",
                 "--models", f"scripted:{script},scripted:{script}", "--rounds", "1", "--json"], cli_env)
    data = json.loads(proc.stdout)
    assert data["item"]["status"] == "done"
    assert data["item"]["outcome"]["answer"].startswith("Rest, ice and elevation")
    assert json.loads(_cli(["show", "last", "--json"], cli_env).stdout)["protocol"] == "longform"


@pytest.mark.parametrize("args, message", [
    (["debate", "--models", "scripted:echo,scripted:echo"], "No question given"),
    (["debate", "-q", "x", "-o", "A=1", "-m", "scripted:echo,scripted:echo"], "at least two options"),
    (["debate", "-q", "x", "-o", "A=1", "-o", "oops", "-m", "scripted:echo,scripted:echo"], "is not LETTER=TEXT"),
    (["debate", "-q", "x", "-o", "A=1", "-o", "B=2", "-m", "scripted:echo"], "at least two seats"),
    (["debate", "-q", "x", "-o", "A=1", "-o", "B=2", "-m", "scripted:echo,scripted:echo", "--order", "later"], "order: Input should be"),
    (["debate", "-q", "x", "-o", "A=1", "-o", "B=2", "-m", "scripted:echo,scripted:echo", "--mode", "essay"], "Unknown mode"),
    (["debate", "-q", "x", "-m", "scripted:echo,scripted:echo", "--mode", "longform", "--order", "sequential"], "has no setting order"),
])
def test_cli_debate_bad_input_exits_2(cli_env, args, message):
    proc = _cli(args, cli_env, check=False)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr + proc.stdout
