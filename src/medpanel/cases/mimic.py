"""MIMIC-IV discharge notes -> consult Cases, as MedSyn prepared them. The project ships no MIMIC data.

For users with credentialed access to MIMIC-IV-Note (discharge.csv) and, optionally, MIMIC-IV's
hosp/diagnoses_icd.csv for the gold ICD-10 codes:

    from medpanel.cases.mimic import load_mimic_discharge
    sample = load_mimic_discharge("discharge.csv.gz", diagnoses_csv="diagnoses_icd.csv.gz")  # 1,000 notes, seed 13
    sample.cases[0].chief_complaint, sample.counts

What it does, in order, as MedSyn's released notebook (src/create_mimicIV_sample.ipynb) did:

1. Keep a note only if its text (in any letter case; the release lower-cased notes) contains each
   of the eleven headings the release tested for, anywhere (`REQUIRED_SECTIONS`): chief complaint,
   history of present illness, major surgical or invasive procedure, social history, physical exam,
   pertinent results, brief hospital course (tested without its colon), medications on admission,
   discharge medications, discharge diagnosis, discharge instructions. "Discharge Condition" is not
   required, and "Discharge Diagnoses:" does not count as "discharge diagnosis:".
2. Drop notes that contain "deceased" or "patient expired" anywhere (`is_deceased`); nothing else
   (a "Discharge Disposition: Expired" alone does not drop a note).
3. With a diagnoses file: keep notes whose admission has ICD-10 diagnosis codes (gold, in seq_num order).
4. Draw `n` notes with `seed` the way pandas' DataFrame.sample(n, random_state=seed) draws rows
   (numpy RandomState(seed).choice(N, n, replace=False)), from the kept notes in file order.
5. Show the assistant the release's spans (`released_spans`): the chief complaint up to "Major
   Surgical or Invasive Procedure:"; the "history" from "History of Present Illness:" up to
   "Social History:", so Past Medical History too; the physical exam up to "Pertinent Results:";
   the results up to "Brief Hospital Course:". The discharge diagnosis (the reference) runs up to
   "Discharge Condition:". Each from the first occurrence of its heading.

Deviations kept, each for a reason:

* Letter case: the release lower-cased whole notes; medpanel matches headings in any case but shows
  the note as written.
* The release dropped codes seen fewer than 10 times in the whole corpus before sampling, and kept
  notes whose admission had ICD-10 procedure codes only; medpanel needs the diagnoses file only and
  keeps every diagnosis code, so the kept-note order, and hence the 1,000 drawn, differ from theirs.
* Where a span's closing heading is missing or comes before it, the release ran on to the end of
  the text before "Brief Hospital Course:" (or stopped with an error where the opening heading
  came only after it); medpanel then uses the section up to its next heading (`parse_sections`),
  so the hidden discharge sections never leak into what the panel sees.

A plain-text note in this format also works on its own: `note_case(text)` (used by `medpanel consult
note.txt`).
"""

from __future__ import annotations

import csv
import gzip
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterable, Iterator

import numpy as np

from medpanel.cases.model import Case, Reference
from medpanel.errors import UsageError

# The headings the released notebook tested for, in its order: present anywhere in the note, in any case.
_RELEASED_REQUIRED = ("chief complaint:", "history of present illness:", "major surgical or invasive procedure:", "social history:",
                      "physical exam:", "pertinent results:", "brief hospital course", "medications on admission:",
                      "discharge medications:", "discharge diagnosis:", "discharge instructions:")
REQUIRED_SECTIONS = tuple(marker.rstrip(":") for marker in _RELEASED_REQUIRED)
# The release's spans: section -> (opening heading, closing heading); each searched for from the
# opening's first occurrence, in the text before "brief hospital course:" (the diagnosis in all of it).
_SPANS = {
    "chief complaint": ("chief complaint:", "major surgical or invasive procedure:"),
    "history of present illness": ("history of present illness:", "social history:"),
    "physical exam": ("physical exam:", "pertinent results:"),
    "pertinent results": ("pertinent results:", "brief hospital course:"),
}
_DIAGNOSIS_SPAN = ("discharge diagnosis:", "discharge condition:")
_DEATH_MARKERS = ("deceased", "patient expired")
# What MedSyn's assistant was shown: the chief complaint, HPI, physical exam and pertinent results.
ASSISTANT_SECTIONS = ("chief complaint", "history of present illness", "physical exam", "pertinent results")
# Written at discharge: the reference, never shown to the panel.
REFERENCE_SECTION = "discharge diagnosis"

# Headings recognised at the start of a line -> canonical section name. Headings outside the twelve
# are listed too, so that each ends the section before it instead of running into it.
_HEADINGS = {
    "chief complaint": "chief complaint",
    "major surgical or invasive procedure": "major surgical or invasive procedure",
    "history of present illness": "history of present illness",
    "social history": "social history",
    "physical exam": "physical exam",
    "physical examination": "physical exam",
    "pertinent results": "pertinent results",
    "brief hospital course": "brief hospital course",
    "medications on admission": "medications on admission",
    "discharge medications": "discharge medications",
    "discharge diagnosis": "discharge diagnosis",
    "discharge diagnoses": "discharge diagnosis",
    "discharge condition": "discharge condition",
    "discharge instructions": "discharge instructions",
    "name": "name",
    "unit no": "unit no",
    "admission date": "admission date",
    "discharge date": "discharge date",
    "date of birth": "date of birth",
    "sex": "sex",
    "service": "service",
    "allergies": "allergies",
    "attending": "attending",
    "past medical history": "past medical history",
    "past surgical history": "past surgical history",
    "family history": "family history",
    "review of systems": "review of systems",
    "discharge disposition": "discharge disposition",
    "facility": "facility",
    "followup instructions": "followup instructions",
}
# Longest first, so "discharge diagnoses" is not read as "discharge diagnosis" + "es".
_HEADING_RE = re.compile(
    r"^[ \t]*(" + "|".join(re.escape(h) for h in sorted(_HEADINGS, key=len, reverse=True)) + r")[ \t]*:",
    re.IGNORECASE | re.MULTILINE,
)


def parse_sections(text: str) -> dict[str, str]:
    """Sections of a discharge note by canonical name, in the order they appear.

    A section runs from its heading to the next recognised heading. Text on the heading's own line
    belongs to it ("Service: MEDICINE"); a heading that appears twice has both bodies, joined.
    Sub-headings inside a section ("ADMISSION EXAM:", "GENERAL:") are not section headings.
    """
    matches = list(_HEADING_RE.finditer(text or ""))
    sections: dict[str, str] = {}
    for i, match in enumerate(matches):
        name = _HEADINGS[match.group(1).lower()]
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        body = text[match.end():end].strip()
        sections[name] = f"{sections[name]}\n{body}".strip() if name in sections else body
    return sections


def _lower(text: str) -> str:
    """The text lower-cased letter for letter, so positions in it are positions in the text."""
    low = text.lower()
    return low if len(low) == len(text) else "".join(c.lower() if len(c.lower()) == 1 else c for c in text)


def missing_sections(text: str) -> list[str]:
    """Required headings the note does not contain (an empty body still counts: the release tested the heading)."""
    low = _lower(text or "")
    return [name for name, marker in zip(REQUIRED_SECTIONS, _RELEASED_REQUIRED) if marker not in low]


def is_deceased(text: str) -> bool:
    """Whether the note says "deceased" or "patient expired" anywhere, in any case (the released filter)."""
    low = _lower(text or "")
    return any(marker in low for marker in _DEATH_MARKERS)


def exclusion_reason(text: str) -> str | None:
    """Why MedSyn's filters drop this note ("missing sections: ...", "deceased"), or None to keep it."""
    missing = missing_sections(text)
    if missing:
        return "missing sections: " + ", ".join(missing)
    if is_deceased(text):
        return "deceased"
    return None


def released_spans(text: str) -> dict[str, str]:
    """The sections as MedSyn's notebook cut them (see the module docstring), where both headings are found in order."""
    low = _lower(text or "")
    cut = low.find("brief hospital course:")
    before = len(low) if cut < 0 else cut
    spans = {}
    for name, (opening, closing) in [*_SPANS.items(), ("discharge diagnosis", _DIAGNOSIS_SPAN)]:
        limit = len(low) if name == "discharge diagnosis" else before
        start = low.find(opening, 0, limit)
        if start < 0:
            continue
        start += len(opening)
        end = limit if name == "pertinent results" and cut >= 0 else low.find(closing, start, limit)
        if end >= 0:
            spans[name] = text[start:end].strip()
    return spans


def seeded_sample(total: int, n: int, seed: int = 13) -> list[int]:
    """Positions of `n` of `total` items, drawn as pandas' DataFrame.sample(n, random_state=seed) draws rows."""
    if total < 0 or n < 0:
        raise UsageError(f"Cannot sample {n} of {total}.", "Give non-negative sizes.")
    if n > total:
        raise UsageError(f"Cannot sample {n} notes: only {total} passed the filters.", f"Ask for at most {total} (n={total}).")
    return [int(i) for i in np.random.RandomState(seed).choice(total, size=n, replace=False)]


def normalise_mimic_code(code: str) -> str:
    """MIMIC stores ICD-10 codes without the dot (E785): put it back after the third character."""
    bare = code.strip().upper().replace(".", "")
    return bare if len(bare) <= 3 else f"{bare[:3]}.{bare[3:]}"


def note_case(text: str, *, case_id: str = "note", source: str = "", codes: list[str] | None = None,
              visible: Iterable[str] = ASSISTANT_SECTIONS, metadata: dict | None = None) -> Case:
    """A consult Case from one discharge note: the chief complaint for the physician, the `visible`
    sections for the assistant, the discharge diagnosis (and `codes`) as the reference. The sections
    MedSyn cut by its own spans (`released_spans`) are cut that way; others run to their next heading."""
    sections = parse_sections(text) | released_spans(text)  # the release's spans win where they were found
    if not sections.get("chief complaint"):
        raise UsageError(f"Note '{case_id}' has no 'Chief Complaint:' section.",
                         "Start a line with 'Chief Complaint:' followed by the complaint, or give a case YAML with chief_complaint.")
    wanted = list(visible)
    note = {name: sections[name] for name in wanted if sections.get(name)}
    if set(note) <= {"chief complaint"}:
        raise UsageError(f"Note '{case_id}' has none of the sections the assistant should see ({', '.join(wanted[1:])}).",
                         "Add e.g. a 'History of Present Illness:' section, or choose other sections.")
    hidden = {name: body for name, body in sections.items() if name not in note}
    return Case(
        id=case_id,
        source=source,
        chief_complaint=sections["chief complaint"],
        note=note,
        reference=Reference(conclusion=sections.get(REFERENCE_SECTION) or None, codes=list(codes or [])),
        metadata={"format": "mimic-discharge", "other_sections": hidden, **(metadata or {})},
    )


# ---------------------------------------------------------------------------- whole files


@dataclass
class MimicSample:
    cases: list[Case]
    counts: dict[str, int] = field(default_factory=dict)  # read, missing_sections, deceased, no_icd10, kept, sampled


def _rows(path: Path) -> Iterator[dict[str, str]]:
    if not path.exists():
        raise UsageError(f"{path} does not exist.", "Give the path of MIMIC-IV-Note's discharge.csv(.gz) (or hosp/diagnoses_icd.csv(.gz)).")
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # discharge notes are long
    with (gzip.open(path, "rt", newline="") if path.suffix == ".gz" else path.open(newline="")) as fh:
        yield from csv.DictReader(fh)


def _icd10_codes(diagnoses_csv: Path, admissions: set[str]) -> dict[str, list[str]]:
    by_admission: dict[str, list[tuple[int, str]]] = {}
    for row in _rows(diagnoses_csv):
        if row.get("icd_version") == "10" and row.get("hadm_id") in admissions:
            by_admission.setdefault(row["hadm_id"], []).append((int(row.get("seq_num") or 0), normalise_mimic_code(row["icd_code"])))
    out: dict[str, list[str]] = {}
    for hadm, pairs in by_admission.items():
        codes = list(dict.fromkeys(code for _, code in sorted(pairs)))
        out[hadm] = codes
    return out


def load_mimic_discharge(discharge_csv: str | Path, diagnoses_csv: str | Path | None = None, *, n: int | None = 1000,
                         seed: int = 13, visible: Iterable[str] = ASSISTANT_SECTIONS) -> MimicSample:
    """MedSyn's test set from the user's own MIMIC files: filter, then draw `n` notes with `seed` (None: keep all).

    Reads the notes file twice (screening, then the drawn notes) so memory holds only the sample.
    """
    discharge_csv = Path(discharge_csv)
    counts = {"read": 0, "missing_sections": 0, "deceased": 0, "no_icd10": 0, "kept": 0, "sampled": 0}
    kept: list[tuple[str, str]] = []  # (note_id, hadm_id) in file order
    for row in _rows(discharge_csv):
        if "text" not in row or "note_id" not in row:
            raise UsageError(f"{discharge_csv} has no note_id/text columns.", "Give MIMIC-IV-Note's discharge.csv.")
        counts["read"] += 1
        reason = exclusion_reason(row["text"])
        if reason is None:
            kept.append((row["note_id"], row.get("hadm_id", "")))
        else:
            counts["deceased" if reason == "deceased" else "missing_sections"] += 1
    codes: dict[str, list[str]] = {}
    if diagnoses_csv is not None:
        codes = _icd10_codes(Path(diagnoses_csv), {hadm for _, hadm in kept})
        before = len(kept)
        kept = [(note, hadm) for note, hadm in kept if codes.get(hadm)]
        counts["no_icd10"] = before - len(kept)
    counts["kept"] = len(kept)
    order = seeded_sample(len(kept), n, seed) if n is not None else list(range(len(kept)))
    wanted = {kept[i][0]: rank for rank, i in enumerate(order)}
    drawn: list[Case | None] = [None] * len(order)
    visible = tuple(visible)
    for row in _rows(discharge_csv):
        rank = wanted.get(row["note_id"])
        if rank is not None and drawn[rank] is None:
            drawn[rank] = note_case(row["text"], case_id=f"mimic-{row['note_id']}", source=discharge_csv.name,
                                    codes=codes.get(row.get("hadm_id", ""), []), visible=visible,
                                    metadata={"note_id": row["note_id"], "subject_id": row.get("subject_id"), "hadm_id": row.get("hadm_id")})
    cases = [c for c in drawn if c is not None]
    counts["sampled"] = len(cases)
    return MimicSample(cases=cases, counts=counts)
