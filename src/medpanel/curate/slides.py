"""Visual track: the slides a recording shows, when each was on screen, and the text on it.

Frames are sampled every `every_s` seconds (5 s, as the paper). The paper keeps frames that a zero-shot
CLIP classifier calls a projected slide, crops them with Grounding DINO and SAM, and drops near-duplicates
at CLIP cosine > 0.85. None of those weights can be fetched here, so the default is a documented heuristic
(`looks_like_slide`) and a perceptual hash:

- A slide is the largest bright region of the frame (luminance above `bright`, text holes filled) that
  covers at least `min_area` of it, is nearly rectangular (fills `min_fill` of its bounding box), has a
  screen's aspect ratio, and holds some dark marks (text) but is not mostly dark. This reads light
  slides, projected in a room or shared full screen; a dark-themed slide, or a dark band at a slide's
  edge (a coloured title bar), is not read: that needs the CLIP/detector path.
- The crop is that region's bounding box. Two crops whose perceptual hashes (imagehash.phash, 256 bits)
  differ in at most `max_hash_distance` bits are one slide (on the synthetic meeting one slide's frames
  differ by 0-2 bits and two slides of one template by 50 or more): the earliest is kept, and a later showing of
  it is recorded as another showing of the same slide.
- The text on each kept slide is read with tesseract (Debian's tesseract-ocr), for the captioning stage
  when the captioning model cannot see images.

A showing runs from halfway between the last frame read without the slide and the first with it, to
halfway between its last frame and the next one read. Where two 5-s frames differ, the frames every
second between them are read against the kept slides, so a boundary is off by at most half a second.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

from medpanel.curate.align import SlideShown
from medpanel.errors import MissingExtraError, UsageError


@dataclass(frozen=True)
class VisualSettings:
    every_s: float = 5.0  # slides are found in these frames (the paper's interval)
    probe_s: float = 1.0  # and their showings' edges placed with these
    analysis_width: int = 320  # frames are judged at this width (the crop is taken at full size)
    bright: int = 150
    min_area: float = 0.12
    min_fill: float = 0.85
    aspect: tuple[float, float] = (1.0, 2.6)
    ink: tuple[float, float] = (0.004, 0.5)  # share of dark marks inside the region
    hash_size: int = 16  # a 16x16 DCT hash (256 bits): 8x8 cannot tell apart two slides of one template
    max_hash_distance: int = 24
    ocr: bool = True


@dataclass
class Slide:
    """A kept slide: its id, crop file (relative to the work folder), first time seen, box in the frame,
    the OCR text, and its showings."""

    slide_id: str
    image: str
    first_seen: float
    box: tuple[int, int, int, int]
    text: str = ""
    showings: list[tuple[float, float]] = field(default_factory=list)


def sample_frames(path: Path, every_s: float) -> Iterator[tuple[float, Any]]:
    """(time, PIL image) every `every_s` seconds: each frame decoded in order, converted only when due."""
    try:
        import av
    except ImportError:
        raise MissingExtraError("video decoding", "curate", "av") from None
    try:
        container = av.open(str(path))
    except Exception as exc:
        raise UsageError(f"Cannot open {path} as media: {exc}", "Give a video file ffmpeg can play.") from None
    with container:
        if not container.streams.video:
            return
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        # Times from the stream's start, as the audio's are: some containers (MPEG-TS, MPEG-PS) start at an offset.
        origin = float(stream.start_time * stream.time_base) if stream.start_time is not None else 0.0
        due = 0.0
        for frame in container.decode(stream):
            if frame.time is None:
                continue
            t = float(frame.time) - origin
            if t + 1e-6 < due:
                continue
            yield t, frame.to_image()
            while due <= t + 1e-6:
                due += every_s


def media_duration(path: Path) -> float | None:
    """The recording's length in seconds as its container states it (None when it does not)."""
    import av

    try:
        with av.open(str(path)) as container:
            return container.duration / 1_000_000 if container.duration else None
    except Exception:
        return None


def looks_like_slide(image: Any, settings: VisualSettings) -> tuple[int, int, int, int] | None:
    """The slide's box (left, top, right, bottom) in `image`'s pixels, or None when it shows no slide."""
    import numpy as np
    from scipy import ndimage

    scale = settings.analysis_width / image.width
    small = image.convert("L").resize((settings.analysis_width, max(1, round(image.height * scale))))
    lum = np.asarray(small, dtype=np.float32)
    # Closed (text holes bridged) on an edge-padded copy: closing erodes a region that touches the frame's edge.
    padded = np.pad(lum > settings.bright, 3, mode="edge")
    mask = ndimage.binary_fill_holes(ndimage.binary_closing(padded, structure=np.ones((5, 5)))[3:-3, 3:-3])
    labels, count = ndimage.label(mask)
    if count == 0:
        return None
    sizes = ndimage.sum(mask, labels, index=range(1, count + 1))
    biggest = int(np.argmax(sizes)) + 1
    rows, cols = np.nonzero(labels == biggest)
    top, bottom, left, right = rows.min(), rows.max() + 1, cols.min(), cols.max() + 1
    area = sizes[biggest - 1]
    height, width = bottom - top, right - left
    if area < settings.min_area * lum.size or area < settings.min_fill * height * width:
        return None
    if not settings.aspect[0] <= width / height <= settings.aspect[1]:
        return None
    region = lum[top:bottom, left:right]
    background = np.median(region)
    ink = float(np.mean(region < background - 60))
    if not settings.ink[0] <= ink <= settings.ink[1]:
        return None
    pad = 0.005
    box = (left / scale - pad * image.width, top / scale - pad * image.height,
           right / scale + pad * image.width, bottom / scale + pad * image.height)
    return (max(0, int(box[0])), max(0, int(box[1])), min(image.width, int(box[2] + 0.999)), min(image.height, int(box[3] + 0.999)))


def ocr_available() -> bool:
    return shutil.which("tesseract") is not None


def read_text(image: Any) -> str:
    """The slide's text by tesseract, lines kept, blank lines dropped; "" without tesseract."""
    if not ocr_available():
        return ""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "slide.png"
        if image.width < 1000:  # tesseract reads small print better enlarged
            image = image.resize((image.width * 2, image.height * 2))
        image.save(path)
        done = subprocess.run(["tesseract", str(path), "stdout", "--psm", "3"], capture_output=True, text=True, timeout=120)
    return "\n".join(line.strip() for line in done.stdout.splitlines() if line.strip())


def find_slides(path: Path, folder: Path, settings: VisualSettings = VisualSettings(), *, duration: float | None = None) -> list[Slide]:
    """The recording's distinct slides, their crops written to folder/slides/, with their showings.

    Slides are found in the frames every `every_s`; where two such frames show different things, the
    frames every `probe_s` between them are read too (only against the slides already kept), so a
    showing's edges are placed to within half of `probe_s`, not half of `every_s`."""
    import imagehash

    (folder / "slides").mkdir(parents=True, exist_ok=True)
    kept: list[Slide] = []
    hashes: list[Any] = []

    def state(image: Any, t: float, may_add: bool) -> int | None:
        box = looks_like_slide(image, settings)
        if box is None:
            return None
        crop = image.crop(box)
        code = imagehash.phash(crop, hash_size=settings.hash_size)
        match = next((i for i, h in enumerate(hashes) if code - h <= settings.max_hash_distance), None)
        if match is None and may_add:
            match = len(kept)
            name = f"slides/slide_{match + 1:02d}.png"
            # Whole or not at all, as the stage files: a kill mid-save leaves only a .part file (swept on the next run).
            part = folder / f"{name}.{os.getpid()}-{secrets.token_hex(3)}.part"
            crop.save(part, format="PNG")
            os.replace(part, folder / name)
            kept.append(Slide(f"slide_{match + 1:02d}", name, round(t, 3), box, read_text(crop) if settings.ocr else ""))
            hashes.append(code)
        return match

    seen: list[tuple[float, int | None]] = []  # (time, kept slide index or None), in time order
    probes: list[tuple[float, Any]] = []
    step = min(settings.probe_s, settings.every_s)
    due = 0.0
    for t, image in sample_frames(path, step):
        if t + 1e-6 < due:
            probes.append((t, image))
            continue
        now = state(image, t, may_add=True)
        if seen and now != seen[-1][1]:
            seen += [(pt, state(pi, pt, may_add=False)) for pt, pi in probes]
        seen.append((t, now))
        probes = []
        while due <= t + 1e-6:
            due += settings.every_s
    duration = duration if duration is not None else media_duration(path)
    end = duration if duration is not None else (seen[-1][0] + step if seen else 0.0)
    for i, (t, index) in enumerate(seen):
        if index is None or (i > 0 and seen[i - 1][1] == index):
            continue
        j = i
        while j + 1 < len(seen) and seen[j + 1][1] == index:
            j += 1
        start = (seen[i - 1][0] + t) / 2 if i > 0 else 0.0
        stop = (seen[j][0] + seen[j + 1][0]) / 2 if j + 1 < len(seen) else end
        kept[index].showings.append((round(start, 3), round(max(stop, start), 3)))
    return kept


def showings(slides: list[Slide]) -> list[SlideShown]:
    return [SlideShown(s.slide_id, a, b) for s in slides for a, b in s.showings]


def slides_to_json(slides: list[Slide]) -> list[dict]:
    return [asdict(s) for s in slides]


def slides_from_json(data: list[dict]) -> list[Slide]:
    return [Slide(d["slide_id"], d["image"], d["first_seen"], tuple(d["box"]), d.get("text", ""),
                  [tuple(x) for x in d.get("showings", [])]) for d in data]
