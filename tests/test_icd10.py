"""ICD-10 codes: normal form, the code table, parsing from model text, and MedSyn's per-sample metrics.

Expected values are worked by hand in the comments. The table comes from the shared ICD-10-CM data
(the `shared_data` fixture skips without it); pure set arithmetic needs nothing.
"""

from __future__ import annotations

import pytest

from medpanel.errors import UsageError
from medpanel.scoring.icd10 import code_table, icd10_scores, lookup, normalise, parse_codes, set_metrics

ALL_LEVELS = ("code", "category", "chapter")


def level(scores: dict, name: str) -> tuple:
    return tuple(scores[f"{name}_{m}"] for m in ("precision", "recall", "f1", "jaccard"))


# ---------------------------------------------------------------- normal form and parsing (no data needed)


@pytest.mark.parametrize("raw, normal", [
    ("E11.9", "E11.9"), ("e11.9", "E11.9"), ("E119", "E11.9"), (" e 11.9 ", "E11.9"),
    ("I10", "I10"), ("i10", "I10"), ("I10.", "I10"),  # three characters: no dot
    ("S72001A", "S72.001A"), ("t81.4xxa", "T81.4XXA"), ("C7A.00", "C7A.00"), ("QA00", "QA0.0"),
])
def test_normal_form_puts_the_dot_after_the_third_character_only_when_longer(raw, normal):
    assert normalise(raw) == normal


@pytest.mark.parametrize("raw", ["", "Not assigned", "ICD10CM", "1E11", "E1", "E11.12345"])
def test_text_that_is_not_code_shaped_has_no_normal_form(raw):
    assert normalise(raw) is None


@pytest.mark.parametrize("text, codes", [
    ("E11.9, I10; J18.9", ["E11.9", "I10", "J18.9"]),  # commas and semicolons
    ("E11.9 and I10", ["E11.9", "I10"]),  # "and"
    ("Codes: E11.9 (type 2 diabetes), I10 (hypertension).", ["E11.9", "I10"]),  # stray words, trailing dot
    ("- E11.9\n- I10\n- J18.9", ["E11.9", "I10", "J18.9"]),  # a markdown list
    ("[E11.9, 'I10']", ["E11.9", "I10"]),  # a printed Python list
    ("ICD-10: e119, HbA1c raised, T2DM", ["E11.9"]),  # lower case, no dot; HbA1c and T2DM are words, not codes
    ("E11.9, E11.9, e11.9 and E119", ["E11.9"]),  # one code written four ways
    ("Not assigned", []),
    ("", []),
])
def test_codes_are_parsed_out_of_messy_text(text, codes):
    assert parse_codes(text) == codes


def test_a_list_is_parsed_item_by_item():
    assert parse_codes(["E11.9 Type 2 diabetes", "I10", "see note"]) == ["E11.9", "I10"]


def test_set_metrics_by_hand():
    # P = {a, b}, G = {b, c}: one hit; precision 1/2, recall 1/2, F1 1/2, Jaccard 1/3 (union a, b, c)
    assert set_metrics({"a", "b"}, {"b", "c"}) == {"precision": 0.5, "recall": 0.5, "f1": 0.5, "jaccard": pytest.approx(1 / 3)}
    # no hits: everything 0 (F1 is 0, not 0/0)
    assert set_metrics({"a"}, {"b"}) == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "jaccard": 0.0}


def test_empty_prediction_policy_is_explicit():
    assert set_metrics(set(), {"b"}) == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "jaccard": 0.0}
    assert set_metrics(set(), {"b"}, "exclude") == {"precision": None, "recall": None, "f1": None, "jaccard": None}
    # Without gold codes a sample cannot be scored, whatever was predicted.
    assert set(set_metrics({"a"}, set()).values()) == {None}


# ---------------------------------------------------------------- the code table


def test_table_lookups(shared_data):
    assert len(code_table()) == 98186  # rows of icd10cm_2026_codes.tsv (98,147 before the 39 lost categories were restored)
    e119 = lookup("e119")
    assert (e119.code, e119.valid, e119.category, e119.block, e119.chapter) == ("E11.9", True, "E11", "E08-E13", 4)
    assert e119.description == "Type 2 diabetes mellitus without complications"
    # MedSyn's example of a hallucinated code: M34.59 does not exist; its category M34 is systemic sclerosis.
    fake = lookup("M3459")
    assert (fake.code, fake.valid, fake.description) == ("M34.59", False, None)
    assert fake.category_description == "Systemic sclerosis [scleroderma]" and fake.chapter == 13
    assert lookup("G35").description == "Multiple sclerosis"
    # Categories with no row of their own still exist (C7A is only a block title in the flat table).
    assert lookup("C7A").valid and lookup("C7A").description == "Malignant neuroendocrine tumors"


@pytest.mark.parametrize("code, chapter, description", [
    ("B20", 1, "Human immunodeficiency virus [HIV] disease"), ("C50", 2, "Malignant neoplasm of breast"),
    ("F99", 5, "Mental disorder, not otherwise specified"), ("P84", 16, "Other problems with newborn"),
    ("R99", 18, "Ill-defined and unknown cause of mortality"), ("Z66", 21, "Do not resuscitate"),
])
def test_categories_whose_code_is_their_block_exist(shared_data, code, chapter, description):
    # These were missing from the table until 2026-12-01, so a correct B20 counted as an invented code.
    info = lookup(code)
    assert (info.valid, info.chapter, info.description, info.block) == (True, chapter, description, code)


@pytest.mark.parametrize("code, chapter", [
    ("D3A.0", 2), ("D49.9", 2), ("D50.0", 3),  # D3A sorts inside C00-D49
    ("H59.0", 7), ("H60.1", 8),  # eye vs ear
    ("QA0.0", 17),  # new in 2026, in Q00-QA0
    ("U07.1", 22),
])
def test_chapters_by_range(shared_data, code, chapter):
    assert lookup(code).chapter == chapter


def test_a_made_up_category_outside_every_chapter(shared_data):
    # U99 is past U85 (the end of chapter 22) and no other chapter starts with U.
    info = lookup("U99")
    assert (info.valid, info.chapter, info.block) == (False, None, None)


def test_lookup_of_non_code_is_a_usage_error(shared_data):
    with pytest.raises(UsageError, match="not shaped like an ICD-10 code"):
        lookup("diabetes")


# ---------------------------------------------------------------- per-sample metrics on hand-worked examples


def test_exact_match(shared_data):
    scores = icd10_scores("E11.9, I10", "I10 and E11.9")  # same two codes, other order
    for name in ALL_LEVELS:
        assert level(scores, name) == (1.0, 1.0, 1.0, 1.0)
    assert scores["invalid_rate"] == 0.0 and scores["empty"] == 0.0


def test_category_only_match(shared_data):
    # E11.65 vs E11.9: different codes, same category E11, same chapter 4.
    scores = icd10_scores("E11.65", "E11.9")
    assert level(scores, "code") == (0.0, 0.0, 0.0, 0.0)
    assert level(scores, "category") == (1.0, 1.0, 1.0, 1.0)
    assert level(scores, "chapter") == (1.0, 1.0, 1.0, 1.0)


def test_chapter_only_match(shared_data):
    # E10.9 (type 1) vs E11.9 (type 2): categories E10 and E11 differ, both in chapter 4.
    scores = icd10_scores("E10.9", "E11.9")
    assert level(scores, "code") == (0.0, 0.0, 0.0, 0.0)
    assert level(scores, "category") == (0.0, 0.0, 0.0, 0.0)
    assert level(scores, "chapter") == (1.0, 1.0, 1.0, 1.0)


def test_three_character_gold_codes_match_at_full_code_level(shared_data):
    # Gold I10, N23, R52 are complete three-character codes. Predicted I10 and R52:
    # hits 2 of 2 predicted (P = 1), of 3 gold (R = 2/3); F1 = 2·1·(2/3)/(1 + 2/3) = 0.8; J = 2/3.
    scores = icd10_scores("I10, R52", "I10, N23, R52")
    assert level(scores, "code") == pytest.approx((1.0, 2 / 3, 0.8, 2 / 3))
    # MedSyn's released code would compare "I10." with "I10" here and find no hit at all.


def test_invalid_codes_count_against_precision_and_are_reported(shared_data):
    # Predicted M34.59 (does not exist) and G35; gold G35. Code: 1 hit of 2 predicted, 1 gold:
    # P = 1/2, R = 1, F1 = 2·(1/2)·1/(3/2) = 2/3, J = 1/2 (union M34.59, G35). Categories M34, G35 vs G35: the same.
    # Chapters 13 and 6 vs 6: the same again. Half the distinct predicted codes are invalid.
    scores = icd10_scores("M34.59, G35", "G35")
    for name in ALL_LEVELS:
        assert level(scores, name) == pytest.approx((0.5, 1.0, 2 / 3, 0.5))
    assert scores["invalid_rate"] == 0.5


def test_empty_prediction(shared_data):
    # Nothing code-shaped in the prediction: under "zero" every metric is 0, under "exclude" None.
    zero = icd10_scores("Not assigned", "E11.9, I10")
    assert all(zero[f"{name}_{m}"] == 0.0 for name in ALL_LEVELS for m in ("precision", "recall", "f1", "jaccard"))
    assert (zero["empty"], zero["invalid_rate"], zero["n_predicted"], zero["n_gold"]) == (1.0, None, 0.0, 2.0)
    excluded = icd10_scores([], "E11.9", empty="exclude")
    assert all(excluded[f"{name}_{m}"] is None for name in ALL_LEVELS for m in ("precision", "recall", "f1", "jaccard"))
    with pytest.raises(UsageError, match="empty-prediction policy"):
        icd10_scores([], "E11.9", empty="ignore")


def test_duplicates_count_once(shared_data):
    # Predicted E11.9 four ways and I10 -> {E11.9, I10}; gold E11.9 twice -> {E11.9}.
    # P = 1/2, R = 1, F1 = 2/3, J = 1/2 at every level (categories {E11, I10} vs {E11}; chapters {4, 9} vs {4}).
    scores = icd10_scores("E11.9, e11.9, E119, E11.9 and I10", ["E11.9", "E11.9"])
    for name in ALL_LEVELS:
        assert level(scores, name) == pytest.approx((0.5, 1.0, 2 / 3, 0.5))
    assert (scores["n_predicted"], scores["n_gold"]) == (2.0, 1.0)
    # Two codes of one category are one category: E11.9 + E11.65 vs E11.8 is a perfect category match.
    assert level(icd10_scores("E11.9, E11.65", "E11.8"), "category") == (1.0, 1.0, 1.0, 1.0)


def test_mixed_levels_by_hand(shared_data):
    # Predicted E11.65, I10, M34.59; gold E11.9, I10, J18.9.
    # code: hit I10 -> P 1/3, R 1/3, F1 1/3, J 1/5 (union of 5 codes)
    # category: {E11, I10, M34} vs {E11, I10, J18}: 2 hits -> 2/3, 2/3, 2/3, J 2/4
    # chapter: {4, 9, 13} vs {4, 9, 10}: 2 hits -> the same as categories
    scores = icd10_scores(["E11.65", "I10", "M34.59"], "E11.9, I10, J18.9")
    assert level(scores, "code") == pytest.approx((1 / 3, 1 / 3, 1 / 3, 1 / 5))
    assert level(scores, "category") == pytest.approx((2 / 3, 2 / 3, 2 / 3, 1 / 2))
    assert level(scores, "chapter") == pytest.approx((2 / 3, 2 / 3, 2 / 3, 1 / 2))
    assert scores["invalid_rate"] == pytest.approx(1 / 3)


def test_scoring_without_the_table_leaves_chapter_and_validity_out():
    scores = icd10_scores("E11.65", "E11.9", table=False)
    assert level(scores, "category") == (1.0, 1.0, 1.0, 1.0)
    assert level(scores, "chapter") == (None, None, None, None)
    assert scores["invalid_rate"] is None
