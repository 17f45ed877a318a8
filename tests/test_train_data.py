"""Board Simulation training data: examples from cases and released rows, split by recording, as JSONL."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import MEDPANEL, ROOT
from test_opentumorboard import BOARD_RECORD, manifest_row, write_gz

from medpanel.cases import Case, Reference, Turn, load_dataset
from medpanel.cases.opentumorboard import load_otb_records
from medpanel.errors import UsageError
from medpanel.protocols.board import SYSTEM
from medpanel.scoring.board_format import score_format
from medpanel.train.data import sft_example, sft_examples, split_examples, target_text


def case(cid: str, recording: str | None = None, discussion=(("Moderator", "Presenting."), ("Radiologist", "A 3 cm mass.")),
         conclusion: str | None = "Surgery first. Then adjuvant therapy.") -> Case:
    return Case(id=cid, summary="A woman with a lung mass.", metadata={"recording": recording} if recording else {},
                reference=Reference(conclusion=conclusion, discussion=[Turn(role=r, text=t) for r, t in discussion]))


def test_an_example_is_the_board_prompt_and_the_recorded_meeting_in_the_tagged_format():
    example = sft_example(case("c1", "rec1", discussion=(("Moderator", " Presenting\n the case. "), ("Surgeon", "Resectable."))))
    assert example["id"] == "c1" and example["recording"] == "rec1"
    assert example["prompt"][0] == {"role": "system", "content": SYSTEM}
    assert example["prompt"][1]["content"].startswith("CASE SUMMARY:\nA woman with a lung mass.")
    target = example["completion"][0]["content"]
    assert target == ("<discussion>\n<turn 1> Moderator: Presenting the case.\n<turn 2> Surgeon: Resectable.\n</discussion>\n"
                      "<conclusion>Surgery first. Then adjuvant therapy.</conclusion>")
    assert score_format(target).exact  # the target is what the format score calls exact (two conclusion sentences)
    assert sft_example(case("c2", conclusion=None)) is None and sft_example(case("c3", discussion=())) is None
    assert sft_example(case("c4"), system="Be a board.")["prompt"][0]["content"] == "Be a board."


def test_a_released_training_row_keeps_its_own_prompt_and_target_byte_for_byte(tmp_path):
    row = manifest_row(BOARD_RECORD)
    target = "<discussion>\n<turn 1> Moderator: Case.\n</discussion>\n<conclusion>Focal therapy.</conclusion>"
    row["conversations"].append({"from": "gpt", "value": target})
    (released,) = load_otb_records(write_gz(tmp_path / "board_simulation.caption.jsonl.gz", [row]))
    example = sft_example(released)
    assert example["prompt"][0]["content"] == "You are simulating a tumor board."
    assert example["prompt"][1]["content"] == row["conversations"][1]["value"]
    assert example["completion"][0]["content"] == target and target_text(released) == target
    assert example["recording"] == BOARD_RECORD["video_uid"]


def test_the_split_keeps_each_recording_on_one_side_and_earlier_placements():
    cases = [case(f"c{i}", f"rec{i // 3}") for i in range(30)]  # ten recordings, three cases each
    examples, skipped = sft_examples([*cases, case("none", conclusion=None)])
    assert len(examples) == 30 and [s.case_id for s in skipped] == ["none"]
    train, held, placed = split_examples(examples, validation=0.2, seed=1)
    assert len(held) == 6 and len(train) == 24  # two of ten recordings
    assert not {e["recording"] for e in train} & {e["recording"] for e in held}
    again = split_examples(examples + [e | {"id": "x", "recording": "rec99"} for e in examples[:1]], 0.2, 1,
                           previous={r: ("train" if s == "train" else "dev") for r, s in placed.items()})[2]
    assert all(again[r] == placed[r] for r in placed)
    with pytest.raises(UsageError, match="not a share below 1"):
        split_examples(examples, validation=1.0)


def test_cli_builds_the_files_from_the_example_cases(tmp_path):
    env = {"MEDPANEL_STORE": str(tmp_path / "t.db"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([MEDPANEL, "train", "data", "examples", "--out", str(tmp_path / "data"), "--validation", "0.2", "--json"],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    manifest = json.loads(done.stdout)
    with_meetings = [c for c in load_dataset(str(ROOT / "examples")) if c.reference.discussion and c.reference.conclusion]
    assert manifest["train"]["examples"] + manifest["validation"]["examples"] == len(with_meetings) >= 4
    rows = [json.loads(line) for line in (tmp_path / "data" / "train.jsonl").read_text().splitlines()]
    assert len(rows) == manifest["train"]["examples"] and all(set(r) == {"id", "recording", "prompt", "completion"} for r in rows)
    import hashlib

    assert hashlib.sha256((tmp_path / "data" / "train.jsonl").read_bytes()).hexdigest() == manifest["train"]["sha256"]
    bad = subprocess.run([MEDPANEL, "train", "data", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "x")], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_cli_rebuilds_keep_every_recordings_side_even_across_an_absence(tmp_path):
    env = {"MEDPANEL_STORE": str(tmp_path / "t.db"), "PATH": "/usr/bin:/bin"}
    cases = tmp_path / "cases.jsonl"

    def build(rows, *extra):
        cases.write_text("".join(json.dumps(c.model_dump(mode="json")) + "\n" for c in rows))
        done = subprocess.run([MEDPANEL, "train", "data", str(cases), "--out", str(tmp_path / "d"), "--json", *extra], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        return done

    rows = [case(f"c{i}", f"rec{i}") for i in range(20)]
    first = json.loads(build(rows, "--validation", "0.3").stdout)["recordings"]
    assert sorted(first.values()).count("validation") == 6
    # rec0..rec4 left out, another seed: nobody present moves; then they come back on their old side.
    second = json.loads(build(rows[5:], "--validation", "0.3", "--seed", "9").stdout)["recordings"]
    assert all(second[r] == first[r] for r in first)
    third = json.loads(build(rows, "--validation", "0.3", "--seed", "9").stdout)["recordings"]
    assert third == first
    (tmp_path / "d" / "manifest.json").write_text("[1, 2]")
    bad = build(rows)
    assert bad.returncode == 2 and "earlier placements" in bad.stderr and "Traceback" not in bad.stderr
    lonely = subprocess.run([MEDPANEL, "train", "data", str(cases), "--out", str(tmp_path / "e"), "--validation", "0.99"], env=env,
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert lonely.returncode == 2 and "nothing is left to train on" in lonely.stderr
