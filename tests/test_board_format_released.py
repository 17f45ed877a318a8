"""The `released_code` preset does what OpenTumorBoard's released code does, quirks included.

Two released sources: the training reward (training/verl_otb/reward.py: format score, loop
scanner, strict turn lines) and the evaluation reader
(scripts/evaluation/formats/simulation_evaluation_format.py: what `FormatScore.parse` reports in
this preset). Each quirk is worked by hand below, beside medpanel's named alternative.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import MEDPANEL, ROOT
from medpanel.scoring.board_format import FormatSettings, check_repetition, extract_conclusion, parse_board_response, score_format
from medpanel.scoring.reward import JudgeScores, board_reward

CONCLUSION = "Resect the lesion. Image in three months."
EVERY_OFFSET = FormatSettings(repetition_detector="every_offset")


def meeting(turns: str, conclusion: str = CONCLUSION) -> str:
    return f"<discussion>\n{turns}\n</discussion>\n<conclusion>{conclusion}</conclusion>"


def looping_meeting(padding: int, copies: int) -> str:
    """Turn 2 repeats an 8-token block. Word tokens: discussion, turn, 1, moderator (4), the padding,
    turn, 2, surgeon (3): the loop starts at token padding + 7."""
    pad = " ".join(f"w{i}" for i in range(padding))
    block = " ".join(f"b{i}" for i in range(8))
    return meeting(f"<turn 1> Moderator: {pad}\n<turn 2> Surgeon: " + " ".join([block] * copies))


# ---------------------------------------------------------------- the loop scanner


def test_a_loop_off_the_grid_counts_one_copy_fewer():
    # "x" then "a b" x 8: the loop starts at token 1, off the width-2 grid. The released scanner reads
    # blocks [x a] [b a] [b a] ... : seven copies of "b a" then a lone "b". Under 8: no loop.
    text = "x " + "a b " * 8
    released = check_repetition(text)
    assert (released.max_run, released.detected, released.detector) == (7, False, "released_grid")
    # every offset: a width-2 streak of 14 from token 3 -> 1 + 14 // 2 = 8 copies: a loop
    strict = check_repetition(text, EVERY_OFFSET)
    assert (strict.max_run, strict.detected) == (8, True)
    assert check_repetition("a b " * 8).max_run == 8  # on the grid both see all 8


def test_tails_under_eight_tokens_are_not_scanned():
    assert check_repetition("ok ok ok ok ok").max_run == 1              # the release starts at 1 and never scans
    assert check_repetition("ok ok ok ok ok", EVERY_OFFSET).max_run == 5


def test_the_severe_gate_at_128_copies_flips_with_the_grid():
    # padding 900: the loop starts at token 907 = 3 (mod 8), off the grid, and the grid sees 127 copies.
    # 1941 word tokens (4 + 900 + 3 + 1024 + discussion, conclusion, 7 words, conclusion); the top 4-gram
    # occurs 128 times: 512 / 1941 = .264, under .5, so only the run can make the loop severe.
    off = score_format(looping_meeting(900, 128), response_tokens=2000)
    assert off.repetition.tail_tokens == 1941 and off.repetition.ngram_count == 128
    assert (off.repetition.max_run, off.repetition.detected, off.repetition.severe) == (127, True, False)
    # penalty max(ramp(127; 8..128) = 119/120, ramp(.264; .15...5) = .326); base 1 -> format 1/120
    assert off.failure is None and off.score == pytest.approx(1 / 120)
    judges = JudgeScores(alignment=5, decisions=5, consistency=5)  # match .40 + .35 + .25 = 1
    assert board_reward(looping_meeting(900, 128), judges, response_tokens=2000).reward == pytest.approx(1 + 0.1 / 120)
    # the every-offset detector counts all 128: severe, gate closed, reward -.20 + .1 * -1
    strict = score_format(looping_meeting(900, 128), settings=EVERY_OFFSET, response_tokens=2000)
    assert (strict.repetition.max_run, strict.failure) == (128, "severe_repetition")
    # padding 905: the loop starts at 912, on the grid: the release sees 128 copies too
    on = score_format(looping_meeting(905, 128), response_tokens=2000)
    assert (on.repetition.max_run, on.failure, on.score) == (128, "severe_repetition", -1.0)
    assert board_reward(looping_meeting(905, 128), judges, response_tokens=2000).reward == pytest.approx(-0.30)


# ---------------------------------------------------------------- strict turn lines (the training reward)


def test_strict_turn_numbers_take_unicode_digits_after_the_first():
    # "<turn 1٢>" (ASCII 1, ARABIC-INDIC 2) matches the released [1-9]\d*: a valid turn numbered 12 at place 2
    text = meeting("<turn 1> Moderator: Shall we?\n<turn 1٢> Surgeon: Resect.")
    released = score_format(text)
    assert (released.components["turn_syntax"], released.components["numbering"], released.turn_count) == (1.0, 0.5, 2)
    ascii_only = score_format(text, settings=FormatSettings(turn_digits="ascii"))
    assert (ascii_only.components["turn_syntax"], ascii_only.components["numbering"], ascii_only.turn_count) == (0.5, 1.0, 1)
    # "<turn ١>": the first digit must be ASCII, in the release too
    assert score_format(meeting("<turn ١> Moderator: Shall we?")).components["turn_syntax"] == 0.0


def test_distinct_roles_are_counted_as_written():
    text = meeting("<turn 1> Moderator: Shall we?\n<turn 2> moderator: Yes.")
    assert score_format(text).role_count == 2  # the release's set of stripped roles is case-sensitive
    assert score_format(text, settings=FormatSettings(distinct_roles="casefolded")).role_count == 1


# ---------------------------------------------------------------- the evaluation reader


def turns_of(text: str, reader: str = "released") -> list[tuple[int, str, str]]:
    return [(t.number, t.role, t.text) for t in parse_board_response(text, reader).turns]


def test_released_reader_is_what_the_released_preset_reports():
    text = meeting("<turn 1> Moderator: First line.\nSecond line.\n<turn 2> Surgeon: Resect.")
    parse = score_format(text).parse
    assert parse.reader == "released"
    assert [(t.number, t.role, t.text) for t in parse.turns] == [(1, "Moderator", "First line.\n\nSecond line."), (2, "Surgeon", "Resect.")]
    assert score_format(text, settings=FormatSettings.for_preset("paper")).parse.reader == "lenient"


def test_continuation_lines_follow_a_blank_line_in_the_released_reader():
    text = meeting("<turn 1> Moderator: First line.\nSecond line.")
    assert turns_of(text) == [(1, "Moderator", "First line.\n\nSecond line.")]
    assert turns_of(text, "lenient") == [(1, "Moderator", "First line.\nSecond line.")]


def test_a_turn_head_alone_on_its_line_takes_the_role_from_the_next():
    text = meeting("<turn 1>\nModerator: Shall we?\n<turn 2> Surgeon: Resect.")
    assert turns_of(text) == [(1, "Moderator", "Shall we?"), (2, "Surgeon", "Resect.")]
    assert score_format(text).parse.status == "parsed"
    lenient = parse_board_response(text, "lenient")  # the head line names no role: no turn 1
    assert [(t.number, t.role) for t in lenient.turns] == [(2, "Surgeon")]
    assert "turn numbers are not 1..N in order" in lenient.warnings


def test_an_empty_turn_takes_the_next_line_even_the_next_head():
    text = meeting("<turn 1> Moderator:\n<turn 2> Surgeon: Resect.")
    assert turns_of(text) == [(1, "Moderator", "<turn 2> Surgeon: Resect.")]
    assert turns_of(text, "lenient") == [(2, "Surgeon", "Resect.")]  # a head with nothing said is no turn


def test_capital_turn_heads_are_not_turns_in_the_released_reader():
    mixed = meeting("<turn 1> Moderator: Shall we?\n<Turn 2> Surgeon: Resect.\n<turn 3> Oncologist: Agree.")
    assert turns_of(mixed) == [(1, "Moderator", "Shall we?\n\n<Turn 2> Surgeon: Resect."), (3, "Oncologist", "Agree.")]
    assert score_format(mixed).parse.warnings == ["turn numbers are not 1..N in order"]
    assert [t.number for t in parse_board_response(mixed, "lenient").turns] == [1, 2, 3]
    # only capitals: no turn head at all, so the release tries the markdown-table format and finds no
    # "Conclusion:" line
    capitals = score_format(meeting("<Turn 1> Moderator: Shall we?\n<Turn 2> Surgeon: Resect.")).parse
    assert (capitals.status, capitals.warnings) == ("raw_fallback", ["missing Conclusion section"])


def test_unicode_turn_numbers_in_the_evaluation_reader():
    text = meeting("<turn ١> Moderator: Shall we?\n<turn ٢> Surgeon: Resect.")  # ARABIC-INDIC 1, 2
    assert [t.number for t in score_format(text).parse.turns] == [1, 2]


def test_the_released_reader_reads_the_markdown_table_format():
    text = ("| Role | Response |\n|---|---|\n| **Moderator** | Shall we resect? |\n| Surgeon | Yes.\nWith margins. |\n"
            "Conclusion: Resect the lesion. Image in three months.")
    parse = score_format(text).parse
    assert (parse.status, parse.layout, parse.conclusion) == ("parsed", "table", CONCLUSION)
    assert [(t.role, t.text) for t in parse.turns] == [("Moderator", "Shall we resect?"), ("Surgeon", "Yes.\nWith margins.")]
    assert extract_conclusion(text, "released") == (CONCLUSION, "parsed")
    assert parse_board_response(text, "lenient").status == "raw_fallback"


def test_only_a_leading_think_block_is_removed_by_the_released_reader():
    well = meeting("<turn 1> Moderator: Shall we?\n<turn 2> Surgeon: Resect.")
    # an unclosed think block: the release removes nothing and reads the turns after it
    released = parse_board_response("<think>draft " + well, "released")
    assert (released.status, released.conclusion) == ("parsed", CONCLUSION)
    # the lenient reader (medpanel.reply_text.strip_reply): reasoning that never closes is no answer
    lenient = parse_board_response("<think>draft " + well, "lenient")
    assert (lenient.status, lenient.conclusion) == ("raw_fallback", None)
    assert parse_board_response("<think>plan</think>\n" + well, "released").status == "parsed_after_cleanup"


# ---------------------------------------------------------------- the command line


def run_cli(args, env):
    return subprocess.run([MEDPANEL, *args], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_cli_reward_off_the_grid_and_crlf_kept(cli_env, tmp_path):
    path = tmp_path / "loop.txt"
    path.write_text(looping_meeting(900, 128))
    judged = ["score", "reward", str(path), "--alignment", "5", "--decisions", "5", "--consistency", "5", "--tokens", "2000", "--json"]
    data = json.loads(run_cli(judged, cli_env).stdout)
    assert data["judged"] is True and data["reward"] == pytest.approx(1 + 0.1 / 120)
    strict = json.loads(run_cli([*judged, "--detector", "every_offset"], cli_env).stdout)
    assert strict["judged"] is False and strict["reward"] == pytest.approx(-0.30)
    # line ends are scored as written: "\r\n" breaks the envelope, as in the release (file's final "\r\n" dropped)
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes((meeting("<turn 1> Moderator: Go.\n<turn 2> Surgeon: Cut.") + "\n").replace("\n", "\r\n").encode())
    fmt = json.loads(run_cli(["score", "format", str(crlf), "--json"], cli_env).stdout)
    assert fmt["components"]["envelope"] == 0.0 and fmt["components"]["no_outer_whitespace"] == 1.0
    assert fmt["score"] == pytest.approx(0.25 * 0.8125)  # dense 1 - .1875, not exact
    bad = run_cli(["score", "format", str(crlf), "--reader", "bogus"], cli_env)
    assert bad.returncode == 2 and "Unknown board reader" in bad.stderr and "Traceback" not in bad.stderr


def test_turn_numbers_drop_leading_zeros_of_any_script_as_int_does():
    # Only ASCII '0' was stripped before the 20-digit check: 25 Arabic-Indic zeros then "1" read as 10**20, not 1.
    from medpanel.scoring.board_reader import turn_number

    zero = "\u0660"  # ARABIC-INDIC DIGIT ZERO
    for digits in (zero * 25 + "1", zero * 25 + "\u0662", "\u0966" * 30 + "3", "1" + zero * 25, "0" * 3 + "7", "12"):
        assert turn_number(digits) == int(digits), ascii(digits)
    text = meeting(f"<turn {zero * 25}\u0661> Moderator: Shall we?\n<turn \u0662> Surgeon: Resect.")
    assert [t.number for t in score_format(text).parse.turns] == [1, 2]
    # strict lines ([1-9]\d*): "<turn 1" + 25 Arabic-Indic zeros + ">" is the number int() reads, not a stand-in
    strict = meeting(f"<turn 1> Moderator: Shall we?\n<turn 1{zero * 25}> Surgeon: Resect.")
    assert [t.number for t in score_format(strict).parse.turns] == [1, int("1" + zero * 25)]
