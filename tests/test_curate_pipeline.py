"""Curation end to end on a synthetic meeting built here (rendered slides, espeak-ng voices, ffmpeg):
the offline stages on the real Whisper and voice encoder, the model stages on a scripted curator, and
the case it writes run by `medpanel board`. Then the command line: a folder of recordings, killed and
resumed, with a broken recording that fails alone."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import MEDPANEL, ROOT
from curate_support import copy_meeting, curator_body, require_media, scripted_curator

from medpanel.cases import load_case, load_dataset
from medpanel.curate.align import Utterance
from medpanel.curate.pipeline import FILES, OFFLINE, curate, dependents
from medpanel.curate.quality import alignment_accuracy, diarization_error_rate, slide_quality, word_error_rate
from medpanel.curate.slides import slides_from_json

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def meeting(tmp_path_factory):
    require_media()
    from medpanel.testing.meeting import build_meeting

    video, truth = build_meeting(tmp_path_factory.mktemp("meeting"))
    return video, truth


@pytest.fixture(scope="module")
def curated(meeting, tmp_path_factory):
    video, truth = meeting
    out = tmp_path_factory.mktemp("curated")
    log: list[tuple[str, str, str]] = []
    report = asyncio.run(curate(video, out, make_model=scripted_curator, progress=lambda *a: log.append(a)))
    return out, report, log, truth


def data(out: Path, stage: str, recording: str = "meeting"):
    return json.loads((out / "work" / recording / FILES[stage]).read_text())["data"]


def test_slides_are_found_once_each_and_their_showings_placed(curated):
    out, report, _, truth = curated
    assert report.results[0].state == "done", report.results[0].error
    slides = slides_from_json(data(out, "slides"))
    quality = slide_quality(truth.showings, slides)
    # Three slides shown, the first shown twice: three kept, none a duplicate, each the right one.
    assert (quality["kept"], quality["recall"], quality["precision"], quality["duplicate_rate"]) == (3, 1.0, 1.0, 0.0)
    first = next(s for s in slides if quality["truth_of"][s.slide_id] == "s1")
    assert len(first.showings) == 2
    for s in slides:
        true = [(t["from"], t["to"]) for t in truth.showings if t["slide_id"] == quality["truth_of"][s.slide_id]]
        assert len(s.showings) == len(true)
        for (a, b), (ta, tb) in zip(s.showings, true):
            assert abs(a - ta) <= 1.0 and abs(b - tb) <= 1.0  # edges placed by the 1-s probes
        assert (out / "work" / "meeting" / s.image).is_file()
    assert "EGFR" in next(s.text for s in slides if quality["truth_of"][s.slide_id] == "s2")  # OCR read it


def test_utterances_are_transcribed_with_their_speakers(curated):
    out, _, _, truth = curated
    found = [Utterance(**u) for u in data(out, "speakers")["utterances"]]
    said = [Utterance(u["start"], u["end"], u["speaker"], u["text"]) for u in truth.utterances]
    assert len({u.speaker for u in found}) == 3
    assert diarization_error_rate(said, found) < 0.15
    assert word_error_rate([u.text for u in said], [u.text for u in found]) < 0.35


def test_each_utterance_is_aligned_with_the_slide_on_screen(curated):
    out, _, _, truth = curated
    found = [Utterance(**u) for u in data(out, "speakers")["utterances"]]
    links = [(u, a["slide_id"]) for u, a in zip(found, data(out, "align"))]
    truth_of = slide_quality(truth.showings, slides_from_json(data(out, "slides")))["truth_of"]
    assert alignment_accuracy(truth.utterances, links, truth_of) >= 0.85


def test_model_stages_roles_cases_captions_and_deleak(curated):
    out, _, _, _ = curated
    assert set(data(out, "roles").values()) == {"Moderator", "Radiologist", "Medical Oncologist"}
    assert len(data(out, "cases")) == 2
    captions = data(out, "captions")
    ct = next(c for c in captions.values() if c["caption"].startswith("CT"))
    # The curator's CT caption named "metastases", which the slide never shows: replaced by its own text.
    assert ct["why"] == "slide text" and "metastases" not in ct["caption"]
    leaked = data(out, "deleak")
    edits = {e["field"]: e for e in leaked[0]["edits"]}
    assert edits["summary"]["action"] == "cut" and edits["summary"]["removed"] == ["A follow-up scan after surgery was clear"]
    assert "follow-up" not in leaked[0]["case"]["summary"]
    refused = [e for f, e in edits.items() if f.startswith("caption:")]
    assert refused and all(e["action"] == "refused" and e["reasons"] == ["new_content_word"] for e in refused)
    assert all(not c.endswith("confirmed") for c in leaked[0]["captions"].values())


def test_the_cases_are_written_in_the_board_format_and_board_runs_them(curated, tmp_path):
    out, report, log, _ = curated
    placed = [c for cases in report.split["cases"].values() for c in cases]
    assert sorted(placed) == ["meeting-01", "meeting-02"]
    split = next(k for k, v in report.split["cases"].items() if "meeting-01" in v)
    folder = out / "cases" / split / "meeting-01"
    case = load_case(folder)
    assert [s.caption.split()[0] for s in case.slides] == ["CT", "Biopsy"]
    assert all(Path(s.image).is_file() for s in case.slides)
    assert "62" in case.summary and case.reference.conclusion
    questions = case.metadata["specialist_questions"]
    assert {q["target_role"] for q in questions} <= {"Radiologist", "Medical Oncologist"} and questions
    assert all(q["type"] == "treatment_recommendation" for q in questions)
    assert case.reference.discussion[0].role == "Moderator"
    assert len(load_dataset(str(out / "cases" / split))) >= 1
    assert [stage for _, stage, message in log if message == "running"][:4] == list(OFFLINE)
    # `medpanel board` runs the curated case (a scripted board that answers in the paper's format).
    meeting_text = ("<discussion>\n<turn 1> Moderator: Radiologist, the scan?\n<turn 2> Radiologist: A 3 cm mass.\n</discussion>\n"
                    "<conclusion>Surgery, then adjuvant osimertinib.</conclusion>")
    replies = tmp_path / "board.yaml"
    replies.write_text(json.dumps([meeting_text]))
    env = {"MEDPANEL_STORE": str(tmp_path / "board.db"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([MEDPANEL, "board", str(folder), "-m", f"scripted:{replies}"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Surgery, then adjuvant osimertinib." in done.stdout
    # ... and `medpanel bench` runs the split's folder as a dataset, one item per curated case.
    replies.write_text(json.dumps([meeting_text] * 2))
    bench = subprocess.run([MEDPANEL, "bench", str(out / "cases" / split), "-p", "board", "-m", f"scripted:{replies}", "-c", "1", "--json"],
                           env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bench.returncode == 0, bench.stderr
    assert json.loads(bench.stdout)["items"]["done"] == len(report.split["cases"][split])


def test_dependents_follow_what_each_stage_reads():
    assert dependents("audio") == ["speakers", "align", "roles", "cases", "extract", "deleak", "write"]
    assert dependents("slides") == ["align", "captions", "extract", "deleak", "write"]
    assert dependents("deleak") == ["write"]


def _wait_for(path: Path, proc: subprocess.Popen, limit_s: float = 120) -> None:
    deadline = time.monotonic() + limit_s
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_cli_resumes_per_recording_and_stage_after_a_kill_and_isolates_a_broken_recording(meeting, tmp_path):
    from medpanel.testing import MockConfig, MockServer

    video, _ = meeting
    folder = tmp_path / "recordings"
    copy_meeting(video, folder, "a_meeting")
    copy_meeting(video, folder, "b_meeting")
    (folder / "a_broken.mp4").write_bytes(b"this is not a video")  # first in order: the others must still run
    out = tmp_path / "out"
    env = {"MEDPANEL_STORE": str(tmp_path / "curate.db"), "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
    with MockServer(MockConfig(reply=curator_body)) as server:
        command = [MEDPANEL, "curate", str(folder), "--out", str(out), "--model", f"openai:curator@{server.base_url}", "--json"]
        # Killed (SIGKILL: nothing runs on the way out) once the first recording's slides are written.
        proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait_for(out / "work" / "a_meeting" / FILES["slides"], proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        made = {s: (out / "work" / "a_meeting" / FILES[s]).stat().st_mtime_ns for s in FILES if (out / "work" / "a_meeting" / FILES[s]).exists()}
        assert list(made)[:3] == ["audio", "speakers", "slides"] and "deleak" not in made
        assert not (out / "work" / "b_meeting" / FILES["audio"]).exists()
        done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 4, done.stderr  # one recording failed, the others finished
    report = json.loads(done.stdout)
    by_name = {r["recording"]: r for r in report["recordings"]}
    assert by_name["a_meeting"]["skipped"] == list(made)  # resumed where the kill left it
    assert by_name["a_meeting"]["ran"] == [s for s in FILES if s not in made]
    assert by_name["b_meeting"]["state"] == "done" and by_name["b_meeting"]["skipped"] == []
    broken = by_name["a_broken"]
    assert broken["state"] == "failed" and broken["failed_stage"] == "audio" and "a_broken.mp4" in broken["error"]
    assert json.loads((out / "work" / "a_broken" / "status.json").read_text())["state"] == "failed"
    assert "failed a_broken at audio" in done.stderr
    for stage, stamp in made.items():  # the finished stages were not made again
        assert (out / "work" / "a_meeting" / FILES[stage]).stat().st_mtime_ns == stamp
    cases = sorted(c for v in report["split"]["cases"].values() for c in v)
    assert cases == ["a_meeting-01", "a_meeting-02", "b_meeting-01", "b_meeting-02"]
    # A third run finds everything done: nothing runs again, and with the broken file removed it exits 0.
    (folder / "a_broken.mp4").unlink()
    again = subprocess.run([*command[:-1], "--stages", "offline,write", "--json"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    rerun = json.loads(again.stdout)
    assert all(r["ran"] == [] for r in rerun["recordings"]) and rerun["split"]["cases"] == report["split"]["cases"]
    # Another --every reruns the slides and what reads them, and removes the later stages' files; a
    # recording whose file changed is curated afresh.
    stamp = (folder / "b_meeting.mp4").stat()
    os.utime(folder / "b_meeting.mp4", ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 10**9))
    changed = subprocess.run([*command[:-1], "--stages", "offline", "--every", "4", "--json"], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert changed.returncode == 0, changed.stderr
    runs = {r["recording"]: r for r in json.loads(changed.stdout)["recordings"]}
    assert (runs["a_meeting"]["skipped"], runs["a_meeting"]["ran"]) == (["audio", "speakers"], ["slides", "align"])
    assert runs["b_meeting"]["ran"] == list(OFFLINE)
    assert not (out / "work" / "a_meeting" / FILES["captions"]).exists() and (out / "work" / "a_meeting" / FILES["roles"]).exists()


def test_cli_bad_input_is_exit_2_with_a_fix(tmp_path):
    env = {"MEDPANEL_STORE": str(tmp_path / "c.db"), "PATH": "/usr/bin:/bin"}
    notes = tmp_path / "notes.txt"
    notes.write_text("not a recording")
    video = tmp_path / "clip" / "meeting.mp4"
    video.parent.mkdir()
    video.write_bytes(b"x")
    for args, message in ((["nowhere.mp4", "--out", str(tmp_path / "o")], "does not exist"),
                          ([str(tmp_path), "--out", str(tmp_path / "o")], "No recordings in"),
                          ([str(tmp_path), "--out", str(tmp_path / "o"), "--stages", "audio,dance"], "'dance' is not a stage"),
                          ([str(notes), "--out", str(tmp_path / "o")], "is not a recording"),
                          ([str(video), "--out", str(tmp_path / "o"), "--stages", "extract"], "reads the align stage's output"),
                          ([str(video), "--out", str(tmp_path / "o"), "--model", "nosuch:thing"], "nosuch")):
        done = subprocess.run([MEDPANEL, "curate", *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
        # Refused before any recording ran: a run would have left the recording's status.json.
        assert not (tmp_path / "o" / "work" / "meeting" / "status.json").exists(), args


def test_the_readme_curation_example_runs_on_the_embedded_model(tmp_path):
    """The README's curation commands, as written (their /tmp/curated made a folder of this test's), on the
    committed example meeting with the default model: the embedded one."""
    import re

    from conftest import needs_local_model

    require_media()
    needs_local_model()
    readme = (ROOT / "README.md").read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", readme, flags=re.S) if "medpanel curate" in b)
    commands = [part.strip() for line in block.splitlines() for part in line.split("&&") if ".venv/bin/medpanel" in part]
    assert [c.split()[1] for c in commands] == ["curate", "board"]
    env = {"MEDPANEL_STORE": str(tmp_path / "readme.db"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    for command in commands:
        argv = command.replace("/tmp/curated", str(tmp_path / "curated")).split()
        done = subprocess.run([MEDPANEL, *argv[1:]], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    case = load_case(tmp_path / "curated" / "cases" / "train" / "board_meeting-01")
    assert case.reference.discussion and case.slides and all(Path(s.image).is_file() for s in case.slides)


def test_other_recordings_a_stream_with_an_offset_audio_alone_and_video_without_sound(meeting, tmp_path):
    from medpanel.curate.slides import find_slides

    video, truth = meeting

    def ffmpeg(*args: str) -> Path:
        subprocess.run(["ffmpeg", "-y", "-loglevel", "error", "-i", str(video), *args], check=True, timeout=120)
        return Path(args[-1])

    # MPEG-TS starts its clock at an offset (about 1.4 s): showings are still placed from the recording's start.
    ts = ffmpeg("-c", "copy", "-f", "mpegts", str(tmp_path / "meeting.ts"))
    from_mp4 = [x.showings for x in find_slides(video, tmp_path / "mp4")]
    from_ts = [x.showings for x in find_slides(ts, tmp_path / "ts")]
    assert len(from_ts) == len(from_mp4) == 3
    for a, b in zip(from_ts, from_mp4):
        assert len(a) == len(b) and all(abs(x - y) <= 1.0 for pa, pb in zip(a, b) for x, y in zip(pa, pb))
    folder = tmp_path / "inputs"
    folder.mkdir()
    ffmpeg("-vn", str(folder / "sound_only.wav"))
    ffmpeg("-an", "-c:v", "copy", str(folder / "silent_film.mp4"))
    report = asyncio.run(curate(folder, tmp_path / "out", stages=list(OFFLINE)))
    by_name = {r.recording: r for r in report.results}
    assert by_name["sound_only"].state == "done"
    assert data(tmp_path / "out", "slides", "sound_only") == [] and len(data(tmp_path / "out", "speakers", "sound_only")["utterances"]) >= 8
    assert all(a["slide_id"] is None for a in data(tmp_path / "out", "align", "sound_only"))
    silent = by_name["silent_film"]
    assert (silent.state, silent.failed_stage) == ("failed", "audio") and "Cannot read audio" in silent.error
