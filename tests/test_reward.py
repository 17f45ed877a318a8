"""The Dr.GRPO reward over plain judge numbers, worked by hand.

alignment = (a - 1)/4, decisions = d/5, consistency = c/5, support = decisions * consistency,
match = .40 alignment + .35 support + .25 decisions, reward = match + .10 format.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from pydantic import ValidationError

from conftest import MEDPANEL, ROOT
from medpanel.errors import UsageError
from medpanel.scoring.reward import (JudgeScores, RewardSettings, board_reward, decisions_mean, needs_judges,
                                     split_reference)
from test_board_format import CONCLUSION, TURNS, WELL, meeting


def test_judged_reward_of_a_well_formed_response():
    result = board_reward(WELL, JudgeScores(alignment=4, decisions=3.5, consistency=3))
    assert result.alignment == pytest.approx(0.75)    # (4 - 1)/4
    assert result.decisions == pytest.approx(0.7)     # 3.5/5
    assert result.consistency == pytest.approx(0.6)   # 3/5
    assert result.support == pytest.approx(0.42)      # .7 * .6
    assert result.match == pytest.approx(0.622)       # .4*.75 + .35*.42 + .25*.7 = .3 + .147 + .175
    assert result.reward == pytest.approx(0.722)      # .622 + .1*1.0 (format 1)
    assert result.judged and result.preset == "released_code"


def test_decisions_weighted_mean_skips_out_of_scope():
    # therapy 4 (w 1), surgery -1 (out), next action 5 (w 1.15), trial 2 (w 2): (4 + 5.75 + 4)/(1 + 1.15 + 2)
    assert decisions_mean({"therapy": 4, "surgery": -1, "next_action": 5, "clinical_trial": 2}) == pytest.approx(13.75 / 4.15)
    assert decisions_mean({"therapy": -1, "surgery": None}) is None
    with pytest.raises(UsageError, match="Unknown decision dimensions"):
        decisions_mean({"radiation": 3})
    with pytest.raises(UsageError, match="outside 0..5"):
        decisions_mean({"therapy": 7})


def test_no_decision_in_scope_counts_as_zero():
    result = board_reward(WELL, JudgeScores(alignment=5, decisions=None, consistency=5))
    assert result.decisions == 0.0 and result.support == 0.0
    assert result.match == pytest.approx(0.4)   # .4*1 + .35*0 + .25*0
    assert result.reward == pytest.approx(0.5)  # .4 + .1*1


def test_gate_skips_judges_for_malformed_truncated_or_looping_replies():
    one_block = board_reward(f"<conclusion>{CONCLUSION}</conclusion>")
    assert not one_block.judged and one_block.match == -0.2
    assert one_block.reward == pytest.approx(-0.275)  # -.2 + .1*(-.75)
    no_blocks = board_reward("The board recommends surgery.")
    assert no_blocks.reward == pytest.approx(-0.3)    # -.2 + .1*(-1)
    truncated = board_reward(WELL, JudgeScores(alignment=5, decisions=5, consistency=5), truncated=True)
    assert not truncated.judged and truncated.reward == pytest.approx(-0.3)  # judges given are ignored
    looping = meeting("<turn 1> Moderator: Any change?\n<turn 2> Radiologist: " + " ".join(["no change"] * 60))
    assert board_reward(looping).reward == pytest.approx(-0.3)  # severe loop: -.2 + .1*(-1)
    assert not needs_judges(board_reward(looping).format)


def test_moderate_loop_lowers_format_only():
    padding = " ".join(f"w{i}" for i in range(1, 41))
    looping = meeting(f"<turn 1> Moderator: {padding}\n<turn 2> Radiologist: " + " ".join(["no change"] * 10),
                      conclusion="The board recommends surveillance. Imaging follows in three months.")
    result = board_reward(looping, JudgeScores(alignment=5, decisions=5, consistency=5))
    fmt = 1 - (36 / 79 - 0.15) / 0.35  # see test_board_format: 4-gram fraction 36/79 -> penalty .8734
    assert result.match == pytest.approx(1.0)              # .4 + .35*1 + .25
    assert result.reward == pytest.approx(1.0 + 0.1 * fmt)  # 1.0127


def test_overlength_enters_through_format():
    result = board_reward(WELL, JudgeScores(alignment=3, decisions=2.5, consistency=5), response_tokens=7168)
    # match .4*.5 + .35*(.5*1) + .25*.5 = .2 + .175 + .125 = .5; format 1 - (7168-6144)/2048 = .5
    assert result.reward == pytest.approx(0.55)  # .5 + .1*.5


def test_paper_preset_has_no_gate_and_floors_the_judged_terms():
    paper = RewardSettings.for_preset("paper")
    only_discussion = f"<discussion>\n{TURNS}\n</discussion>"
    result = board_reward(only_discussion, settings=paper)
    # blocks in order .5, syntax 1, numbering 1, roles 1, conclusion 0, whitespace 1 -> dense 4.5/6 = .75; base .25*.75
    assert result.format.score == pytest.approx(0.1875)
    assert result.match == 0.0 and not result.judged and not needs_judges(result.format)  # no conclusion to judge
    assert result.reward == pytest.approx(0.01875)  # 0 + .1*.1875
    same = board_reward(WELL, JudgeScores(alignment=4, decisions=3.5, consistency=3), settings=paper)
    assert same.reward == pytest.approx(0.722)      # the paper states the released normalisations; weights are the released ones


def test_weights_can_be_overridden():
    settings = RewardSettings.for_preset("released_code", format_weight=0.2, invalid_match=-0.5)
    assert board_reward(WELL, JudgeScores(alignment=4, decisions=3.5, consistency=3), settings=settings).reward == pytest.approx(0.822)  # .622 + .2
    assert board_reward("no tags", settings=settings).reward == pytest.approx(-0.7)  # -.5 + .2*(-1)
    with pytest.raises(UsageError, match="Unknown reward preset"):
        RewardSettings.for_preset("v2")


def test_missing_judges_and_bad_scales_are_refused():
    with pytest.raises(UsageError, match="needs the judges"):
        board_reward(WELL)
    with pytest.raises(ValidationError):
        JudgeScores(alignment=0, decisions=3, consistency=3)  # alignment is 1..5
    with pytest.raises(ValidationError):
        JudgeScores(alignment=3, decisions=3, consistency=6)  # consistency is 0..5


def test_reference_must_hold_one_conclusion():
    assert split_reference("Resect, then image.") == (None, "Resect, then image.")
    assert split_reference(WELL) == (TURNS, CONCLUSION)
    with pytest.raises(UsageError, match="exactly one"):
        split_reference("<conclusion>A.</conclusion><conclusion>B.</conclusion>")
    with pytest.raises(UsageError, match="exactly one"):
        board_reward(WELL, JudgeScores(alignment=3, decisions=3, consistency=3), reference="<discussion>x</discussion>")


def test_cli_reward(cli_env, tmp_path):
    path = tmp_path / "reply.txt"
    path.write_text(WELL)
    args = ["score", "reward", str(path), "--alignment", "4", "--decisions", "3.5", "--consistency", "3", "--json"]
    data = json.loads(subprocess.run([MEDPANEL, *args], env=cli_env, capture_output=True, text=True, timeout=120, cwd=ROOT).stdout)
    assert data["reward"] == pytest.approx(0.722)  # as in test_judged_reward_of_a_well_formed_response
    half = subprocess.run([MEDPANEL, "score", "reward", str(path), "--alignment", "4"], env=cli_env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert half.returncode == 2 and "--consistency" in half.stderr
