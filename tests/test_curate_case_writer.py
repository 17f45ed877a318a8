"""A curated case written as a case folder reads back through load_case and runs as a board."""

from __future__ import annotations

import json
import subprocess

import pytest

from medpanel.cases import load_case
from medpanel.curate.case_writer import CuratedCase, CuratedSlide, SpecialistQuestion, write_case

from conftest import MEDPANEL, ROOT

SLIDES = ROOT / "examples" / "prostate" / "slides"


def curated() -> CuratedCase:
    return CuratedCase(
        id="rec07-case2",
        summary="A 69-year-old man has Grade Group 2 prostate adenocarcinoma at the right base; his PSA is 9.4 ng/mL.",
        slides=[CuratedSlide(SLIDES / "01_psa_trend.png", "PSA trend from 4.4 to 9.4 ng/mL over three years."),
                CuratedSlide(SLIDES / "02_mri_findings.png", "MRI: 11 mm PI-RADS 4 lesion, right base, no extraprostatic extension."),
                CuratedSlide(None, "Staging summary: cT1c N0 M0 (image not kept).")],
        questions=[SpecialistQuestion("Would you add ADT to radiotherapy here?", "Radiation Oncologist",
                                      "No: at favourable intermediate risk I would give radiotherapy alone.", "treatment_recommendation"),
                   SpecialistQuestion("Does the capsular contact suggest extension?", "Radiologist",
                                      "No, 6 mm of contact without bulging reads as organ-confined.", "findings_interpretation")],
        discussion=[("Moderator", "Let us start with the MRI."), ("Radiologist", "One PI-RADS 4 lesion: organ-confined."),
                    ("Radiation Oncologist", "Radiotherapy alone, no ADT.")],
        conclusion="The board recommended radiotherapy without ADT or surveillance. A genomic classifier was requested.",
        metadata={"recording": "rec07", "source_url": "https://example.org/video", "start_s": 312.0, "end_s": 1290.5},
    )


def test_a_written_case_reads_back_equal(tmp_path):
    case = curated()
    path = write_case(case, tmp_path / case.id)
    assert path == tmp_path / case.id / "case.yaml"
    loaded = load_case(path.parent)
    assert loaded.id == case.id and loaded.summary == case.summary
    assert [s.caption for s in loaded.slides] == [s.caption for s in case.slides]
    # Images are copied under slides/, numbered in order, byte for byte; a caption-only slide stays caption-only.
    assert [s.image and s.image.rsplit("/", 1)[-1] for s in loaded.slides] == ["01_01_psa_trend.png", "02_02_mri_findings.png", None]
    for written, original in zip(loaded.slides[:2], case.slides[:2]):
        assert written.image.startswith(str(path.parent / "slides"))
        assert open(written.image, "rb").read() == original.image.read_bytes()
    assert [(t.role, t.text) for t in loaded.reference.discussion] == case.discussion
    assert loaded.reference.conclusion == case.conclusion
    assert (loaded.question, loaded.target_role, loaded.reference.answer) == (case.questions[0].question, "Radiation Oncologist",
                                                                            case.questions[0].answer)
    assert loaded.metadata["specialist_questions"] == [
        {"type": q.type, "target_role": q.target_role, "question": q.question, "reference_answer": q.answer} for q in case.questions]
    assert {k: loaded.metadata[k] for k in case.metadata} == case.metadata


def test_the_specialist_protocol_sees_one_item_per_question(tmp_path):
    from medpanel.protocols.specialist import specialist_items

    items = specialist_items(load_case(write_case(curated(), tmp_path / "c")))
    assert [(i.target_role, i.metadata["qa_type"]) for i in items] == [("Radiation Oncologist", "treatment_recommendation"),
                                                                      ("Radiologist", "findings_interpretation")]


def test_the_writer_refuses_what_it_cannot_write_cleanly(tmp_path):
    case = curated()
    write_case(case, tmp_path / "c")
    with pytest.raises(FileExistsError):
        write_case(case, tmp_path / "c")
    write_case(case, tmp_path / "c", overwrite=True)
    gone = CuratedCase(id="x", summary="s", slides=[CuratedSlide(tmp_path / "missing.png", "c")])
    with pytest.raises(FileNotFoundError):
        write_case(gone, tmp_path / "d")
    assert not (tmp_path / "d").exists()  # nothing written before the check
    with pytest.raises(ValueError):
        write_case(CuratedCase(id="../escape", summary="s"), tmp_path / "e")


def test_a_written_case_runs_as_a_board(cli_env, tmp_path):
    folder = tmp_path / "case"
    write_case(curated(), folder)
    meeting = ("<discussion>\n<turn 1> Moderator: A man with Grade Group 2 disease.\n<turn 2> Radiation Oncologist: "
               "Radiotherapy without ADT.\n</discussion>\n<conclusion>The board recommended radiotherapy without ADT. "
               "A genomic classifier was requested.</conclusion>")
    replies = tmp_path / "meeting.json"
    replies.write_text(json.dumps([meeting]))
    proc = subprocess.run([MEDPANEL, "board", str(folder), "--model", f"scripted:{replies}", "--json"], env=cli_env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["item"]["item_id"] == "rec07-case2" and out["item"]["status"] == "done"
    assert out["item"]["outcome"]["answer"] == "The board recommended radiotherapy without ADT. A genomic classifier was requested."
    assert [e["speaker"] for e in out["events"] if e["phase"] == "discussion"] == ["Moderator", "Radiation Oncologist"]
