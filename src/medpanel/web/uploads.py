"""Uploaded cases: a case file and its slide images, checked, then kept in a folder of their own.

Each upload is size-limited and type-checked before it is written: the case file must be UTF-8 YAML or
JSON, each image a PNG, JPEG, GIF or BMP by its first bytes (never by its name). Images are kept under the
folder's `slides/` with a cleaned file name, so the case file names them `slides/NAME`; the loader then
refuses any path that leaves the folder.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path

from medpanel.cases.files import decode_text, image_format
from medpanel.errors import UsageError

CASE_SUFFIXES = (".yaml", ".yml", ".json")
MAX_IMAGES = 20


class Upload:
    """One uploaded file as the route read it: its name and bytes (read with a bound, see read_bounded)."""

    def __init__(self, name: str, data: bytes) -> None:
        self.name, self.data = name, data


async def read_bounded(file, limit: int) -> Upload:
    """Read an uploaded file, refusing it once it passes `limit` bytes (never read whole first)."""
    name = Path(file.filename or "").name
    chunks, size = [], 0
    while chunk := await file.read(256 * 1024):
        size += len(chunk)
        if size > limit:
            raise UsageError(f"{name or 'The upload'} is over the {limit / 1e6:.0f} MB upload limit.",
                             "Upload a smaller file: shrink the slide images, or trim the case file to the case material.")
        chunks.append(chunk)
    return Upload(name, b"".join(chunks))


def clean_name(name: str) -> str:
    """The file name kept: letters, digits, spaces and . _ - (so `slides/my slide.png` in a case still matches)."""
    stem = re.sub(r"[^A-Za-z0-9._ -]+", "_", Path(name).name).strip("._ ")
    return stem[:100] or "file"


def check_case_file(upload: Upload) -> str:
    if not upload.name.lower().endswith(CASE_SUFFIXES):
        raise UsageError(f"{upload.name or 'The case file'} is not a case file (YAML or JSON).",
                         "Upload the case as case.yaml or case.json (see examples/ for the format).")
    if not upload.data.strip():
        raise UsageError(f"{upload.name} is empty.", "Upload the case file with its fields (see examples/).")
    return decode_text(upload.data, f"The uploaded case file {upload.name}")


def check_image(upload: Upload) -> str:
    kind = image_format(upload.data[:16])
    if kind is None:
        raise UsageError(f"{upload.name or 'An upload'} is not an image: slides must be PNG, JPEG, GIF or BMP files.",
                         "Upload the slide as an image file (its content is checked, not its name).")
    return kind


def save_case(folder_root: Path, case_file: Upload, images: list[Upload]) -> Path:
    """Check everything, then write the case and its slides to a new folder; returns the folder."""
    text = check_case_file(case_file)
    images = [image for image in images if image.name or image.data]
    if len(images) > MAX_IMAGES:
        raise UsageError(f"{len(images)} slide images were uploaded; at most {MAX_IMAGES} are taken.", "Upload the slides the board needs.")
    for image in images:
        check_image(image)
    names = [clean_name(image.name) for image in images]
    if len(set(names)) < len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise UsageError(f"Two slides are named {', '.join(twice)}.", "Give each slide image its own file name.")
    folder = folder_root / secrets.token_hex(6)
    (folder / "slides").mkdir(parents=True)
    suffix = ".json" if case_file.name.lower().endswith(".json") else ".yaml"
    (folder / f"case{suffix}").write_text(text, encoding="utf-8")
    for image in images:
        (folder / "slides" / clean_name(image.name)).write_bytes(image.data)
    return folder
