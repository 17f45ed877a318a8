"""A synthetic tumor-board recording with its known truth, for curation tests and benchmarks.

Why: no recorded meeting may ship with the project, and curation's quality (word error rate, speaker
error, slides found, alignment) can only be measured against a recording whose truth is known. This
builds one: slides rendered with Pillow and shown as a projection inside a darker room, camera views
between them, several espeak-ng voices speaking a short two-case meeting, muxed by ffmpeg into an MP4.
The truth (who said what when, which slide was on screen when, where each case starts) is returned and
written beside the video as truth.json.

Needs the Debian packages espeak-ng and ffmpeg (`.ci/run` installs them).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import wave
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

RATE = 16000
SIZE = (640, 360)
SCREEN = (96, 36, 544, 288)  # where the projected slide sits in the room view (left, top, right, bottom)
GAP_S = 0.6  # silence between utterances


@dataclass(frozen=True)
class Voice:
    """An espeak-ng voice: name (+variant), pitch 0-99, words per minute."""

    voice: str
    pitch: int
    speed: int


VOICES = {
    "moderator": Voice("en-us+m3", 35, 165),
    "radiologist": Voice("en-gb+f3", 80, 160),
    "oncologist": Voice("en-us+m7", 15, 150),
}
ROLES = {"moderator": "Moderator", "radiologist": "Radiologist", "oncologist": "Medical Oncologist"}

# Each case: its slides (title and lines) and its discussion as (speaker, text, slide shown or None for
# the camera). A slide shown again later (case 1's first slide) is a duplicate the curator must drop.
SLIDES = {
    "s1": ("CT chest", ["3.1 cm spiculated right upper lobe mass", "No mediastinal adenopathy"]),
    "s2": ("Biopsy", ["Adenocarcinoma of the lung", "EGFR exon 19 deletion"]),
    "s3": ("MRI pelvis", ["Rectal adenocarcinoma, mid rectum", "Mesorectal fascia clear"]),
}
SCRIPT = [
    [("moderator", "Our first patient is a 62 year old woman who never smoked and has a new lung mass.", None),
     ("moderator", "She had a cough for two months and lost some weight.", None),
     ("radiologist", "The chest scan shows a 3 centimeter spiculated mass in the right upper lobe.", "s1"),
     ("radiologist", "There are no enlarged lymph nodes in the mediastinum.", "s1"),
     ("moderator", "Thank you. What did the biopsy show?", "s2"),
     ("oncologist", "It is an adenocarcinoma of the lung with an exon 19 deletion.", "s2"),
     ("oncologist", "So targeted therapy is an option for her.", "s2"),
     ("radiologist", "Going back to the scan, there is no sign of spread to the other lung.", "s1"),
     ("radiologist", "The liver and the adrenal glands look normal.", "s1"),
     ("oncologist", "I would recommend surgery first and then adjuvant osimertinib.", None)],
    [("moderator", "The second patient is a man of 70 with rectal bleeding.", None),
     ("moderator", "A colonoscopy found a mass in the rectum.", None),
     ("radiologist", "The pelvic scan shows a tumor in the middle of the rectum.", "s3"),
     ("radiologist", "The mesorectal fascia is clear and there are two small nodes.", "s3"),
     ("oncologist", "I suggest total neoadjuvant therapy before any surgery.", "s3"),
     ("moderator", "We agree on total neoadjuvant therapy and restaging afterwards.", None)],
]


@dataclass
class MeetingTruth:
    """What the recording holds: utterances (start, end, speaker, text, the slide on screen while it
    is said), slide showings (slide id, from, to), case spans (from, to), the role of each speaker, the slide texts and the screen box."""

    duration: float
    utterances: list[dict] = field(default_factory=list)
    showings: list[dict] = field(default_factory=list)
    cases: list[dict] = field(default_factory=list)
    roles: dict[str, str] = field(default_factory=dict)
    slides: dict[str, dict] = field(default_factory=dict)
    screen: tuple[int, int, int, int] = SCREEN


def _font(size: int):
    return ImageFont.load_default(size=size)  # Pillow's own scalable font: no system font needed


def render_slide(slide_id: str, size: tuple[int, int] = (SCREEN[2] - SCREEN[0], SCREEN[3] - SCREEN[1])) -> Image.Image:
    """A light slide (the visual heuristic reads light slides): a title bar and its lines in dark text."""
    title, lines = SLIDES[slide_id]
    image = Image.new("RGB", size, (248, 248, 244))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, size[0], 52), fill=(214, 226, 244))
    draw.text((16, 10), title, fill=(20, 40, 110), font=_font(30))
    for i, line in enumerate(lines):
        draw.text((16, 80 + i * 44), line, fill=(20, 20, 20), font=_font(22))
    return image


def room(slide: Image.Image | None, seed: int) -> Image.Image:
    """The camera's view: a dim room with people in it, and the slide projected on the screen (when one
    is shown) slightly dimmed as a projection is."""
    rng = np.random.default_rng(seed)
    base = np.full((SIZE[1], SIZE[0], 3), (70, 62, 58), dtype=np.float32)
    base += rng.normal(0, 3, base.shape)
    image = Image.fromarray(base.clip(0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    if slide is None:  # a speaker view: people at a table, no screen
        for k in range(5):
            x = 60 + k * 115 + int(rng.integers(-10, 10))
            colour = tuple(int(c) for c in rng.integers(40, 200, 3))
            draw.ellipse((x, 110, x + 60, 170), fill=(196, 150, 120))
            draw.rectangle((x - 15, 170, x + 75, 300), fill=colour)
        draw.rectangle((0, 290, SIZE[0], SIZE[1]), fill=(110, 80, 50))
    else:
        projected = Image.eval(slide, lambda v: int(v * 0.92))
        image.paste(projected, SCREEN[:2])
        draw.ellipse((20, 300, 80, 360), fill=(40, 40, 40))  # a head in front of the screen's corner
    return image


def _speak(text: str, voice: Voice, folder: Path, index: int) -> np.ndarray:
    """One utterance from espeak-ng as float32 samples at RATE, leading and trailing silence trimmed."""
    path = folder / f"u{index:02d}.wav"
    subprocess.run(["espeak-ng", "-v", voice.voice, "-p", str(voice.pitch), "-s", str(voice.speed), "-w", str(path), text],
                   check=True, capture_output=True)
    with wave.open(str(path), "rb") as f:
        rate, raw = f.getframerate(), f.readframes(f.getnframes())
    samples = np.frombuffer(raw, dtype=np.int16).astype(np.float32) / 32768.0
    samples = np.interp(np.arange(0, len(samples), rate / RATE), np.arange(len(samples)), samples).astype(np.float32)
    loud = np.flatnonzero(np.abs(samples) > 0.02)
    return samples[loud[0]:loud[-1] + 1] if len(loud) else samples


def _write_wav(path: Path, samples: np.ndarray) -> None:
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(RATE)
        f.writeframes((samples.clip(-1, 1) * 32767).astype(np.int16).tobytes())


def build_meeting(folder: Path, *, name: str = "meeting", script: list | None = None, fps: int = 10) -> tuple[Path, MeetingTruth]:
    """Write folder/NAME.mp4 and folder/NAME.truth.json; returns the video path and the truth. A slide
    stays on screen through the pause that follows its utterance; the camera shows between slides."""
    for tool in ("espeak-ng", "ffmpeg"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} is not installed: apt-get install {tool}")
    script = script or SCRIPT
    folder.mkdir(parents=True, exist_ok=True)
    work = folder / f".{name}-parts"
    work.mkdir(exist_ok=True)
    audio: list[np.ndarray] = [np.zeros(int(RATE * 1.0), np.float32)]
    t = 1.0
    truth = MeetingTruth(duration=0.0, roles=dict(ROLES),
                         slides={k: {"title": v[0], "lines": v[1]} for k, v in SLIDES.items()})
    visuals: list[tuple[float, str | None]] = [(0.0, None)]  # (from, slide id or None): what is on screen
    index = 0
    for case_lines in script:
        case_from = t
        for speaker, text, slide in case_lines:
            if slide != visuals[-1][1]:
                visuals.append((t - GAP_S / 2 if t > GAP_S else 0.0, slide))
            clip = _speak(text, VOICES[speaker], work, index)
            index += 1
            truth.utterances.append({"start": round(t, 3), "end": round(t + len(clip) / RATE, 3), "speaker": speaker,
                                     "text": text, "slide": slide})
            audio += [clip, np.zeros(int(RATE * GAP_S), np.float32)]
            t += len(clip) / RATE + GAP_S
        truth.cases.append({"from": round(case_from, 3), "to": round(t, 3)})
        audio.append(np.zeros(int(RATE * 1.0), np.float32))
        t += 1.0
    truth.duration = round(t, 3)
    samples = np.concatenate(audio)
    _write_wav(work / "audio.wav", samples)
    # The visual timeline as an ffmpeg concat list: each still for as long as it is shown.
    rendered = {k: render_slide(k) for k in SLIDES}
    lines = []
    for i, (start, slide) in enumerate(visuals):
        end = visuals[i + 1][0] if i + 1 < len(visuals) else truth.duration
        if end <= start:
            continue
        frame = work / f"v{i:02d}.png"
        room(rendered[slide] if slide else None, seed=i).save(frame)
        lines += [f"file '{frame.name}'", f"duration {end - start:.3f}"]
        if slide:
            truth.showings.append({"slide_id": slide, "from": round(start, 3), "to": round(end, 3)})
    lines.append(lines[-2])  # the concat demuxer needs the last file named again to honour its duration
    (work / "visuals.txt").write_text("\n".join(lines) + "\n")
    video = folder / f"{name}.mp4"
    subprocess.run(["ffmpeg", "-y", "-loglevel", "error", "-f", "concat", "-safe", "0", "-i", str(work / "visuals.txt"),
                    "-i", str(work / "audio.wav"), "-vf", f"fps={fps},format=yuv420p", "-c:v", "libx264", "-preset", "medium", "-crf", "28", "-tune", "stillimage",
                    "-c:a", "aac", "-b:a", "64k", "-ac", "1", "-t", f"{truth.duration:.3f}", str(video)], check=True, capture_output=True)
    shutil.rmtree(work)
    (folder / f"{name}.truth.json").write_text(json.dumps(asdict(truth), indent=1))
    return video, truth
