"""The one reply stripper: reasoning blocks and fences, one policy for unclosed reasoning."""

from hypothesis import given, settings
from hypothesis import strategies as st

from medpanel.reply_text import strip_fence, strip_reasoning, strip_reply


def test_closed_blocks_are_removed_wherever_they_are():
    got = strip_reply("<think>A is tempting</think>Answer: B <think >but</think> final")
    assert got.text == "Answer: B  final"
    assert got.steps == ("think",)
    assert not got.unclosed_reasoning


def test_unclosed_reasoning_is_no_answer():
    got = strip_reply("<think>Option C looks right because ... Answer: C")
    assert got.text == ""
    assert got.unclosed_reasoning and got.no_answer


def test_a_second_block_left_open_is_still_no_answer():
    got = strip_reply("<think>short</think>Answer: A<THINKING>on reflection D")
    assert got.unclosed_reasoning and got.text == ""


def test_a_lone_closing_tag_ends_the_reasoning():
    # R1-style templates put the opening tag in the prompt; only the text after the close is the answer.
    got = strip_reply("the options suggest A ... </think>\nAnswer: D")
    assert got.text == "Answer: D" and got.steps == ("think",)


def test_fence_with_and_without_language_tag():
    assert strip_reply('```json\n{"answer": "x"}\n```').text == '{"answer": "x"}'
    assert strip_reply("```\nplain\n```").steps == ("code_fence",)
    assert strip_fence("```\nunterminated") == ("unterminated", True)
    assert strip_fence("no fence") == ("no fence", False)


def test_reasoning_then_fence():
    got = strip_reply('<think>x</think>\n```json\n{"a": 1}\n```')
    assert got.text == '{"a": 1}' and got.steps == ("think", "code_fence")


def test_nothing_to_strip_keeps_the_text():
    got = strip_reply("  Answer: A  ")
    assert got.text == "Answer: A" and got.steps == () and not got.no_answer
    assert strip_reply(None).text == ""


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_never_raises_and_never_leaves_an_open_tag(text):
    got = strip_reasoning(text)
    lowered = got.text.lower()
    assert got.unclosed_reasoning or "<think>" not in lowered
    if got.unclosed_reasoning:
        assert got.text == ""
