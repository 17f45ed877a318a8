"""Loaders: a case file (YAML/JSON) or a named dataset in MEDPANEL_DATA_DIR -> Cases."""

from __future__ import annotations

import gzip
import importlib
import json
import os
from pathlib import Path
from typing import Callable, Iterator

import yaml
from pydantic import ValidationError

from medpanel.cases.files import MAX_RECORD_BYTES, check_structure, decode_text, read_text, resolve_slide_image
from medpanel.cases.model import Case, Reference
from medpanel.errors import UsageError


def data_dir() -> Path:
    """Where the shared public datasets live: $MEDPANEL_DATA_DIR, else ../shared/data from the project root."""
    env = os.environ.get("MEDPANEL_DATA_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in [Path.cwd(), *here.parents]:
        candidate = parent.parent / "shared" / "data"
        if candidate.is_dir():
            return candidate
    return Path("../shared/data")


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: many times faster


def _read_structured(path: Path) -> object:
    text = read_text(path, "Case file")
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.load(text, Loader=_YAML_LOADER)  # noqa: S506 - a safe loader
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}.", "Fix the syntax and try again.") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise UsageError(f"{path} is not valid YAML: {getattr(exc, 'problem', None) or exc}{where}.", "Fix the syntax and try again.") from None
    except RecursionError:
        raise UsageError(f"{path} is nested too deeply to read.", "A case is a flat mapping of fields; check the file.") from None
    check_structure(data, str(path))
    return data


def _resolve_slides(data: dict, base: Path, where: str) -> None:
    """Slide images -> checked absolute paths inside the case's folder (see cases/files.py)."""
    slides = data.get("slides")
    if slides is None:
        return
    if not isinstance(slides, list):
        raise UsageError(f"{where}: 'slides' must be a list of {{image, caption}} entries, not {type(slides).__name__}.", "See examples/ for the case format.")
    for i, slide in enumerate(slides, 1):
        if not isinstance(slide, dict):
            raise UsageError(f"{where}: slide {i} must be a mapping with image and caption, not {type(slide).__name__}.", "See examples/ for the case format.")
        if slide.get("image") is not None:
            slide["image"] = resolve_slide_image(slide["image"], base, f"{where}, slide {i}")


def _invalid(exc: ValidationError, limit: int = 5) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:limit])


def load_case(path: str | Path) -> Case:
    """Read one case from a YAML or JSON file (or a folder holding case.yaml). Slide image paths are relative to the file."""
    file = Path(path)
    if file.is_dir():
        candidates = [file / n for n in CASE_FILES if (file / n).exists()]
        if not candidates:
            raise UsageError(f"Folder {file} has no case.yaml or case.json.", "Point at a case file, or add case.yaml to the folder.")
        file = candidates[0]
    if not file.exists():
        raise UsageError(f"Case file {file} does not exist.", "Check the path (examples live in examples/).")
    data = _read_structured(file)
    if not isinstance(data, dict):
        raise UsageError(f"Case file {file} must hold a mapping of fields.", "See examples/ for the case format.")
    data.setdefault("id", file.parent.name if file.stem == "case" else file.stem)
    data.setdefault("source", str(file))
    _resolve_slides(data, file.parent, f"Case {file}")
    try:
        return Case.model_validate(data)
    except ValidationError as exc:
        raise UsageError(f"Case file {file} is invalid: {_invalid(exc)}.", "See examples/ for the case format.") from None


def _jsonl(path: Path) -> Iterator[dict]:
    """The records of a JSONL file (see `jsonl_records`)."""
    for _, record in jsonl_records(path):
        yield record


def jsonl_records(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, record) of a JSONL file, plain or gzipped (told by its magic bytes): each line one JSON
    object (UTF-8, bounded in size); a bad line, or a broken gzip stream, is named."""
    try:
        with path.open("rb") as probe:
            packed = probe.read(2) == b"\x1f\x8b"
        fh = gzip.open(path, "rb") if packed else path.open("rb")
    except OSError as exc:
        raise UsageError(f"Cannot read {path}: {exc.strerror or exc}.", "Check the path and that the file is readable.") from None
    with fh:
        lines = iter(lambda: fh.readline(MAX_RECORD_BYTES + 1), b"")
        line_no = 0
        while True:
            try:
                raw = next(lines)
            except StopIteration:
                return
            except (OSError, EOFError) as exc:  # only a gzip stream breaks mid-read
                raise UsageError(f"{path} is not a readable gzipped JSONL file: {exc}.", "Check the file is a complete download.") from None
            line_no += 1
            if len(raw) > MAX_RECORD_BYTES:
                raise UsageError(f"{path}:{line_no} is a record over {MAX_RECORD_BYTES // 2**20} MB.", "Split or trim that record.")
            line = decode_text(raw, f"{path}:{line_no}")
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{path}:{line_no} is not valid JSON: {exc.msg}.", "Fix or remove that line.") from None
            except RecursionError:
                raise UsageError(f"{path}:{line_no} is nested too deeply to read.", "Fix or remove that line.") from None
            if not isinstance(record, dict):
                raise UsageError(f"{path}:{line_no} is a JSON {type(record).__name__}, not an object.", "Each line must be one JSON object ({...}).")
            check_structure(record, f"{path}:{line_no}")
            yield line_no, record


def load_medagents_file(path: Path, prefix: str, metadata: Callable[[dict], dict] = lambda row: {}) -> Iterator[Case]:
    """One multiple-choice file in medagents-benchmark's shape (MedQA, MMLU medical, MedMCQA):
    question, options {A..E}, answer_idx, answer, realidx. Case ids are PREFIX-REALIDX."""
    for i, row in enumerate(_jsonl(path)):
        if not isinstance(row.get("question"), str) or not isinstance(row.get("options"), dict):
            raise UsageError(f"{path}: record {i + 1} has no question text or options mapping.", "Use the dataset's JSONL as released.")
        options, answer = row["options"], row.get("answer_idx")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in options.items()):
            raise UsageError(f"{path}: record {i + 1} has options that are not letter -> text.", "Use the dataset's JSONL as released.")
        if answer is not None and (not isinstance(answer, str) or answer not in options):
            raise UsageError(f"{path}: record {i + 1} has answer_idx {answer!r}, not one of its option letters {sorted(options)}.",
                             "Use the dataset's JSONL as released (answer_idx is a letter such as \"C\").")
        yield Case(
            id=f"{prefix}-{row.get('realidx', i)}",
            source=path.name,
            question=row["question"],
            options=row["options"],
            reference=Reference(answer=row.get("answer_idx"), answer_text=row.get("answer")),
            metadata=metadata(row),
        )


def load_medqa_file(path: Path) -> Iterator[Case]:
    """MedQA as released by medagents-benchmark."""
    return load_medagents_file(path, "medqa", lambda row: {"meta_info": row.get("meta_info", "")})


def _case_records(path: Path) -> Iterator[Case]:
    """A JSONL file of Case records, one per line; a bad record names its line."""
    for line_no, row in enumerate(_jsonl(path), 1):
        _resolve_slides(row, path.parent, f"{path}: record {line_no}")
        try:
            yield Case.model_validate(row)
        except ValidationError as exc:
            raise UsageError(f"{path}: record {line_no} is not a valid case ({_invalid(exc, 3)}).", "See examples/ for the case fields.") from None


CASE_FILES = ("case.yaml", "case.yml", "case.json")


def _case_file_dataset(path: Path) -> Iterator[Case]:
    if path.is_dir():
        for child in sorted(path.iterdir()):
            if child.suffix in (".yaml", ".yml", ".json") or any((child / name).exists() for name in CASE_FILES):
                yield load_case(child)
    else:
        yield load_case(path)


def _medqa(file: str) -> Callable[[], Iterator[Case]]:
    def load() -> Iterator[Case]:
        path = data_dir() / "medqa" / file
        if not path.exists():
            raise UsageError(f"MedQA file {path} not found.", "Set MEDPANEL_DATA_DIR to the folder holding the shared datasets.")
        return load_medqa_file(path)

    return load


# Named datasets: a loader function, or "module:function" imported only when the dataset is used.
# A loader takes no arguments and yields Cases; it raises UsageError when its files are missing.
DATASETS: dict[str, Callable[[], Iterator[Case]] | str] = {
    "medqa": _medqa("medqa_us_4opt_test.jsonl"),
    "medqa5": _medqa("medqa_us_5opt_test.jsonl"),
    "medqa-hard": _medqa("medqa_us_4opt_test_hard100.jsonl"),
    # multiple-choice benchmarks of MCC
    "pubmedqa": "medpanel.cases.mcq_datasets:load_pubmedqa",
    "mmlu-medical": "medpanel.cases.mcq_datasets:load_mmlu_medical",
    "medmcqa": "medpanel.cases.mcq_datasets:load_medmcqa",
    "medxpertqa": "medpanel.cases.mcq_datasets:load_medxpertqa",
    "rabbits": "medpanel.cases.mcq_datasets:load_rabbits_pairs",
    "medqa-missing-answer": "medpanel.cases.mcq_datasets:load_medqa_missing_answer",
    # OSCE scenarios
    "agentclinic": "medpanel.cases.osce:load_agentclinic_medqa",
    "agentclinic-extended": "medpanel.cases.osce:load_agentclinic_extended",
    # clinical notes with ICD-10 codes / chief complaints (MedSyn-style consults)
    "codiesp": "medpanel.cases.notes:load_codiesp_dev",
    "codiesp-test": "medpanel.cases.notes:load_codiesp_test",
    "aci-bench": "medpanel.cases.notes:load_aci_bench",
}


def _loader(name: str) -> Callable[[], Iterator[Case]]:
    entry = DATASETS[name]
    if isinstance(entry, str):
        module, _, func = entry.partition(":")
        return getattr(importlib.import_module(module), func)
    return entry


def dataset_names() -> list[str]:
    return list(DATASETS)


def _pick_one(dataset: str, pick: str) -> Case:
    for index, case in enumerate(_loader(dataset)()):
        if case.id == pick or (pick.isdigit() and index == int(pick)):
            return case
    raise UsageError(f"Dataset '{dataset}' has no item '{pick}'.", f"Give a 0-based index or a case id, e.g. {dataset}:0.")


def _looks_like_otb(path: Path) -> bool:
    """An uncompressed OpenTumorBoard file: its first record has their id fields or the ShareGPT form."""
    first = next(_jsonl(path), {})
    return any(key in first for key in ("simulation_id", "qa_id")) or first.get("format") == "sharegpt"


def _refuse_healthbench(path: Path) -> None:
    """A HealthBench file (plain or gzipped) named without the prefix, told by its first record's fields, is
    pointed to the right command instead of failing in another loader."""
    first = next(_jsonl(path), {})
    if not isinstance(first, dict):
        return
    if {"prompt", "rubrics"} <= set(first):
        raise UsageError(f"{path} looks like a HealthBench benchmark file (its records have prompt and rubrics).",
                         f"Name it as healthbench:{path}.")
    if {"prompt", "binary_labels"} <= set(first):
        raise UsageError(f"{path} looks like HealthBench's meta-evaluation file (its records have binary_labels), not a dataset to run.",
                         f"Grade a grader with it: medpanel score healthbench-meta {path} --judge SPEC.")


def load_dataset(name: str, limit: int | None = None) -> list[Case]:
    """A named dataset, a case file or folder of case files, or a JSONL file of Case records."""
    base, _, pick = name.partition(":")
    if base == "healthbench":  # healthbench:FILE names the user's download (the data is not shipped)
        from medpanel.cases.healthbench import load_healthbench

        return _collected(name, load_healthbench(pick), limit)
    if pick and base in DATASETS:  # one item of a named dataset: NAME:INDEX or NAME:CASE_ID
        return [_pick_one(base, pick)]
    if name in DATASETS:
        cases: Iterator[Case] = _loader(name)()
    else:
        path = Path(name)
        if not path.exists():
            raise UsageError(f"Unknown dataset '{name}'.", f"Use a name ({', '.join(DATASETS)}), healthbench:FILE, a case file or folder, "
                             "or a JSONL file of cases.")
        if path.is_file() and path.name.endswith((".jsonl", ".jsonl.gz")):
            _refuse_healthbench(path)
        if path.name.endswith(".jsonl.gz") or (path.suffix == ".jsonl" and _looks_like_otb(path)):  # OpenTumorBoard's records
            from medpanel.cases.opentumorboard import load_otb_records

            cases = load_otb_records(path)
        elif path.suffix == ".jsonl":
            cases = _case_records(path)
        else:
            cases = _case_file_dataset(path)
    return _collected(name, cases, limit)


def _collected(name: str, cases: Iterator[Case], limit: int | None) -> list[Case]:
    """The first `limit` cases, refusing an empty dataset and duplicate ids."""
    out: list[Case] = []
    for case in cases:
        if limit is not None and len(out) >= limit:
            break
        out.append(case)
    if not out and limit != 0:
        raise UsageError(f"Dataset '{name}' has no cases.", "Point at a file or folder that holds at least one case.")
    ids = [c.id for c in out]
    if len(set(ids)) != len(ids):
        raise UsageError(f"Dataset '{name}' has duplicate case ids.", "Give every case a unique id.")
    return out
