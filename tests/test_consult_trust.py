"""Consult numbers a researcher can trust: every discharge code kept, unfinished consults counted,
and no scoring without the ICD-10-CM table (issue 8, points 3 and 4)."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import MEDPANEL, ROOT
from medpanel.cases.model import Case, Reference
from medpanel.errors import UsageError
from medpanel.models.runtime import Runtime
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Outcome, Panel, get_protocol
from medpanel.protocols.consult import ConsultSettings, Discharge, score
from medpanel.runs.runner import RunConfig, run_benchmark
from medpanel.runs.summary import summarize


def make_case(case_id: str = "pyelo", codes=("N10", "N39.0")) -> Case:
    return Case(id=case_id, chief_complaint="Fever and right flank pain",
                note={"history of present illness": "Three days of fever, dysuria and right flank pain."},
                reference=Reference(codes=list(codes)))


def codes_of(written) -> list[str]:
    return Discharge.model_validate({"diagnosis": "x", "codes": written}).codes


# ---------------------------------------------------------------- point 3: every code in a discharge item is kept


@pytest.mark.parametrize("written, codes", [
    ("E119 I10", ["E11.9", "I10"]),  # two codes in one item, the first without its dot
    ("N13.5, D18.09 and N23", ["N13.5", "D18.09", "N23"]),  # the code after "and"
    (["E119 I10", "N13.5 and N23"], ["E11.9", "I10", "N13.5", "N23"]),  # item by item
    ("Type 2 diabetes E11.9 I10", ["E11.9", "I10"]),  # words first, codes at the end
    ("E11.9 I10 hypertension E78.5 hyperlipidaemia", ["E11.9", "I10", "E78.5"]),  # a long code among words
    ("D51.0 (vitamin B12 deficiency anemia)", ["D51.0"]),  # a description in brackets is not read for codes
    ("Type 2 diabetes (E11.9)", ["E11.9"]),  # ... unless the rest of the item has none
    ("E11.9/I10 or e11.9", ["E11.9", "I10"]),  # a repeat counts once
])
def test_every_code_of_a_discharge_item_is_kept(written, codes):
    assert codes_of(written) == codes


def test_what_is_not_read_as_a_code_is_recorded():
    discharge = Discharge.model_validate({"diagnosis": "x", "codes": "D51.0 vitamin B12 deficiency anemia"})
    # "B12" among the description's words is a vitamin, not a code: not scored, but not silently dropped either.
    assert discharge.codes == ["D51.0"] and discharge.unread == ["B12"]
    assert "unread" not in Discharge.model_json_schema()["properties"]  # the model is never asked for it
    assert Discharge.model_validate({"diagnosis": "x", "codes": "D51.0 (vitamin B12 deficiency)"}).unread == ["B12"]
    # An ICD-9 code (or a mangled one) beside a good code is not a code, and is listed.
    assert Discharge.model_validate({"diagnosis": "x", "codes": ["E11.9, 250.00"]}).unread == ["250.00"]


async def test_a_consult_keeps_all_codes_of_its_discharge_and_records_the_rest():
    physician = ScriptedModel([{"message": "Evaluation?"}, {"action": "submit", "message": "Ready."},
                               {"diagnosis": "Pyelonephritis", "codes": ["N10 R50.9", "N13.5, D18.09 and N23", "D51.0 vitamin B12 deficiency"]}])
    assistant = ScriptedModel(responder=lambda r: "Fever and flank pain.")
    outcome = await get_protocol("consult").run(make_case(), Panel.of([physician, assistant]), ConsultSettings(max_turns=5))
    assert outcome.data["codes"] == ["N10", "R50.9", "N13.5", "D18.09", "N23", "D51.0"]
    assert outcome.data["unread"] == ["B12"]


# ---------------------------------------------------------------- point 4: unfinished consults are counted


def unfinished(policy: str | None = None) -> Outcome:
    data = {"turns": 4, "codes": []} | ({"unfinished": policy} if policy else {})
    return Outcome(status="unfinished", answer=None, data=data)


def test_an_unfinished_consult_scores_as_an_empty_prediction_by_default(shared_data):
    scores = score(make_case(), unfinished())
    assert (scores["finished"], scores["code_f1"], scores["category_recall"], scores["chapter_jaccard"]) == (0.0, 0.0, 0.0, 0.0)
    assert scores["empty"] == 1.0 and scores["n_predicted"] == 0.0
    excluded = score(make_case(), unfinished("exclude"))
    assert excluded["finished"] == 0.0 and excluded["code_f1"] is None


def test_unfinished_policy_is_a_checked_setting():
    assert ConsultSettings().unfinished == "empty"
    assert ConsultSettings.model_validate({"unfinished": "exclude"}).unfinished == "exclude"
    with pytest.raises(ValueError):
        ConsultSettings.model_validate({"unfinished": "drop"})


@pytest.mark.parametrize("policy, n, mean", [(None, 2, (2 / 3) / 2), ("exclude", 1, 2 / 3)])
async def test_run_means_count_unfinished_consults_unless_excluded(store, shared_data, policy, n, mean):
    cases = [make_case("done"), make_case("endless")]
    physician = ScriptedModel([{"message": "Evaluation?"}, {"action": "submit", "message": "Ready."},
                               {"diagnosis": "Pyelonephritis", "codes": ["N10"]},
                               {"message": "Evaluation?"}, {"action": "ask", "message": "More?"}])
    assistant = ScriptedModel(responder=lambda r: "Answer.")
    settings = {"max_turns": 4} | ({"unfinished": policy} if policy else {})
    config = RunConfig(dataset="inline", protocol="consult", models=["physician", "assistant"], concurrency=1, settings=settings)
    result = await run_benchmark(store, config, Runtime(), panel=Panel.of([physician, assistant]), cases=cases)
    summary = summarize(store, result.run_id)
    # The finished consult: N10 vs {N10, N39.0}, F1 2/3; the unfinished one: 0 (empty) or left out.
    assert summary["scores"]["code_f1"]["n"] == n and summary["scores"]["code_f1"]["mean"] == pytest.approx(mean)
    assert (summary["scores"]["finished"]["mean"], summary["scores"]["finished"]["n"]) == (0.5, 2)
    assert f"Consults: 1 finished, 1 unfinished; the ICD-10 means count {n}" in " ".join(summary["notes"])


def test_cli_consult_counts_an_unfinished_consult_and_accepts_exclude(tmp_path, cli_env, shared_data):
    case = tmp_path / "case.json"
    case.write_text(json.dumps({"id": "pyelo", "chief_complaint": "Fever", "note": {"history": "Fever and flank pain."},
                                "reference": {"codes": ["N10"]}}))
    script = tmp_path / "physician.json"
    script.write_text(json.dumps([{"message": "Evaluation?"}, {"action": "ask", "message": "More?"}]))
    base = [MEDPANEL, "consult", str(case), "--physician", f"scripted:{script}", "--assistant", "scripted:echo", "--max-turns", "3", "--json"]
    counted = json.loads(subprocess.run(base, env=cli_env, capture_output=True, text=True, timeout=120, cwd=ROOT, check=True).stdout)
    assert counted["status"] == "unfinished" and counted["scores"]["code_f1"] == 0.0
    proc = subprocess.run([*base, "--set", "unfinished=exclude"], env=cli_env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["scores"]["code_f1"] is None
    proc = subprocess.run([*base, "--set", "unfinished=drop"], env=cli_env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "unfinished" in proc.stderr and "Traceback" not in proc.stderr


# ---------------------------------------------------------------- a missing ICD-10 table is an error, never blank columns


def test_scoring_without_the_icd10_table_names_the_data_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDPANEL_DATA_DIR", str(tmp_path))
    done = Outcome(status="ok", answer="Pyelonephritis", data={"codes": ["N10"], "turns": 3})
    with pytest.raises(UsageError) as caught:
        score(make_case(), done)
    message = f"{caught.value} {getattr(caught.value, 'fix', '')}"
    assert str(tmp_path / "icd10cm") in message and "MEDPANEL_DATA_DIR" in message


def test_cli_consult_without_the_icd10_table_exits_2_before_any_call(tmp_path, cli_env):
    case = tmp_path / "case.json"
    case.write_text(json.dumps({"id": "pyelo", "chief_complaint": "Fever", "note": {"history": "Fever."}, "reference": {"codes": ["N10"]}}))
    env = cli_env | {"MEDPANEL_DATA_DIR": str(tmp_path / "nowhere")}
    proc = subprocess.run([MEDPANEL, "consult", str(case), "--physician", "scripted:echo"], env=env, capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "MEDPANEL_DATA_DIR" in proc.stderr and "icd10cm" in proc.stderr and "Traceback" not in proc.stderr


# ---------------------------------------------------------------- a category among words; codes joined by dashes


@pytest.mark.parametrize("written, codes, unread", [
    ("E11.9 type 2 diabetes I10 hypertension N18.3", ["E11.9", "I10", "N18.3"], []),  # I10 is a category
    ("G40 epilepsy G43 migraine", ["G40", "G43"], []),
    ("D51.0 vitamin B12 deficiency", ["D51.0"], ["B12"]),  # no category B12: a vitamin, left unread
])
def test_a_three_character_category_among_words_is_kept(shared_data, written, codes, unread):
    discharge = Discharge.model_validate({"diagnosis": "x", "codes": written})
    assert discharge.codes == codes and discharge.unread == unread


def test_without_the_code_table_a_three_character_word_stays_unread(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDPANEL_DATA_DIR", str(tmp_path))
    discharge = Discharge.model_validate({"diagnosis": "x", "codes": "G40 epilepsy G43 migraine"})
    assert discharge.codes == ["G40"] and discharge.unread == ["G43"]


@pytest.mark.parametrize("written", ["E11.9–I10", "E11.9—I10", "E11.9\u2011I10", "E11.9-I10", "E11.9 – I10", "E11.9\u2212I10"])
def test_codes_joined_by_a_dash_are_two_codes(written):
    assert codes_of(written) == ["E11.9", "I10"]


def test_a_dash_inside_one_code_or_a_word_is_no_separator():
    assert Discharge.model_validate({"diagnosis": "x", "codes": ["E11.9, E11-9"]}).unread == ["E11-9"]
    assert codes_of("D51.0 B12‑related anemia") == ["D51.0"]
