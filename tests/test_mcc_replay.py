"""Replaying MCC's published debate logs: the parser on short synthetic logs in each of the logs'
forms, the settling rules on hand-built transcripts, and the published MedQA and long-form logs."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from conftest import MEDPANEL, ROOT
from medpanel.errors import UsageError
from medpanel.replay import VoteRules, parse_log, replay_debate, replay_mcc_folder
from medpanel.replay.mcc import load_logs, replay_logs
from medpanel.replay.mcc_longform import replay_long_form
from medpanel.transcript import Transcript

SEP = "=" * 80

# English form, with the wording variants the machine translation produced. Round 1 leaves Qwen alone on B;
# in round 2 Qwen moves to D, which makes a consensus before DeepSeek speaks (MCC checks after every response).
ENGLISH_LOG = f"""Case_id: case_demo
Case_description: 
A 30-year-old runner has lateral knee pain after a marathon.
Serum: normal
Which structure is most likely irritated?
Options: 
1. Anterior cruciate ligament
2. Medial meniscus
3. Patellar tendon
4. Iliotibial band
Correct Answer: Iliotibial band
{SEP}
Launch the MCC process
{SEP}
GPT is reasoning the answer...
GPT's diagnostic conclusion:
Choice: Option 4 (Iliotibial band)
GPT's full response:
{SEP}
**1. Case Summary** Lateral pain in a runner; Option 2 would be medial.
**My final selection is: Option 4 (Iliotibial band)**
{SEP}
Qwen is reasoning the answer...
Qwwn's diagnostic conclusion:
Choice: Option 2 (Medial meniscus)
Qwen's full response:
{SEP}
**My final selection is: Option 2 (Medial meniscus)**
{SEP}
Deepseek is reasoning the answer...
DeepSeek's diagnostic conclusion:
Choice: Option3 (Patellar tendon)
DeepSeek's full response:
{SEP}
**My final selection is: Option 3 (Patellar tendon)**
{SEP}

The initial diagnoses of the three models are different!
Correct answer: Option 4 (Iliotibial band)
The three models have different initial diagnoses, and the debate process begins... GPT chose Option 4, Qwen chose Option 2, and DeepSeek chose Option 3

======== Round 1 of debate ========
GPT is responding to the diagnoses of the other models...
GPT has finished responding. Choice: Option 4
GPT's response to the other models:
{SEP}
**I disagree with Qwen's viewpoint because** the pain is lateral. Option 2 does not fit.
{SEP}
GPT's post-response choice: Option 4 (Iliotibial band)
Qwen's choice: Option 2 (Medial meniscus)
DeepSeek's choice: Option 3 (Patellar tendon)
Qwen is responding to other models' diagnoses...
Qwen response completed, Choice: Option 2
Qwen's response to other models:{SEP}
**I maintain Option 2.**
{SEP}
Qwen's response: Option 2 (Medial meniscus)
GPT's choice: Option 4 (Iliotibial band)
DeepSeek's choice: Option 3 (Patellar tendon)
DeepSeek is responding to the diagnoses of the other models...
DeepSeek's response is complete, choice: Option 4
DeepSeek's response to other models:
{SEP}
**I agree with GPT's viewpoint.** My final selection is: Option 4
{SEP}
DeepSeek changes its position! From Option 3 to Option 4
GPT chooses: Option 4 (Iliotibial band)
Qwen chooses: Option 2 (Medial meniscus)
Round 1 of debate: Still no consensus, GPT chooses Option 4 (Iliotibial band), Qwen chooses Option 2 (Medial meniscus), DeepSeek chooses Option 4 (Iliotibial band)
======== Debate Round 2 ========
GPT is responding to the diagnosis of other models...
GPT response is complete, Choice: Option 4
GPT's response to other models:
{SEP}
**My final selection is: Option 4**
{SEP}
GPT's response: Option 4 (Iliotibial band)
Qwen's choice: Option 2 (Medial meniscus)
DeepSeek's choice: Option 4 (Iliotibial band)
Qwen is responding to the diagnosis of other models...
Qwen's response is complete, Choice: Option 4
Qwen's response to other models:
{SEP}
**I agree with the shared viewpoint of GPT and DeepSeek.** My final selection is: Option 4
{SEP}
Qwen's choice after responding: Option 4 (Iliotibial band)
GPT's choice: Option 4 (Iliotibial band)
DeepSeek's choice: Option 4 (Iliotibial band)
Debate Round 2: All models have reached a consensus! (All chose Option 4 - Iliotibial band)

========= Final Debate Result =========
GPT, Qwen, and DeepSeek-R1 have reached a consensus!
Final diagnosis: Option4 - Iliotibial band
Correct Answer: - Iliotibial band
Is the final diagnosis correct? ✓ Correct
"""

# Chinese console form (as in MedQA case_320 and the debate rounds of the mixed files): the three models
# stay split for one round, the round limit is reached, and a majority vote settles on a wrong answer.
CHINESE_LOG = f"""案例ID: case_zh
类别: step1
病例描述: 
A 60-year-old man has crushing chest pain for 40 minutes. Which test should come first?
选项: 
1. Chest radiograph
2. Electrocardiogram
3. Troponin in six hours
正确答案: Electrocardiogram
==================================================
开始医学案例辩论
{SEP}
GPT正在推理答案...
GPT API响应状态码: 200
开始提取模型选择...
【严格匹配】找到最终选择: 选项2 (Electrocardiogram)
GPT的诊断结论:
选择: 选项 2 (Electrocardiogram)
GPT的完整回答:
{SEP}
**My final selection is: Option 2 (Electrocardiogram)(心电图)**
{SEP}
Qwen正在生成答案...
Qwen的诊断结论:
选择: 选项 3 (Troponin in six hours)
Qwen的完整回答:
{SEP}
**My final selection is: Option 3**
{SEP}
DeepSeek正在生成答案...
DeepSeek的诊断结论:
选择: 选项 1 (Chest radiograph)
DeepSeek的完整回答:
{SEP}
**My final selection is: Option 1**
{SEP}
三个模型初始诊断存在分歧！
三个模型初始诊断存在分歧，开始辩论过程... GPT选择了选项2，Qwen选择了选项3，DeepSeek选择了选项1
======== 辩论第1轮 ========
GPT正在回应其他模型的诊断...
GPT回应完成，Choice: 选项 2
GPT对其他模型的回应内容:
{SEP}
**My final selection is: Option 2**
{SEP}
GPT回应后的选择：Option 2 (Electrocardiogram)
Qwen选择：Option 3 (Troponin in six hours)
DeepSeek选择：Option 1 (Chest radiograph)
Qwen正在回应其他模型的诊断...
Qwen回应完成，Choice: 选项 1
Qwen对其他模型的回应内容:
{SEP}
**My final selection is: Option 1**
{SEP}
Qwen回应后的选择：Option 1 (Chest radiograph)
GPT选择：Option 2 (Electrocardiogram)
DeepSeek选择：Option 1 (Chest radiograph)
DeepSeek正在回应其他模型的诊断...
DeepSeek回应完成，Choice: 选项 1
DeepSeek对其他模型的回应内容:
{SEP}
**My final selection is: Option 1**
{SEP}
GPT选择：Option 2 (Electrocardiogram)
Qwen选择：Option 1 (Chest radiograph)
辩论第1轮: 仍未达成一致，GPT选择Option 2 (Electrocardiogram)，Qwen选择Option 1 (Chest radiograph)，DeepSeek选择Option 1 (Chest radiograph)
达到最大辩论轮次，仍未达成一致。
最终选择（多数投票）: Option 1 (Chest radiograph)
正确诊断: Option 2 (Electrocardiogram)
最终选择是否正确: 错误 ✗
========= 最终辩论结果 =========
GPT，Qwen与DeepSeek-R1未达成共识
通过多数投票决定，最终诊断：选项1 - Chest radiograph
最终诊断是否正确: ✗ 错误
"""

# The Chinese header of another benchmark of the study (MMLU anatomy): '问题' for the question, the gold as
# a 0-based index with its option number, '的选择' for the conclusion; all three agree at once.
CHINESE_VARIANT_LOG = f"""案例ID: anatomy_demo
类别: anatomy
问题: 
Which nerve supplies the deltoid muscle?
选项: 
1. Radial nerve
2. Axillary nerve
3. Median nerve
正确答案索引: 1 (对应选项编号: 2)
==================================================
开始解剖学多选题辩论
{SEP}
GPT正在推理答案...
【提取】找到最终选择: 选项2
GPT的选择:
选择: 选项 2 (Axillary nerve)
GPT的完整回答:
{SEP}
**My final selection is: Option 2**
{SEP}
Qwen正在生成答案...
Qwen的选择:
选择: 选项 2 (Axillary nerve)
Qwen的完整回答:
{SEP}
**My final selection is: Option 2**
{SEP}
DeepSeek正在生成答案...
DeepSeek的选择:
选择: 选项 2 (Axillary nerve)
DeepSeek的完整回答:
{SEP}
**My final selection is: Option 2**
{SEP}
三个模型初始选择已达成一致！所有模型都选择了选项2
========= 最终辩论结果 =========
GPT，Qwen与DeepSeek达成共识！最终选择：选项2 - Axillary nerve
正确答案: 选项2
最终选择是否正确: ✓ 正确
"""

# The same variant with a debate: Qwen starts on option 1, moves to 2 in round 1, and the panel agrees.
CHINESE_VARIANT_DEBATE = CHINESE_VARIANT_LOG.replace(
    "Qwen的选择:\n选择: 选项 2 (Axillary nerve)", "Qwen的选择:\n选择: 选项 1 (Radial nerve)").split("三个模型初始选择")[0] + f"""三个模型初始选择存在分歧！
三个模型初始选择存在分歧，开始辩论过程... GPT选择了选项2，Qwen选择了选项1，DeepSeek选择了选项2
======== 辩论第1轮 ========
GPT正在回应其他模型的选择...
开始提取模型选择...
【提取】找到最终选择: 选项2
GPT回应完成，选择: 选项 2
GPT对其他模型的回应内容:
{SEP}
**I agree with DeepSeek's viewpoint.** My final selection is: Option 2
{SEP}
GPT回应后的选择：选项 2 (Axillary nerve)
Qwen选择：选项 1 (Radial nerve)
DeepSeek选择：选项 2 (Axillary nerve)
Qwen正在回应其他模型的选择...
【提取】找到最终选择: 选项2
Qwen回应完成，选择: 选项 2
Qwen对其他模型的回应内容:
{SEP}
**My final selection is: Option 2**
{SEP}
Qwen回应后的选择：选项 2 (Axillary nerve)
GPT选择：选项 2 (Axillary nerve)
DeepSeek选择：选项 2 (Axillary nerve)
辩论第1轮: 所有模型已达成一致！(均选择了选项2 - Axillary nerve)
========= 最终辩论结果 =========
GPT，Qwen与DeepSeek达成共识！最终选择：选项2 - Axillary nerve
正确答案: 选项2
最终选择是否正确: ✓ 正确
案例 0 的辩论结果已保存到 debate_results/anatomy_debate_result_case_0.json
"""

# Answers as words, no numbered options (the PubMedQA logs): every seat speaks in every round.
WORD_LOG = """PMID: 999
Question: Does early mobilisation shorten hospital stay?
Correct Answer: yes

======================= Launch the MCC process =======================
----- GPT's initial response -----
GPT is reasoning the answer...
**4. Final Answer**
**My final choice is: "maybe"**
GPT selected: maybe

----- Qwen's initial response -----
Qwen is reasoning the answer...
**My final choice is: "yes"**
Qwen selected: yes

----- Deepseek's initial response -----
DeepSeek is reasoning the answer...
The trial investigators chose length of stay.
**My final choice is: "yes"**
DeepSeek selected: yes

-------- Debate round 1 --------

----------------------- GPT's response -----------------------
GPT is generating the response...
The authors chose a small sample, but the effect is clear.
**My final choice is: "yes"**
GPT selected: yes

----------------------- Qwen's response -----------------------
Qwen is generating the response...
Qwen selected: yes

----------------------- DeepSeek's response -----------------------
DeepSeek is generating the response...
DeepSeek selected: yes

Consensus reached: All models selected yes
"""


def _choices(log, phase: str, rnd: int = 0) -> list[tuple[str, str | None]]:
    return [(e.speaker, e.data["choice"]) for e in log.transcript.turns() if e.phase == phase and e.round == rnd]


# ---------------------------------------------------------------- the parser


def test_english_log_parses_into_case_and_transcript():
    log = parse_log(ENGLISH_LOG, "case_demo.txt")
    case = log.case
    assert case.id == "case_demo"
    assert case.question.startswith("A 30-year-old runner") and "Serum: normal" in case.question  # a "label:" line inside the question stays
    assert case.options == {"A": "Anterior cruciate ligament", "B": "Medial meniscus", "C": "Patellar tendon", "D": "Iliotibial band"}
    assert case.reference.answer == "D"  # the gold text matched to option 4
    # 'Qwwn' (a typo in the logs) and 'Deepseek' are still the seats; 'Option3' without a space is read
    assert _choices(log, "initial") == [("GPT", "D"), ("Qwen", "B"), ("DeepSeek", "C")]
    assert _choices(log, "debate", 1) == [("GPT", "D"), ("Qwen", "B"), ("DeepSeek", "D")]
    assert _choices(log, "debate", 2) == [("GPT", "D"), ("Qwen", "D")]  # consensus came before DeepSeek's turn
    gpt_initial = log.transcript.turns("GPT")[0]
    assert gpt_initial.model == "o1-mini" and "Lateral pain in a runner" in gpt_initial.text  # the reasoning block
    assert "I disagree with Qwen" in log.transcript.turns("GPT")[1].text
    logged = log.logged
    assert (logged.final, logged.method, logged.correct, logged.initial_consensus) == ("D", "consensus", True, False)
    assert [(r.round, r.consensus) for r in logged.rounds] == [(1, False), (2, True)]
    assert logged.rounds[0].choices == {"GPT": "D", "Qwen": "B", "DeepSeek": "D"}
    decision = [e for e in log.transcript if e.kind == "decision"]
    assert [(e.data["choice"], e.data["method"], e.data["round"]) for e in decision] == [("D", "consensus", 2)]
    assert log.warnings == []


def test_chinese_log_parses_with_a_majority_ending():
    log = parse_log(CHINESE_LOG, "case_zh.txt")
    assert log.case.id == "case_zh" and log.case.metadata["类别"] == "step1"
    assert log.case.options["B"] == "Electrocardiogram" and log.case.reference.answer == "B"
    assert _choices(log, "initial") == [("GPT", "B"), ("Qwen", "C"), ("DeepSeek", "A")]
    assert _choices(log, "debate", 1) == [("GPT", "B"), ("Qwen", "A"), ("DeepSeek", "A")]
    assert (log.logged.final, log.logged.method, log.logged.correct) == ("A", "majority", False)
    assert log.logged.rounds[0].choices == {"GPT": "B", "Qwen": "A", "DeepSeek": "A"}
    assert log.logged.initial_consensus is False
    assert log.warnings == []


def test_chinese_header_variant_with_an_index_gold():
    log = parse_log(CHINESE_VARIANT_LOG, "anatomy_demo.txt")
    assert log.case.id == "anatomy_demo" and log.case.question == "Which nerve supplies the deltoid muscle?"
    assert log.case.reference.answer == "B"  # index 1 = option number 2
    assert _choices(log, "initial") == [("GPT", "B"), ("Qwen", "B"), ("DeepSeek", "B")]
    assert (log.logged.final, log.logged.method, log.logged.correct, log.logged.initial_consensus) == ("B", "consensus", True, True)
    assert log.logged.gold == "B"


def test_chinese_variant_with_a_debate():
    log = parse_log(CHINESE_VARIANT_DEBATE, "anatomy_demo.txt")
    assert _choices(log, "initial") == [("GPT", "B"), ("Qwen", "A"), ("DeepSeek", "B")]
    assert _choices(log, "debate", 1) == [("GPT", "B"), ("Qwen", "B")]
    assert [(r.round, r.consensus, r.choices["DeepSeek"]) for r in log.logged.rounds] == [(1, True, "B")]
    assert (log.logged.final, log.logged.method, log.logged.correct) == ("B", "consensus", True)
    replay = replay_debate(log.transcript)
    assert (replay.final, replay.consensus_round, [(s.seat, s.from_choice, s.to_choice) for s in replay.shifts]) == ("B", 1, [("Qwen", "A", "B")])
    assert log.warnings == []


def test_word_answers_without_numbered_options():
    log = parse_log(WORD_LOG, "Case_999.txt")
    assert log.case.id == "999" and log.case.options == {} and log.case.reference.answer == "yes"
    # "The trial investigators chose length of stay." is prose, not a choice
    assert _choices(log, "initial") == [("GPT", "maybe"), ("Qwen", "yes"), ("DeepSeek", "yes")]
    assert _choices(log, "debate", 1) == [("GPT", "yes"), ("Qwen", "yes"), ("DeepSeek", "yes")]
    assert "small sample" in log.transcript.turns("GPT")[1].text  # the reasoning, when the log has no '=' block
    assert (log.logged.final, log.logged.method) == ("yes", "consensus")


def test_a_contradicting_log_is_settled_by_its_majority_of_statements_and_noted():
    # The status line after the reasoning and the reasoning itself say 4; the line before says 1 (a mistranslation).
    text = ENGLISH_LOG.replace("Qwen's response is complete, Choice: Option 4", "Qwen's response is complete, Choice: Option 1")
    log = parse_log(text, "case_demo.txt")
    qwen_round2 = [e for e in log.transcript.turns("Qwen") if e.round == 2][0]
    assert qwen_round2.data["choice"] == "D"
    assert qwen_round2.data["witnesses"] == {"status": "D", "stated": "A", "reasoning": "D"}
    assert any("states different choices" in w for w in log.warnings)


def test_an_unreadable_choice_is_none_and_blocks_consensus():
    text = CHINESE_VARIANT_LOG.replace("Qwen的选择:\n选择: 选项 2 (Axillary nerve)", "Qwen的选择:\nUnable to extract clear choice")
    text = text.replace("Qwen的完整回答:\n" + SEP + "\n**My final selection is: Option 2**", "Qwen的完整回答:\n" + SEP + "\n(cut off)")
    log = parse_log(text, "anatomy_demo.txt")
    assert _choices(log, "initial") == [("GPT", "B"), ("Qwen", None), ("DeepSeek", "B")]
    replay = replay_debate(log.transcript)
    # not a consensus (Qwen gave nothing readable); no rounds were held, so the vote settles it: B 2 votes
    assert (replay.final, replay.method, replay.consensus_round, replay.votes) == ("B", "majority", None, {"B": 2})


# ---------------------------------------------------------------- reading initial choices: mcc vs lenient

# MedQA case_174's form: Qwen's conclusion names its option on the heading line and has no "Choice:" line.
HEADING_ONLY = ENGLISH_LOG.replace("Qwwn's diagnostic conclusion:\nChoice: Option 2 (Medial meniscus)",
                                   "Qwwn's diagnostic conclusion: Option 2")


def test_mcc_reading_takes_only_the_choice_line_and_lenient_also_the_heading():
    mcc = parse_log(HEADING_ONLY, "case_demo.txt")  # the default reading
    assert _choices(mcc, "initial") == [("GPT", "D"), ("Qwen", None), ("DeepSeek", "C")]
    qwen = mcc.transcript.turns("Qwen")[0]
    assert qwen.data == {"choice": None, "lenient_choice": "B"}
    assert any("no choice line gives B" in w for w in mcc.warnings)
    assert mcc.transcript.turns("GPT")[0].data == {"choice": "D", "source": "choice-line"}
    lenient = parse_log(HEADING_ONLY, "case_demo.txt", choice_reading="lenient")
    assert _choices(lenient, "initial") == [("GPT", "D"), ("Qwen", "B"), ("DeepSeek", "C")]
    assert lenient.warnings == []
    # debate turns are read alike: Qwen's round-1 turn says B under both readings
    assert _choices(mcc, "debate", 1) == _choices(lenient, "debate", 1) == [("GPT", "D"), ("Qwen", "B"), ("DeepSeek", "D")]
    # the replay still ends as the log does: consensus on D in round 2 (Qwen's None only changes its starting point)
    assert replay_debate(mcc.transcript).final == replay_debate(lenient.transcript).final == "D"


def test_mcc_reading_ignores_extraction_traces_and_the_reasoning_in_chinese_logs():
    # the choice line '选择: 选项 2' removed: the trace '【严格匹配】找到最终选择: 选项2' and the reasoning's
    # 'My final selection is: Option 2' are left, which only the lenient reading takes
    text = CHINESE_LOG.replace("GPT的诊断结论:\n选择: 选项 2 (Electrocardiogram)\n", "GPT的诊断结论:\n")
    assert _choices(parse_log(text, "case_zh.txt"), "initial") == [("GPT", None), ("Qwen", "C"), ("DeepSeek", "A")]
    assert _choices(parse_log(text, "case_zh.txt", choice_reading="lenient"), "initial")[0] == ("GPT", "B")
    # the reasoning alone (trace removed too) is also only the lenient reading's
    no_trace = text.replace("【严格匹配】找到最终选择: 选项2 (Electrocardiogram)\n", "")
    assert _choices(parse_log(no_trace, "case_zh.txt"), "initial")[0] == ("GPT", None)
    lenient = parse_log(no_trace, "case_zh.txt", choice_reading="lenient")
    assert lenient.transcript.turns("GPT")[0].data == {"choice": "B", "source": "reasoning"}
    # the intact Chinese log reads the same under both: each choice line agrees with its trace
    assert _choices(parse_log(CHINESE_LOG, "case_zh.txt"), "initial") == _choices(parse_log(CHINESE_LOG, "case_zh.txt", choice_reading="lenient"), "initial")


def test_a_heading_that_breaks_the_logged_initial_consensus_still_replays_to_the_logged_answer():
    # all three seats chose option 2 and the log reports an initial consensus and no rounds; Qwen's option
    # sits on its heading ('Qwen的选择: 选项 2', the Chinese form of case_174's line), not on a choice line
    text = CHINESE_VARIANT_LOG.replace("Qwen的选择:\n选择: 选项 2 (Axillary nerve)", "Qwen的选择: 选项 2 (Axillary nerve)")
    mcc = parse_log(text, "anatomy_demo.txt")
    assert _choices(mcc, "initial") == [("GPT", "B"), ("Qwen", None), ("DeepSeek", "B")]
    assert (mcc.logged.final, mcc.logged.initial_consensus) == ("B", True)
    replay = replay_debate(mcc.transcript)
    # no consensus (Qwen unparsed) and no rounds to hold, so the vote over the parsed answers settles it: B 2 votes
    assert (replay.final, replay.method, replay.consensus_round, replay.votes) == ("B", "majority", None, {"B": 2})
    lenient = replay_debate(parse_log(text, "anatomy_demo.txt", choice_reading="lenient").transcript)
    assert (lenient.final, lenient.method, lenient.consensus_round) == ("B", "consensus", 0)


def test_word_answers_read_alike_under_both_readings():
    # 'GPT selected: maybe' is a choice line: the PubMedQA form has no conclusion heading
    assert _choices(parse_log(WORD_LOG, "Case_999.txt"), "initial") == [("GPT", "maybe"), ("Qwen", "yes"), ("DeepSeek", "yes")]
    assert parse_log(WORD_LOG, "Case_999.txt").warnings == parse_log(WORD_LOG, "Case_999.txt", choice_reading="lenient").warnings == []


def test_unknown_choice_reading_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="Unknown choice reading 'loose'"):
        parse_log(ENGLISH_LOG, "case_demo.txt", choice_reading="loose")
    with pytest.raises(UsageError, match="Unknown choice reading"):
        replay_mcc_folder(tmp_path, choice_reading="loose")  # refused before the (empty) folder is read


# ---------------------------------------------------------------- the settling rules


def test_replay_of_the_english_log():
    log = parse_log(ENGLISH_LOG, "case_demo.txt")
    replay = replay_debate(log.transcript)
    assert (replay.final, replay.method, replay.consensus_round, replay.unused_turns) == ("D", "consensus", 2, 0)
    assert [(s.seat, s.round, s.from_choice, s.to_choice) for s in replay.shifts] == [("DeepSeek", 1, "C", "D"), ("Qwen", 2, "B", "D")]
    assert replay.end_of_round[1] == {"GPT": "D", "Qwen": "B", "DeepSeek": "D"}
    # with only round 1 counted, the vote settles it: D (GPT, DeepSeek) beats B (Qwen)
    capped = replay_debate(log.transcript, rules=VoteRules(max_rounds=1))
    assert (capped.final, capped.method, capped.votes) == ("D", "majority", {"B": 1, "D": 2})


def _transcript(initial: list[str | None], rounds: list[list[tuple[str, str | None]]]) -> Transcript:
    t = Transcript()
    for seat, choice in zip(("GPT", "Qwen", "DeepSeek"), initial):
        t.record("turn", "", speaker=seat, phase="initial", round=0, data={"choice": choice})
    for number, turns in enumerate(rounds, 1):
        for seat, choice in turns:
            t.record("turn", "", speaker=seat, phase="debate", round=number, data={"choice": choice})
    return t


def test_three_way_tie_policies():
    # three rounds, nobody moves: B / D / A to the end -> 1 vote each
    stuck = [("GPT", "B"), ("Qwen", "D"), ("DeepSeek", "A")]
    t = _transcript(["B", "D", "A"], [stuck, stuck, stuck])
    first = replay_debate(t, rules=VoteRules(tie="first-model"))
    assert (first.final, first.method, first.tied, first.rounds_held) == ("B", "majority", True, 3)  # GPT speaks first
    assert replay_debate(t, rules=VoteRules(tie="abstain")).final is None
    drawn = {replay_debate(t, rules=VoteRules(tie="random-seeded"), key=f"case{i}").final for i in range(12)}
    assert drawn <= {"A", "B", "D"} and len(drawn) > 1
    assert replay_debate(t, rules=VoteRules(tie="random-seeded"), key="case3").final == replay_debate(t, rules=VoteRules(tie="random-seeded"), key="case3").final


def test_sequential_and_simultaneous_orders_can_settle_differently():
    # initial A / B / B. Round 1: GPT moves to B (all agree at that moment), then Qwen and DeepSeek move to A.
    t = _transcript(["A", "B", "B"], [[("GPT", "B"), ("Qwen", "A"), ("DeepSeek", "A")]])
    sequential = replay_debate(t, rules=VoteRules(order="sequential"))
    assert (sequential.final, sequential.method, sequential.consensus_round, sequential.unused_turns) == ("B", "consensus", 1, 2)
    simultaneous = replay_debate(t, rules=VoteRules(order="simultaneous"))
    # at the round's end: B, A, A -> no consensus, vote 2-1 for A
    assert (simultaneous.final, simultaneous.method, simultaneous.votes) == ("A", "majority", {"A": 2, "B": 1})


def test_word_log_replays_under_both_orders():
    log = parse_log(WORD_LOG, "Case_999.txt")
    # after GPT's round-1 turn everyone says yes: sequential stops there, leaving Qwen's and DeepSeek's turns unused
    assert (replay_debate(log.transcript).final, replay_debate(log.transcript).unused_turns) == ("yes", 2)
    both = replay_debate(log.transcript, rules=VoteRules(order="simultaneous"))
    assert (both.final, both.consensus_round, both.unused_turns) == ("yes", 1, 0)


def test_bad_rules_are_usage_errors():
    with pytest.raises(UsageError, match="Unknown tie policy"):
        VoteRules(tie="coin")
    with pytest.raises(UsageError, match="Unknown debate order"):
        VoteRules(order="round-robin")


def test_folder_replay_and_summary(tmp_path):
    (tmp_path / "case_2.txt").write_text(ENGLISH_LOG.replace("case_demo", "case_2"), encoding="utf-8")
    (tmp_path / "case_10.txt").write_text(CHINESE_LOG, encoding="utf-8")
    (tmp_path / "notes.md").write_text("not a log")
    (tmp_path / "readme.txt").write_text("These are the debate logs.\nOption 1: read them.\n")
    report = replay_mcc_folder(tmp_path)
    mc = report["multiple_choice"]
    assert mc["items"] == 2 and report["long_form"] == [] and report["skipped"] == [str(tmp_path / "readme.txt")]
    # case_2: initial D/B/C (GPT right), ends in consensus on D in round 2 (right).
    # case_zh: initial B/C/A (GPT right), vote A after round 1 (wrong).
    assert mc["initial"]["correct"] == {"GPT": 2, "Qwen": 0, "DeepSeek": 0}
    assert mc["initial"]["consensus"] == 0
    assert mc["initial"]["majority_vote_ties"] == 2  # both start 1-1-1, settled for GPT's choice: right both times
    assert mc["initial"]["majority_vote_correct"] == 2
    assert mc["consensus_by_round"] == {"2": {"consensus": 1, "correct": 1}}
    assert mc["majority_vote"] == {"items": 1, "correct": 0, "ties": 0, "no_answer": 0}
    assert mc["final"]["correct"] == 1 and mc["final"]["accuracy"] == 0.5
    # shifts: case_2 DeepSeek C->D (r1), Qwen B->D (r2); case_zh Qwen C->A (r1)
    assert mc["stance_shifts"]["total"] == 3 and mc["stance_shifts"]["to_correct"] == 2
    ag = mc["agreement_with_logs"]
    assert (ag["final_logged"], ag["final_agree"], ag["verdict_agree"], ag["round_summaries_agree"]) == (2, 2, 2, 3)


def test_missing_folder_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        replay_mcc_folder(tmp_path / "nowhere")
    with pytest.raises(UsageError, match="holds no .txt logs"):
        replay_mcc_folder(tmp_path)


def test_cli_replay_json_save_and_bad_input(cli_env, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "case_1.txt").write_text(ENGLISH_LOG, encoding="utf-8")
    proc = subprocess.run([MEDPANEL, "replay", "mcc", str(logs), "--json", "--save", "--run-id", "demo"], env=cli_env,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["multiple_choice"]["final"]["correct"] == 1 and report["stored_run"] == "demo"
    shown = subprocess.run([MEDPANEL, "show", "demo", "--item", "case_demo", "--json"], env=cli_env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    events = json.loads(shown.stdout)
    assert [e["data"].get("source") for e in events if e["kind"] == "decision"] == ["log", "replay"]
    bad = subprocess.run([MEDPANEL, "replay", "mcc", str(tmp_path / "nope")], env=cli_env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert bad.returncode == 2 and "does not exist" in bad.stderr and "Traceback" not in bad.stderr
    tie = subprocess.run([MEDPANEL, "replay", "mcc", str(logs), "--tie", "coin"], env=cli_env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert tie.returncode == 2 and "Unknown tie policy" in tie.stderr


def test_cli_choice_reading_option_and_envvar(cli_env, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "case_1.txt").write_text(HEADING_ONLY, encoding="utf-8")
    # Qwen's heading says option 2 (B): only the lenient reading takes it; the default notes it (Qwen's turn opens on line 23)
    default = subprocess.run([MEDPANEL, "replay", "mcc", str(logs), "--json"], env=cli_env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert default.returncode == 0, default.stderr
    report = json.loads(default.stdout)
    assert report["choice_reading"] == "mcc"
    assert [w["warning"] for w in report["multiple_choice"]["warnings"]] == [
        "line 23: Qwen's initial turn: no choice line gives B, which the lenient reading takes; unparsed under MCC's reading"]
    lenient = subprocess.run([MEDPANEL, "replay", "mcc", str(logs), "--json"], env={**cli_env, "MEDPANEL_CHOICE_READING": "lenient"},
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert json.loads(lenient.stdout)["choice_reading"] == "lenient" and json.loads(lenient.stdout)["multiple_choice"]["warnings"] == []
    bad = subprocess.run([MEDPANEL, "replay", "mcc", str(logs), "--choice-reading", "loose"], env=cli_env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert bad.returncode == 2 and "Unknown choice reading" in bad.stderr and "Traceback" not in bad.stderr


# ---------------------------------------------------------------- the published logs


def test_medqa_logs_replay_to_the_published_figures(shared_data):
    folder = shared_data / "mcc_logs" / "MedQA"
    if not folder.is_dir():
        pytest.skip(f"{folder} not found")
    started = time.perf_counter()
    texts, long_texts = load_logs(folder)
    logs, replays = replay_logs(texts)
    elapsed = time.perf_counter() - started
    from medpanel.replay import summarize_replays

    mc = summarize_replays(logs, replays)
    assert mc["items"] == 1273 and mc["gold_known"] == 1273 and long_texts == []
    assert mc["final"]["correct"] == 1179  # 92.6%, the paper's MedQA accuracy
    # The default (mcc) reading takes an initial choice only from its "Choice:" line, as MCC counted: Qwen 1040.
    # case_174 is the one file whose Qwen conclusion has no such line (its option, 5 = the gold, sits on the heading
    # "Qwen's diagnostic conclusion: Option 5", and the cut-off reasoning never selects), so Qwen is unparsed there.
    assert mc["initial"]["correct"] == {"GPT": 1084, "Qwen": 1040, "DeepSeek": 1143}
    by_id = {log.id: (log, rep) for log, rep in zip(logs, replays)}
    log174, rep174 = by_id["case_174"]
    assert rep174.initial == {"GPT": "E", "Qwen": None, "DeepSeek": "E"} and log174.case.reference.answer == "E"
    # the log reports an initial consensus and holds no rounds; the vote over the parsed answers gives its answer: E 2 votes
    assert (rep174.final, rep174.method, rep174.votes, log174.logged.final) == ("E", "majority", {"E": 2}, "E")
    assert by_id["case_116"][1].initial["Qwen"] is None  # its response was cut off and the log gives no choice
    # every other turn reads the same as under the lenient reading: just one parse note more, case_174's
    assert [w["case"] for w in mc["warnings"] if "lenient reading" in w["warning"]] == ["case_174"]
    ag = mc["agreement_with_logs"]
    assert ag["final_logged"] == 1272 and ag["final_agree"] == 1272 and ag["final_disagreements"] == []  # case_290's log stops early
    assert ag["verdict_logged"] == ag["verdict_agree"] == 1272
    # initial consensus 991 (lenient: 992 with case_174); the logs claim one also where a seat is unparsed (116, 174)
    assert mc["initial"]["consensus"] == 991 and mc["majority_vote"]["items"] == 95  # 94 + case_174
    assert (ag["initial_status_agree"], [d["case"] for d in ag["initial_status_disagreements"]]) == (1270, ["case_116", "case_174"])
    # the logged 3-way tie: GPT / Qwen / DeepSeek ended on 2 / 4 / 1 and the log's vote is 2 -> first-model
    log31, rep31 = by_id["case_31"]
    assert rep31.initial and rep31.tied and rep31.final == "B" == log31.logged.final
    # case_971 states Qwen's round-1 choice as 1 before its reasoning and 5 after it; 5 makes the logged consensus
    assert by_id["case_971"][1].consensus_round == 1 and by_id["case_971"][0].logged.rounds[0].consensus
    assert elapsed < 60, f"replay took {elapsed:.1f} s"


def test_medqa_logs_under_the_lenient_reading(shared_data):
    folder = shared_data / "mcc_logs" / "MedQA"
    if not folder.is_dir():
        pytest.skip(f"{folder} not found")
    from medpanel.replay import summarize_replays

    texts, _ = load_logs(folder)
    logs, replays = replay_logs(texts, choice_reading="lenient")
    mc = summarize_replays(logs, replays)
    # lenient also takes case_174's heading "Qwen's diagnostic conclusion: Option 5" (= the gold): Qwen 1040 + 1 = 1041
    assert mc["initial"]["correct"] == {"GPT": 1084, "Qwen": 1041, "DeepSeek": 1143}
    rep174 = next(rep for log, rep in zip(logs, replays) if log.id == "case_174")
    assert (rep174.initial["Qwen"], rep174.method, rep174.consensus_round, rep174.final) == ("E", "consensus", 0, "E")
    ag = mc["agreement_with_logs"]
    assert mc["final"]["correct"] == 1179 and ag["final_agree"] == ag["final_logged"] == 1272
    # initial consensus 992 = 991 + case_174; only case_116 (Qwen unparsed under both readings) departs from its log
    assert mc["initial"]["consensus"] == 992 and mc["majority_vote"]["items"] == 94
    assert [d["case"] for d in ag["initial_status_disagreements"]] == ["case_116"]


def test_abstaining_on_ties_departs_from_the_logs_only_at_the_tie(shared_data):
    folder = shared_data / "mcc_logs" / "MedQA"
    if not folder.is_dir():
        pytest.skip(f"{folder} not found")
    from medpanel.replay import summarize_replays

    texts, _ = load_logs(folder)
    rules = VoteRules(tie="abstain")
    mc = summarize_replays(*replay_logs(texts, rules), rules=rules)
    assert [d["case"] for d in mc["agreement_with_logs"]["final_disagreements"]] == ["case_31"]
    assert mc["final"]["correct"] == 1179  # the tie's logged answer (2) was wrong anyway (gold 3)


def test_long_form_log_replays_to_the_logged_consensus_scores(shared_data):
    path = shared_data / "mcc_logs" / "Long_form_medical" / "table_s14_complete_log.txt"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    result = replay_long_form(path.read_text(encoding="utf-8"), path)
    r1, r2 = result["rounds"]
    # round 1, six scores per dimension (each model scores the two others):
    #   factual  9 9 10 9 10 9 -> mean 9.333, sigma 0.4714, A 0.8821
    #   complete 8 9 9 8 9 8   -> mean 8.5,   sigma 0.5,    A 0.875
    #   safety   10 10 10 10 10 9 -> mean 9.833, sigma 0.3727, A 0.9068   => mean 0.8880 ~ 0.89
    assert sorted(r1["scores"]["factual_accuracy"]) == [9, 9, 9, 9, 10, 10]
    assert r1["computed_by_dimension"]["completeness"] == pytest.approx(0.875)
    assert r1["computed"] == pytest.approx(0.888, abs=5e-4) and r1["logged"] == 0.89 and r1["agrees"]
    # round 2: factual 10 9 9 10 10 9 -> 0.875; complete 9 9 9 10 9 8 -> sigma 0.5774, 0.8557; safety all 10 -> 1  => 0.9102
    assert r2["computed"] == pytest.approx(0.9102, abs=5e-4) and r2["logged"] == 0.91 and r2["agrees"]
    assert all(r2["dimensions_agree"].values())
    # the logged run went on past 0.89 (>= 0.8) and stopped after round 2
    assert result["first_round_at_threshold"] == 1 and result["logged_stop_after_round"] == 2
