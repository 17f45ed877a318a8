"""MIMIC-IV discharge notes: section parsing, MedSyn's filters, and seeded sampling, on synthetic notes.

The note below is written for this test in MIMIC-IV-Note's layout (de-identified blanks "___",
headings at line starts, sub-headings inside sections). No MIMIC data is used or shipped.
"""

from __future__ import annotations

import csv
import gzip

import pytest

from medpanel.cases.mimic import (ASSISTANT_SECTIONS, REQUIRED_SECTIONS, exclusion_reason, is_deceased, load_mimic_discharge,
                                  missing_sections, normalise_mimic_code, note_case, parse_sections, released_spans, seeded_sample)
from medpanel.errors import UsageError

NOTE = """ 
Name:  ___                     Unit No:   ___
 
Admission Date:  ___              Discharge Date:   ___
 
Date of Birth:  ___             Sex:   M
 
Service: MEDICINE
 
Allergies: 
Penicillins
 
Attending: ___.
 
Chief Complaint:
Chest pain
 
Major Surgical or Invasive Procedure:
Cardiac catheterization with drug-eluting stent to the LAD
 
History of Present Illness:
Mr. ___ is a ___ year old man with hypertension and hyperlipidemia
who presented with two hours of substernal chest pressure radiating
to the left arm, with diaphoresis. In the ED, troponin was 0.45.
 
Past Medical History:
Hypertension
Hyperlipidemia
 
Social History:
___
Family History:
Father with MI at age 55.
 
Physical Exam:
ADMISSION PHYSICAL EXAM:
VS: 98.1 150/90 88 18 97% RA
GENERAL: Diaphoretic, uncomfortable.
CV: RRR, no murmurs.
 
DISCHARGE PHYSICAL EXAM:
GENERAL: Comfortable.
 
Pertinent Results:
ADMISSION LABS:
___ 06:30AM BLOOD WBC-9.1 RBC-4.52 Hgb-13.9
___ 06:30AM BLOOD cTropnT-0.45*
 
Brief Hospital Course:
___ with HTN and HLD presenting with an anterior NSTEMI, taken to
cardiac catheterization with a drug-eluting stent to the proximal LAD.
 
Medications on Admission:
The Preadmission Medication list is accurate and complete.
1. Lisinopril 10 mg PO DAILY 
 
Discharge Medications:
1. Aspirin 81 mg PO DAILY 
2. Atorvastatin 80 mg PO QPM 
3. Ticagrelor 90 mg PO BID 
 
Discharge Disposition:
Home
 
Discharge Diagnosis:
Primary: NSTEMI
Secondary: Hypertension, hyperlipidemia
 
Discharge Condition:
Mental Status: Clear and coherent.
Level of Consciousness: Alert and interactive.
 
Discharge Instructions:
Dear Mr. ___,
You were admitted for a heart attack. Please take all your medicines.
 
Followup Instructions:
___
"""


def variant(old: str, new: str) -> str:
    assert old in NOTE
    return NOTE.replace(old, new)


def test_sections_are_split_at_their_headings():
    sections = parse_sections(NOTE)
    assert missing_sections(NOTE) == []
    assert sections["chief complaint"] == "Chest pain"
    assert sections["major surgical or invasive procedure"] == "Cardiac catheterization with drug-eluting stent to the LAD"
    assert sections["history of present illness"].startswith("Mr. ___ is a ___ year old man")
    assert sections["history of present illness"].endswith("troponin was 0.45.")
    assert sections["service"] == "MEDICINE"  # text on the heading's own line belongs to it
    assert sections["social history"] == "___"
    # Sub-headings stay inside their section, and the exam runs until "Pertinent Results:".
    exam = sections["physical exam"]
    assert "ADMISSION PHYSICAL EXAM:" in exam and "DISCHARGE PHYSICAL EXAM:" in exam and exam.endswith("GENERAL: Comfortable.")
    assert sections["pertinent results"].splitlines()[0] == "ADMISSION LABS:"
    # "Discharge Diagnoses:" is the discharge diagnosis section too; "Discharge Disposition" is its own.
    assert sections["discharge diagnosis"] == "Primary: NSTEMI\nSecondary: Hypertension, hyperlipidemia"
    assert parse_sections(variant("Discharge Diagnosis:", "Discharge Diagnoses:"))["discharge diagnosis"].startswith("Primary: NSTEMI")
    assert sections["discharge disposition"] == "Home"
    assert sections["discharge instructions"].startswith("Dear Mr. ___,")
    assert len(REQUIRED_SECTIONS) == 11  # the released notebook's headings: discharge condition is not one


def test_headings_match_in_any_case_and_repeated_headings_join():
    text = "CHIEF COMPLAINT:\nfever\nhistory of present illness: three days of fever\nChief Complaint:\ncough\n"
    assert parse_sections(text) == {"chief complaint": "fever\ncough", "history of present illness": "three days of fever"}


def test_a_note_missing_a_required_section_is_excluded():
    text = variant("Major Surgical or Invasive Procedure:\nCardiac catheterization with drug-eluting stent to the LAD\n", "")
    assert missing_sections(text) == ["major surgical or invasive procedure"]
    assert exclusion_reason(text) == "missing sections: major surgical or invasive procedure"
    # A heading with an empty body is present: MedSyn's test was the heading's presence.
    assert exclusion_reason(variant("Social History:\n___", "Social History:\n")) is None


@pytest.mark.parametrize("text, deceased", [
    (NOTE, False),
    # The released filter looks for "deceased" and "patient expired" only: an "Expired" disposition or condition is kept.
    (variant("Discharge Disposition:\nHome", "Discharge Disposition:\nExpired"), False),
    (variant("Discharge Condition:\nMental Status: Clear and coherent.", "Discharge Condition:\nexpired"), False),
    (variant("Father with MI at age 55.", "Patient expired at 03:10 despite resuscitation."), True),
    (variant("Father with MI at age 55.", "The PATIENT EXPIRED at 03:10."), True),  # any case: the release lower-cased notes
    (variant("Father with MI at age 55.", "Father deceased (MI at 55)."), True),  # the released filter's test: the word anywhere
    (variant("Mr. ___ is a ___ year old man", "Mr. ___, whose inhaler had expired, is a ___ year old man"), False),
])
def test_deceased_and_expired_are_excluded(text, deceased):
    assert is_deceased(text) is deceased
    assert exclusion_reason(text) == ("deceased" if deceased else None)


def test_the_released_filters_require_eleven_headings_as_written():
    # Discharge Condition is not among them; "Discharge Diagnoses:" is not "discharge diagnosis:".
    assert exclusion_reason(variant("Discharge Condition:\nMental Status: Clear and coherent.\nLevel of Consciousness: Alert and interactive.\n", "")) is None
    assert exclusion_reason(variant("Discharge Diagnosis:", "Discharge Diagnoses:")) == "missing sections: discharge diagnosis"
    # "Brief Hospital Course" was tested without its colon; headings count anywhere, in any case.
    assert exclusion_reason(variant("Brief Hospital Course:", "BRIEF HOSPITAL COURSE")) is None


def test_the_assistant_sees_the_released_spans():
    spans = released_spans(NOTE)
    # The history runs from the HPI up to Social History, so Past Medical History is in it.
    assert spans["history of present illness"].startswith("Mr. ___ is a ___ year old man")
    assert spans["history of present illness"].endswith("Past Medical History:\nHypertension\nHyperlipidemia")
    assert spans["chief complaint"] == "Chest pain"
    assert spans["physical exam"].startswith("ADMISSION PHYSICAL EXAM:") and spans["physical exam"].endswith("GENERAL: Comfortable.")
    assert spans["pertinent results"].endswith("cTropnT-0.45*")
    assert spans["discharge diagnosis"] == "Primary: NSTEMI\nSecondary: Hypertension, hyperlipidemia"
    case = note_case(NOTE, case_id="n1")
    assert "Past Medical History:\nHypertension" in case.note["history of present illness"]


def test_a_span_without_its_closing_heading_stops_at_the_next_heading():
    # The release would run these on to the end of the text (the diagnosis included); medpanel keeps the heading's section.
    text = ("Chief Complaint:\nFever\nHistory of Present Illness:\nThree days of cough.\nPertinent Results:\nWBC 14\n"
            "Discharge Diagnosis:\nPneumonia\n")
    assert released_spans(text) == {}
    case = note_case(text, case_id="plain")
    assert case.chief_complaint == "Fever" and case.note["pertinent results"] == "WBC 14"
    assert "Pneumonia" not in " ".join(case.note.values()) + case.chief_complaint


def test_note_case_shows_the_assistant_only_what_medsyn_showed():
    case = note_case(NOTE, case_id="n1", codes=["I21.4", "I10"])
    assert case.chief_complaint == "Chest pain"
    assert list(case.note) == list(ASSISTANT_SECTIONS)  # complaint, HPI, exam, results
    assert "NSTEMI" not in "".join(case.note.values())  # the brief hospital course and the diagnosis stay hidden
    assert case.reference.conclusion.startswith("Primary: NSTEMI")
    assert case.reference.codes == ["I21.4", "I10"]
    assert "brief hospital course" in case.metadata["other_sections"]
    wider = note_case(NOTE, visible=(*ASSISTANT_SECTIONS, "social history", "medications on admission"))
    assert list(wider.note)[-1] == "medications on admission"


def test_a_note_without_a_chief_complaint_is_rejected_with_a_fix():
    with pytest.raises(UsageError, match="no 'Chief Complaint:' section"):
        note_case(variant("Chief Complaint:\nChest pain\n", ""))


def test_seeded_sampling_is_reproducible_and_matches_pandas():
    first = seeded_sample(100, 10, seed=13)
    assert first == seeded_sample(100, 10, seed=13)
    assert len(set(first)) == 10 and all(0 <= i < 100 for i in first)
    assert first != seeded_sample(100, 10, seed=14)
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame({"row": range(100)})
    assert first == frame.sample(n=10, random_state=13)["row"].tolist()  # MedSyn drew its 1,000 with DataFrame.sample
    with pytest.raises(UsageError, match="only 5 passed the filters"):
        seeded_sample(5, 6)


def test_mimic_codes_get_their_dot_back():
    assert [normalise_mimic_code(c) for c in ("I214", "I10", "E785", "Z7982")] == ["I21.4", "I10", "E78.5", "Z79.82"]


def _write_csv(path, header, rows):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)


def test_load_mimic_discharge_filters_attaches_codes_and_samples(tmp_path):
    notes = [
        ("10-DS-1", "1", "101", NOTE),  # kept
        ("10-DS-2", "2", "102", variant("Father with MI at age 55.", "The patient expired on ___.")),  # deceased
        ("10-DS-3", "3", "103", variant("Pertinent Results:", "Results:")),  # no pertinent results heading
        ("10-DS-4", "4", "104", variant("Chest pain", "Shortness of breath")),  # kept, ICD-9 codes only
        ("10-DS-5", "5", "105", variant("Chest pain", "Syncope")),  # kept
        ("10-DS-6", "6", "106", variant("Chest pain", "Fever")),  # kept
        ("10-DS-7", "7", "107", variant("Discharge Disposition:\nHome", "Discharge Disposition:\nExpired")),  # passes the filters; no codes
    ]
    discharge = tmp_path / "discharge.csv.gz"
    _write_csv(discharge, ["note_id", "subject_id", "hadm_id", "note_type", "text"], [(n, s, h, "DS", t) for n, s, h, t in notes])
    diagnoses = tmp_path / "diagnoses_icd.csv"
    _write_csv(diagnoses, ["subject_id", "hadm_id", "seq_num", "icd_code", "icd_version"], [
        ("1", "101", "2", "I10", "10"), ("1", "101", "1", "I214", "10"),  # seq_num puts I21.4 first
        ("4", "104", "1", "41071", "9"),  # ICD-9 only: dropped
        ("5", "105", "1", "R55", "10"), ("6", "106", "1", "R509", "10"), ("6", "106", "2", "R509", "10"),
    ])
    everything = load_mimic_discharge(discharge, diagnoses, n=None)
    assert everything.counts == {"read": 7, "missing_sections": 1, "deceased": 1, "no_icd10": 2, "kept": 3, "sampled": 3}
    assert [c.id for c in everything.cases] == ["mimic-10-DS-1", "mimic-10-DS-5", "mimic-10-DS-6"]
    assert everything.cases[0].reference.codes == ["I21.4", "I10"]
    assert everything.cases[2].reference.codes == ["R50.9"]  # a repeated code counts once
    assert everything.cases[1].chief_complaint == "Syncope"

    drawn = load_mimic_discharge(discharge, diagnoses, n=2, seed=13)
    kept_ids = ["mimic-10-DS-1", "mimic-10-DS-5", "mimic-10-DS-6"]
    assert [c.id for c in drawn.cases] == [kept_ids[i] for i in seeded_sample(3, 2, seed=13)]
    assert drawn.counts["sampled"] == 2

    without_codes = load_mimic_discharge(discharge, n=None)  # no diagnoses file: filters only, no gold codes
    assert without_codes.counts["kept"] == 5 and without_codes.cases[0].reference.codes == []

    with pytest.raises(UsageError, match="only 3 passed"):
        load_mimic_discharge(discharge, diagnoses, n=4)
