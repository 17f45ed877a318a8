"""OpenTumorBoard's released record formats, written here in small synthetic gzipped files (the project ships none of their data)."""

from __future__ import annotations

import gzip
import json

import pytest

from medpanel.cases import load_dataset
from medpanel.cases.opentumorboard import load_otb_records, parse_slides, write_otb_predictions
from medpanel.errors import UsageError

SLIDES = ("<image> PSMA PET/CT showing focal uptake in the right prostate base.\n"
          "<image> MRI with an 8 mm PI-RADS 4 lesion at the right base.")
BOARD_RECORD = {
    "schema_version": 1, "benchmark_version": "1.0", "task_name": "tumor_board_simulation", "simulation_id": "sim_000001",
    "video_uid": "vid01", "video_dir": "videos/vid01", "case_id": "case_1", "case_start_sec": 30.0, "case_end_sec": 900.5,
    "case_summary": "A 69-year-old man has Grade Group 2 prostate adenocarcinoma at the right base.",
    "slides": SLIDES,
    "reference_conclusion": "The panel would offer focal therapy. Trial participation is favoured.",
    "source_task": "task1",
}
TURN_RECORD = {
    "schema_version": 1, "benchmark_version": "1.0", "qa_id": "qa_000001", "video_uid": "vid01", "video_dir": "videos/vid01",
    "case_id": "case_1", "qa_index": 3, "qa_type": "treatment_recommendation",
    "qa_type_candidates": ["treatment_recommendation", "next_action_suggestion"], "utterance_id": "u17",
    "target_specialist_role": "surgeon", "case_summary": BOARD_RECORD["case_summary"], "slides": "",
    "question": "Would you consider focal therapy for this patient?",
    "reference_answer": "I would offer focal therapy with counselling about recurrence.",
    "source_task": "task2", "source_aliases": [{"source_task": "task2", "qa_index": 3, "qa_type": "treatment_recommendation"}],
}


def write_gz(path, rows):
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    return path


def manifest_row(record, *, images=None):
    metadata = {k: v for k, v in record.items() if not k.startswith("reference_")}
    user = f"CASE SUMMARY:\n{record['case_summary']}\n\nSLIDE DESCRIPTIONS:\n{record['slides']}"
    row = {"schema_version": 1, "format": "sharegpt", "id": record["simulation_id"], "prompt_version": "board_simulation_caption",
           "metadata": metadata, "conversations": [{"from": "system", "value": "You are simulating a tumor board."},
                                                   {"from": "human", "value": user}]}
    if images is not None:
        row["images"] = images
    return row


def test_slides_string_becomes_captioned_slides_without_images():
    slides = parse_slides(SLIDES)
    assert [s.caption for s in slides] == ["PSMA PET/CT showing focal uptake in the right prostate base.",
                                           "MRI with an 8 mm PI-RADS 4 lesion at the right base."]
    assert all(s.image is None for s in slides)
    assert parse_slides("") == [] and parse_slides(None) == []


def test_board_simulation_records_load_through_load_dataset(tmp_path):
    second = BOARD_RECORD | {"simulation_id": "sim_000002", "slides": ""}
    path = write_gz(tmp_path / "task1_test.jsonl.gz", [BOARD_RECORD, second])
    cases = load_dataset(str(path))
    assert [c.id for c in cases] == ["sim_000001", "sim_000002"]
    first = cases[0]
    assert first.summary == BOARD_RECORD["case_summary"] and len(first.slides) == 2
    assert first.reference.conclusion == BOARD_RECORD["reference_conclusion"]
    assert first.metadata["otb_task"] == "board_simulation" and first.metadata["video_uid"] == "vid01"
    assert first.metadata["slides_text"] == SLIDES and first.metadata["case_end_sec"] == 900.5
    assert "reference_conclusion" not in first.metadata and "case_summary" not in first.metadata
    assert cases[1].slides == [] and cases[1].slide_text() == "No slide descriptions are available."
    assert len(load_dataset(str(path), limit=1)) == 1


def test_specialist_turn_records(tmp_path):
    path = write_gz(tmp_path / "task2_validation.jsonl.gz", [TURN_RECORD])
    (case,) = load_otb_records(path)
    assert case.id == "qa_000001" and case.question == TURN_RECORD["question"] and case.target_role == "surgeon"
    assert case.reference.answer == TURN_RECORD["reference_answer"] and case.reference.conclusion is None  # the field the judge reads
    assert case.metadata["qa_type"] == "treatment_recommendation"
    assert case.metadata["qa_type_candidates"] == ["treatment_recommendation", "next_action_suggestion"]
    assert case.metadata["source_aliases"][0]["qa_index"] == 3 and case.metadata["otb_task"] == "specialist_turn"


def test_sharegpt_manifest_has_inputs_and_no_reference(tmp_path):
    path = write_gz(tmp_path / "board_simulation.caption.jsonl.gz", [manifest_row(BOARD_RECORD)])
    (case,) = load_otb_records(path)
    assert case.id == "sim_000001" and case.reference.conclusion is None
    assert case.metadata["input"] == "sharegpt_manifest" and case.metadata["prompt_version"] == "board_simulation_caption"
    assert case.metadata["sharegpt_user"].startswith("CASE SUMMARY:\nA 69-year-old man")
    assert [s.caption for s in case.slides][0].startswith("PSMA PET/CT")


def test_image_manifest_attaches_images_only_when_all_exist(tmp_path):
    (tmp_path / "slides").mkdir()
    for name in ("a.png", "b.png"):
        (tmp_path / "slides" / name).write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(16))
    inputs = tmp_path / "data" / "test_inputs"
    inputs.mkdir(parents=True)
    path = write_gz(inputs / "board_simulation.image.jsonl.gz", [manifest_row(BOARD_RECORD, images=["slides/a.png", "slides/b.png"])])
    (case,) = load_otb_records(path)  # paths are relative to the release root, two folders up
    assert [s.image for s in case.slides] == [str(tmp_path / "slides" / "a.png"), str(tmp_path / "slides" / "b.png")]
    partial = write_gz(inputs / "partial.jsonl.gz", [manifest_row(BOARD_RECORD, images=["slides/a.png", "slides/missing.png"])])
    (case,) = load_otb_records(partial)
    assert all(s.image is None for s in case.slides) and case.metadata["image_paths"] == ["slides/a.png", "slides/missing.png"]


def test_plain_jsonl_with_gz_name_is_read_too(tmp_path):
    path = tmp_path / "task1_test.jsonl.gz"
    path.write_text(json.dumps(BOARD_RECORD) + "\n")
    assert [c.id for c in load_otb_records(path)] == ["sim_000001"]


@pytest.mark.parametrize("rows, message", [
    ([BOARD_RECORD, TURN_RECORD], "mixes kinds"),
    ([{k: v for k, v in BOARD_RECORD.items() if k != "case_summary"}], "lacks case_summary"),
    ([{k: v for k, v in BOARD_RECORD.items() if k != "reference_conclusion"}], "lacks reference_conclusion"),
    ([{"hello": "world"}], "not an OpenTumorBoard record"),
    ([manifest_row(BOARD_RECORD) | {"id": "sim_999999"}], "differs from metadata.simulation_id"),
])
def test_bad_files_are_refused_with_the_line(tmp_path, rows, message):
    path = write_gz(tmp_path / "bad.jsonl.gz", rows)
    with pytest.raises(UsageError, match=message):
        list(load_otb_records(path))


def test_truncated_gzip_is_a_usage_error(tmp_path):
    whole = gzip.compress((json.dumps(BOARD_RECORD) + "\n").encode() * 50)
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(UsageError, match="not a readable gzipped JSONL"):
        list(load_otb_records(path))


WELL = ("<discussion>\n<turn 1> Moderator: Is focal therapy reasonable?\n<turn 2> Surgeon: Yes, the lesion is localized.\n"
        "</discussion>\n<conclusion>The board offers focal therapy. Trial enrolment is preferred.</conclusion>")


def read_jsonl(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def test_board_predictions_in_the_benchmarks_responses_layout(tmp_path):
    cases = load_otb_records(write_gz(tmp_path / "task1_test.jsonl.gz", [
        BOARD_RECORD, BOARD_RECORD | {"simulation_id": "sim_000002"}, BOARD_RECORD | {"simulation_id": "sim_000003"}]))
    responses = {"sim_000001": WELL, "sim_000002": "I cannot help with that.", "sim_000003": None}
    written = write_otb_predictions(tmp_path / "run" / "responses.jsonl", cases, responses, model="local",
                                    finish_reasons={"sim_000001": "stop"}, errors={"sim_000003": "timeout after 3 tries"})
    assert (written.written, written.failed) == (2, 1)
    rows = read_jsonl(tmp_path / "run" / "responses.jsonl")
    good, bad = rows
    assert good["simulation_id"] == "sim_000001" and good["task_name"] == "tumor_board_simulation"
    assert good["raw_response"] == WELL and good["parse_status"] == "parsed" and good["finish_reason"] == "stop"
    assert good["parsed_output"]["conclusion"] == "The board offers focal therapy. Trial enrolment is preferred."
    assert good["parsed_output"]["discussion"] == [{"role": "Moderator", "response": "Is focal therapy reasonable?"},
                                                   {"role": "Surgeon", "response": "Yes, the lesion is localized."}]
    assert good["parsed_output"]["conclusion_sentence_count"] == 2 and good["video_uid"] == "vid01"
    assert bad["parsed_output"] is None and bad["parse_status"] == "raw_fallback"
    assert read_jsonl(tmp_path / "run" / "errors.jsonl") == [
        {"kind": "error", "schema_version": 1, "simulation_id": "sim_000003", "error": "timeout after 3 tries"}]


def test_specialist_predictions_gzipped(tmp_path):
    cases = list(load_otb_records(write_gz(tmp_path / "task2.jsonl.gz", [TURN_RECORD, TURN_RECORD | {"qa_id": "qa_000002"}])))
    responses = {"qa_000001": '```json\n{"answer": "Focal therapy, with counselling."}\n```', "qa_000002": "Focal therapy."}
    written = write_otb_predictions(tmp_path / "responses.jsonl.gz", cases, responses, model="openai:gpt-4o-mini")
    assert (written.written, written.failed, written.errors_path) == (2, 0, None)
    fenced, plain = read_jsonl(tmp_path / "responses.jsonl.gz")
    assert fenced["qa_id"] == "qa_000001" and fenced["parsed_output"] == {"answer": "Focal therapy, with counselling."}
    assert fenced["parse_status"] == "parsed_after_cleanup" and fenced["qa_type"] == "treatment_recommendation"
    assert plain["parsed_output"] is None and plain["parse_status"] == "raw_fallback" and plain["raw_response"] == "Focal therapy."


def test_predictions_need_otb_cases(tmp_path):
    from medpanel.cases.model import Case

    with pytest.raises(UsageError, match="not an OpenTumorBoard item"):
        write_otb_predictions(tmp_path / "r.jsonl", [Case(id="x", summary="s")], {"x": "text"}, model="m")
    written = write_otb_predictions(tmp_path / "r.jsonl", [Case(id="x", summary="s")], {"x": WELL}, model="m", task="board_simulation")
    assert read_jsonl(tmp_path / "r.jsonl")[0]["simulation_id"] == "x" and written.written == 1


def test_uncompressed_otb_jsonl_is_recognised_by_its_fields(tmp_path):
    plain = tmp_path / "task1_test.jsonl"
    plain.write_text(json.dumps(BOARD_RECORD) + "\n")
    (case,) = load_dataset(str(plain))
    assert case.metadata["otb_task"] and case.reference.conclusion == BOARD_RECORD["reference_conclusion"]


def test_board_predictions_use_the_benchmarks_own_reader(tmp_path):
    # The released evaluation reader rejects capitalised turn heads; the lenient one reads them.
    # responses.jsonl's parse_status must be what the benchmark itself would say.
    cases = load_otb_records(write_gz(tmp_path / "task1_test.jsonl.gz", [BOARD_RECORD]))
    capitals = ("<discussion>\n<Turn 1> Moderator: Is focal therapy reasonable?\n<Turn 2> Surgeon: Yes, it is localized.\n"
                "</discussion>\n<conclusion>The board offers focal therapy. Trial enrolment is preferred.</conclusion>")
    write_otb_predictions(tmp_path / "responses.jsonl", cases, {"sim_000001": capitals}, model="m")
    from medpanel.scoring.board_format import parse_board_response

    row = read_jsonl(tmp_path / "responses.jsonl")[0]
    assert row["parse_status"] == parse_board_response(capitals, reader="released").status
    assert parse_board_response(capitals, reader="released").status != parse_board_response(capitals).status


@pytest.mark.parametrize("images, problem", [
    (["OUTSIDE", "OUTSIDE"], "outside"),
    (["notes.txt", "notes.txt"], "not an image"),
    ([5, 6], "not text"),
])
def test_manifest_images_must_be_images_inside_the_release(tmp_path, images, problem):
    # A manifest's image list is read and sent to a vision model: the same rules as a case file's slides.
    (tmp_path / "notes.txt").write_text("not a picture")
    outside = tmp_path.parent / f"outside-{tmp_path.name}.png"  # a real image, but beyond the release's folders
    outside.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(16))
    images = [str(outside) if i == "OUTSIDE" else i for i in images]
    inputs = tmp_path / "data" / "test_inputs"
    inputs.mkdir(parents=True)
    path = write_gz(inputs / "board_simulation.image.jsonl.gz", [manifest_row(BOARD_RECORD, images=images)])
    with pytest.raises(UsageError, match=problem):
        list(load_otb_records(path))
