"""The Board Simulation format term and the evaluation reader, on responses worked by hand.

Released-code dense weights: blocks .25, envelope .1875, turn syntax .1875, numbering .1875,
conclusion sentences .125, no outer whitespace .0625; score = .25 dense + .75 exact.
Paper preset: six parts at 1/6 each (blocks in order, turn syntax, numbering, roles, conclusion
sentences, no outer whitespace).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import MEDPANEL, ROOT
from medpanel.errors import UsageError
from medpanel.scoring.board_format import (FormatSettings, check_repetition, count_sentences, count_sentences_loosely,
                                           extract_conclusion, longest_block_run, parse_board_response, score_format, word_tokens)

TURNS = ("<turn 1> Moderator: Shall we start with the scan?\n"
         "<turn 2> Radiologist: The lesion is 2 cm.\n"
         "<turn 3> Surgeon: I would resect it.")
CONCLUSION = "The board recommends resection. Follow-up imaging is planned in three months."


def meeting(turns: str = TURNS, conclusion: str = CONCLUSION) -> str:
    return f"<discussion>\n{turns}\n</discussion>\n<conclusion>{conclusion}</conclusion>"


WELL = meeting()
PAPER = FormatSettings.for_preset("paper")


def test_well_formed_response_scores_one():
    result = score_format(WELL)
    assert result.components == {"blocks": 1.0, "blocks_in_order": 1.0, "envelope": 1.0, "turn_syntax": 1.0, "numbering": 1.0,
                                 "roles": 1.0, "conclusion_sentences": 1.0, "no_outer_whitespace": 1.0}
    assert result.dense == pytest.approx(1.0)   # .25 + .1875*3 + .125 + .0625
    assert result.exact is True
    assert result.score == pytest.approx(1.0)   # .25*1 + .75*1
    assert (result.turn_count, result.role_count, result.moderator_first, result.conclusion_sentences) == (3, 3, True, 2)
    assert result.conclusion == CONCLUSION and result.needs_judges
    assert score_format(WELL, settings=PAPER).score == pytest.approx(1.0)  # every paper part holds too


def test_missing_discussion_block_fails_closed_but_keeps_dense_credit():
    only_conclusion = f"<conclusion>{CONCLUSION}</conclusion>"
    result = score_format(only_conclusion)
    # blocks .5 (one of two), envelope 0, syntax 0 and numbering 0 (no turn lines), conclusion 1, whitespace 1
    assert result.dense == pytest.approx(0.3125)  # .25*.5 + .125*1 + .0625*1
    assert result.base == pytest.approx(0.078125)  # .25*.3125
    assert result.failure == "one_block" and result.score == -0.75 and not result.needs_judges
    paper = score_format(only_conclusion, settings=PAPER)
    # blocks in order .5, syntax 0, numbering 0, roles 0, conclusion 1, whitespace 1 -> 2.5/6
    assert paper.dense == pytest.approx(2.5 / 6)
    assert paper.failure is None and paper.score == pytest.approx(0.25 * 2.5 / 6)  # .1041667, no gate in the paper preset


def test_no_blocks_and_truncation_fail_closed():
    assert score_format("The board recommends surgery.").failure == "no_blocks"
    assert score_format("The board recommends surgery.").score == -1.0
    truncated = score_format(WELL, truncated=True)
    assert truncated.failure == "truncated" and truncated.score == -1.0


def test_bad_numbering_costs_a_third_of_the_numbering_weight():
    result = score_format(meeting(TURNS.replace("<turn 3>", "<turn 4>")))
    assert result.components["turn_syntax"] == 1.0
    assert result.components["numbering"] == pytest.approx(2 / 3)  # numbers 1,2,4 at places 1,2,3: two of three right
    assert result.dense == pytest.approx(0.9375)  # 1 - .1875*(1/3)
    assert result.exact is False
    assert result.score == pytest.approx(0.234375)  # .25*.9375 + .75*0
    assert parse_board_response(meeting(TURNS.replace("<turn 3>", "<turn 4>"))).warnings == ["turn numbers are not 1..N in order"]


def test_a_line_that_is_not_a_turn_costs_turn_syntax():
    result = score_format(meeting(TURNS.replace("<turn 3> Surgeon:", "Surgeon:")))
    assert result.components["turn_syntax"] == pytest.approx(2 / 3)  # 2 of 3 lines match <turn N> Role: text
    assert result.components["numbering"] == 1.0                     # the two valid turns are 1, 2
    assert result.score == pytest.approx(0.25 * (1 - 0.1875 / 3))    # .25*.9375 = .234375


@pytest.mark.parametrize("conclusion, sentences, credit, score", [
    ("The board recommends resection.", 1, 0.5, 0.234375),              # dense 1 - .125*.5 = .9375; .25*.9375
    ("Resection is advised. Imaging follows. Trials were discussed.", 3, 1.0, 1.0),
    ("One. Two. Three. Four. Five.", 5, 0.5, 0.234375),                 # same as one sentence
    ("One. Two. Three. Four. Five. Six.", 6, 0.0, 0.21875),             # dense 1 - .125 = .875; .25*.875
])
def test_conclusion_sentence_credit(conclusion, sentences, credit, score):
    result = score_format(meeting(conclusion=conclusion))
    assert result.conclusion_sentences == sentences
    assert result.components["conclusion_sentences"] == credit
    assert result.score == pytest.approx(score)


def test_outer_whitespace_breaks_the_envelope_too():
    for text in (" " + WELL, WELL + "\n"):
        result = score_format(text)
        assert result.components["envelope"] == 0.0 and result.components["no_outer_whitespace"] == 0.0
        assert result.dense == pytest.approx(0.75)    # 1 - .1875 - .0625
        assert result.score == pytest.approx(0.1875)  # .25*.75
        # the paper preset has no envelope part: only whitespace is lost, 5/6 dense
        assert score_format(text, settings=PAPER).score == pytest.approx(0.25 * 5 / 6)  # .2083333


def test_moderator_not_first_matters_only_in_the_paper_preset():
    swapped = meeting("<turn 1> Radiologist: The lesion is 2 cm.\n<turn 2> Moderator: Thank you.")
    assert score_format(swapped).components["roles"] == 0.5   # two roles (.5) but not Moderator first (0)
    assert score_format(swapped).score == pytest.approx(1.0)  # roles carry no weight in the released code
    assert score_format(swapped, settings=PAPER).score == pytest.approx(0.25 * 5.5 / 6)  # dense (5 + .5)/6, exact 0 -> .2291667


def test_code_fence_is_scored_as_written_unless_asked_to_clean():
    fenced = "```xml\n" + WELL + "\n```"
    result = score_format(fenced)
    assert result.components["envelope"] == 0.0 and result.components["no_outer_whitespace"] == 1.0
    assert result.score == pytest.approx(0.203125)  # dense 1 - .1875 = .8125; .25*.8125
    assert score_format(fenced, settings=FormatSettings(score_cleaned_text=True)).score == pytest.approx(1.0)


def test_sentence_counting_rules():
    text = "Dr. Lee saw J. Smith at 5 p.m. today. He agreed!"
    # strict: "Dr." and "J." are skipped (title, initial); "m." (lower-case), "today.", "agreed!" count
    assert count_sentences(text) == 3
    # loose (evaluation warning): every end mark before a space counts: Dr. J. m. today. agreed!
    assert count_sentences_loosely(text) == 5
    assert count_sentences('He said "stop." Then left.') == 2  # a closing quote may follow the mark


def test_longest_block_run_at_any_alignment():
    assert longest_block_run("a b a b a b c".split(), 8) == 3    # width 2: positions 2..5 repeat -> 1 + 4//2
    assert longest_block_run("x a b a b a b a b".split(), 8) == 4  # starts off the even grid: 1 + 6//2
    assert longest_block_run("ok ok ok".split(), 8) == 3         # width 1: 1 + 2//1
    assert longest_block_run([], 8) == 0


def test_repetition_of_a_pure_loop():
    check = check_repetition("ok " * 20)
    assert check.max_run == 20              # width 1: 19 repeats after the first -> 1 + 19
    assert check.ngram_count == 17          # 4-grams in 20 tokens: 20 - 3, all the same
    assert check.ngram_fraction == 1.0      # min(1, 17*4/20)
    assert check.detected and check.severe  # fraction >= .5
    assert check.penalty == 1.0             # max(ramp(20; 8..128) = .1, ramp(1; .15...5) = 1)


def test_moderate_loop_is_a_continuous_penalty():
    padding = " ".join(f"w{i}" for i in range(1, 41))
    looping = meeting(f"<turn 1> Moderator: {padding}\n<turn 2> Radiologist: " + "no change " * 9 + "no change",
                      conclusion="The board recommends surveillance. Imaging follows in three months.")
    # word tokens: discussion 1 + (turn 1 moderator) 3 + 40 + (turn 2 radiologist) 3 + 20 + discussion 1 + conclusion 1
    #              + (the board recommends surveillance imaging follows in three months) 9 + conclusion 1 = 79
    assert len(word_tokens(looping)) == 79
    result = score_format(looping)
    # "no change" x 10 starts at token 47, off the width-2 grid: the released scanner sees "change no" x 9;
    # the every-offset detector sees all 10 (width-2 streak of 18 -> 1 + 18//2)
    assert result.repetition.max_run == 9
    assert check_repetition(looping, FormatSettings(repetition_detector="every_offset")).max_run == 10
    assert result.repetition.ngram_count == 9    # "no change no change" starts at loop offsets 0, 2, ..., 16
    assert result.repetition.ngram_fraction == pytest.approx(36 / 79)  # 9*4/79 = .4557, under .5: not severe
    assert result.repetition.detected and not result.repetition.severe
    # penalty max(ramp(9; 8..128) = 1/120, ramp(.4557; .15...5) = (36/79 - .15)/.35 = .8734)
    assert result.repetition.penalty == pytest.approx((36 / 79 - 0.15) / 0.35)
    assert result.failure is None
    assert result.score == pytest.approx(1 - (36 / 79 - 0.15) / 0.35)  # base 1 - .8734 = .1266


def test_severe_loop_fails_closed_in_released_and_floors_in_paper():
    looping = meeting("<turn 1> Moderator: Any change on the scan?\n<turn 2> Radiologist: " + " ".join(["no change"] * 60))
    result = score_format(looping)
    # 144 word tokens (1 + 3 + 5 + 3 + 120 + 1 + 1 + 9 + 1); top 4-gram 59 times -> min(1, 59*4/144) = 1
    assert result.repetition.ngram_fraction == 1.0 and result.repetition.max_run == 60  # width 2: 1 + 118//2
    assert result.failure == "severe_repetition" and result.score == -1.0
    paper = score_format(looping, settings=PAPER)
    assert paper.failure is None
    assert paper.repetition.penalty == 1.0   # max(ramp(60) = 52/120, ramp(1.0) = 1)
    assert paper.score == pytest.approx(0.0)  # base 1 - 1, above the floor of -1


@pytest.mark.parametrize("tokens, penalty", [
    (6144, 0.0),   # the ramp starts here
    (7168, 0.5),   # (7168 - 6144) / 2048
    (8192, 1.0),
    (9000, 1.0),   # capped at 1
])
def test_overlength_penalty(tokens, penalty):
    result = score_format(WELL, response_tokens=tokens)
    assert result.length.penalty == pytest.approx(penalty) and result.length.source == "given"
    assert result.score == pytest.approx(1.0 - penalty)


def test_overlength_with_a_smaller_generation_limit_and_a_tokenizer():
    assert score_format(WELL, response_tokens=6656, length_limit=7168).length.penalty == pytest.approx(0.5)  # 512 / 1024
    # whitespace tokenizer over WELL: 1 + 9 + 8 + 7 + 1 + 11 = 37 pieces
    tight = FormatSettings(overlength_start=30, overlength_end=40)
    result = score_format(WELL, settings=tight, tokenizer=str.split)
    assert (result.length.tokens, result.length.source) == (37, "tokenizer")
    assert result.score == pytest.approx(0.3)  # 1 - (37 - 30)/10
    # without a tokenizer: word tokens, 1 + 9 + 8 + 7 + 1 + 1 + 11 + 1 = 39 (tags count as words)
    assert score_format(WELL).length.tokens == 39 and score_format(WELL).length.source == "word_tokens"


def test_evaluation_reader_statuses():
    assert parse_board_response(WELL).status == "parsed"
    thought = parse_board_response("<think>Plan the meeting.</think>\n" + WELL)
    assert thought.status == "parsed_after_cleanup" and thought.cleanup == ["think"]
    fenced = parse_board_response("```\n" + WELL + "\n```")
    assert fenced.status == "parsed" and fenced.cleanup == ["code_fence"] and fenced.conclusion == CONCLUSION
    cut = parse_board_response(WELL.removesuffix("</conclusion>"))
    assert cut.status == "parsed_with_warnings" and cut.warnings == ["missing </conclusion> tag"] and cut.conclusion == CONCLUSION
    one = parse_board_response(meeting(conclusion="Resect."))
    assert one.warnings == ["expected a 2-4 sentence conclusion, found approximately 1"]
    assert parse_board_response(TURNS).status == "raw_fallback"                   # no conclusion tag
    assert parse_board_response("<conclusion>Resect. Then image.</conclusion>").status == "raw_fallback"  # no turns


def test_reader_joins_continued_lines_and_tolerates_missing_discussion_close():
    text = ("<discussion>\n<turn 1> Moderator: First line\ncontinues here.\n<turn 2> Surgeon: Resect.\n"
            f"<conclusion>{CONCLUSION}</conclusion>")
    parsed = parse_board_response(text)
    assert parsed.status == "parsed_with_warnings" and parsed.warnings == ["missing </discussion> tag"]
    assert [t.text for t in parsed.turns] == ["First line\ncontinues here.", "Resect."]
    assert [t.role for t in parsed.turns] == ["Moderator", "Surgeon"]


def test_extract_conclusion_fallbacks():
    assert extract_conclusion(WELL) == (CONCLUSION, "parsed")
    assert extract_conclusion("Some notes. <conclusion>Resect now.</conclusion>") == ("Resect now.", "conclusion_xml")
    assert extract_conclusion("Conclusion: Resect now.") == ("Resect now.", "conclusion_only_response")
    assert extract_conclusion("No plan here.") == ("", "unavailable")


def test_settings_are_checked():
    with pytest.raises(UsageError, match="sum to 1"):
        FormatSettings(dense_weights={"blocks": 0.5})
    with pytest.raises(UsageError, match="Unknown format components"):
        FormatSettings(dense_weights={"style": 1.0})
    with pytest.raises(UsageError, match="Unknown reward preset"):
        FormatSettings.for_preset("nope")
    assert FormatSettings.for_preset("paper", overlength_end=4096, overlength_start=2048).overlength_end == 4096


def run_cli(args, env, stdin=None):
    return subprocess.run([MEDPANEL, *args], env=env, input=stdin, capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_cli_format_reads_a_file_or_stdin(cli_env, tmp_path):
    path = tmp_path / "reply.txt"
    path.write_text(WELL + "\n")  # the file's final newline is not part of the response
    data = json.loads(run_cli(["score", "format", str(path), "--json"], cli_env).stdout)
    assert data["score"] == pytest.approx(1.0) and data["needs_judges"] is True
    piped = run_cli(["score", "format", "-", "--json", "--keep-final-newline"], cli_env, stdin=WELL + "\n")
    assert json.loads(piped.stdout)["score"] == pytest.approx(0.1875)  # newline kept: envelope and whitespace lost
    env = cli_env | {"MEDPANEL_REWARD_PRESET": "paper", "MEDPANEL_RESPONSE_TOKENS": "7168"}
    assert json.loads(run_cli(["score", "format", str(path), "--json"], env).stdout)["score"] == pytest.approx(0.5)  # 1 - .5
    missing = run_cli(["score", "format", str(tmp_path / "none.txt")], cli_env)
    assert missing.returncode == 2 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr


def _long_meeting(words: int = 7000) -> str:
    per = words // 3
    turns = [f"<turn {i + 1}> {role}: " + " ".join(f"w{i * per + k}" for k in range(per))
             for i, role in enumerate(("Moderator", "Urologist", "Radiation Oncologist"))]
    return "<discussion>\n" + "\n".join(turns) + "\n</discussion>\n<conclusion>Offer surgery. Discuss with the patient.</conclusion>"


def test_released_code_applies_no_overlength_penalty_when_no_token_count_is_given():
    # The release's _overlong_penalty(None, ...) returns 0; medpanel fell back to word tokens and scored 0.5757.
    long = _long_meeting()
    released = score_format(long, settings=FormatSettings.for_preset("released_code"))
    assert released.score == pytest.approx(1.0) and released.length.penalty == 0.0
    assert released.length.note == "length unknown: no overlength penalty (as the release)"
    assert released.length.source == "word_tokens" and released.length.tokens > 7000  # the count, for reference only
    # a count, given or from a tokenizer, is still penalised; the paper preset keeps its word-token stand-in
    given = score_format(long, settings=FormatSettings.for_preset("released_code"), response_tokens=7013)
    assert given.length.penalty == pytest.approx((7013 - 6144) / 2048) and given.length.note is None
    assert score_format(long, tokenizer=str.split).length.penalty > 0
    paper = score_format(long, settings=FormatSettings.for_preset("paper"))
    assert paper.length.penalty == pytest.approx((paper.length.tokens - 6144) / 2048) and paper.length.note is None
