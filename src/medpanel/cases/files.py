"""Reading what a user points medpanel at: bounded, UTF-8 only, slide images kept inside the case's folder.

Every loader reads through here, so a binary file, a UTF-16 export, a 50 MB summary or a slide path
like ``../../etc/passwd`` is refused with one clear message before anything is parsed or sent to a
model server.
"""

from __future__ import annotations

import os
from pathlib import Path

from medpanel.errors import UsageError

MAX_CASE_FILE_BYTES = 4 * 1024 * 1024  # a case file with its whole note is a few hundred kB
MAX_RECORD_BYTES = 4 * 1024 * 1024  # one JSONL record
MAX_IMAGE_BYTES = 20 * 1024 * 1024  # what vision APIs accept per image
MAX_TEXT_CHARS = 1_000_000  # one text field of a case (summary, note section, question)
MAX_NESTING = 64  # YAML/JSON nesting depth: real cases use fewer than ten levels
MAX_NODES = 1_000_000  # values in one parsed file or record

# Magic numbers of the image formats vision models take.
_IMAGE_MAGIC = {
    b"\x89PNG\r\n\x1a\n": "png",
    b"\xff\xd8\xff": "jpeg",
    b"GIF87a": "gif",
    b"GIF89a": "gif",
    b"BM": "bmp",
}


def _encoding_problem(raw: bytes) -> str:
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or (len(raw) > 1 and raw[1:2] == b"\x00"):
        return "it looks like UTF-16"
    if b"\x00" in raw[:8192]:
        return "it looks like a binary file"
    return "it is not UTF-8 (perhaps Latin-1 or Windows-1252)"


def decode_text(raw: bytes, where: str) -> str:
    """UTF-8 text (a UTF-8 byte-order mark is allowed), or a UsageError naming the encoding problem."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{where} is not UTF-8 text: {_encoding_problem(raw)} (byte {exc.start}).",
                         "Re-save the file as UTF-8 (e.g. `iconv -f LATIN1 -t UTF-8 in > out`).") from None
    if "\x00" in text:
        raise UsageError(f"{where} contains NUL bytes: {_encoding_problem(raw)}.", "Point at the text file, saved as UTF-8.")
    return text


def read_text(path: Path, what: str = "File", limit: int = MAX_CASE_FILE_BYTES) -> str:
    """A whole text file, bounded in size and checked to be UTF-8."""
    try:
        size = path.stat().st_size
        if size > limit:
            raise UsageError(f"{what} {path} is {size / 1e6:.1f} MB, over the {limit / 1e6:.0f} MB limit.",
                             "Trim it to the case material; a whole case fits in far less.")
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"Cannot read {path}: {exc.strerror or exc}.", "Check the path and that the file is readable.") from None
    return decode_text(raw, f"{what} {path}")


def check_structure(value: object, where: str) -> None:
    """Refuse parsed data nested deeper than MAX_NESTING, with a string over MAX_TEXT_CHARS, or with more
    than MAX_NODES values (YAML aliases can make a small file expand without bound). Iterative: no
    recursion to overflow."""
    stack: list[tuple[object, int]] = [(value, 0)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise UsageError(f"{where} holds more than {MAX_NODES:,} values (repeated YAML aliases?).", "A case is a small mapping of fields; check the file.")
        if depth > MAX_NESTING:
            raise UsageError(f"{where} is nested more than {MAX_NESTING} levels deep.", "A case is a flat mapping of fields; check the file.")
        if isinstance(item, str) and len(item) > MAX_TEXT_CHARS:
            raise UsageError(f"{where} has a text field of {len(item):,} characters, over the {MAX_TEXT_CHARS:,} limit.",
                             "Shorten it: a panel reads a case summary of a few thousand words at most.")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
            stack.extend((k, depth + 1) for k in item)
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def slide_roots(case_dir: Path) -> list[Path]:
    """Where slide images may live: the case's own folder and any named in $MEDPANEL_SLIDE_DIRS."""
    extra = [Path(p).expanduser() for p in os.environ.get("MEDPANEL_SLIDE_DIRS", "").split(os.pathsep) if p]
    return [r.resolve() for r in [case_dir, *extra]]


def image_format(head: bytes) -> str | None:
    for magic, name in _IMAGE_MAGIC.items():
        if head.startswith(magic):
            return name
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    return None


def resolve_slide_image(image: object, case_dir: Path, where: str, allowed: list[Path] | None = None) -> str:
    """The absolute path of a slide image, checked: a string path inside an allowed folder (the case's
    own, or `allowed`, plus $MEDPANEL_SLIDE_DIRS), naming a real image file (by its content) of bounded size."""
    if not isinstance(image, str) or not image.strip():
        raise UsageError(f"{where}: a slide's image must be a file path (text), not {type(image).__name__} {image!r}.",
                         "Give the image as a path relative to the case file, or leave it out and keep the caption.")
    roots = [r.resolve() for r in allowed] + slide_roots(case_dir)[1:] if allowed else slide_roots(case_dir)
    path = (case_dir / image).resolve()
    if not any(path == root or root in path.parents for root in roots):
        raise UsageError(f"{where}: slide image {image!r} is outside the case's folder ({roots[0]}).",
                         "Keep slide images beside the case file, or name their folder in MEDPANEL_SLIDE_DIRS.")
    if not path.is_file():
        raise UsageError(f"{where}: slide image {image} not found (looked at {path}).", "Image paths are relative to the case file.")
    size = path.stat().st_size
    if size > MAX_IMAGE_BYTES:
        raise UsageError(f"{where}: slide image {image} is {size / 1e6:.1f} MB, over the {MAX_IMAGE_BYTES / 1e6:.0f} MB limit.",
                         "Downscale the image (a slide needs no more than about 2000 pixels a side).")
    with path.open("rb") as fh:
        head = fh.read(16)
    if image_format(head) is None:
        raise UsageError(f"{where}: {image} is not an image (PNG, JPEG, GIF, WebP or BMP, judged by its content).",
                         "Point the slide at the image file itself.")
    return str(path)
