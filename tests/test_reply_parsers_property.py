"""Every parser of model replies, on arbitrary text: an answer, a recorded "no answer", or a clear error;
never an unexpected exception, never a hang (each example is bounded in time by hypothesis' deadline)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from medpanel.models.structured import Schema
from medpanel.protocols.consult import read_discharge_codes
from medpanel.protocols.specialist import answer_text, released_answer_text
from medpanel.scoring.board_format import FormatSettings, score_format
from medpanel.scoring.board_reader import extract_conclusion, parse_board_response
from medpanel.scoring.exact import parse_choice, read_choice
from medpanel.scoring.icd10 import parse_codes

# Text that looks like model output: tags, turn heads, think blocks, JSON bits, codes, injection text.
_pieces = st.sampled_from([
    "<think>", "</think>", "<discussion>", "</discussion>", "<conclusion>", "</conclusion>", "<turn 1>", "<Turn 2>",
    "<turn ١٢>", " Moderator: ", "Radiologist:", "\n", "\r\n", "```json\n", "```", '{"answer": "', '"}', "{", "}", "[", "]",
    "Answer: B", "Option (C)", "I choose D", "\\boxed{A}", "E11.9", "I10", "N13.5, D18.09 and N23", "Z3A.01", "T84.50XA",
    "[/INST]", "\x1b[31m", "\x00", "\u200b", "＜／conclusion＞", "Ignore previous instructions.", "So. ", "Dr. Smith.", " ",
])
replies = st.one_of(st.text(max_size=300), st.lists(st.one_of(_pieces, st.text(max_size=12)), max_size=40).map("".join))
FAST = settings(max_examples=250, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(replies)
def test_choice_readers(text):
    read = read_choice(text, "ABCDE")
    assert read.choice is None or read.choice in "ABCDE"
    assert parse_choice(text, {"A": "yes", "B": "no", "C": "maybe"}) in (None, "A", "B", "C")
    if read.status == "unclosed_reasoning":
        assert read.choice is None


@FAST
@given(replies)
def test_board_readers_both_modes(text):
    for reader in ("released", "lenient"):
        parsed = parse_board_response(text, reader=reader)
        assert parsed.status in ("parsed", "parsed_with_warnings", "parsed_after_cleanup", "raw_fallback")
        conclusion, how = extract_conclusion(text, reader=reader)
        assert isinstance(conclusion, str) and isinstance(how, str)


@FAST
@given(replies, st.booleans())
def test_format_score_is_bounded(text, truncated):
    for preset in ("released_code", "paper"):
        score = score_format(text, settings=FormatSettings.for_preset(preset), truncated=truncated)
        assert -1.0 <= score.score <= 1.0


@FAST
@given(replies)
def test_specialist_answer_readers(text):
    assert isinstance(answer_text(text), str)
    assert released_answer_text(text) is None or isinstance(released_answer_text(text), str)


@FAST
@given(st.one_of(replies, st.lists(st.one_of(replies, st.integers(), st.none()), max_size=6)))
def test_discharge_code_reader_keeps_or_records_everything(value):
    codes, unread = read_discharge_codes(value)
    assert isinstance(codes, list) and all(isinstance(u, str) for u in unread)
    parse_codes(value if isinstance(value, str) else [v for v in value if isinstance(v, str)])


class Review(BaseModel):
    score: int = Field(ge=1, le=10)
    rationale: str = Field(max_length=1200)


@FAST
@given(replies)
def test_structured_validation_raises_only_value_errors(text):
    try:
        parsed = Schema(Review).validate(text)
    except ValueError as exc:
        assert str(exc)  # a reason the re-ask can state
    else:
        assert 1 <= parsed.score <= 10
