"""Trusting MCC numbers: choices never read out of unclosed reasoning, one `settle` for the live debate and
replays, and a log replay that reads every log's structure (not words inside a model's reasoning)."""

from __future__ import annotations

import itertools
import re

import pytest

from medpanel.cases import Case, Reference
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Panel, get_protocol
from medpanel.protocols.debate import DebateSettings
from medpanel.protocols.baselines import SelfConsistencySettings
from medpanel.protocols.single import SingleSettings
from medpanel.replay import VoteRules, parse_log, replay_debate
from medpanel.scoring.exact import parse_choice
from medpanel.transcript import Transcript

CASE = Case(id="q1", question="Which drug?", options={"A": "alpha", "B": "beta", "C": "gamma", "D": "delta"}, reference=Reference(answer="B"))
TRUNCATED = "<think>Beta fits best, so the answer is B. But wait, consider gamma"


# ---------------------------------------------------------------- choices: unclosed reasoning is no answer


@pytest.mark.parametrize("text, choice, status", [
    (TRUNCATED, None, "unclosed_reasoning"),                     # was read as B: cut-off reasoning scored as an answer
    ("<THINKING>Answer: C, surely", None, "unclosed_reasoning"),
    ("<think>Answer: C</think>\nAnswer: B", "B", "parsed"),       # closed reasoning is dropped, the reply after it read
    ("Answer: C is tempting</think>Answer: B", "B", "parsed"),    # the opening tag was in the prompt
    ("<think>Answer: C</think>", None, "empty"),                  # reasoning and nothing after it: no answer either
    ("```\nAnswer: D\n```", "D", "parsed"),
    ("I cannot tell from the options given.", None, "no_choice_found"),
])
def test_read_choice_states_why_there_is_no_answer(text, choice, status):
    assert parse_choice(text, CASE.options) == choice
    from medpanel.scoring.exact import read_choice

    read = read_choice(text, CASE.options)
    assert (read.choice, read.status) == (choice, status)


def _seat(name: str, *replies: str) -> ScriptedModel:
    return ScriptedModel(list(replies), name=name)


async def test_debate_records_unclosed_reasoning_apart_from_no_choice_found():
    p = Panel.of([_seat("x", "Answer: B", "Answer: B"), _seat("y", TRUNCATED, "Answer: B"), _seat("z", "No idea.", "Answer: B")],
                 names=["x", "y", "z"])
    out = await get_protocol("debate").run(CASE, p, DebateSettings(max_rounds=1))
    initial = {e.speaker: e.data for e in out.transcript.turns() if e.phase == "initial"}
    assert initial["y"]["choice"] is None and initial["y"]["answer_status"] == "unclosed_reasoning"
    assert initial["z"]["choice"] is None and initial["z"]["answer_status"] == "no_choice_found"
    assert initial["x"]["answer_status"] == "parsed"
    # the truncated B never counted as agreement: the seats debated and agreed only in round 1
    assert out.data["consensus_round"] == 1 and out.answer == "B"


async def test_single_and_self_consistency_record_the_reason():
    out = await get_protocol("single").run(CASE, Panel.of([_seat("m", TRUNCATED)]), SingleSettings())
    assert out.answer is None and out.data["answer_status"] == "unclosed_reasoning"
    assert out.transcript.turns()[0].data["answer_status"] == "unclosed_reasoning"
    model = ScriptedModel(responder=lambda r: TRUNCATED, name="m")
    out = await get_protocol("self-consistency").run(CASE, Panel.of([model]), SelfConsistencySettings(k=3))
    assert out.answer is None and out.data["samples"] == [None, None, None]
    assert {e.data["answer_status"] for e in out.transcript.turns()} == {"unclosed_reasoning"}


# ---------------------------------------------------------------- one settle: live debate and replay alike


def _scripted_panel(script: dict[str, list[str | None]]) -> Panel:
    def reply(choice):
        return f"Answer: {choice}" if choice else "I am not sure."
    return Panel.of([ScriptedModel([reply(c) for c in choices], name=seat) for seat, choices in script.items()], names=list(script))


def _as_log_transcript(script: dict[str, list[str | None]]) -> Transcript:
    """The turns a log of this debate would record, in speaking order, with every round played out
    (a log may hold turns after the settlement: the replay must ignore them as the live debate never asked)."""
    t = Transcript()
    for seat, choices in script.items():
        t.record("turn", "", speaker=seat, round=0, phase="initial", data={"choice": choices[0]})
    for rnd in range(1, len(next(iter(script.values())))):
        for seat, choices in script.items():
            t.record("turn", "", speaker=seat, round=rnd, phase="debate", data={"choice": choices[rnd]})
    return t


CHOICES = ["B", "C", None]
SCRIPTS = [dict(zip("xyz", (list(a), list(b), list(c))))
           for a, b, c in itertools.islice(itertools.product(itertools.product(CHOICES, repeat=3), repeat=3), 0, None, 997)]


@pytest.mark.parametrize("order", ["sequential", "simultaneous"])
@pytest.mark.parametrize("tie", ["abstain", "first-model"])
async def test_live_debate_and_replay_settle_identical_inputs_identically(order, tie):
    assert len(SCRIPTS) >= 19
    for script in SCRIPTS:
        live = await get_protocol("debate").run(CASE, _scripted_panel(script), DebateSettings(max_rounds=2, order=order, tie_policy=tie))
        rep = replay_debate(_as_log_transcript(script), ("x", "y", "z"), VoteRules(order=order, tie=tie), key=CASE.id)
        assert (rep.final, rep.consensus_round) == (live.answer, live.data["consensus_round"]), script
        assert rep.rounds_held == live.data["rounds_used"]
        if rep.method == "majority":
            assert rep.votes == live.data["decision"]["votes"] and rep.tied == bool(live.data["decision"]["tied"])


def test_settle_ignores_responses_after_a_sequential_consensus():
    from medpanel.protocols.settle import Response, settle

    responses = [Response("x", 1, "B"), Response("y", 1, "B"), Response("z", 1, "C")]
    seq = settle({"x": "C", "y": "B", "z": "B"}, responses, "xyz", order="sequential")
    assert (seq.answer, seq.consensus_round, seq.unused) == ("B", 1, 2)  # agreed once x spoke
    sim = settle({"x": "C", "y": "B", "z": "B"}, responses, "xyz", order="simultaneous", tie_policy="first-model")
    assert (sim.answer, sim.method, sim.consensus_round, sim.vote.votes) == ("B", "majority", None, {"B": 2, "C": 1})


# ---------------------------------------------------------------- the replay reads structure, not a model's words

from test_mcc_replay import ENGLISH_LOG, SEP, WORD_LOG  # noqa: E402  (the synthetic logs of each form)


def _turn_choices(log) -> list[tuple[str, str, int, str | None]]:
    return [(e.speaker, e.phase, e.round, e.data["choice"]) for e in log.transcript.turns()]


def _read(text: str, name: str = "case_x.txt"):
    return parse_log(text, name)


# Sentences a model may write in its reasoning that look like the log's own end-of-debate / result markers.
REASONING_PHRASES = ["Maximum caution is needed with early mobilisation.", "The pilot did not reach its enrolment target.",
                     "maximum benefit was seen in the elderly.", "Is the final answer correct? The data lean that way.",
                     "Correct answer: hard to say from one trial.", "Consensus reached in the guidelines favours it.",
                     "Round 2: the authors revisit the cohort.", "All models chose to ignore the confounders here.",
                     "Final answer depends on the effect size."]


def test_reasoning_words_do_not_end_a_turn_in_a_log_without_blocks():
    # WORD_LOG has no '=' rows around the reasoning: the seat's selection line follows its own words. Before the fix,
    # "maximum" / "did not reach" ended the turn and the selection line ("GPT selected: maybe") was lost.
    base = _read(WORD_LOG)
    for phrase in REASONING_PHRASES:
        mutated = WORD_LOG.replace('**My final choice is: "maybe"**', f'{phrase}\n**My final choice is: "maybe"**') \
                          .replace("The authors chose a small sample", f"{phrase}\nThe authors chose a small sample")
        log = _read(mutated)
        assert _turn_choices(log) == _turn_choices(base), phrase
        assert (log.logged.final, log.logged.method, log.logged.unread) == ("yes", "consensus", []), phrase
        assert replay_debate(log.transcript, key=log.id).final == "yes"


def test_doubled_punctuation_in_selection_lines_is_read():
    for punct in ("::", ": :", "：", "：：", ":-"):
        mutated = WORD_LOG.replace("GPT selected: maybe", f"GPT selected{punct} maybe").replace("Qwen selected: yes", f"Qwen selected{punct} yes")
        assert _turn_choices(_read(mutated)) == _turn_choices(_read(WORD_LOG)), punct
    log = _read(ENGLISH_LOG.replace("Choice: Option 4 (Iliotibial band)", "Choice:: Option 4 (Iliotibial band)", 1))
    assert _turn_choices(log) == _turn_choices(_read(ENGLISH_LOG))


def _without_rows(text: str) -> str:
    """The log with no block around the reasoning: separator rows and '... response:' headers removed."""
    lines = [line for line in text.split("\n") if line.strip() != SEP]
    return "\n".join(line for line in lines if not re.search(r"(?i:full response|response to (?:the )?other models)\s*:\s*$", line))


def test_english_log_without_rows_and_with_marker_words_in_reasoning_reads_the_same():
    base = _read(ENGLISH_LOG)
    mutated = _without_rows(ENGLISH_LOG)
    for marker in ("**I disagree with Qwen's viewpoint because**", "**I maintain Option 2.**", "**I agree with GPT's viewpoint.**"):
        mutated = mutated.replace(marker, marker + "\n" + "\n".join(REASONING_PHRASES))
    log = _read(mutated)
    assert _turn_choices(log) == _turn_choices(base)
    assert [(r.round, r.consensus) for r in log.logged.rounds] == [(r.round, r.consensus) for r in base.logged.rounds]
    assert (log.logged.final, log.logged.correct, log.logged.unread) == (base.logged.final, base.logged.correct, [])


RESULT_FORMS = ["Final choice (majority vote): Option {n} (x)", "Consensus: All models chose Option {n}", "All models choose Option {n}",
                "Final answer: Option {n} - x", "Final result: Option {n}", "Final diagnosis:: Option {n} – x", "最终诊断：选项{n} - x",
                "By majority vote, the final diagnosis is: Option {n}", "The final diagnosis was determined by majority vote: Option {n}"]


@pytest.mark.parametrize("form", RESULT_FORMS)
def test_every_form_of_the_result_line_is_read_and_checked(form):
    from medpanel.replay import summarize_replays

    log = _read(ENGLISH_LOG.replace("Final diagnosis: Option4 - Iliotibial band", form.format(n=4)))
    assert log.logged.final == "D"
    assert [st.read for st in log.logged.statements] == [True]
    wrong = _read(ENGLISH_LOG.replace("Final diagnosis: Option4 - Iliotibial band", form.format(n=2)))
    ag = summarize_replays([wrong], [replay_debate(wrong.transcript, key=wrong.id)])["agreement_with_logs"]
    # the check reads the result line, whatever its form, and sees it contradict the replay (D)
    assert (ag["results_logged"], ag["results_read"], ag["results_agree"]) == (1, 1, 0)
    assert ag["result_disagreements"][0]["logged"] == "B"


def test_a_result_line_that_cannot_be_read_is_counted_as_unread(tmp_path):
    from medpanel.replay import replay_mcc_folder

    text = ENGLISH_LOG.replace("Final diagnosis: Option4 - Iliotibial band", "Final diagnosis: the band on the outer thigh")
    (tmp_path / "case_1.txt").write_text(text, encoding="utf-8")
    ag = replay_mcc_folder(tmp_path)["multiple_choice"]["agreement_with_logs"]
    assert (ag["results_logged"], ag["results_read"]) == (1, 0)
    assert ag["results_unread"] == [{"case": "case_demo", "line": text.split("\n").index("Final diagnosis: the band on the outer thigh") + 1,
                                     "text": "Final diagnosis: the band on the outer thigh"}]


def test_initial_consensus_line_states_a_result_that_is_checked():
    # "The three models have reached an initial consensus! All models chose Option 2" names the result: it is read
    log = _read(ENGLISH_LOG.split("The initial diagnoses")[0].replace("Option 2 (Medial meniscus)", "Option 4 (Iliotibial band)")
                .replace("Option3 (Patellar tendon)", "Option 4 (Iliotibial band)")
                + "The three models have reached an initial consensus! All models chose Option 4\n")
    assert [(st.kind, st.choice, st.read) for st in log.logged.statements] == [("initial_consensus", "D", True)]
    assert log.logged.initial_consensus is True


# ---------------------------------------------------------------- real logs, mutated


def _medqa(shared_data, name: str) -> tuple[str, str]:
    path = shared_data / "mcc_logs" / "MedQA" / name
    if not path.is_file():
        pytest.skip(f"{path} not found")
    return path.read_text(encoding="utf-8-sig"), str(path)


@pytest.mark.parametrize("name", ["case_31.txt", "case_971.txt", "case_1.txt", "case_0.txt"])
def test_real_logs_without_rows_and_with_marker_words_read_the_same(shared_data, name):
    # case_31: a 3-way tie settled by vote; case_971: Qwen's statement (1) and status line (5) differ; case_0: initial consensus
    text, path = _medqa(shared_data, name)
    base = parse_log(text, path)
    lines = [line for line in text.split("\n") if not re.fullmatch(r"={10,}", line.strip())]
    lines = [line for line in lines if not re.search(r"(?i:full response|response to (?:the )?other models)\s*:\s*$", line)]
    mutated = "\n".join(line + ("\n" + REASONING_PHRASES[i % len(REASONING_PHRASES)] if line.startswith("**") else "")
                        for i, line in enumerate(lines))
    log = parse_log(mutated, path)
    assert _turn_choices(log) == _turn_choices(base)
    assert (log.logged.final, log.logged.initial_consensus, log.logged.correct) == (base.logged.final, base.logged.initial_consensus, base.logged.correct)
    assert [(r.round, r.consensus) for r in log.logged.rounds] == [(r.round, r.consensus) for r in base.logged.rounds]
    assert log.logged.unread == []
    rep, rep0 = replay_debate(log.transcript, key=log.id), replay_debate(base.transcript, key=base.id)
    assert (rep.final, rep.consensus_round) == (rep0.final, rep0.consensus_round)


def test_medqa_agreement_check_reads_every_logged_result(shared_data):
    from medpanel.replay import replay_mcc_folder

    folder = shared_data / "mcc_logs" / "MedQA"
    if not folder.is_dir():
        pytest.skip(f"{folder} not found")
    mc = replay_mcc_folder(folder)["multiple_choice"]
    assert mc["items"] == 1273 and mc["final"]["correct"] == 1179
    assert mc["initial"]["correct"] == {"GPT": 1084, "Qwen": 1040, "DeepSeek": 1143}
    ag = mc["agreement_with_logs"]
    # 2,357 result lines: per initial-consensus log its "All models chose" line and its "Final diagnosis"; per voted log
    # both vote lines; per debate consensus its final line. Every one read, every one agrees with the replay.
    assert ag["results_unread"] == [] and ag["result_disagreements"] == []
    assert ag["results_logged"] == ag["results_read"] == ag["results_agree"] == 2357


def test_cli_prints_how_many_logged_results_it_could_not_read(cli_env, tmp_path):
    import subprocess

    from conftest import MEDPANEL, ROOT

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "case_1.txt").write_text(ENGLISH_LOG.replace("Final diagnosis: Option4 - Iliotibial band", "Final diagnosis: see the notes"),
                                     encoding="utf-8")
    proc = subprocess.run([MEDPANEL, "replay", "mcc", str(logs)], env={**cli_env, "COLUMNS": "200"}, capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "logged result lines: 0/1 read, 0 agree with the replay, 1 could not be read" in proc.stdout
    assert "unread result case_demo line" in proc.stdout and "Final diagnosis: see the notes" in proc.stdout


# ---------------------------------------------------------------- a '='-fenced block whose closing row is missing


def _drop_last_row(text: str) -> str:
    """The log with its last bare row of '=' deleted (the closing row of the last reasoning block)."""
    lines = text.split("\n")
    rows = [i for i, line in enumerate(lines) if re.fullmatch(r"=+", line.strip())]
    del lines[rows[-1]]
    return "\n".join(lines)


@pytest.mark.parametrize("name", ["case_3.txt", "case_31.txt", "case_0.txt", "case_971.txt"])
def test_a_missing_closing_row_does_not_swallow_the_result(shared_data, name):
    # Before the fix the block ran to the end of the file: no final, no round summaries, "0/0 read ... 0 unread".
    text, path = _medqa(shared_data, name)
    base, log = parse_log(text, path), parse_log(_drop_last_row(text), path)
    assert base.logged.statements and all(st.read for st in base.logged.statements)
    assert (log.logged.final, log.logged.method, log.logged.correct, log.logged.initial_consensus) == \
           (base.logged.final, base.logged.method, base.logged.correct, base.logged.initial_consensus)
    assert [(st.kind, st.choice, st.read) for st in log.logged.statements] == [(st.kind, st.choice, st.read) for st in base.logged.statements]
    assert [(r.round, r.consensus) for r in log.logged.rounds] == [(r.round, r.consensus) for r in base.logged.rounds]
    assert [t[:3] for t in _turn_choices(log)] == [t[:3] for t in _turn_choices(base)]


def test_a_fenced_block_open_at_the_end_of_the_log_warns_and_counts_its_result_lines_unread():
    cut = ENGLISH_LOG.index("Final diagnosis: Option4 - Iliotibial band")
    head = ENGLISH_LOG[:cut]
    last_row = head.rstrip("\n").rfind(SEP)
    # the last block's closing row gone, and no banner or summary after it: only a result-like line
    text = head[:last_row] + "Final diagnosis: Option4 - Iliotibial band\n"
    log = _read(text)
    assert any("never closes" in w for w in log.warnings), log.warnings
    assert [(st.kind, st.read) for st in log.logged.statements][-1:] == [("unknown", False)]
    assert log.logged.unread


@pytest.mark.parametrize("name", ["case_3.txt", "case_560.txt", "case_579.txt"])
def test_a_turn_opening_line_inside_a_fenced_block_ends_it_only_before_structure(shared_data, name):
    # "Qwen is reasoning the answer..." written inside a model's reasoning (after "**2.") closed the block and
    # started a phantom turn (the reviewer's injection changed the parsed turns in 150/150 logs).
    # A banner written inside the reasoning likewise closes nothing unless what it heads follows.
    text, path = _medqa(shared_data, name)
    base = parse_log(text, path)
    for line in ("Qwen is reasoning the answer...", "======== Debate Round 3 ========", "===== Final Debate Result ====="):
        injected = re.sub(r"(\n\*\*2\.[^\n]*\n)", lambda m: m.group(1) + line + "\n", text)
        assert injected != text
        log = parse_log(injected, path)
        assert _turn_choices(log) == _turn_choices(base), line
        assert (log.logged.final, [st.read for st in log.logged.statements]) == (base.logged.final, [st.read for st in base.logged.statements]), line


# ---------------------------------------------------------------- cut-off logs and duplicate case ids


def test_a_truncated_log_warns_and_is_reported_apart_from_the_figures(shared_data, tmp_path):
    # `head -c 20000 case_3.txt` was replayed as a finished debate, with no warning, and counted in the figures
    from medpanel.replay import replay_mcc_folder

    text, path = _medqa(shared_data, "case_3.txt")
    log = parse_log(text[:20000], path)
    assert any(w.startswith("log ends mid-debate") for w in log.warnings), log.warnings
    assert not any(w.startswith("log ends mid-debate") for w in parse_log(text, path).warnings)
    full0, _ = _medqa(shared_data, "case_0.txt")
    (tmp_path / "case_3.txt").write_text(text[:20000], encoding="utf-8")
    (tmp_path / "case_0.txt").write_text(full0, encoding="utf-8")
    report = replay_mcc_folder(tmp_path)
    assert report["multiple_choice"]["items"] == 1  # only the finished debate counts
    assert [d["case"] for d in report["ended_mid_debate"]] == ["case_3"]


def test_files_sharing_a_case_id_are_warned_about(shared_data, tmp_path):
    from medpanel.replay import replay_mcc_folder

    text, _ = _medqa(shared_data, "case_0.txt")
    (tmp_path / "case_0.txt").write_text(text, encoding="utf-8")
    (tmp_path / "case_0_copy.txt").write_text(text, encoding="utf-8")
    report = replay_mcc_folder(tmp_path)
    assert list(report["duplicate_case_ids"]) == ["case_0"]
    assert any("share case id case_0" in w["warning"] for w in report["multiple_choice"]["warnings"])
