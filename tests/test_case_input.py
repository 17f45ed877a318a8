"""Bad case and dataset files: one clear UsageError naming the problem, never a traceback or a hang."""

import json
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from medpanel.cases.loaders import load_case, load_dataset, load_medqa_file
from medpanel.errors import UsageError

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


def _case(tmp_path: Path, text: str | bytes, name: str = "case.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


@pytest.mark.parametrize("raw, words", [
    ("summary: ok\n".encode("utf-16"), "UTF-16"),
    (b"\x89\x01\x02binary\x00\xff\xfe" * 10, "binary"),
    ("summary: caf\u00e9 na\u00efve\n".encode("latin-1"), "not UTF-8"),
    (b"summary: x\x00y\n", "NUL"),
])
def test_non_utf8_case_files_are_named(tmp_path, raw, words):
    with pytest.raises(UsageError) as err:
        load_case(_case(tmp_path, raw))
    assert words in str(err.value) and "UTF-8" in err.value.fix


def test_utf8_with_bom_is_fine(tmp_path):
    assert load_case(_case(tmp_path, "\ufeffsummary: fine\n".encode())).summary == "fine"


def test_deeply_nested_yaml_is_refused_quickly(tmp_path):
    path = _case(tmp_path, "summary: " + "[" * 100_000 + "]" * 100_000 + "\n")
    start = time.monotonic()
    with pytest.raises(UsageError, match="nested"):
        load_case(path)
    assert time.monotonic() - start < 10


def test_yaml_alias_bomb_is_bounded(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    lines.append("summary: s")
    with pytest.raises(UsageError, match="values"):
        load_case(_case(tmp_path, "\n".join(lines) + "\n"))


def test_a_huge_summary_is_refused_before_parsing(tmp_path):
    path = _case(tmp_path, "summary: " + "x" * (5 * 1024 * 1024) + "\n")
    with pytest.raises(UsageError, match="MB"):
        load_case(path)


def test_a_long_text_field_inside_the_size_limit_is_refused(tmp_path):
    path = _case(tmp_path, json.dumps({"summary": "y" * 1_200_000}), "case.json")
    with pytest.raises(UsageError, match="characters"):
        load_case(path)


@pytest.mark.parametrize("image", [5, ["a.png"], {"p": 1}, ""])
def test_slide_image_of_the_wrong_type(tmp_path, image):
    path = _case(tmp_path, json.dumps({"summary": "s", "slides": [{"image": image, "caption": "c"}]}), "case.json")
    with pytest.raises(UsageError, match="image"):
        load_case(path)


def test_slides_must_be_a_list_of_mappings(tmp_path):
    with pytest.raises(UsageError, match="slides"):
        load_case(_case(tmp_path, json.dumps({"summary": "s", "slides": "one.png"}), "case.json"))
    with pytest.raises(UsageError, match="slide 1"):
        load_case(_case(tmp_path, json.dumps({"summary": "s", "slides": ["one.png"]}), "case.json"))


@pytest.mark.parametrize("image", ["../../../../../../etc/passwd", "/etc/shadow", "/etc/hostname"])
def test_slide_paths_outside_the_case_folder_are_never_read(tmp_path, image):
    folder = tmp_path / "case"
    folder.mkdir()
    path = _case(folder, json.dumps({"summary": "s", "slides": [{"image": image, "caption": "c"}]}), "case.json")
    with pytest.raises(UsageError, match="outside the case's folder"):
        load_case(path)


def test_a_slide_that_is_not_an_image_is_refused(tmp_path):
    (tmp_path / "notes.png").write_text("not really a picture")
    path = _case(tmp_path, json.dumps({"summary": "s", "slides": [{"image": "notes.png", "caption": "c"}]}), "case.json")
    with pytest.raises(UsageError, match="not an image"):
        load_case(path)


def test_real_images_inside_the_folder_and_named_folders_are_accepted(tmp_path, monkeypatch):
    (tmp_path / "case").mkdir()
    (tmp_path / "case" / "ok.png").write_bytes(PNG)
    (tmp_path / "shared_slides").mkdir()
    (tmp_path / "shared_slides" / "ct.png").write_bytes(PNG)
    slides = [{"image": "ok.png", "caption": "a"}, {"image": "../shared_slides/ct.png", "caption": "b"}]
    path = _case(tmp_path / "case", json.dumps({"summary": "s", "slides": slides}), "case.json")
    with pytest.raises(UsageError, match="outside"):
        load_case(path)
    monkeypatch.setenv("MEDPANEL_SLIDE_DIRS", str(tmp_path / "shared_slides"))
    case = load_case(path)
    assert [Path(s.image).name for s in case.slides] == ["ok.png", "ct.png"]


def test_jsonl_lines_that_are_not_objects(tmp_path):
    path = tmp_path / "cases.jsonl"
    path.write_text('{"id": "a", "summary": "s"}\n[1, 2]\n')
    with pytest.raises(UsageError, match=r"cases.jsonl:2 is a JSON list"):
        load_dataset(str(path))


def test_jsonl_that_is_not_utf8(tmp_path):
    path = tmp_path / "cases.jsonl"
    path.write_bytes('{"id": "a", "summary": "s"}\n'.encode("utf-16"))
    with pytest.raises(UsageError, match="UTF"):
        load_dataset(str(path))


@pytest.mark.parametrize("row", [
    {"question": "q", "options": {"A": "x", "B": "y"}, "answer_idx": 1},
    {"question": "q", "options": None, "answer_idx": "A"},
    {"question": "q", "options": {"A": "x", "B": None}, "answer_idx": "A"},
    {"question": "q", "options": {"A": "x"}, "answer_idx": "C"},
])
def test_medqa_shaped_rows_with_wrong_types(tmp_path, row):
    path = tmp_path / "medqa.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(UsageError, match="record 1"):
        list(load_medqa_file(path))


def test_an_empty_dataset_is_refused(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(UsageError, match="no cases"):
        load_dataset(str(tmp_path / "empty.jsonl"))
    (tmp_path / "folder").mkdir()
    with pytest.raises(UsageError, match="no cases"):
        load_dataset(str(tmp_path / "folder"))


# ---------------------------------------------------------------- the class of input stays closed

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=300))
def test_arbitrary_bytes_as_a_case_file(tmp_path, raw):
    path = _case(tmp_path, raw)
    try:
        load_case(path)
    except UsageError:
        pass


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record=st.dictionaries(st.sampled_from(["id", "summary", "slides", "options", "reference", "metadata", "note", "question"]),
                              _json_values, max_size=5))
def test_arbitrary_records_in_a_jsonl_of_cases(tmp_path, record):
    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps(record) + "\n")
    try:
        load_dataset(str(path))
    except UsageError:
        pass


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(row=st.dictionaries(st.sampled_from(["question", "options", "answer_idx", "answer", "realidx", "meta_info"]), _json_values, max_size=6))
def test_arbitrary_medqa_rows(tmp_path, row):
    path = tmp_path / "medqa.jsonl"
    path.write_text(json.dumps(row) + "\n")
    try:
        list(load_medqa_file(path))
    except UsageError:
        pass


# ---------------------------------------------------------------- the other loaders a user points at a file

_otb_fields = st.sampled_from(["simulation_id", "qa_id", "case_summary", "slides", "question", "reference_answer",
                               "reference_conclusion", "target_specialist_role", "qa_type", "metadata", "images", "format"])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record=st.dictionaries(_otb_fields, _json_values, max_size=7))
def test_arbitrary_opentumorboard_records(tmp_path, record):
    import gzip

    from medpanel.cases.opentumorboard import load_otb_records

    path = tmp_path / "task1_test.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
    try:
        list(load_otb_records(path))
    except UsageError:
        pass


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.one_of(st.binary(max_size=200), st.dictionaries(st.sampled_from(["id", "pred", "gold"]), _json_values, max_size=3)
                     .map(lambda d: (json.dumps(d) + "\n").encode())))
def test_arbitrary_icd10_pairs_files(tmp_path, raw):
    from medpanel.scoring.icd10_pairs import read_pairs

    path = tmp_path / "pairs.jsonl"
    path.write_bytes(raw)
    try:
        read_pairs(path)
    except UsageError:
        pass


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=60))
def test_arbitrary_osce_scenario_names(text):
    from medpanel.cases.osce import resolve_scenario

    try:
        resolve_scenario(text)
    except UsageError:
        pass


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=2000))
def test_arbitrary_discharge_notes(text):
    from medpanel.cases.mimic import exclusion_reason, note_case, parse_sections

    parse_sections(text)
    exclusion_reason(text)
    try:
        note_case(text)
    except UsageError:
        pass
