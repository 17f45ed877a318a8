"""The bundled example cases (examples/*/case.yaml) are complete, synthetic, and their slides are the
ones examples/make_slides.py renders."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from medpanel.cases.loaders import load_case, load_dataset
from medpanel.protocols.specialist import specialist_items
from medpanel.scoring.sentences import count_sentences

EXAMPLES = ROOT / "examples"
CASE_DIRS = sorted(p for p in EXAMPLES.iterdir() if (p / "case.yaml").is_file())
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_there_are_several_example_cases():
    assert len(CASE_DIRS) >= 5, [p.name for p in CASE_DIRS]
    ids = [load_case(p).id for p in CASE_DIRS]
    assert len(set(ids)) == len(ids)
    assert sorted(c.id for c in load_dataset(str(EXAMPLES))) == sorted(ids)  # the folder loads as one dataset


@pytest.fixture(params=CASE_DIRS, ids=lambda p: p.name)
def case_dir(request):
    return request.param


def test_case_is_labelled_synthetic(case_dir):
    text = (case_dir / "case.yaml").read_text(encoding="utf-8")
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    assert "synthetic" in header.lower() and "invented" in header.lower(), "the header comment must say every detail is invented"
    assert yaml.safe_load(text)["synthetic"] is True
    case = load_case(case_dir)
    assert case.synthetic
    assert "not a real patient" in case.metadata.get("synthetic_note", "")
    assert case.metadata.get("cancer_site")


def test_case_has_rendered_slides(case_dir):
    case = load_case(case_dir)
    assert len(case.slides) >= 3
    referenced = set()
    for slide in case.slides:
        assert slide.image and slide.caption.strip()
        path = Path(slide.image) if Path(slide.image).is_absolute() else case_dir / slide.image  # the loader resolves it
        assert path.is_file(), slide.image
        assert path.resolve().is_relative_to(case_dir.resolve())
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC), f"{path.name} is not a PNG"
        assert len(data) < 200_000, f"{path.name} is {len(data) // 1024} KB"
        referenced.add(path.resolve())
    on_disk = {p.resolve() for p in (case_dir / "slides").glob("*.png")}
    assert on_disk == referenced, "every slide image is used by the case, and every slide exists"


def test_case_has_a_reference_board(case_dir):
    case = load_case(case_dir)
    assert case.summary.strip() and "board is asked" in case.summary
    conclusion = case.reference.conclusion or ""
    assert 2 <= count_sentences(conclusion) <= 4, conclusion
    turns = case.reference.discussion
    assert all(t.role.strip() and t.text.strip() for t in turns)
    assert len({t.role for t in turns}) >= 3
    assert len(turns) >= 5


def test_case_has_specialist_questions(case_dir):
    case = load_case(case_dir)
    assert case.question.strip() and case.target_role.strip() and (case.reference.answer or "").strip()
    assert count_sentences(case.reference.answer) <= 3  # a Specialist Turn answers in at most three sentences
    items = specialist_items(case)
    assert len(items) >= 1
    for item in items:
        assert item.target_role and item.question and item.reference.answer
        assert count_sentences(item.reference.answer) <= 3, item.id
        assert item.metadata["qa_type"] in {"findings_interpretation", "treatment_recommendation", "eligibility_assessment"}
    # the top-level question is one of the listed ones, with the same role and reference answer
    same = [i for i in items if " ".join(i.question.split()) == " ".join(case.question.split())]
    assert same and same[0].target_role == case.target_role
    assert " ".join(same[0].reference.answer.split()) == " ".join(case.reference.answer.split())


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None or importlib.util.find_spec("PIL") is None,
                    reason="examples/make_slides.py needs matplotlib and Pillow")
def test_make_slides_reproduces_the_committed_images(tmp_path):
    from PIL import Image

    proc = subprocess.run([sys.executable, str(EXAMPLES / "make_slides.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rendered = sorted(p.relative_to(tmp_path) for p in tmp_path.glob("*/slides/*.png"))
    committed = sorted(p.relative_to(EXAMPLES) for p in EXAMPLES.glob("*/slides/*.png"))
    assert rendered == committed, "make_slides.py renders exactly the committed slide files"
    for rel in rendered:
        with Image.open(tmp_path / rel) as new, Image.open(EXAMPLES / rel) as old:
            assert new.size == old.size, rel
            assert new.convert("RGB").tobytes() == old.convert("RGB").tobytes(), f"{rel} differs: re-run examples/make_slides.py"
