"""parse_choice: explicit statements win, the last one counts, nothing is guessed."""

from __future__ import annotations

import pytest

from medpanel.scoring.exact import exact_match, parse_choice

ABCD = "ABCD"
TEN = "ABCDEFGHIJ"


@pytest.mark.parametrize("text, expected", [
    ("Answer: B", "B"),
    ("**Answer: B**", "B"),
    ("Final answer: (C)", "C"),
    ("The answer is D.", "D"),
    ("**Final Answer:** **C**", "C"),
    ("Answer - B", "B"),
    ("Answer: **Option B**", "B"),
    ("The correct answer is **B) Cholesterol embolization**", "B"),
    ("the best answer would be B", "B"),
    ("I choose option C.", "C"),
    ("My final selection is: Option C (Decreased ATP)", "C"),  # MCC's own closing line, with a letter
    ("\\boxed{C}", "C"),
    ("Option A is the most likely, given the biopsy.", "A"),
    ("A is tempting but the answer is C", "C"),
    ("I first thought A. Answer: B", "B"),
    ("Answer: C\nOn reflection...\nAnswer: D", "D"),  # the last statement wins
    ("<think>the answer is A</think>\nAnswer: C", "C"),  # a reasoning model's scratchpad is set aside
    ("B", "B"),
    ("(b)", "B"),
    ("A. no\nB. yes, this one\nC. no", None),  # a walk through the options is not a choice
    ("B. Cholesterol embolization", "B"),  # one option line only
    ("The answer is a rare syndrome.", None),  # lower-case 'a' is the article, not option A
    ("Answer: E", None),  # not one of the options
    ("Answer: I cannot tell", None),
    ("", None),
])
def test_parse_choice(text, expected):
    assert parse_choice(text, ABCD) == expected


def test_option_i_is_not_the_pronoun():
    assert parse_choice("Answer: I", TEN) == "I"
    assert parse_choice("Answer: I think it is H", TEN) is None  # no explicit letter after the pronoun...
    assert parse_choice("Final answer: I believe H.\nAnswer: H", TEN) == "H"


def test_answer_given_as_option_text():
    options = {"A": "yes", "B": "no", "C": "maybe"}
    assert parse_choice("Answer: maybe", options) == "C"
    assert parse_choice("Final answer: No.", options) == "B"
    assert parse_choice("Answer: yes", "ABC") is None  # without the texts, no way to tell
    # a longer option that starts with a shorter one's text: the longest match wins
    drugs = {"A": "Aspirin", "B": "Aspirin and heparin", "C": "Warfarin"}
    assert parse_choice("Answer: aspirin and heparin, started today", drugs) == "B"
    assert parse_choice("Answer: aspirin", drugs) == "A"


def test_exact_match():
    assert exact_match("B", "B") == 1.0
    assert exact_match("b ", "B") == 1.0
    assert exact_match(None, "B") == 0.0  # unparsed counts as wrong
    assert exact_match("B", None) is None  # no key, no score
