"""Clinical notes for consults: CodiEsp case reports (gold ICD-10 codes) and ACI-Bench visit notes.

Both are read from `data_dir()` at run time.

CodiEsp (`codiesp/codiesp_v4_en_es_with_icd10.jsonl`): the English machine translation of each case
report is the note the assistant sees; the gold is its ICD-10 diagnosis codes (`icd10cm_dx`;
procedure codes are kept in metadata, not scored). The reports have no chief-complaint field, so
one is derived by a fixed rule (`codiesp_chief_complaint`), recorded per case in
`metadata["chief_complaint_rule"]`:

    In the first four sentences, find the earliest phrase that introduces why the patient came
    ("complaining of", "presented (to ...) with", "consulted for", "admitted (to ...) for/with",
    "came/attended (to ...) for/with/due to", "referred (to ...) for", "for evaluation of",
    "reason for consultation"); the chief complaint is the rest of that sentence. If no sentence
    has one, it is the first sentence (usually who the patient is and their background).
    Either way it is cut to 40 words.

On the dev set this finds a cue in about half the cases (127 of 250). The rule can catch a diagnosis the
report states early ("admitted for an ultrasound finding compatible with testicular neoplasia"):
that is what the report gives as the reason for the visit, and the same is true of MIMIC's field.

ACI-Bench (`aci_bench/*.csv` with `*_metadata.csv`): the visit note's sections (parsed from its
capitalised headings) are the note; the chief complaint is the metadata's `cc`; the note's
assessment and plan are the reference conclusion and are not shown to the panel. No codes.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from collections.abc import Iterator

from medpanel.cases.loaders import data_dir
from medpanel.cases.model import Case, Reference
from medpanel.errors import UsageError

CODIESP_FILE = "codiesp/codiesp_v4_en_es_with_icd10.jsonl"
CHIEF_COMPLAINT_WORDS = 40

_PLACE = r"(?:(?:to|at|in)\s+[\w\s,'-]{0,50}?\s+)?"
_CUES: list[tuple[str, re.Pattern[str]]] = [
    (name, re.compile(pattern, re.IGNORECASE))
    for name, pattern in [
        ("complaining of", r"\bcomplain(?:ing|ed|s)?\s+(?:of|about)\s+"),
        ("consulted for", r"\bconsult(?:ed|s|ing)?\s+" + _PLACE + r"(?:for|because of|due to|with)\s+"),
        ("presented with", r"\bpresent(?:ed|s|ing)?\s+" + _PLACE + r"(?:with|for|due to|because of)\s+"),
        ("admitted for", r"\badmitted\s+" + _PLACE + r"(?:for|with|due to|because of)\s+"),
        ("came for", r"\b(?:came|comes|come|went|attended|visited|arrived)\s+" + _PLACE + r"(?:for|with|due to|because of)\s+"),
        ("referred for", r"\breferred\s+" + _PLACE + r"(?:for|with|due to|because of)\s+"),
        ("for evaluation of", r"\bfor\s+(?:the\s+)?(?:evaluation|study|assessment|investigation)\s+of\s+"),
        ("reason for consultation", r"\breason\s+for\s+(?:consultation|admission|referral)(?:\s+was)?:?\s+"),
    ]
]


def _cut(text: str, words: int = CHIEF_COMPLAINT_WORDS) -> str:
    parts = text.split()
    clipped = " ".join(parts[:words])
    return clipped + (" ..." if len(parts) > words else "")


def codiesp_chief_complaint(text: str) -> tuple[str, str]:
    """(chief complaint, the rule that produced it: a cue name or "first sentence"). See the module docstring."""
    sentences = [s.strip() for s in re.split(r"\n+|(?<=[.!?])\s+(?=[A-Z])", text or "") if s.strip()]
    if not sentences:
        raise UsageError("The case report is empty.", "Check the CodiEsp file.")
    for sentence in sentences[:4]:
        hits = [(m.end(), m.start(), name) for name, pattern in _CUES if (m := pattern.search(sentence))]
        if hits:
            _end, _start, name = min(hits, key=lambda h: (h[1], -h[0]))  # the earliest cue; the longest if tied
            rest = sentence[_end:].strip().rstrip(".").strip()
            if rest:
                return _cut(rest), name
    return _cut(sentences[0].rstrip(".")), "first sentence"


def _codiesp_rows() -> list[dict]:
    path = data_dir() / CODIESP_FILE
    if not path.exists():
        raise UsageError(f"CodiEsp file {path} not found.", "Set MEDPANEL_DATA_DIR to the folder holding the shared datasets (codiesp/).")
    with path.open() as fh:
        return [json.loads(line) for line in fh if line.strip()]


def codiesp_case(row: dict) -> Case:
    complaint, rule = codiesp_chief_complaint(row["text_en"])
    return Case(
        id=f"codiesp-{row['doc_id']}",
        source=f"codiesp/{row['split']}",
        chief_complaint=complaint,
        note={"clinical case": row["text_en"].strip()},
        reference=Reference(codes=[c.upper() for c in row.get("icd10cm_dx") or []]),
        metadata={"doc_id": row["doc_id"], "split": row["split"], "chief_complaint_rule": rule,
                  "procedure_codes": row.get("icd10pcs_px") or []},
    )


def load_codiesp(split: str) -> Iterator[Case]:
    rows = [r for r in _codiesp_rows() if r["split"] == split]
    if not rows:
        raise UsageError(f"CodiEsp has no '{split}' split.", "Use train, dev or test.")
    return (codiesp_case(r) for r in rows)


def load_codiesp_dev() -> Iterator[Case]:
    return load_codiesp("dev")


def load_codiesp_test() -> Iterator[Case]:
    return load_codiesp("test")


def find_codiesp_case(key: str) -> Case:
    """A CodiEsp case by position in the dev split (0-based) or by document id (any split, with or without 'codiesp-')."""
    rows = _codiesp_rows()
    key = key.strip()
    if key.isdigit():
        dev = [r for r in rows if r["split"] == "dev"]
        index = int(key)
        if index >= len(dev):
            raise UsageError(f"CodiEsp dev has {len(dev)} cases; there is no index {index}.", f"Use 0 to {len(dev) - 1}, or a document id.")
        return codiesp_case(dev[index])
    doc_id = key.removeprefix("codiesp-")
    for row in rows:
        if row["doc_id"] == doc_id:
            return codiesp_case(row)
    raise UsageError(f"No CodiEsp document '{key}'.", "Give a dev-set index (codiesp:0) or a document id such as codiesp:S0004-06142005000900016-1.")


# ---------------------------------------------------------------------------- ACI-Bench

ACI_FILES = ("train", "valid", "clinicalnlp_taskB_test1", "clinicalnlp_taskC_test2", "clef_taskC_test3")
# Headings that hold the visit's conclusion: the reference, kept from the panel.
_ACI_REFERENCE = ("assessment and plan", "assessment", "plan", "impression", "instructions", "orders")
_ACI_HEADINGS = {
    "chief complaint", "history of present illness", "review of systems", "review of symptoms", "physical exam",
    "physical examination", "exam", "vitals", "vitals reviewed", "results", "medical history", "past history",
    "past medical history", "surgical history", "family history", "social history", "medications",
    "current medications", "allergies", "birth history", "procedure", "subjective", "ekg", *_ACI_REFERENCE,
}


def aci_sections(note: str) -> dict[str, str]:
    """Sections of an ACI-Bench note: a known heading alone on its line, in capitals, starts one."""
    sections: dict[str, str] = {}
    current, lines = "preamble", []
    for line in note.splitlines():
        heading = line.strip().rstrip(":")
        if heading and heading.isupper() and heading.lower() in _ACI_HEADINGS:
            if "\n".join(lines).strip():
                sections[current] = (sections.get(current, "") + "\n" + "\n".join(lines)).strip()
            current, lines = heading.lower(), []
        else:
            lines.append(line)
    if "\n".join(lines).strip():
        sections[current] = (sections.get(current, "") + "\n" + "\n".join(lines)).strip()
    return sections


def load_aci_bench() -> Iterator[Case]:
    folder = data_dir() / "aci_bench"
    if not folder.is_dir():
        raise UsageError(f"ACI-Bench folder {folder} not found.", "Set MEDPANEL_DATA_DIR to the folder holding the shared datasets (aci_bench/).")
    for name in ACI_FILES:
        notes, meta = folder / f"{name}.csv", folder / f"{name}_metadata.csv"
        if not notes.exists() or not meta.exists():
            raise UsageError(f"ACI-Bench file {notes} or its metadata is missing.", "Restore the aci_bench/ folder of the shared datasets.")
        with meta.open(newline="") as fh:
            by_encounter = {row["encounter_id"]: row for row in csv.DictReader(fh)}
        with notes.open(newline="") as fh:
            for row in csv.DictReader(fh):
                yield _aci_case(row, by_encounter.get(row["encounter_id"], {}), name)


def _aci_case(row: dict, meta: dict, split: str) -> Case:
    sections = aci_sections(row["note"])
    reference = "\n\n".join(f"{name.upper()}\n{sections[name]}" for name in _ACI_REFERENCE if name in sections)
    note = {name: body for name, body in sections.items() if name not in _ACI_REFERENCE}
    complaint = (meta.get("cc") or "").strip() or sections.get("chief complaint", "").strip()
    return Case(
        id=f"aci-{row['encounter_id']}",
        source=f"aci_bench/{split}",
        chief_complaint=complaint,
        note=note,
        reference=Reference(conclusion=reference or None),
        metadata={"split": split, "encounter_id": row["encounter_id"], "patient_age": meta.get("patient_age"),
                  "patient_gender": meta.get("patient_gender"), "secondary_complaints": meta.get("2nd_complaints") or "",
                  "chief_complaint_rule": "metadata cc" if meta.get("cc") else "note section"},
    )


def load_note_file(path: Path, visible: tuple[str, ...] | None = None) -> Case:
    """A plain-text note in MIMIC's discharge format (sections by 'Heading:' lines) as a consult case."""
    from medpanel.cases.mimic import ASSISTANT_SECTIONS, note_case

    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"Cannot read {path}: {exc.strerror or exc}.", "Check the path and that the file is readable.") from None
    return note_case(text, case_id=path.stem, source=str(path), visible=visible or ASSISTANT_SECTIONS)


def load_consult_case(spec: str, visible: tuple[str, ...] | None = None) -> Case:
    """The case `medpanel consult` is given: 'codiesp:<index or id>', a case file (YAML/JSON) or
    folder, or a plain-text note with MIMIC-style 'Heading:' sections (`visible` picks what the assistant sees)."""
    from medpanel.cases.loaders import load_case

    if spec.startswith("codiesp:"):
        return find_codiesp_case(spec.partition(":")[2])
    path = Path(spec)
    if not path.exists():
        raise UsageError(f"Note file {path} does not exist.", "Give a case YAML/JSON, a text note with 'Chief Complaint:' etc. headings, or codiesp:<index>.")
    if path.is_dir() or path.suffix.lower() in (".yaml", ".yml", ".json"):
        return load_case(path)
    return load_note_file(path, visible)
