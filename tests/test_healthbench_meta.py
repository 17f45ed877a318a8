"""HealthBench's grader meta-evaluation, worked by hand on tests/fixtures/healthbench/meta.jsonl.

    row  category        physicians (ids)          grader
    r0   hedging         F F T   (p1 p2 p3)        T
    r1   emergent        T T     (p1 p4)           T
    r2   emergent        F F F   (p2 p3 p4)        F
    r3   hedging         T F     (p1 p3)           T
    r4   communication   T T T F (p1 p2 p3 p4)     T

Pairwise (every grader label against every physician label): the grader said met in 11 pairs, 7 of them
agreeing (precision 7/11); the physicians said met in 7 pairs, all 7 agreeing (recall 1): met F1 7/9. The
grader said not met in 3 pairs, all agreeing (precision 1), of 7 physician not-met pairs (recall 3/7): not-met
F1 3/5. Macro F1 (7/9 + 3/5) / 2 = 31/45.
Majority: r3 splits evenly and is left out; the majorities are F, T, F, T for r0, r1, r2, r4: met precision
2/3, recall 1, F1 4/5; not met precision 1, recall 1/2, F1 2/3; macro F1 11/15.
"""

from __future__ import annotations

import json
import subprocess
from fractions import Fraction
from pathlib import Path

import pytest

from conftest import MEDPANEL
from medpanel.cases.healthbench import meta_rows
from medpanel.errors import UsageError
from medpanel.models.scripted import ScriptedModel
from medpanel.scoring.healthbench_grader import grade_meta_rows
from medpanel.scoring.healthbench_meta import agreement, majority, meta_report, physician_agreement

META = Path(__file__).parent / "fixtures" / "healthbench" / "meta.jsonl"
GRADER = [True, True, False, True, True]
MET = ("Mentions that regular heavy drinking", "Names warning signs", "Advises against stopping", "States the usual adult range")


def exactly(value: float | None, fraction: Fraction) -> bool:
    return value is not None and value == pytest.approx(float(fraction), abs=1e-12)


def rows():
    return meta_rows(META)


def test_pairwise_agreement_by_hand():
    r = rows()
    report = agreement(GRADER, [x.labels for x in r], [x.category for x in r])
    overall = report.overall
    assert (overall.rows, overall.pairs) == (5, 14)
    assert exactly(overall.precision(True), Fraction(7, 11)) and overall.recall(True) == 1.0
    assert overall.precision(False) == 1.0 and exactly(overall.recall(False), Fraction(3, 7))
    assert exactly(overall.f1(True), Fraction(7, 9)) and exactly(overall.f1(False), Fraction(3, 5))
    assert exactly(overall.macro("f1"), Fraction(31, 45))
    by = report.by_category
    assert by["cluster:emergent_emergency_behavior"].macro("f1") == 1.0
    # the grader never said "not met" on a hedging row: that class has no precision, so no macro F1, as in the release
    hedging = by["cluster:hedging_no-uncertainty_harmless"]
    assert exactly(hedging.f1(True), Fraction(4, 7)) and hedging.precision(False) is None and hedging.macro("f1") is None
    assert exactly(by["cluster:communication_tailored"].f1(True), Fraction(6, 7))


def test_majority_agreement_leaves_out_an_even_split():
    r = rows()
    report = agreement(GRADER, [x.labels for x in r], [x.category for x in r], against="majority")
    assert report.without_majority == 1 and report.overall.rows == 4
    assert exactly(report.overall.f1(True), Fraction(4, 5)) and exactly(report.overall.f1(False), Fraction(2, 3))
    assert exactly(report.overall.macro("f1"), Fraction(11, 15))
    assert majority([True, False]) is None and majority([True, True, False]) is True


def test_each_physician_against_the_others_by_hand():
    r = rows()
    doctors = physician_agreement([(x.labels, x.physicians, x.category) for x in r])
    assert list(doctors) == ["p1", "p2", "p3", "p4"]
    p1 = doctors["p1"].overall  # r0 F vs F,T · r1 T vs T · r3 T vs F · r4 T vs T,T,F
    assert exactly(p1.precision(True), Fraction(3, 5)) and exactly(p1.recall(True), Fraction(3, 4))
    assert exactly(p1.macro("f1"), Fraction(8, 15))
    expected = {"p1": Fraction(8, 15), "p2": Fraction(17, 24), "p3": Fraction(1, 2), "p4": Fraction(17, 35)}
    assert all(exactly(doctors[p].overall.macro("f1"), f) for p, f in expected.items())
    report = meta_report(GRADER, [x.labels for x in r], [x.physicians for x in r], [x.category for x in r])
    assert exactly(report["grader"]["macro_f1"], Fraction(31, 45))
    assert report["physicians"]["physicians"] == 4 and exactly(report["physicians"]["macro_f1"], sum(expected.values()) / 4)


async def test_the_grader_is_asked_once_per_row_with_the_run_s_grading_call():
    judge = ScriptedModel(name="grader", responder=lambda r: {"explanation": "ok", "criteria_met": r.messages[1].content.rpartition(":\n")[2].startswith(MET)})
    graded = await grade_meta_rows(judge, rows(), concurrency=2)
    assert [g.criteria_met for g, _ in graded] == GRADER and all(error is None for _, error in graded)
    assert len(judge.history) == 5 and all(r.schema is not None for r in judge.history)
    first = judge.history[0].messages[1].content
    assert "user: Is it safe to take paracetamol" in first and "An occasional glass of wine" in first
    assert "CRITERION:\nMentions that regular heavy drinking" in first  # no points: the file gives none


def test_a_benchmark_file_is_refused_as_the_meta_file():
    with pytest.raises(UsageError, match="benchmark file"):
        meta_rows(Path(__file__).parent / "fixtures" / "healthbench" / "mini.jsonl")


def test_bad_meta_lines_name_the_line(tmp_path):
    good = META.read_text().splitlines()[0]
    for change, said in [({"binary_labels": []}, "'binary_labels' must be a non-empty list"),
                         ({"binary_labels": [True, "yes"]}, "'binary_labels' must be"),
                         ({"anonymized_physician_ids": ["p1"]}, "one id (a string) per label"),
                         ({"rubric": ""}, "'rubric' must be a non-empty string")]:
        file = tmp_path / "meta.jsonl"
        file.write_text(good + "\n" + json.dumps({**json.loads(good), **change}) + "\n")
        with pytest.raises(UsageError) as caught:
            meta_rows(file)
        assert caught.value.problem.startswith(f"{file}:2: ") and said in caught.value.problem


def _cli(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([MEDPANEL, *args], env=env, capture_output=True, text=True, timeout=120)


def test_the_command_prints_the_macro_f1_and_writes_no_run(cli_env, tmp_path):
    replies = tmp_path / "grades.yaml"  # one grade per row, in file order (--concurrency 1 keeps the order)
    replies.write_text("\n".join(f"- {{explanation: As scripted., criteria_met: {str(v).lower()}}}" for v in GRADER) + "\n")
    proc = _cli(["score", "healthbench-meta", str(META), "--judge", f"scripted:{replies}", "-c", "1", "--json"], cli_env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["rows"] == data["graded"] == 5 and data["unscored"] == []
    assert exactly(data["grader"]["macro_f1"], Fraction(31, 45)) and data["against"] == "pairwise"
    assert data["by_category"]["cluster:emergent_emergency_behavior"]["macro_f1"] == 1.0
    text = _cli(["score", "healthbench-meta", str(META), "--judge", f"scripted:{replies}", "-c", "1", "--against", "majority"],
                {**cli_env, "COLUMNS": "200"})
    assert text.returncode == 0, text.stderr
    assert "macro F1 0.733" in text.stdout and "1 rows left out" in text.stdout and "cluster:emergent_emergency_behavior" in text.stdout
    runs = _cli(["runs", "--json"], cli_env)
    assert json.loads(runs.stdout) == []  # the grades are logged calls, not a run


def test_the_command_refuses_bad_input_with_exit_2(cli_env, tmp_path):
    missing = _cli(["score", "healthbench-meta", str(tmp_path / "meta.jsonl"), "--judge", "scripted:x"], cli_env)
    assert missing.returncode == 2 and "not shipped" in missing.stderr and "oss_meta_eval.jsonl" in missing.stderr
    assert "Traceback" not in missing.stderr
    wrong = _cli(["score", "healthbench-meta", str(META), "--judge", "scripted:x", "--against", "vote"], cli_env)
    assert wrong.returncode == 2 and "Unknown --against 'vote'" in wrong.stderr
    both = _cli(["score", "healthbench-meta", str(META), "--judge", "scripted:x", "--limit", "2", "--sample", "2"], cli_env)
    assert both.returncode == 2 and "not both" in both.stderr


def test_an_ungraded_row_is_listed_and_exits_1(cli_env):
    proc = _cli(["score", "healthbench-meta", str(META), "--judge", "scripted:not a grade", "--limit", "2", "--json"], cli_env)
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["graded"] == 0 and len(data["unscored"]) == 2 and "invalid_output" in data["unscored"][0]["error"]


def test_sample_draws_the_rows_simple_evals_draws():
    import random

    from medpanel.cli.healthbench import pick_rows

    everything = list(range(10))
    assert pick_rows(everything, None, 3) == random.Random(0).sample(everything, 3)
    assert pick_rows(everything, 3, None) == [0, 1, 2] and pick_rows(everything, None, 50) == everything


def test_the_physicians_agreement_counts_every_row_even_one_the_grader_could_not_grade(cli_env, tmp_path):
    expected = (Fraction(8, 15) + Fraction(17, 24) + Fraction(1, 2) + Fraction(17, 35)) / 4  # all five rows, by hand above
    r = rows()
    report = meta_report([None, *GRADER[1:]], [x.labels for x in r], [x.physicians for x in r], [x.category for x in r])
    assert report["grader"]["rows"] == 4 and exactly(report["physicians"]["macro_f1"], expected)
    replies = tmp_path / "grades.yaml"  # row 1: never a grade (asked and re-asked twice); then rows 2-5 in order
    replies.write_text("- not a grade\n" * 3 + "".join(f"- {{explanation: ok, criteria_met: {str(v).lower()}}}\n" for v in GRADER[1:]))
    proc = _cli(["score", "healthbench-meta", str(META), "--judge", f"scripted:{replies}", "-c", "1", "--json"], cli_env)
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["graded"] == 4 and len(data["unscored"]) == 1 and data["grader"]["rows"] == 4
    assert exactly(data["physicians"]["macro_f1"], expected) and data["physicians"]["physicians"] == 4
