"""MIMIC-IV discharge notes -> consult Cases, as MedSyn prepared them. The project ships no MIMIC data.

For users with credentialed access to MIMIC-IV-Note (discharge.csv) and, optionally, MIMIC-IV's
hosp/diagnoses_icd.csv for the gold ICD-10 codes:

    from medpanel.cases.mimic import load_mimic_discharge
    sample = load_mimic_discharge("discharge.csv.gz", diagnoses_csv="diagnoses_icd.csv.gz")  # 1,000 notes, seed 13
    sample.cases[0].chief_complaint, sample.counts

What it does, in order (MedSyn §3):

1. Split every note into its sections by the headings MIMIC writes at the start of a line
   ("Chief Complaint:", "History of Present Illness:", ...), case-insensitively (`parse_sections`).
2. Keep a note only if all twelve sections the paper requires are present (`REQUIRED_SECTIONS`).
3. Drop notes of patients who died (`is_deceased`): "deceased" anywhere in the note or "patient
   expired" anywhere (the released notebook's test), or a discharge disposition or condition of "Expired".
4. With a diagnoses file: keep notes whose admission has ICD-10 diagnosis codes (gold, in seq_num order).
5. Draw `n` notes with `seed` the way pandas' DataFrame.sample(n, random_state=seed) draws rows
   (numpy RandomState(seed).choice(N, n, replace=False)), from the kept notes in file order.

Not repeated: the released preprocessing also dropped codes seen fewer than 10 times in the whole
corpus before sampling; the kept-note order therefore differs from theirs, so the same seed does
not pick the same 1,000 notes. The filters and the sampler are the paper's.

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

# The twelve sections MedSyn requires in a note, in the order MIMIC writes them.
REQUIRED_SECTIONS = (
    "chief complaint",
    "major surgical or invasive procedure",
    "history of present illness",
    "social history",
    "physical exam",
    "pertinent results",
    "brief hospital course",
    "medications on admission",
    "discharge medications",
    "discharge diagnosis",
    "discharge condition",
    "discharge instructions",
)
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
_DECEASED = re.compile(r"\bdeceased\b|\bpatient expired\b", re.IGNORECASE)
_EXPIRED = re.compile(r"\bexpired\b", re.IGNORECASE)


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


def missing_sections(sections: dict[str, str], required: Iterable[str] = REQUIRED_SECTIONS) -> list[str]:
    """Required sections whose heading does not appear (an empty body still counts as present)."""
    return [name for name in required if name not in sections]


def is_deceased(text: str, sections: dict[str, str] | None = None) -> bool:
    """Whether the note records the patient's death (see the module docstring for the rule)."""
    if _DECEASED.search(text or ""):
        return True
    sections = sections if sections is not None else parse_sections(text)
    return any(_EXPIRED.search(sections.get(name, "")) for name in ("discharge disposition", "discharge condition"))


def exclusion_reason(text: str) -> str | None:
    """Why MedSyn's filters drop this note ("missing sections: ...", "deceased"), or None to keep it."""
    sections = parse_sections(text)
    missing = missing_sections(sections)
    if missing:
        return "missing sections: " + ", ".join(missing)
    if is_deceased(text, sections):
        return "deceased"
    return None


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
    sections for the assistant, the discharge diagnosis (and `codes`) as the reference."""
    sections = parse_sections(text)
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
