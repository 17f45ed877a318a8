"""MCC's multiple-choice datasets on the real shared files, RABBITS pairing, and the missing-answer transform."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from medpanel.cases import Case, Reference, load_dataset
from medpanel.cases.mcq_datasets import NONE_OF_THE_ABOVE, load_rabbits_pairs, with_missing_answers
from medpanel.errors import UsageError
from medpanel.scoring.exact import recall_on
from medpanel.scoring.rabbits import accuracy_drop


def _well_formed(cases: list[Case]) -> None:
    assert len({c.id for c in cases}) == len(cases)
    for c in cases:
        assert c.question and c.options and c.reference.answer in c.options


def test_medqa_count(shared_data):
    cases = load_dataset("medqa")
    _well_formed(cases)
    assert len(cases) == 1273


def test_pubmedqa_reasoning_required_test_set(shared_data):
    cases = load_dataset("pubmedqa")
    _well_formed(cases)
    assert len(cases) == 500
    assert all(c.options == {"A": "yes", "B": "no", "C": "maybe"} for c in cases)
    truth = json.loads((shared_data / "pubmedqa" / "test_ground_truth.json").read_text())
    assert {c.metadata["pmid"]: c.reference.answer_text for c in cases} == truth
    # yes / no / maybe counts of the 500 test labels, counted from test_ground_truth.json
    assert Counter(c.reference.answer for c in cases) == {"A": 276, "B": 169, "C": 55}
    first = cases[0]
    assert first.id == "pubmedqa-12377809"
    assert first.question.startswith("Abstract:\nAims: Dyschesia can be provoked")
    assert first.question.endswith("Question: Is anorectal endosonography valuable in dyschesia?")
    # the conclusion (the reasoning-free extra) stays in the reference, out of the question
    assert first.reference.conclusion and first.reference.conclusion[:40] not in first.question


def test_mmlu_medical_subjects(shared_data):
    cases = load_dataset("mmlu-medical")
    _well_formed(cases)
    assert len(cases) == 1089
    assert Counter(c.metadata["subject"] for c in cases) == {
        "professional_medicine": 272, "clinical_knowledge": 265, "college_medicine": 173,
        "college_biology": 144, "anatomy": 135, "medical_genetics": 100,
    }


def test_medmcqa_single_answer(shared_data):
    cases = load_dataset("medmcqa")
    _well_formed(cases)
    assert len(cases) == 2816
    assert all(list(c.options) == ["A", "B", "C", "D"] for c in cases)


def test_medxpertqa_ten_options_and_metadata(shared_data):
    cases = load_dataset("medxpertqa")
    _well_formed(cases)
    assert len(cases) == 244
    assert all(list(c.options) == list("ABCDEFGHIJ") for c in cases)
    assert all("Answer Choices:" not in c.question for c in cases)
    assert Counter(c.metadata["question_type"] for c in cases) == {"Reasoning": 186, "Understanding": 58}
    assert Counter(c.metadata["medical_task"] for c in cases) == {"Diagnosis": 100, "Treatment": 81, "Basic Science": 63}
    first = cases[0]
    assert first.id == "medxpertqa-Text-20" and first.reference.answer == "J" and first.options["J"] == "Bacterial destruction"
    assert first.metadata["body_system"] == "Digestive"


def test_rabbits_pairs_kept_and_all(shared_data):
    cases = load_dataset("rabbits")
    _well_formed(cases)
    # 378 rows marked 'keep' by RABBITS' reviewers (the paper's MedQA subset), two cases each
    assert len(cases) == 756
    by_pair: dict[int, dict[str, Case]] = {}
    for c in cases:
        by_pair.setdefault(c.metadata["pair"], {})[c.metadata["variant"]] = c
        assert c.id == f"rabbits-{c.metadata['pair']}-{c.metadata['variant']}"
    assert len(by_pair) == 378 and all(set(p) == {"orig", "brand"} for p in by_pair.values())
    # the twins share the gold answer and differ in their text (a drug name swapped in the stem or the options)
    assert all(p["orig"].reference.answer == p["brand"].reference.answer for p in by_pair.values())
    assert all((p["orig"].question, p["orig"].options) != (p["brand"].question, p["brand"].options) for p in by_pair.values())
    first = by_pair[0]
    assert "naproxen" in first["orig"].question and "aflaxen" in first["brand"].question
    assert len(list(load_rabbits_pairs(include_dropped=True))) == 2 * 441


def test_rabbits_gold_matches_medqa(shared_data):
    """RABBITS' 0-based label must be MedQA's gold letter: every original stem is found in MedQA with the same answer."""
    medqa = {c.question.strip(): c for c in load_dataset("medqa")}
    originals = [c for c in load_rabbits_pairs(include_dropped=True) if c.metadata["variant"] == "orig"]
    assert len(originals) == 441
    matched = [c for c in originals if c.question in medqa]
    assert len(matched) == 441
    assert all(medqa[c.question].reference.answer == c.reference.answer for c in matched)
    assert all(medqa[c.question].options == c.options for c in matched)


def test_rabbits_accuracy_drop_worked_by_hand():
    scores = {
        "rabbits-0-orig": 1.0, "rabbits-0-brand": 1.0,   # right both times
        "rabbits-1-orig": 1.0, "rabbits-1-brand": 0.0,   # lost with the brand name
        "rabbits-2-orig": 1.0, "rabbits-2-brand": 0.0,   # lost
        "rabbits-3-orig": 0.0, "rabbits-3-brand": 1.0,   # gained
        "rabbits-4-orig": 1.0,                           # twin missing: left out of both sides
        "rabbits-5-orig": 0.0, "rabbits-5-brand": None,  # twin failed (unscored): left out
        "medqa-7": 1.0,                                  # not a RABBITS id: ignored
    }
    result = accuracy_drop(scores)
    # 4 complete pairs: original 3/4 = 0.75, brand 2/4 = 0.5, drop 0.25
    assert result["pairs"] == 4
    assert result["original"] == 0.75 and result["brand"] == 0.5 and result["drop"] == 0.25
    assert result["lost"] == 2 and result["gained"] == 1
    # exact McNemar: 3 discordant pairs, 2 one way: two-sided binomial p = 2 * P(X >= 2 | n=3, 1/2) = 2 * 4/8 = 1.0
    assert result["p_value"] == pytest.approx(1.0)
    assert accuracy_drop({})["pairs"] == 0 and accuracy_drop({})["drop"] is None


def test_missing_answer_transform_worked_by_hand():
    cases = [Case(id=f"q{i}", question="?", options={"A": "a", "B": "b", "C": "c", "D": "d"}, reference=Reference(answer="B")) for i in range(200)]
    meta = list(with_missing_answers(cases, fraction=0.25, seed=3))
    missing = [c for c in meta if c.metadata["missing_answer"]]
    kept = [c for c in meta if not c.metadata["missing_answer"]]
    assert 25 <= len(missing) <= 75  # a seeded quarter of 200 (50 expected)
    for c in missing:  # B removed, C and D move up, 'None of the above' is D and right
        assert c.options == {"A": "a", "B": "c", "C": "d", "D": NONE_OF_THE_ABOVE} and c.reference.answer == "D"
    for c in kept:  # every option stays; 'None of the above' is a fifth, wrong option
        assert c.options == {"A": "a", "B": "b", "C": "c", "D": "d", "E": NONE_OF_THE_ABOVE} and c.reference.answer == "B"
    again = list(with_missing_answers(cases, fraction=0.25, seed=3))
    assert [c.metadata["missing_answer"] for c in again] == [c.metadata["missing_answer"] for c in meta]
    # recall over the missing-answer items: picked 'None of the above' on 2 of 4 -> 0.5
    assert recall_on([("D", "D"), ("A", "D"), (None, "D"), ("D", "D")]) == 0.5
    assert recall_on([]) is None
    with pytest.raises(UsageError, match="between 0 and 1"):
        list(with_missing_answers(cases, fraction=1.5))


def test_medqa_missing_answer_on_real_data(shared_data):
    from medpanel.cases.mcq_datasets import load_medqa_missing_answer

    cases = list(load_medqa_missing_answer())
    assert len(cases) == 1273
    for c in cases:
        assert c.reference.answer in c.options
        if c.metadata["missing_answer"]:
            assert c.options[c.reference.answer] == NONE_OF_THE_ABOVE and len(c.options) == 4
        else:
            assert c.options["E"] == NONE_OF_THE_ABOVE and c.reference.answer == c.metadata["original_answer"]

