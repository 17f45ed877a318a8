"""Loaders for MCC's multiple-choice benchmarks, read from MEDPANEL_DATA_DIR at run time.

Every loader yields Cases with `question`, `options` {letter: text} and `reference.answer` (a letter).
Counts in the shared data: PubMedQA PQA-L test 500, MMLU medical 1,089, MedMCQA dev single-answer
2,816, MedXpertQA Text sample 244, RABBITS MedQA 378 kept pairs (441 rows with the dropped ones).
"""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Iterator
from pathlib import Path

from medpanel.cases.loaders import _jsonl, data_dir, load_medagents_file, load_medqa_file
from medpanel.cases.model import Case, Reference
from medpanel.errors import UsageError

LETTERS = "ABCDEFGHIJ"
PUBMEDQA_OPTIONS = {"A": "yes", "B": "no", "C": "maybe"}


def _file(*parts: str) -> Path:
    path = data_dir().joinpath(*parts)
    if not path.exists():
        raise UsageError(f"Dataset file {path} not found.", "Set MEDPANEL_DATA_DIR to the folder holding the shared datasets.")
    return path


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}.", "Restore the file from its source.") from None


def load_pubmedqa() -> Iterator[Case]:
    """PubMedQA PQA-L, reasoning-required: the abstract's sections (without its conclusion) and the
    question; yes / no / maybe as options A / B / C. The 500 test ids of test_ground_truth.json, in its order."""
    labelled = _read_json(_file("pubmedqa", "ori_pqal.json"))
    truth = _read_json(_file("pubmedqa", "test_ground_truth.json"))
    letter_of = {text: letter for letter, text in PUBMEDQA_OPTIONS.items()}
    for pmid, decision in truth.items():  # type: ignore[union-attr]
        row = labelled[pmid]  # type: ignore[index]
        sections = row.get("LABELS") or [""] * len(row["CONTEXTS"])
        abstract = "\n".join(f"{label.title()}: {text}" if label else text for label, text in zip(sections, row["CONTEXTS"], strict=True))
        yield Case(
            id=f"pubmedqa-{pmid}",
            source="pubmedqa/ori_pqal.json",
            question=f"Abstract:\n{abstract}\n\nQuestion: {row['QUESTION']}",
            options=dict(PUBMEDQA_OPTIONS),
            # The long answer is the abstract's conclusion: the reasoning-free setting's extra, never shown.
            reference=Reference(answer=letter_of[decision], answer_text=decision, conclusion=row.get("LONG_ANSWER")),
            metadata={"pmid": pmid, "year": row.get("YEAR"), "meshes": row.get("MESHES", [])},
        )


def load_mmlu_medical() -> Iterator[Case]:
    """MMLU's six medical subjects from the JSONL (the CSV folder is an early pre-release: not used)."""
    # The subject goes into the id as well: realidx restarts in each subject.
    for case in load_medagents_file(_file("mmlu_medical", "mmlu_medical6_test.jsonl"), "mmlu", lambda row: {"subject": row["subject"]}):
        yield case.model_copy(update={"id": f"mmlu-{case.metadata['subject']}-{case.id.removeprefix('mmlu-')}"})


def load_medmcqa() -> Iterator[Case]:
    """MedMCQA dev set, filtered to the 2,816 single-answer questions."""
    return load_medagents_file(_file("medmcqa", "medmcqa_dev_single_2816.jsonl"), "medmcqa")


def load_medxpertqa() -> Iterator[Case]:
    """MedXpertQA Text (244-item sample), ten options A-J. The question text repeats the options after
    'Answer Choices:'; that tail is cut, since the options are given separately."""
    path = _file("medxpertqa", "medxpertqa_text_sampled244.jsonl")
    for row in _jsonl(path):
        options = {o["letter"]: o["content"] for o in row["options"]}
        stem = row["question"].split("\nAnswer Choices:")[0].strip()
        yield Case(
            id=f"medxpertqa-{row['id']}",
            source=path.name,
            question=stem,
            options=options,
            reference=Reference(answer=row["label"][0], answer_text=options.get(row["label"][0])),
            metadata={k: row.get(k) for k in ("medical_task", "body_system", "question_type")},
        )


# RABBITS' MedQA sheet holds two copies of the MedQA columns side by side (original | brand-swapped),
# so columns are read by position: id, sent1, sent2, ending0-3, label, found_keywords, local_id.
_RABBITS_ORIGINAL, _RABBITS_BRAND, _RABBITS_KEEP = 0, 11, 21


def _rabbits_case(row: list[str], start: int, pair: int, variant: str, kept: bool) -> Case:
    stem = " ".join(part for part in (row[start + 1].strip(), row[start + 2].strip()) if part)
    options = {LETTERS[i]: row[start + 3 + i].strip() for i in range(4)}
    answer = LETTERS[int(row[start + 7])]
    return Case(
        id=f"rabbits-{pair}-{variant}",
        source="rabbits/annotated_medqa_new.csv",
        question=stem,
        options=options,
        reference=Reference(answer=answer, answer_text=options[answer]),
        metadata={"pair": pair, "variant": variant, "medqa_id": row[start], "drugs": row[start + 8], "kept": kept},
    )


def load_rabbits_pairs(include_dropped: bool = False) -> Iterator[Case]:
    """RABBITS on MedQA: each row gives two Cases, `rabbits-<i>-orig` and `rabbits-<i>-brand` (generic drug
    names swapped for brand names), i the row's position in the sheet. By default only the 378 rows the
    physician reviewers marked 'keep' (the paper's MedQA subset); `include_dropped` gives all 441.
    The MedMCQA sheet is not loaded: its rows carry no gold answer (cop = -1)."""
    path = _file("rabbits", "annotated_medqa_new.csv")
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    header, body = rows[0], rows[1:]
    if len(header) <= _RABBITS_KEEP or header[_RABBITS_KEEP].strip().lower() != "keep/drop":
        raise UsageError(f"{path} does not have RABBITS' layout (column {_RABBITS_KEEP} should be keep/drop).", "Restore the file from BittermanLab/RABBITS.")
    for pair, row in enumerate(body):
        kept = row[_RABBITS_KEEP].strip().lower() == "keep"
        if not kept and not include_dropped:
            continue
        yield _rabbits_case(row, _RABBITS_ORIGINAL, pair, "orig", kept)
        yield _rabbits_case(row, _RABBITS_BRAND, pair, "brand", kept)


NONE_OF_THE_ABOVE = "None of the above"


def with_missing_answers(cases: Iterator[Case] | list[Case], fraction: float = 0.2, seed: int = 0) -> Iterator[Case]:
    """MetaMedQA-style missing-answer items from ordinary multiple choice.

    Every item gets a last option 'None of the above'. In a seeded `fraction` of items the correct option
    is removed (the rest re-lettered), so 'None of the above' becomes the answer; metadata["missing_answer"]
    marks them, and missing-answer recall is `scoring.exact.recall_on` over them.

    Only this one of MetaMedQA's augmentations can be made from the shared data. Its unknown-answer items
    (questions about a fictional organ, malformed items missing essential information) need the released
    MetaMedQA set (maximegmd/MetaMedQA), which is not in the shared data, so unknown-answer recall cannot
    be measured here.
    """
    if not 0.0 <= fraction <= 1.0:
        raise UsageError(f"fraction {fraction} is not between 0 and 1.", "Give the share of items to strip of their answer, e.g. 0.2.")
    for case in cases:
        gold = case.reference.answer
        missing = gold in case.options and random.Random(f"{seed}:{case.id}").random() < fraction
        kept = [text for letter, text in case.options.items() if not (missing and letter == gold)]
        if len(kept) + 1 > len(LETTERS):
            raise UsageError(f"Case {case.id} has too many options to add 'None of the above'.", "Use items with at most nine options.")
        options = {LETTERS[i]: text for i, text in enumerate([*kept, NONE_OF_THE_ABOVE])}
        old_to_new = {letter: LETTERS[i] for i, letter in enumerate(k for k in case.options if not (missing and k == gold))}
        answer = LETTERS[len(kept)] if missing else old_to_new.get(gold or "")
        yield case.model_copy(update={
            "id": f"{case.id}-meta",
            "options": options,
            "reference": case.reference.model_copy(update={"answer": answer, "answer_text": options.get(answer or "")}),
            "metadata": {**case.metadata, "missing_answer": missing, "original_answer": gold},
        })


def load_medqa_missing_answer() -> Iterator[Case]:
    """MedQA (4 options) with MetaMedQA-style missing-answer items: 20% of items, seed 0."""
    return with_missing_answers(load_medqa_file(_file("medqa", "medqa_us_4opt_test.jsonl")))
