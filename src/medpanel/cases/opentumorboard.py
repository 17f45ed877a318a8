"""OpenTumorBoard's released files, read as they are, and predictions written the way its scripts read them.

Read (`load_otb_records`, gzipped or plain JSONL; the kind is told from each record's fields):

* Board Simulation records (task1_*.jsonl.gz: `simulation_id`, `case_summary`, `slides`,
  `reference_conclusion`) -> Case(summary, slides, reference.conclusion).
* Specialist Turn records (task2_*.jsonl.gz: `qa_id`, `qa_type`, `target_specialist_role`,
  `question`, `reference_answer`) -> Case(question, target_role, reference.answer).
* ShareGPT test-input manifests (test_inputs/*.jsonl.gz: `format: "sharegpt"`, `id`, `metadata`,
  `conversations`, optional `images`) -> the same Cases from `metadata`, without references; the
  exact system and user texts are kept in metadata (`sharegpt_system`, `sharegpt_user`).

`slides` is one string: each slide is the marker `<image>` and its one-line caption. Slides become
`Slide(caption=...)` with no image (the release carries no images); the string itself is kept in
`metadata["slides_text"]` so the benchmark's user text can be rebuilt byte for byte. Image
manifests list image paths; they are kept in `metadata["image_paths"]` and attached to the slides
only when every file exists (as given, or under one of the manifest's three nearest parent folders)
and their number equals the number of slides.

Write (`write_otb_predictions`): one JSON line per answered item, in the layout of the benchmark's
generation scripts' `responses.jsonl`, which its judge-batch builder and text-metrics script read:
the item id (`simulation_id` or `qa_id`), `raw_response`, `parsed_output`, `parse_status`,
`parse_warnings` and run fields. Board Simulation `parsed_output` is
{"discussion": [{"role", "response"}], "conclusion", ...} from the evaluation reader, or null
(their scripts then re-read `raw_response`). Specialist Turn `parsed_output` is {"answer": ...}
when the reply is that JSON object, else null with status raw_fallback (their scripts then take
the raw text as the answer). Items whose model call failed are not written there: they go to
`errors.jsonl` beside it, as the benchmark's own runner does, so a failure is never scored as an
answer (their judge builder refuses a run with missing items until they are filled).
"""

from __future__ import annotations

import ast
import gzip
import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from medpanel.cases.files import resolve_slide_image
from medpanel.cases.loaders import jsonl_records
from medpanel.cases.model import Case, Reference, Slide
from medpanel.errors import UsageError
from medpanel.reply_text import strip_reply
from medpanel.scoring.board_format import parse_board_response

OtbTask = Literal["board_simulation", "specialist_turn"]
ID_FIELD = {"board_simulation": "simulation_id", "specialist_turn": "qa_id"}
TASK_NAME = {"board_simulation": "tumor_board_simulation", "specialist_turn": "specialist_turn"}
_REQUIRED = {"board_simulation": ("simulation_id", "case_summary"),
             "specialist_turn": ("qa_id", "case_summary", "question", "target_specialist_role")}
# Record fields that become Case fields; everything else goes to metadata as it is.
_MAPPED = {"case_summary", "slides", "question", "target_specialist_role", "reference_conclusion", "reference_answer"}
_SLIDE_MARKER = "<image>"


def parse_slides(value: str | None) -> list[Slide]:
    """The `slides` string -> one Slide per `<image>` marker, its caption the text up to the next marker.
    A string with no marker at all is read as one caption per non-empty line."""
    text = (value or "").strip()
    if not text:
        return []
    if _SLIDE_MARKER not in text:
        return [Slide(caption=line.strip()) for line in text.splitlines() if line.strip()]
    parts = text.split(_SLIDE_MARKER)
    lead = parts[0].strip()
    slides = [Slide(caption=" ".join(part.split())) for part in parts[1:]]
    if lead:  # text before the first marker: keep it rather than lose it
        slides.insert(0, Slide(caption=" ".join(lead.split())))
    return slides


def _metadata_of(row: dict, where: str) -> dict:
    meta = row.get("metadata")
    if isinstance(meta, str):  # some manifests carry it as a serialised mapping
        for reader in (json.loads, ast.literal_eval):
            try:
                meta = reader(meta)
                break
            except (ValueError, SyntaxError):
                continue
    if not isinstance(meta, dict):
        raise UsageError(f"{where}: a ShareGPT manifest record needs a 'metadata' object.", "Use the benchmark's test_inputs files as released.")
    return meta


def _task_of(record: dict, where: str) -> OtbTask:
    if "simulation_id" in record or record.get("task_name") == "tumor_board_simulation":
        return "board_simulation"
    if "qa_id" in record:
        return "specialist_turn"
    raise UsageError(f"{where}: not an OpenTumorBoard record (no simulation_id or qa_id).",
                     "Pass a task1_*/task2_* file or a test_inputs manifest as released.")


def _attach_images(slides: list[Slide], images: list[str], manifest: Path) -> None:
    if not images or len(images) != len(slides):
        return
    roots = [Path.cwd(), *list(manifest.resolve().parents)[:3]]
    found: list[str] = []
    for image in images:
        if not isinstance(image, str):
            raise UsageError(f"{manifest}: image path {image!r} is not text.", "List image paths as strings in the manifest's images.")
        candidates = [Path(image)] if Path(image).is_absolute() else [root / image for root in roots]
        hit = next((c for c in candidates if c.is_file()), None)
        if hit is None:
            return  # all or nothing: a half-illustrated case would mislead a vision model
        # The same checks as a case file's slides: inside the folders the manifest may use, and an image.
        found.append(resolve_slide_image(str(hit.resolve()), hit.resolve().parent, f"{manifest}", allowed=roots))
    for slide, image in zip(slides, found):
        slide.image = image


def _case(record: dict, task: OtbTask, path: Path, where: str, manifest_row: dict | None) -> Case:
    missing = [name for name in _REQUIRED[task] if not isinstance(record.get(name), str) or not record[name].strip()]
    if task == "board_simulation" and manifest_row is None and not record.get("reference_conclusion"):
        missing.append("reference_conclusion")
    if task == "specialist_turn" and manifest_row is None and not record.get("reference_answer"):
        missing.append("reference_answer")
    if missing:
        raise UsageError(f"{where}: {task} record lacks {', '.join(missing)}.", "Use the benchmark's files as released.")
    metadata: dict[str, Any] = {k: v for k, v in record.items() if k not in _MAPPED}
    metadata |= {"otb_task": task, "slides_text": record.get("slides") or "",
                 "input": "sharegpt_manifest" if manifest_row is not None else "record"}
    # The judges' `released` mode rebuilds the benchmark's judge text from the fields as released, unstripped.
    raw = {name: record[name] for name in ("case_summary", "question", "target_specialist_role")
           if isinstance(record.get(name), str) and record[name] != record[name].strip()}
    if raw:
        metadata["raw_fields"] = raw
    slides = parse_slides(record.get("slides"))
    if manifest_row is not None:
        turns = {turn.get("from"): turn.get("value") for turn in manifest_row.get("conversations") or [] if isinstance(turn, dict)}
        metadata |= {"prompt_version": manifest_row.get("prompt_version"), "sharegpt_system": turns.get("system"),
                     "sharegpt_user": turns.get("human")}
        if isinstance(turns.get("gpt"), str):  # a training row's target (discussion and conclusion), for `medpanel train`
            metadata["sharegpt_assistant"] = turns["gpt"]
        if "images" in manifest_row:
            metadata["image_paths"] = list(manifest_row.get("images") or [])
            _attach_images(slides, metadata["image_paths"], path)
    return Case(
        id=str(record[ID_FIELD[task]]),
        source=path.name,
        summary=record["case_summary"].strip(),
        slides=slides,
        question=(record.get("question") or "").strip(),
        target_role=(record.get("target_specialist_role") or "").strip(),
        # A Specialist Turn reference is free text: `answer`, the field the clinical-equivalence judge reads.
        reference=Reference(conclusion=record.get("reference_conclusion"), answer=record.get("reference_answer")),
        metadata=metadata,
    )


def load_otb_records(path: str | Path) -> Iterator[Case]:
    """Cases from one released OpenTumorBoard file (records or a ShareGPT manifest, gzipped or not).
    A file must hold one task and one layout; mixing them is refused."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"OpenTumorBoard file {file} does not exist.", "Point at a task1_*/task2_* .jsonl.gz file or a test_inputs manifest.")
    seen: tuple[OtbTask, bool] | None = None
    for line_no, row in jsonl_records(file):
        where = f"{file}:{line_no}"
        is_manifest = isinstance(row.get("conversations"), list) or row.get("format") == "sharegpt"
        record = _metadata_of(row, where) if is_manifest else row
        task = _task_of(record, where)
        if is_manifest and str(row.get("id")) != str(record.get(ID_FIELD[task])):
            raise UsageError(f"{where}: manifest id {row.get('id')!r} differs from metadata.{ID_FIELD[task]}.",
                             "Use the manifest as released.")
        if seen is not None and seen != (task, is_manifest):
            raise UsageError(f"{where}: the file mixes kinds of records ({seen[0]} and {task}, or records and manifest lines).",
                             "Load each released file on its own.")
        seen = (task, is_manifest)
        yield _case(record, task, file, where, row if is_manifest else None)


# ---------------------------------------------------------------- predictions


class PredictionsWritten(BaseModel):
    path: str
    written: int
    failed: int
    errors_path: str | None = None


def _task_of_case(case: Case, task: OtbTask | None) -> OtbTask:
    found = task or case.metadata.get("otb_task")
    if found not in ID_FIELD:
        raise UsageError(f"Case '{case.id}' is not an OpenTumorBoard item (no otb_task in its metadata).",
                         "Load it with load_otb_records, or pass task='board_simulation' or 'specialist_turn'.")
    return found


def _specialist_parse(raw: str) -> tuple[dict | None, str, str | None]:
    stripped = strip_reply(raw)
    if stripped.unclosed_reasoning:  # cut off while thinking: no answer, never the reasoning read as one
        return None, "raw_fallback", "reasoning never closed: no answer"
    text = stripped.text
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, "raw_fallback", f"not a JSON object: {exc.msg}"
    if isinstance(value, dict) and isinstance(value.get("answer"), str) and value["answer"].strip():
        return {"answer": value["answer"]}, ("parsed" if text == raw.strip() else "parsed_after_cleanup"), None
    return None, "raw_fallback", "JSON without a non-empty string 'answer'"


def _board_parse(raw: str) -> tuple[dict | None, str, list[str]]:
    parsed = parse_board_response(raw, reader="released")  # the benchmark's own reading, as its responses.jsonl expects
    if parsed.conclusion is None:
        return None, parsed.status, parsed.warnings
    output = {
        "discussion": [{"role": t.role, "response": t.text} for t in parsed.turns],
        "conclusion": parsed.conclusion,
        "discussion_row_count": len(parsed.turns),
        "unique_role_count": parsed.role_count,
        "conclusion_sentence_count": parsed.conclusion_sentences,
    }
    return output, parsed.status, parsed.warnings


def _line(case: Case, task: OtbTask, raw: str, model: str, prompt_version: str, finish_reason: str | None) -> dict:
    meta = case.metadata
    row: dict[str, Any] = {
        "schema_version": 1,
        "task_name": TASK_NAME[task],
        "benchmark_version": meta.get("benchmark_version"),
        ID_FIELD[task]: case.id,
        "video_uid": meta.get("video_uid"),
        "case_id": meta.get("case_id"),
        "provider": "medpanel",
        "requested_model": model,
        "resolved_model": model,
        "model_revision": "unspecified",
        "prompt_version": prompt_version,
        "parameter_profile": "default",
        "response_mode": "instruction_following",
        "finish_reason": finish_reason,
        "raw_response": raw,
        "raw_reasoning_content": None,
        "extracted_final_response": None,
        "final_response_extraction": "not_requested",
    }
    if task == "board_simulation":
        parsed, status, warnings = _board_parse(raw)
        row |= {"parsed_output": parsed, "parse_status": status, "parse_warnings": warnings}
    else:
        parsed, status, error = _specialist_parse(raw)
        row |= {"qa_type": meta.get("qa_type"), "target_specialist_role": case.target_role, "output_schema": "answer_json",
                "parsed_output": parsed, "parse_status": status, "parse_error": error}
    return row


def write_otb_predictions(
    path: str | Path,
    cases: Iterable[Case],
    responses: Mapping[str, str | None],
    *,
    model: str,
    prompt_version: str = "medpanel",
    task: OtbTask | None = None,
    finish_reasons: Mapping[str, str | None] | None = None,
    errors: Mapping[str, str] | None = None,
) -> PredictionsWritten:
    """Write `responses` (case id -> raw model text; None when the call failed) for `cases`.

    Answered items go to `path` (gzipped when it ends in .gz); failed or missing ones to
    errors.jsonl in the same folder with the reason from `errors` (see the module docstring).
    """
    out = Path(path)
    if out.is_dir():
        raise UsageError(f"{out} is a folder.", "Give a file name, e.g. runs/my_model/responses.jsonl.")
    out.parent.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    failures: list[str] = []
    for case in cases:
        kind = _task_of_case(case, task)
        raw = responses.get(case.id)
        if raw is None:
            reason = (errors or {}).get(case.id) or "no response"
            failures.append(json.dumps({"kind": "error", "schema_version": 1, ID_FIELD[kind]: case.id, "error": reason}, ensure_ascii=False))
            continue
        row = _line(case, kind, raw, model, prompt_version, (finish_reasons or {}).get(case.id))
        lines.append(json.dumps(row, ensure_ascii=False, separators=(",", ":")))
    opener = gzip.open if out.name.endswith(".gz") else open
    with opener(out, "wt", encoding="utf-8") as handle:
        handle.writelines(line + "\n" for line in lines)
    errors_path = None
    if failures:
        errors_path = out.with_name("errors.jsonl")
        errors_path.write_text("".join(line + "\n" for line in failures), encoding="utf-8")
    return PredictionsWritten(path=str(out), written=len(lines), failed=len(failures),
                              errors_path=str(errors_path) if errors_path else None)


__all__ = ["PredictionsWritten", "load_otb_records", "parse_slides", "write_otb_predictions"]
