"""The curation stages one by one, on inputs made here: chunking and clustering voices, utterances from
labelled words, the slide heuristic on rendered frames, case spans, role shortlists, captions, extraction
and the de-leak pass on scripted models (each refusal the validator must make), and the stage plumbing."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from medpanel.curate import prompts
from medpanel.curate.align import Linked, Utterance
from medpanel.curate.deleak_pass import deleak_case, sentences
from medpanel.curate.extract import Extracted, Question, Turn, case_slides, extract_case, turns
from medpanel.curate.pipeline import CurateSettings, dependents, recording_ids, recordings
from medpanel.curate.speakers import DiarizeSettings, chunks, cluster, utterances
from medpanel.curate.transcribe import Segment, Word
from medpanel.curate.understand import CaseSpan, caption_slide, infer_roles, role_shortlist, segment_cases, spans_from_starts
from medpanel.errors import UsageError
from medpanel.models.scripted import ScriptedModel


def words(*spec: tuple[str, float, float]) -> list[Word]:
    return [Word(a, b, t) for t, a, b in spec]


def test_chunks_cut_at_pauses_and_split_long_runs_evenly():
    segment = Segment(0, 12, "", words(("a", 0, 0.5), ("b", 0.6, 1.0), ("c", 1.5, 1.9),  # pause 0.5 before c
                                       *[(f"w{i}", 1.5 + i * 0.5, 1.9 + i * 0.5) for i in range(1, 19)]))
    runs = chunks([segment], DiarizeSettings(pause_s=0.3, chunk_s=4.0))
    assert [w.text for w in runs[0]] == ["a", "b"]
    # c..w18 runs 1.5-10.9 s without a pause: cut into three near-equal parts, not 7 + 7 + a short tail.
    rest = runs[1:]
    assert [len(r) for r in rest] == [7, 6, 6] and [w.text for r in rest for w in r] == ["c", *[f"w{i}" for i in range(1, 19)]]


def test_cluster_is_bounded_to_the_speaker_range():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(12, 16))
    points = np.vstack([c + rng.normal(scale=0.01, size=(3, 16)) for c in centres])
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    assert len(set(cluster(points, DiarizeSettings(threshold=0.05)))) == 10  # twelve voices, at most ten speakers
    assert len(set(cluster(points, DiarizeSettings(threshold=5.0, min_speakers=2)))) == 2
    assert cluster(points[:1], DiarizeSettings()) == [0] and cluster([], DiarizeSettings()) == []


def test_utterances_are_runs_of_one_speaker_split_at_long_pauses():
    labelled = [(Word(0, 1, "Hello"), 0), (Word(1.1, 2, "there."), 0), (Word(2.2, 3, "Hi."), 1), (Word(5, 6, "Again."), 1)]
    said = utterances(labelled, pause_s=1.5)
    assert [(u.speaker, u.text, u.start, u.end) for u in said] == [("S1", "Hello there.", 0, 2), ("S2", "Hi.", 2.2, 3), ("S2", "Again.", 5, 6)]


def test_the_slide_heuristic_finds_a_projected_slide_and_refuses_a_room_and_a_blank_screen():
    from PIL import Image

    from medpanel.curate.slides import VisualSettings, looks_like_slide
    from medpanel.testing.meeting import SCREEN, render_slide, room

    settings = VisualSettings()
    box = looks_like_slide(room(render_slide("s2"), seed=1), settings)
    assert box is not None and all(abs(a - b) <= 8 for a, b in zip(box, SCREEN))
    assert looks_like_slide(room(None, seed=2), settings) is None  # people at a table
    blank = Image.new("RGB", (640, 360), (70, 62, 58))
    blank.paste(Image.new("RGB", (448, 252), (240, 240, 240)), SCREEN[:2])
    assert looks_like_slide(blank, settings) is None  # a lit screen with nothing on it
    shared = render_slide("s1", size=(640, 360))  # a screen share: the whole frame is the slide
    assert looks_like_slide(shared, settings) == (0, 0, 640, 360)


def utts(*spec: tuple[float, float, str, str]) -> list[Utterance]:
    return [Utterance(a, b, s, t) for a, b, s, t in spec]


def test_case_spans_drop_bad_and_too_close_starts():
    said = utts(*[(i * 10.0, i * 10.0 + 8, "S1", f"line {i}") for i in range(10)])  # 0-98 s
    assert spans_from_starts([], said) == [CaseSpan(0, 9, 0.0, 98.0)]
    assert spans_from_starts([99, -1], said) == [CaseSpan(0, 9, 0.0, 98.0)]
    # 1 is 10 s after 0 (too close: joins it); 9 leaves a last case of 8 s (too short: joins the one before).
    assert spans_from_starts([0, 1, 5, 9, 5], said) == [CaseSpan(0, 4, 0.0, 48.0), CaseSpan(5, 9, 50.0, 98.0)]
    assert spans_from_starts([2, 6], said, min_case_s=0) == [CaseSpan(2, 5, 20.0, 58.0), CaseSpan(6, 9, 60.0, 98.0)]


def test_segmentation_asks_in_windows_with_global_line_numbers():
    said = utts(*[(i * 5.0, i * 5.0 + 4, "S1", f"line {i}") for i in range(10)])  # 0-49 s
    seen = []

    def answer(request):
        user = request.messages[-1].content
        seen.append(user.splitlines()[0])
        return {"case_starts": [0, 7]} if "lines 0 to" in user else {"case_starts": [5, 7]}

    spans = asyncio.run(segment_cases(ScriptedModel(responder=answer), said, {"S1": "Moderator"}, window=5))
    assert seen == ["Transcript lines 0 to 4:", "Transcript lines 5 to 9:"]
    assert [s.first for s in spans] == [0, 5]  # 7 is outside the first window (dropped) and too close to 5 in the second


def test_a_small_model_chooses_a_role_from_its_shortlist():
    assert role_shortlist("the CT scan and the MRI show a lesion; chemo after")[:2] == ["Radiologist", "Medical Oncologist"]
    assert role_shortlist("hello") == ["Other"]
    small = ScriptedModel(responder=lambda r: {"role": json.loads(json.dumps(r.schema))["properties"]["role"]["enum"][0]}, small=True)
    roles = asyncio.run(infer_roles(small, utts((0, 1, "S1", "The biopsy shows a grade 3 tumor on tissue staining."))))
    assert roles == {"S1": "Pathologist"}
    offered = small.history[0].schema["properties"]["role"]["enum"]
    assert offered[-1] == "Other" and len(offered) <= 4


def test_captions_drop_unreadable_and_non_clinical_slides_and_refuse_invented_words():
    text = "CT chest\n3.1 cm mass in the right upper lobe"
    model = ScriptedModel([{"readable": True, "clinical": False, "caption": "Agenda"},
                           {"readable": True, "clinical": True, "caption": "CT chest showing a liver metastasis"},
                           {"readable": True, "clinical": True, "caption": "CT chest: 3.1 cm right upper lobe mass"}])
    model.supports_vision = False
    assert asyncio.run(caption_slide(model, "s", "ok", None)).why.startswith("unreadable")  # no call: too little text
    assert asyncio.run(caption_slide(model, "s", text, None)).why == "not clinical"
    invented = asyncio.run(caption_slide(model, "s", text, None))
    assert invented.kept and invented.why == "slide text" and invented.caption == "CT chest 3.1 cm mass in the right upper lobe"
    assert asyncio.run(caption_slide(model, "s", text, None)).caption == "CT chest: 3.1 cm right upper lobe mass"
    assert len(model.history) == 3


def test_turns_merge_one_speakers_utterances_and_collect_their_slides():
    links = [Linked(u, s, 1.0) for u, s in zip(utts((0, 1, "S1", "a"), (1, 2, "S1", "b"), (2, 3, "S2", "c"), (3, 4, "S2", "d")),
                                               [None, "x", "y", "x"])]
    merged = turns(links, {"S1": "Moderator"}, CaseSpan(0, 3, 0, 4))
    assert [(t.role, t.text, t.slide_ids) for t in merged] == [("Moderator", "a b", ["x"]), ("Other", "c d", ["y", "x"])]
    # A slide shown in the case though nobody spoke over it is still the case's; one shown before is not.
    assert case_slides(merged, [("z", 3.5, 3.9), ("w", -5, -1)], CaseSpan(0, 3, 0, 4)) == ["x", "y", "z"]


def test_extraction_keeps_an_answer_only_as_the_specialists_own_words():
    discussion = [Turn("Moderator", "S1", "What does the scan show for this patient today?", 0, 2),
                  Turn("Radiologist", "S2", "The scan shows a three centimeter mass and no enlarged nodes at all.", 2, 5),
                  Turn("Medical Oncologist", "S3", "I would not start chemotherapy before surgery in this patient.", 5, 8),
                  Turn("Radiologist", "S2", "Agreed.", 8, 9)]
    model = ScriptedModel([{"summary": "A woman had a lung mass."},
                           {"keep": True, "type": "findings_interpretation", "question": "What does the radiologist see?",
                            "answer": "a three centimeter mass"},
                           {"keep": True, "type": "treatment_recommendation", "question": "Should chemotherapy come first?",
                            "answer": "I would start chemotherapy before surgery"},  # the negation dropped: not a deletion
                           {"conclusion": "Surgery first."}])
    case = asyncio.run(extract_case(model, "c", CaseSpan(0, 3, 0, 9), discussion, [], {}))
    assert [(q.target_role, q.answer, q.answer_trimmed) for q in case.questions] == [
        ("Radiologist", "a three centimeter mass", True),
        ("Medical Oncologist", "I would not start chemotherapy before surgery in this patient.", False)]
    assert len(model.history) == 4  # the moderator's first turn and the short "Agreed." ask nothing


def extracted() -> Extracted:
    return Extracted("c1", {"first": 0, "last": 1, "start": 0, "end": 9},
                     "She had a lung mass. Surgery found no residual tumor.", ["s1", "s2"],
                     [Question("Does the scan show no nodal disease after the resection?", "Radiologist", "No.", "findings_interpretation", 1),
                      Question("What did the operation find?", "Surgeon", "Clear margins.", "findings_interpretation", 2),
                      Question("Which therapy suits her?", "Medical Oncologist", "Osimertinib.", "treatment_recommendation", 3),
                      Question("Is she fit for surgery?", "Surgeon", "Yes.", "eligibility_assessment", 4)],
                     [], "Proceed to surgery.")


def test_the_deleak_pass_applies_valid_deletions_and_refuses_the_rest():
    model = ScriptedModel([
        {"text": "She had a lung mass."},  # summary: a verbatim deletion -> cut
        {"text": "CT chest mass"},  # caption s1: a word subsequence -> cut
        {"text": "Biopsy showing metastatic adenocarcinoma"},  # caption s2: a new word -> refused, kept as it was
        {"verdict": "trim", "text": "Does the scan show nodal disease?"},  # drops "no" from what stays -> refused
        {"verdict": "drop", "text": ""},  # asks for a post-decision finding -> dropped
        {"verdict": "paraphrase", "text": "Which targeted drug suits her?"},  # "targeted", "drug" are nowhere -> refused
        {"verdict": "paraphrase", "text": "Is she fit for surgery for her lung mass?"},  # words all in view -> paraphrased
    ])
    captions = {"s1": "CT chest: 3 cm mass", "s2": "Biopsy showing adenocarcinoma"}
    case, new_captions, edits = asyncio.run(deleak_case(model, extracted(), captions))
    actions = {e.field: (e.action, e.reasons) for e in edits}
    assert case.summary == "She had a lung mass." and actions["summary"] == ("cut", [])
    assert new_captions == {"s1": "CT chest mass", "s2": "Biopsy showing adenocarcinoma"}
    assert actions["caption:s2"] == ("refused", ["new_content_word"])
    assert actions["question:0"] == ("refused", ["negation_removed"])
    assert actions["question:1"][0] == "dropped" and actions["question:2"] == ("refused", ["new_content_word"])
    assert actions["question:3"][0] == "paraphrased"
    assert [q.question for q in case.questions] == ["Does the scan show no nodal disease after the resection?", "Which therapy suits her?",
                                                   "Is she fit for surgery for her lung mass?"]
    assert captions == {"s1": "CT chest: 3 cm mass", "s2": "Biopsy showing adenocarcinoma"}  # the input is not changed


def test_a_small_model_deleaks_by_sentence_numbers_and_may_not_empty_the_summary():
    small = ScriptedModel([{"delete": [2]}, {"delete": []}, {"delete": [1]}, *[{"verdict": "keep"}] * 4], small=True)
    case, new_captions, edits = asyncio.run(deleak_case(small, extracted(), {"s1": "CT chest: 3 cm mass", "s2": "Biopsy."}))
    assert case.summary == "She had a lung mass."
    assert "[1] She had a lung mass.\n[2] Surgery found no residual tumor." in small.history[0].messages[-1].content
    assert {e.field: e.action for e in edits}["caption:s2"] == "refused" and new_captions["s2"] == "Biopsy."  # emptied
    assert len(case.questions) == 4
    again = ScriptedModel([{"delete": [1, 2]}, {"delete": []}, {"delete": []}, *[{"verdict": "keep"}] * 4], small=True)
    case, _, edits = asyncio.run(deleak_case(again, extracted(), {"s1": "CT chest: 3 cm mass", "s2": "Biopsy."}))
    assert edits[0].reasons == ["emptied"] and case.summary.startswith("She had")
    assert sentences("One. Two? Three!  ") == ["One.", "Two?", "Three!"]


def test_stage_plumbing_recordings_ids_and_settings(tmp_path):
    (tmp_path / "b.mp4").write_bytes(b"x")
    (tmp_path / "a.mkv").write_bytes(b"x")
    (tmp_path / "a.mp4").write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("x")
    found = recordings(tmp_path)
    assert [p.name for p in found] == ["a.mkv", "a.mp4", "b.mp4"]
    assert list(recording_ids(found)) == ["a_mkv", "a_mp4", "b"]  # a shared stem: both named by suffix
    assert recording_ids(found[::-1]) == {"b": found[2], "a_mp4": found[1], "a_mkv": found[0]}  # whatever the order
    (tmp_path / "._b.mp4").write_bytes(b"x")  # a hidden file (macOS resource fork) is no recording
    assert [p.name for p in recordings(tmp_path)] == ["a.mkv", "a.mp4", "b.mp4"]
    with pytest.raises(UsageError, match="is not a recording"):
        recordings(tmp_path / "notes.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="No recordings"):
        recordings(tmp_path / "empty")
    with pytest.raises(UsageError, match="does not exist"):
        recordings(tmp_path / "missing.mp4")
    settings = CurateSettings(model="openai:x@http://127.0.0.1:1")
    assert settings.stage_key("roles")["model"] == "openai:x@http://127.0.0.1:1" and settings.stage_key("write") == {}
    assert len(settings.stage_key("deleak")["code"]) == 12  # the model stages' code hash: an edit reruns them
    assert settings.stage_key("align") == {"min_share": 0.25}
    assert "deleak" in dependents("roles") and "slides" not in dependents("audio")
    assert prompts.ROLES[0] == "Moderator" and len(prompts.ROLES) == 11 and len(prompts.TURN_TYPES) == 9


def test_a_partial_stage_list_is_refused_when_an_input_is_missing_or_would_be_removed(tmp_path):
    from medpanel.curate.pipeline import Recording, Tools

    source = tmp_path / "m.mp4"
    source.write_bytes(b"x")
    recording = Recording("m", source, tmp_path / "out", Tools(CurateSettings(), None))
    recording.save("audio", {"duration": 1.0, "segments": []})
    recording.save("speakers", {"diarizer": "resemblyzer", "utterances": []})
    recording.check_inputs(["roles"], redo=False)  # speakers is finished: fine
    with pytest.raises(UsageError, match="would be removed when audio reruns"):
        recording.check_inputs(["audio", "roles"], redo=True)  # audio reruns, which removes speakers' file
    with pytest.raises(UsageError, match="the align stage reads the slides stage's output, which is missing"):
        recording.check_inputs(["align"], redo=False)
    recording.check_inputs(["audio", "speakers", "roles"], redo=True)  # every input chosen
    assert recording.path("speakers").exists()  # checking touches nothing


def _deleaked(case_id: str, summary: str) -> dict:
    case = {"case_id": case_id, "span": {"first": 0, "last": 0, "start": 0.0, "end": 30.0}, "summary": summary, "slide_ids": [],
            "questions": [], "discussion": [{"role": "Moderator", "speaker": "S1", "text": "A case.", "start": 0, "end": 30,
                                             "slide_ids": []}], "conclusion": "Surgery."}
    return {"stage": "deleak", "settings": {}, "data": [{"case": case, "captions": {}, "edits": []}]}


def test_write_fails_a_recording_it_cannot_write_keeps_absent_ones_placed_and_owns_its_folder(tmp_path):
    from medpanel.curate.pipeline import CASES_MARK, curate

    source = tmp_path / "in"
    source.mkdir()
    (source / "new.mp4").write_bytes(b"x")
    out = tmp_path / "out"
    for rid, summary in (("good", "A woman had a lung mass."), ("empty", "")):
        (out / "work" / rid).mkdir(parents=True)
        (out / "work" / rid / "deleaked.json").write_text(json.dumps(_deleaked(f"{rid}-01", summary)))
    (out / "work" / "broken").mkdir()
    (out / "work" / "broken" / "deleaked.json").write_text("{not json")
    (out / "split.json").write_text(json.dumps({"recordings": {"train": [], "dev": [], "test": ["gone"]}}))
    report = asyncio.run(curate(source, out, stages=["write"]))
    failed = {r.recording: (r.failed_stage, r.error) for r in report.failed}
    assert set(failed) == {"empty", "broken"} and failed["empty"][0] == "write" and "no summary" in failed["empty"][1]
    assert report.split["cases"]["train"] + report.split["cases"]["dev"] + report.split["cases"]["test"] == ["good-01"]
    assert "gone" in report.split["recordings"]["test"] and "gone" in report.split["held"]  # absent, still placed
    assert (out / "cases" / CASES_MARK).exists() and json.loads((out / "cases" / "split.json").read_text()) == report.split
    # A cases folder this pipeline did not write is never replaced.
    other = tmp_path / "other"
    (other / "cases").mkdir(parents=True)
    with pytest.raises(UsageError, match="was not written by medpanel curate"):
        asyncio.run(curate(source, other, stages=["write"]))
