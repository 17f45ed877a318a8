"""MedSyn's released ICD-10 scoring (`--preset released`), quirk by quirk, worked by hand, beside the
corrected default; and `medpanel score icd10 --pairs`.

Each quirk is a behaviour of burcusayin/MedSyn src/evaluation (eval.py, utils.py, metrics.py) and of
its MIMIC preprocessing (gold codes get a dot after the third character, always).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import MEDPANEL, ROOT
from medpanel.errors import UsageError
from medpanel.scoring.icd10 import icd10_scores
from medpanel.scoring.icd10_pairs import score_pairs
from medpanel.scoring.icd10_released import PLACEHOLDER, ReleasedCrash, chapter, gold_sets, predicted_sets, released_scores


def level(scores: dict, name: str) -> tuple:
    return tuple(scores[f"{name}_{m}"] for m in ("precision", "recall", "f1", "jaccard"))


def test_three_character_gold_codes_never_match_at_code_level(shared_data):
    # Gold I10 is stored "I10."; the prediction's I10 is read as "I10". Code level: only E11.9 hits,
    # P 1/2, R 1/2, F1 1/2, J 1/3. Categories E11 and I10 both hit.
    assert gold_sets("I10 E119") == ({"I10.", "E11.9"}, {"I10", "E11"})
    released = released_scores("E11.9, I10", "I10 E119")
    assert level(released, "code") == (0.5, 0.5, 0.5, pytest.approx(1 / 3))
    assert level(released, "category") == (1.0, 1.0, 1.0, 1.0)
    assert level(icd10_scores("E11.9, I10", "I10 E119"), "code") == (1.0, 1.0, 1.0, 1.0)


def test_a_d_code_is_its_own_chapter(shared_data):
    # D64.9 and D50.9 are both chapter 3 (D50-D89), but the release's "chapter" of a D category is the category.
    assert (chapter("D64"), chapter("D50"), chapter("D3A")) == ("D64", "D50", chapter("C34"))
    assert level(released_scores("D64.9", "D649 D509"), "chapter") == (1.0, 0.5, pytest.approx(2 / 3), 0.5)
    assert level(released_scores("D64.9", "D509"), "chapter") == (0.0, 0.0, 0.0, 0.0)
    assert level(icd10_scores("D64.9", "D509"), "chapter") == (1.0, 1.0, 1.0, 1.0)


def test_codes_with_a_letter_in_third_place_are_not_found(shared_data):
    # The reader wants two digits after the letter: of "Z3A.00, O9A.1, E11.9" only E11.9 is found.
    assert predicted_sets("Z3A.00, O9A.1, E11.9") == ({"E11.9"}, {"E11"})
    # So against gold Z3A00 (stored Z3A.00, chapter of Z) nothing matches, at any level (E is not Z).
    released = released_scores("Z3A.00, O9A.1, E11.9", "Z3A00")
    assert level(released, "code") == level(released, "category") == level(released, "chapter") == (0.0, 0.0, 0.0, 0.0)
    assert level(icd10_scores("Z3A.00, O9A.1, E11.9", "Z3A00"), "code") == (pytest.approx(1 / 3), 1.0, 0.5, pytest.approx(1 / 3))
    for code in ("D3A.010", "C7A.1", "M1A.0", "QA0.0"):
        assert code not in predicted_sets(f"{code}, E11.9")[0]


def test_longer_codes_are_cut_to_their_category(shared_data):
    # T84.50XA: the reader stops after "T84" (".50X" is not followed by a word boundary) -> T84.
    assert predicted_sets("T84.50XA") == ({"T84"}, {"T84"})
    released = released_scores("T84.50XA", "T8450XA")
    assert level(released, "code") == (0.0, 0.0, 0.0, 0.0) and level(released, "category") == (1.0, 1.0, 1.0, 1.0)
    assert level(icd10_scores("T84.50XA", "T8450XA"), "code") == (1.0, 1.0, 1.0, 1.0)


def test_an_empty_prediction_is_a_placeholder_scored_in_chapter_n(shared_data):
    # "" -> {"Not assigned"}: no code or category hit, but its letter N is the genitourinary chapter of gold N10.
    assert predicted_sets("") == ({PLACEHOLDER}, {PLACEHOLDER})
    released = released_scores("", "N10")
    assert level(released, "code") == (0.0, 0.0, 0.0, 0.0)
    assert level(released, "chapter") == (1.0, 1.0, 1.0, 1.0)
    assert level(icd10_scores("", "N10"), "chapter") == (0.0, 0.0, 0.0, 0.0)


def test_an_invented_category_gets_its_letters_chapter(shared_data):
    # K99 does not exist (chapter 11 ends at K95); the release puts it in K's chapter, the corrected scorer in none.
    assert level(released_scores("K99.9", "K3580"), "chapter") == (1.0, 1.0, 1.0, 1.0)
    assert level(icd10_scores("K99.9", "K3580"), "chapter") == (0.0, 0.0, 0.0, 0.0)


@pytest.mark.parametrize("pred, read, category_hits", [
    # lower case: the text has a dot but the reader wants capitals, so the whole text is one "code"
    ("e11.9", {"e11.9"}, 0.0),
    # no dot anywhere: each token as written, never cut: "E119" is not category E11, "I10" is I10 -> P 1/2
    ("E119 I10", {"E119", "I10"}, 0.5),
    # "A,B" glued: commas are deleted before reading, so "E11.9,I10" is "E11.9I10", in which only "E11" stands alone
    ("E11.9,I10", {"E11"}, 1.0),
    # extra spaces and prose: words without a dot are codes too ("see", "note")
    ("  I10   see note ", {"I10", "see", "note"}, pytest.approx(1 / 3)),
])
def test_model_text_is_never_normalised(shared_data, pred, read, category_hits):
    assert predicted_sets(pred)[0] == read
    # gold E11.9 and I10 (stored E11.9 and I10.): category precision = hits / categories predicted
    assert released_scores(pred, "E119 I10")["category_precision"] == category_hits


def test_and_is_deleted_even_inside_words(shared_data):
    # "hand" loses its "and": "Fracture of h S62.0" has a dot, so the reader finds S62.0 only.
    assert predicted_sets("Fracture of hand S62.0")[0] == {"S62.0"}
    assert predicted_sets("hand")[0] == {"h"}


def test_where_the_release_crashes_the_pair_fails():
    # An H category must be a number after the H ("H25"); "H12A" (or a word such as "HbA1c") stopped the release.
    with pytest.raises(ReleasedCrash, match="H12A"):
        released_scores("H12A", "H259")
    with pytest.raises(UsageError, match="MIMIC-style"):
        released_scores("E11.9", "")


# ---------------------------------------------------------------- many pairs at once


def test_pairs_keep_input_order_count_unfinished_and_failed(shared_data):
    pairs = [{"id": "a", "pred": "E11.9, I10", "gold": "E119 I10", "line": 1},
             {"id": "b", "pred": None, "gold": ["N10"], "line": 2},
             {"id": "c", "pred": "HbA1c", "gold": "E119", "line": 3}]
    released = score_pairs(pairs, preset="released")
    assert [r["id"] for r in released["pairs"]] == ["a", "b", "c"]
    assert [r["status"] for r in released["pairs"]] == ["scored", "unfinished, scored as empty", "failed"]
    # a: code F1 1/2; b: the placeholder, code F1 0 -> mean 1/4 over the two scored pairs; c is left out.
    assert released["means"]["code_f1"] == 0.25 and released["means_rounded"]["code_f1"] == 0.25
    assert released["means"]["chapter_f1"] == 1.0  # a: E and I; b: "Not assigned" in N's chapter, as N10
    assert released["counts"] == {"pairs": 3, "unfinished": 1, "excluded_unfinished": 0, "failed": 1, "scored": 2}
    excluded = score_pairs(pairs, preset="released", unfinished="exclude")
    assert excluded["means"]["code_f1"] == 0.5 and excluded["counts"]["scored"] == 1
    corrected = score_pairs(pairs)  # "HbA1c" is not a code: an empty prediction scoring 0
    assert corrected["means"]["code_f1"] == pytest.approx(1 / 3) and corrected["counts"]["failed"] == 0


def test_score_icd10_pairs_command(tmp_path, cli_env, shared_data):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(json.dumps(p) for p in [
        {"id": 1, "pred": "T84.50XA", "gold": "T8450XA"}, {"id": 2, "pred": ["D64.9"], "gold": ["D509"]}, {"id": 3, "pred": "", "gold": "N10"},
    ]) + "\n")
    run = lambda *args: subprocess.run([MEDPANEL, "score", "icd10", "--pairs", str(pairs), *args], env=cli_env, capture_output=True,
                                       text=True, timeout=120, cwd=ROOT)
    proc = run("--preset", "released", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [p["id"] for p in data["pairs"]] == [1, 2, 3]
    assert [p["scores"]["category_f1"] for p in data["pairs"]] == [1.0, 0.0, 0.0]
    assert [p["scores"]["chapter_f1"] for p in data["pairs"]] == [1.0, 0.0, 1.0]
    assert data["means"]["chapter_f1"] == pytest.approx(2 / 3) and data["means_rounded"]["chapter_f1"] == 0.667
    corrected = json.loads(run("--json").stdout)
    assert [p["scores"]["chapter_f1"] for p in corrected["pairs"]] == [1.0, 1.0, 0.0]
    assert "Mean ICD-10 metrics over 3 of 3 pairs" in run("--preset", "released").stdout
    bad = run("--preset", "paper")
    assert bad.returncode == 2 and "Unknown preset" in bad.stderr
    pairs.write_text('{"id": 1, "pred": 5, "gold": "N10"}\n')
    bad = run()
    assert bad.returncode == 2 and "line 1" in bad.stderr and "Traceback" not in bad.stderr


def test_released_preset_warns_when_null_preds_are_scored_as_empty(tmp_path, cli_env, shared_data):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"id": 1, "pred": "N10", "gold": "N10"}\n{"id": 2, "pred": null, "gold": "N10"}\n')
    run = lambda *args: subprocess.run([MEDPANEL, "score", "icd10", "--pairs", str(pairs), *args], env=cli_env, capture_output=True,
                                       text=True, timeout=120, cwd=ROOT)
    proc = run("--preset", "released", "--json")
    assert proc.returncode == 0, proc.stderr
    warnings = json.loads(proc.stdout)["warnings"]
    assert len(warnings) == 1 and "1 pair(s) with pred null" in warnings[0] and "--set unfinished=exclude" in warnings[0]
    assert "warning: 1 pair(s) with pred null" in " ".join(proc.stderr.split())
    assert json.loads(proc.stdout)["means"]["chapter_f1"] == 1.0  # the default is kept: the placeholder matches chapter N
    for args in (("--preset", "released", "--set", "unfinished=exclude"), ()):  # nothing to warn about
        quiet = run(*args, "--json")
        assert json.loads(quiet.stdout)["warnings"] == [] and "pred null" not in quiet.stderr


def test_a_pairs_file_with_a_byte_order_mark_is_read(tmp_path):
    from medpanel.scoring.icd10_pairs import read_pairs

    pairs = tmp_path / "bom.jsonl"
    pairs.write_bytes('{"id": 1, "pred": "I10", "gold": "I10"}\n'.encode("utf-8-sig"))
    assert read_pairs(pairs) == [{"id": 1, "pred": "I10", "gold": "I10", "line": 1}]
