"""The GRPO reward is the bench scorer: BOARD_REWARD scores a run's meeting and a training sample alike,
skips the judges where the format fails closed, and leaves a failed judgement unscored, never zero."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from medpanel.cases.model import Case, Reference, Turn
from medpanel.context import RunContext
from medpanel.models.registry import build_model
from medpanel.models.runtime import Runtime
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Panel
from medpanel.protocols.board import BoardSettings
from medpanel.runs.runner import RunConfig, run_benchmark
from medpanel.runs.store import Store
from medpanel.scoring.judges import release_mode
from medpanel.scoring.reward import JudgeScores, RewardSettings, board_reward
from medpanel.train.reward import BoardReward, score_sample

ROOT = Path(__file__).resolve().parents[1]
JUDGE_FILE = ROOT / "examples" / "training" / "scripted_judge.yaml"
CASE = Case(id="pros-1", summary="A 69-year-old man with Grade Group 2 prostate cancer at the right base, PSA 9.4.",
            reference=Reference(conclusion="Offer active surveillance with repeat MRI in a year. Surgery is not advised now.",
                                discussion=[Turn(role="Moderator", text="Surveillance or treatment?"), Turn(role="Urologist", text="Surveillance.")]))
MEETING = ("<discussion>\n<turn 1> Moderator: We discuss a 69-year-old man with favourable prostate cancer.\n"
           "<turn 2> Radiologist: The MRI shows one 11 mm PI-RADS 4 lesion without extraprostatic extension.\n"
           "<turn 3> Urologist: Surveillance is reasonable at this grade.\n</discussion>\n"
           "<conclusion>Offer active surveillance with a repeat MRI in a year. Surgery is not advised now.</conclusion>")


def scripted_judge(runtime: Runtime | None = None):
    return build_model(f"scripted:{JUDGE_FILE}", runtime or Runtime())


def settings(preset: str = "released_code") -> BoardSettings:
    return BoardSettings(reward=preset)


async def test_a_well_formed_meeting_is_judged_and_its_reward_is_the_library_reward_of_those_judgements():
    judge = scripted_judge()
    scores = await score_sample(CASE, MEETING, judge, settings(), RunContext(),
                                tokens=80, length_limit=512)
    asked = sorted(r.schema_name for r in judge.history)
    assert asked == ["otb_conclusion_alignment", "otb_consistency", "otb_four_decisions", "otb_reference_scope"]
    # The same judge through the library path (checked side by side with the released reward elsewhere).
    expected = board_reward(MEETING, JudgeScores.from_judgements(await release_mode.reward_judgements(scripted_judge(), CASE, MEETING)),
                            response_tokens=80, length_limit=512)
    assert scores["reward"] == pytest.approx(expected.reward) and scores["reward_match"] == pytest.approx(expected.match)
    assert scores["reward_alignment"] == pytest.approx((4 - 1) / 4)  # the scripted alignment score 4 of 1..5
    assert scores["reward_decisions"] == pytest.approx((4 * 1.00 + 4 * 1.25 + 3 * 1.15) / (1.00 + 1.25 + 1.15) / 5)
    assert scores["reward_format"] == pytest.approx(expected.format.score) and scores["reward_format"] > 0
    assert scores["reward_judged"] == 1.0 and scores["reward_judge_failed"] == 0.0
    assert scores["reward"] == pytest.approx(scores["reward_match"] + 0.10 * scores["reward_format"])


@pytest.mark.parametrize("text, tokens, truncated, expected", [
    (MEETING[: len(MEETING) // 2], 40, True, -0.30),          # cut at the budget: fails closed
    ("The board recommends surveillance.", 5, False, -0.30),   # no blocks
    (MEETING.split("<conclusion>")[0], 60, False, -0.275),    # one block missing
])
async def test_a_meeting_the_format_fails_closed_costs_no_judge_call(text, tokens, truncated, expected):
    judge = scripted_judge()
    scores = await score_sample(CASE, text, judge, settings(), RunContext(), tokens=tokens, truncated=truncated, length_limit=512)
    assert judge.history == []
    assert scores["reward"] == pytest.approx(expected) and scores["reward_match"] == pytest.approx(-0.20)
    assert scores["reward_judged"] == 0.0


async def test_a_judge_that_cannot_score_leaves_the_reward_unscored_not_zero():
    judge = ScriptedModel(responder=lambda r: "I would rather not say.", name="mute", runtime=Runtime(max_reasks=0))
    scores = await score_sample(CASE, MEETING, judge, settings(), RunContext(), tokens=80)
    assert scores["reward"] is None and scores["reward_judge_failed"] == 1.0


async def test_the_paper_preset_scores_with_its_own_format_rules():
    ours = await score_sample(CASE, MEETING, scripted_judge(), settings("paper"), RunContext(), tokens=80)
    released = await score_sample(CASE, MEETING, scripted_judge(), settings("released_code"), RunContext(), tokens=80)
    library = board_reward(MEETING, JudgeScores.from_judgements(await release_mode.reward_judgements(scripted_judge(), CASE, MEETING)),
                           settings=RewardSettings.for_preset("paper"), response_tokens=80)
    assert ours["reward"] == pytest.approx(library.reward) and ours["reward_format"] == pytest.approx(library.format.score)
    assert ours["reward_match"] == pytest.approx(released["reward_match"])  # the judged terms do not depend on the preset


async def test_bench_and_training_give_one_meeting_the_same_reward(tmp_path):
    """Acceptance 3: a board run with --set reward=released_code stores exactly what GRPO's reward returns."""
    store = Store(tmp_path / "bench.db")
    runtime = Runtime(cache=store)
    writer = ScriptedModel(responder=lambda r: MEETING, name="writer", runtime=runtime)
    config = RunConfig(dataset="inline", protocol="board", models=["writer"],
                       settings={"reward": "released_code", "structured": "never", "max_tokens": 64}, roles={"judge": "judge"})
    result = await run_benchmark(store, config, runtime, panel=Panel.of([writer], names=["writer"], roles={"judge": scripted_judge(runtime)}),
                                 cases=[CASE])
    stored = {r["name"]: r["value"] for r in store.scores(result.run_id) if r["name"].startswith("reward")}
    data = store.items(result.run_id)[0]["outcome"]["data"]
    tokens = data["output_tokens"]
    assert data["length_limit"] == 64 and 0 < tokens < 64  # the run's response budget, read by the overlength term
    # The trainer with the same budget: a completion of as many tokens, ended by its eos token.
    reward = BoardReward({CASE.id: CASE}, scripted_judge(), run_id="grpo-test", length_limit=64, eos_ids={0})
    trained = await reward(prompts=[[]], completions=[[{"role": "assistant", "content": MEETING}]], completion_ids=[[7] * (tokens - 1) + [0]],
                           case_id=[CASE.id])
    assert stored["reward"] == pytest.approx(trained[0]) and stored["reward_judged"] == 1.0
    direct = await score_sample(CASE, MEETING, scripted_judge(), settings(), RunContext(), tokens=tokens, length_limit=64)
    assert stored == pytest.approx({k: v for k, v in direct.items() if v is not None})
    events = [e for e in store.events(result.run_id, CASE.id) if e["kind"] == "score" and e["data"]["scorer"] == "board_reward"]
    assert sorted(e["role"] for e in events) == ["conclusion_alignment", "consistency", "four_decisions"]


async def test_the_trl_reward_function_scores_a_batch_logs_each_term_and_attributes_its_calls(tmp_path):
    store = Store(tmp_path / "train.db")
    log = tmp_path / "rewards.jsonl"
    reward = BoardReward({CASE.id: CASE}, scripted_judge(Runtime(cache=store)), run_id="grpo-x", length_limit=6, eos_ids={0}, log_path=log)
    metrics: dict[str, float] = {}

    class State:
        global_step = 3

    completions = [[{"role": "assistant", "content": MEETING}], [{"role": "assistant", "content": "<discussion>\n<turn 1> Moderator"}]]
    got = await reward(prompts=[[], []], completions=completions, completion_ids=[[5, 6, 0], [5, 6, 7, 8, 9, 10]],
                       case_id=[CASE.id, CASE.id], trainer_state=State(), log_metric=metrics.__setitem__)
    assert got[1] == pytest.approx(-0.30) and got[0] > 0.5  # the second hit the 6-token budget without its end: cut
    assert metrics["reward_judged"] == pytest.approx(0.5) and set(metrics) >= {"reward_format", "reward_match"}
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["step"], r["sample"], r["tokens"]) for r in rows] == [(3, 0, 3), (3, 1, 6)] and rows[0]["completion"] == MEETING
    logged = store.call_log("grpo-x")
    assert len(logged) == 4 and {r["item_id"] for r in logged} == {f"train-step-3/{CASE.id}"}  # the judged sample's four calls
    with pytest.raises(ValueError, match="case_id"):
        await reward(prompts=[[]], completions=completions[:1], completion_ids=None, case_id=[])


def test_a_scripted_judge_file_answers_by_schema_and_a_bad_file_is_refused(tmp_path):
    from medpanel.errors import UsageError
    from medpanel.models.base import Message, Request

    judge = scripted_judge()
    reply = asyncio.run(judge.generate(Request(messages=[Message(role="user", content="x")], schema_name="otb_reference_scope")))
    assert json.loads(reply.text)["therapy"] == "positive"
    bad = tmp_path / "bad.yaml"
    bad.write_text("just: a mapping\n")
    with pytest.raises(UsageError, match="by_schema"):
        build_model(f"scripted:{bad}", Runtime())


def test_a_bench_run_with_the_reward_setting_is_scored_by_judge_run_as_training_scores_it(tmp_path, cli_env):
    """The CLI path: `bench --set reward=released_code`, then `judge run` adds the reward the trainer would give."""
    import subprocess

    from conftest import MEDPANEL

    writer = tmp_path / "writer.yaml"
    writer.write_text(json.dumps([MEETING]))
    cases = tmp_path / "cases.jsonl"
    cases.write_text(CASE.model_dump_json() + "\n")
    env = {**cli_env, "MEDPANEL_STORE": str(tmp_path / "cli.db")}
    ran = subprocess.run([MEDPANEL, "bench", str(cases), "--protocol", "board", "--models", f"scripted:{writer}", "--set", "reward=released_code",
                          "--set", "structured=never", "--json"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    judged = subprocess.run([MEDPANEL, "judge", "run", "last", "--judge", f"scripted:{JUDGE_FILE}", "--json"], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert judged.returncode == 0, judged.stderr
    store = Store(tmp_path / "cli.db")
    run_id = store.resolve_run_id("last")
    stored = {r["name"]: r["value"] for r in store.scores(run_id) if r["name"].startswith("reward")}
    expected = asyncio.run(score_sample(CASE, MEETING, scripted_judge(), settings(), RunContext()))
    assert stored == pytest.approx({k: v for k, v in expected.items() if v is not None}) and stored["reward_judged"] == 1.0
    bad = subprocess.run([MEDPANEL, "bench", str(cases), "--protocol", "board", "--models", f"scripted:{writer}", "--set", "reward=best"],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "reward" in bad.stderr and "Traceback" not in bad.stderr


def test_board_reward_option_needs_a_judge_and_a_known_preset(cli_env):
    import subprocess

    from conftest import MEDPANEL

    for extra, said in ((["--reward", "released_code"], "needs a judge"), (["--reward", "best", "--judge", "scripted:echo"], "not a reward preset")):
        done = subprocess.run([MEDPANEL, "board", "examples/prostate", "--model", "scripted:echo", *extra], env=cli_env, cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr


async def test_identical_samples_are_scored_once_and_a_silent_judge_stops_the_run():
    from medpanel.train.reward import JudgeSilent

    judge = scripted_judge()
    reward = BoardReward({CASE.id: CASE}, judge, concurrency=2)
    same = [[{"role": "assistant", "content": MEETING}]] * 3
    got = await reward(prompts=[[]] * 3, completions=same, completion_ids=None, case_id=[CASE.id] * 3)
    assert len(set(got)) == 1 and reward.distinct == 1 and len(judge.history) == 4  # one meeting's four judge calls
    mute = BoardReward({CASE.id: CASE}, ScriptedModel(responder=lambda r: "no", name="mute", runtime=Runtime(max_reasks=0)), silent_batches=2)
    one = [[{"role": "assistant", "content": MEETING}]]
    assert await mute(prompts=[[]], completions=one, completion_ids=None, case_id=[CASE.id]) == [None]
    cut = [[{"role": "assistant", "content": "no blocks"}]]
    await mute(prompts=[[]], completions=cut, completion_ids=None, case_id=[CASE.id])  # nothing asked: neither counts nor resets
    with pytest.raises(JudgeSilent, match="2 batches in a row"):
        await mute(prompts=[[]], completions=one, completion_ids=None, case_id=[CASE.id])
