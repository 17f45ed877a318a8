"""ICD-10 codes: a code table from the ICD-10-CM data, parsing codes out of text, and set metrics.

The table is read at run time from `data_dir()/icd10cm` (codes, chapters, blocks), once per process.
It answers, for any code: its normal form, whether it exists (or was made up), its description,
category (first three characters), block and chapter.

Metrics follow MedSyn's per-sample definitions, averaged over samples by the caller:
precision |P ∩ G| / |P|, recall |P ∩ G| / |G|, F1, and Jaccard |P ∩ G| / |P ∪ G|, at three levels:
the full code, the category, and the chapter. Two choices are explicit here rather than implied:

* Three-character codes ("I10") keep no dot, so they match at full-code level. (MedSyn's released
  code always inserted a dot after the third character, so a three-character gold code could never
  match; that is not repeated.)
* An empty prediction against a non-empty gold set scores 0 on every metric under the default
  policy "zero", or is left out of the average (None) under "exclude". A sample without gold codes
  cannot be scored (None) whatever was predicted.

Predicted codes that do not exist (hallucinated, e.g. "M34.59") stay in the prediction: they count
against precision, and are reported separately as the invalid-code rate. Duplicates count once.

MedSyn's released scoring, with its bugs, is `medpanel.scoring.icd10_released` (preset "released");
scoring many pairs at once is `medpanel.scoring.icd10_pairs`.
"""

from __future__ import annotations

import csv
import re
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from collections.abc import Iterable
from typing import Literal

from medpanel.errors import UsageError

EmptyPolicy = Literal["zero", "exclude"]
LEVELS = ("code", "category", "chapter")
METRICS = ("precision", "recall", "f1", "jaccard")

# A code as it may appear in text: a letter, then a digit and a digit/A/B (C7A, D3A, M1A) or the
# new "QA0" shape, then optionally a dot and up to four characters (S72.001A, T81.4XXA).
# Bounded by non-alphanumerics so "HbA1c" or "T2DM" are not read as codes.
_CODE_IN_TEXT = re.compile(r"(?<![A-Za-z0-9.])([A-Za-z](?:[0-9][0-9ABab]|[Aa][0-9])(?:\.?[0-9A-Za-z]{1,4})?)(?![A-Za-z0-9])")
_CODE_SHAPE = re.compile(r"[A-Z](?:[0-9][0-9A-Z]|A[0-9])[0-9A-Z]{0,4}")
_RANGE_IN_TITLE = re.compile(r"\(([A-Z][0-9A-Z]{2})-([A-Z][0-9A-Z]{2})\)\s*$")


def normalise(code: str) -> str | None:
    """Upper case, dot after the third character only when the code is longer than three; None if not code-shaped."""
    bare = re.sub(r"[\s.]", "", code or "").upper()
    if not _CODE_SHAPE.fullmatch(bare):
        return None
    return bare if len(bare) == 3 else f"{bare[:3]}.{bare[3:]}"


def token_code(token: str) -> str | None:
    """The code one whole token is ("E119", "I10.", "e11.9:"), normalised; None for a word ("T2DM", "and")."""
    token = token.strip(".:-'\"*`")
    match = _CODE_IN_TEXT.fullmatch(token)
    return normalise(token) if match else None


def parse_codes(text: str | Iterable[str]) -> list[str]:
    """Codes in a reply, normalised, de-duplicated, in order of first mention.

    Accepts prose or a list ("E11.9, I10; and J18.9 (pneumonia)"); words between codes are ignored.
    A list of strings is parsed item by item, so ["E11.9 Type 2 diabetes", "I10"] gives both codes.
    """
    items = [text] if isinstance(text, str) else list(text)
    seen: dict[str, None] = {}
    for item in items:
        for raw in _CODE_IN_TEXT.findall(str(item or "")):
            code = normalise(raw)
            if code is not None:
                seen.setdefault(code, None)
    return list(seen)


# ---------------------------------------------------------------------------- the code table


@dataclass(frozen=True)
class CodeInfo:
    code: str  # normal form
    valid: bool  # exists in ICD-10-CM (as a code or a category)
    description: str | None
    category: str  # first three characters
    category_description: str | None
    block: str | None  # e.g. "E08-E13"
    chapter: int | None  # 1..22; None when the category falls in no chapter's range
    chapter_title: str | None
    billable: bool = False


@dataclass(frozen=True)
class _Range:
    low: str
    high: str
    name: str  # chapter number as text, or block range
    title: str

    def holds(self, category: str) -> bool:
        # Categories compare as strings: digits sort before letters, as ICD-10 orders them (D39 < D3A < D40).
        return self.low <= category <= self.high


class CodeTable:
    """The ICD-10-CM code list with chapters and blocks. Build with `code_table()` (cached)."""

    def __init__(self, folder: Path) -> None:
        codes_file = folder / "icd10cm_2026_codes.tsv"
        chapters_file = folder / "icd10cm_2026_chapters.tsv"
        blocks_file = folder / "icd10cm_2026_blocks.tsv"
        for f in (codes_file, chapters_file, blocks_file):
            if not f.exists():
                raise UsageError(f"ICD-10-CM file {f} not found.", "Set MEDPANEL_DATA_DIR to the folder holding icd10cm/ (the shared datasets).")
        self.rows: dict[str, dict[str, str]] = {}
        self.categories: dict[str, str] = {}  # category -> its description, where the table has one
        with codes_file.open(newline="") as fh:
            for row in csv.DictReader(fh, delimiter="\t"):
                self.rows[row["code_nodot"]] = row
                self.categories.setdefault(row["category"], "")
                if row["kind"] == "category":
                    self.categories[row["category"]] = row["description"]
        with chapters_file.open(newline="") as fh:
            self.chapters = [self._range(r["range"], r["chapter"], r["title"]) for r in csv.DictReader(fh, delimiter="\t")]
        with blocks_file.open(newline="") as fh:
            self.blocks = [self._range(r["block"], r["block"], r["title"]) for r in csv.DictReader(fh, delimiter="\t")]
        for block in self.blocks:  # a one-category block (C7A, D3A) carries that category's title
            if block.low == block.high and not self.categories.get(block.low) and block.low in self.categories:
                self.categories[block.low] = block.title

    @staticmethod
    def _range(span: str, name: str, title: str) -> _Range:
        low, _, high = span.partition("-")
        # The title's range wins where they differ (chapter 22: blocks say U00-U49, the CDC title U00-U85).
        titled = _RANGE_IN_TITLE.search(title)
        if titled:
            low, high = titled.groups()
        return _Range(low, high or low, name, title)

    def chapter_of(self, category: str) -> _Range | None:
        return next((c for c in self.chapters if c.holds(category)), None)

    def block_of(self, category: str) -> str | None:
        """The narrowest block whose range holds the category (blocks nest: C00-C96 ⊃ C00-C75 ⊃ C00-C14)."""
        holding = [b for b in self.blocks if b.holds(category)]
        if not holding:
            return None
        holding.sort(key=lambda b: b.high)  # of nested ranges, the narrowest starts last and ends first
        holding.sort(key=lambda b: b.low, reverse=True)
        return holding[0].name

    def info(self, code: str) -> CodeInfo:
        normal = normalise(code)
        if normal is None:
            raise UsageError(f"'{code}' is not shaped like an ICD-10 code.", "Write codes as a letter, two characters, and optionally a dot and up to four more (E11.9, I10).")
        bare = normal.replace(".", "")
        category = bare[:3]
        row = self.rows.get(bare)
        chapter = self.chapter_of(category)
        valid = row is not None or (len(bare) == 3 and category in self.categories)
        if row is not None:
            description = row["description"]
        else:  # a bare category (C7A, D3A) has its title; a made-up code has none
            description = (self.categories.get(category) or None) if valid else None
        return CodeInfo(
            code=normal,
            valid=valid,
            description=description,
            category=category,
            category_description=self.categories.get(category) or None,
            block=(row["block"] if row else None) or self.block_of(category),
            chapter=int(chapter.name) if chapter else None,
            chapter_title=chapter.title if chapter else None,
            billable=bool(row and row["billable"] == "1"),
        )

    def __len__(self) -> int:
        return len(self.rows)


_TABLE_LOCK = threading.Lock()


@lru_cache(maxsize=4)
def _load(folder: str) -> CodeTable:
    return CodeTable(Path(folder))


def code_table(folder: str | Path | None = None) -> CodeTable:
    """The code table from `folder` (default data_dir()/icd10cm), loaded once per process."""
    if folder is None:
        from medpanel.cases.loaders import data_dir

        folder = data_dir() / "icd10cm"
    with _TABLE_LOCK:  # one load even when many items score at once
        return _load(str(Path(folder).resolve()))


def lookup(code: str) -> CodeInfo:
    return code_table().info(code)


# ---------------------------------------------------------------------------- metrics


def level_key(code: str, level: str, table: CodeTable | None = None) -> str:
    """What a normalised code is compared by at a level: itself, its category, or its chapter."""
    if level == "code":
        return code
    category = code.replace(".", "")[:3]
    if level == "category":
        return category
    if level == "chapter":
        chapter = (table or code_table()).chapter_of(category)
        # A category outside every chapter cannot match anything, but still counts as predicted.
        return f"chapter {chapter.name}" if chapter else f"no chapter ({category})"
    raise ValueError(f"unknown level {level!r}; use one of {LEVELS}")


def set_metrics(predicted: set, gold: set, empty: EmptyPolicy = "zero") -> dict[str, float | None]:
    """Precision, recall, F1 and Jaccard of one sample's sets. None where the sample cannot be scored."""
    if not gold:
        return dict.fromkeys(METRICS)
    if not predicted:
        return dict.fromkeys(METRICS, 0.0 if empty == "zero" else None)
    hits = len(predicted & gold)
    precision = hits / len(predicted)
    recall = hits / len(gold)
    f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "jaccard": hits / len(predicted | gold)}


def icd10_scores(predicted: str | Iterable[str], gold: str | Iterable[str], *, empty: EmptyPolicy = "zero",
                 table: CodeTable | None | Literal[False] = None) -> dict[str, float | None]:
    """One sample's scores: `{level}_{metric}` for every level and metric, plus the invalid-code rate.

    Both sides are parsed and normalised (so "e11.9" and "E119" are "E11.9"; duplicates count once).
    `invalid_rate` is the share of distinct predicted codes that do not exist (None with no prediction);
    `n_predicted` and `n_gold` count distinct codes; `empty` is 1.0 when nothing was predicted.
    `table=None` loads the ICD-10-CM table; `table=False` scores without one (where the data is
    missing): chapter metrics and the invalid rate are then None.
    """
    if empty not in ("zero", "exclude"):
        raise UsageError(f"Unknown empty-prediction policy '{empty}'.", "Use 'zero' or 'exclude'.")
    pred_codes, gold_codes = parse_codes(predicted), parse_codes(gold)
    if table is None:
        table = code_table()
    scores: dict[str, float | None] = {}
    for level in LEVELS:
        if level == "chapter" and table is False:
            scores.update({f"chapter_{metric}": None for metric in METRICS})
            continue
        p = {level_key(c, level, table or None) for c in pred_codes}
        g = {level_key(c, level, table or None) for c in gold_codes}
        for metric, value in set_metrics(p, g, empty).items():
            scores[f"{level}_{metric}"] = value
    if table is False or not pred_codes:
        scores["invalid_rate"] = None
    else:
        scores["invalid_rate"] = sum(not table.info(c).valid for c in pred_codes) / len(pred_codes)
    scores["n_predicted"] = float(len(pred_codes))
    scores["n_gold"] = float(len(gold_codes))
    scores["empty"] = 0.0 if pred_codes else 1.0
    return scores


def metric_names() -> list[str]:
    return [f"{level}_{metric}" for level in LEVELS for metric in METRICS]
