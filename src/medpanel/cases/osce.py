"""OSCE scenarios: AgentClinic's patient cases as Cases for the diagnostic dialogue.

Each AgentClinic record (`{"OSCE_Examination": {...}}`) becomes a Case with

    chief_complaint          the patient's primary symptom (else the first sentence of the history)
    reference.answer_text    Correct_Diagnosis
    metadata["osce"]         objective (the examiner's brief), patient_actor (what the patient knows),
                             physical_exam, test_results, acceptable_diagnoses ([] here: AgentClinic
                             names only the gold one), other (any further fields, kept verbatim)

The panel never sees metadata; the patient model is shown patient_actor only. A case file may hold
the same `metadata.osce` block (see docs/longform_osce.md) to run a scenario of one's own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from medpanel.cases.loaders import _jsonl, data_dir, load_case, load_dataset
from medpanel.cases.model import Case, Reference
from medpanel.errors import UsageError
from medpanel.scoring.osce import split_sentences

FILES = {
    "agentclinic": ("agentclinic_medqa.jsonl", "agentclinic"),
    "agentclinic-extended": ("agentclinic_medqa_extended.jsonl", "agentclinic-ext"),
}


def chief_complaint(actor: dict) -> str:
    symptoms = actor.get("Symptoms")
    primary = symptoms.get("Primary_Symptom") if isinstance(symptoms, dict) else None
    if isinstance(primary, str) and primary.strip():
        return primary.strip()
    history = split_sentences(str(actor.get("History") or ""))
    return history[0] if history else ""


def osce_case(record: dict, case_id: str, source: str) -> Case:
    exam = record.get("OSCE_Examination")
    if not isinstance(exam, dict) or not isinstance(exam.get("Patient_Actor"), dict):
        raise UsageError(f"{source}: record {case_id} has no OSCE_Examination.Patient_Actor.", "Use AgentClinic's OSCE JSONL format.")
    actor = exam["Patient_Actor"]
    known = {"Objective_for_Doctor", "Patient_Actor", "Physical_Examination_Findings", "Test_Results", "Correct_Diagnosis"}
    diagnosis = exam.get("Correct_Diagnosis")
    return Case(
        id=case_id,
        source=source,
        chief_complaint=chief_complaint(actor),
        reference=Reference(answer_text=str(diagnosis).strip() if diagnosis else None),
        metadata={"osce": {
            "objective": exam.get("Objective_for_Doctor", ""),
            "patient_actor": actor,
            "physical_exam": exam.get("Physical_Examination_Findings") or {},
            "test_results": exam.get("Test_Results") or {},
            "acceptable_diagnoses": [],
            "other": {k: v for k, v in exam.items() if k not in known},
        }},
    )


def load_agentclinic_file(path: Path, prefix: str) -> Iterator[Case]:
    """Cases from an AgentClinic OSCE JSONL file, ids PREFIX-0, PREFIX-1, ... in file order."""
    if not path.exists():
        raise UsageError(f"AgentClinic file {path} not found.", "Set MEDPANEL_DATA_DIR to the folder holding the shared datasets.")
    for index, record in enumerate(_jsonl(path)):
        yield osce_case(record, f"{prefix}-{index}", path.name)


def _load(name: str) -> Iterator[Case]:
    file, prefix = FILES[name]
    return load_agentclinic_file(data_dir() / "agentclinic_osce" / file, prefix)


def load_agentclinic_medqa() -> Iterator[Case]:
    """AgentClinic-MedQA: 107 OSCE scenarios built from MedQA questions."""
    return _load("agentclinic")


def load_agentclinic_extended() -> Iterator[Case]:
    """AgentClinic-MedQA extended: 214 scenarios (the first 107 are the MedQA set)."""
    return _load("agentclinic-extended")


_INDEXED = re.compile(r"^(?P<name>[a-z-]+):(?P<key>.+)$")


def resolve_scenario(text: str) -> Case:
    """One scenario from `agentclinic:3` (index), `agentclinic-extended:agentclinic-ext-3` (id), a bare case
    id such as `agentclinic-3`, or a case file."""
    match = _INDEXED.match(text.strip())
    if match and match["name"] in FILES:
        cases = load_dataset(match["name"])
        key = match["key"].strip()
        if key.isdigit():
            index = int(key)
            if index >= len(cases):
                raise UsageError(f"{match['name']} has {len(cases)} scenarios; there is no index {index}.", f"Use an index from 0 to {len(cases) - 1}.")
            return cases[index]
        return _by_id(cases, key, match["name"])
    for name, (_, prefix) in FILES.items():
        if re.fullmatch(rf"{re.escape(prefix)}-\d+", text.strip()):
            return _by_id(load_dataset(name), text.strip(), name)
    path = Path(text)
    if path.exists():
        return load_case(path)
    raise UsageError(f"Unknown scenario '{text}'.", "Give agentclinic:INDEX, agentclinic-extended:INDEX, a case id such as agentclinic-3, or a case file.")


def _by_id(cases: list[Case], case_id: str, name: str) -> Case:
    for case in cases:
        if case.id == case_id:
            return case
    raise UsageError(f"{name} has no scenario '{case_id}'.", f"Ids run {cases[0].id} ... {cases[-1].id}; or give an index: {name}:3.")


__all__ = ["load_agentclinic_extended", "load_agentclinic_file", "load_agentclinic_medqa", "osce_case", "resolve_scenario"]
