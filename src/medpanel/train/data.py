"""Training data for Board Simulation: each case with a recorded discussion and conclusion becomes one
supervised example, the prompt being the Board Simulation prompt and the target the meeting as the
board held it, in the benchmark's tagged format.

Why this shape: TRL's SFTTrainer reads conversational prompt-completion records
({"prompt": [messages], "completion": [messages]}) and trains on the completion only, which is the
paper's setting (section 3.3: the model learns to write the discussion and conclusion from the case).

- The prompt: OpenTumorBoard's released system and user text where a record carries them (its ShareGPT
  rows, byte for byte), else medpanel's Board Simulation prompt (protocols/board.py) over the case, or a
  system prompt file the user gives.
- The target: a released row's assistant text as it stands, else the case's reference discussion and
  conclusion rendered with `render_board` (what every board scorer reads).
- The split: by recording (a curated case's `metadata.recording`, a released record's `video_uid`, else
  the case itself), so no meeting is in both training and validation (split.assign_recordings).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from medpanel.cases import Case
from medpanel.curate.split import assign_recordings
from medpanel.errors import UsageError
from medpanel.protocols.board import SYSTEM, board_prompt
from medpanel.scoring.board_format import render_board


@dataclass(frozen=True)
class Skipped:
    case_id: str
    why: str


def recording_of(case: Case) -> str:
    meta = case.metadata
    return str(meta.get("recording") or meta.get("video_uid") or case.id)


def target_text(case: Case) -> str | None:
    """The meeting the model should learn to write, or None when the case has none."""
    released = case.metadata.get("sharegpt_assistant")
    if isinstance(released, str) and released.strip():
        return released
    conclusion = (case.reference.conclusion or "").strip()
    turns = [(t.role, " ".join(t.text.split())) for t in case.reference.discussion if t.text.strip()]
    if not turns or not conclusion:
        return None
    return render_board(turns, " ".join(conclusion.split()))


def sft_example(case: Case, system: str | None = None) -> dict | None:
    """One prompt-completion record (with its id and recording), or None when the case has no target."""
    target = target_text(case)
    if target is None:
        return None
    system_text = system if system is not None else (case.metadata.get("sharegpt_system") or SYSTEM)
    return {"id": case.id, "recording": recording_of(case),
            "prompt": [{"role": "system", "content": system_text}, {"role": "user", "content": board_prompt(case)}],
            "completion": [{"role": "assistant", "content": target}]}


def sft_examples(cases: Iterable[Case], system: str | None = None) -> tuple[list[dict], list[Skipped]]:
    examples, skipped = [], []
    for case in cases:
        example = sft_example(case, system)
        if example is None:
            skipped.append(Skipped(case.id, "no reference discussion and conclusion"))
        else:
            examples.append(example)
    return examples, skipped


def split_examples(examples: Sequence[dict], validation: float = 0.1, seed: int = 0,
                   previous: dict[str, str] | None = None) -> tuple[list[dict], list[dict], dict[str, str]]:
    """(train, validation, recording -> split): every example of one recording on one side; the share of
    recordings for validation apportioned as split.apportion does. `previous` keeps earlier placements."""
    if not 0 <= validation < 1:
        raise UsageError(f"--validation {validation} is not a share below 1.", "Give e.g. --validation 0.1.")
    where = assign_recordings([e["recording"] for e in examples], seed, previous, ratios=(1 - validation, validation, 0.0))
    names = {"train": "train", "dev": "validation", "test": "validation"}
    placed = {r: names[s] for r, s in where.items()}
    train = [e for e in examples if placed[e["recording"]] == "train"]
    held = [e for e in examples if placed[e["recording"]] == "validation"]
    return train, held, placed


def case_record(case: Case) -> dict:
    """A case as a JSONL record `load_dataset` reads back, without slide image paths (captions kept). A case
    whose reference conclusion is only inside its target (a released training row) gets it from there: the
    reward's judges compare against it."""
    record = case.model_dump(mode="json")
    record["slides"] = [{"image": None, "caption": s["caption"]} for s in record.get("slides", [])]
    if not (case.reference.conclusion or "").strip():
        found = re.findall(r"<conclusion>\s*(.*?)\s*</conclusion>", target_text(case) or "", re.S)
        if len(found) == 1 and found[0]:
            record["reference"]["conclusion"] = found[0]
    return record


def write_jsonl(path: Path, records: Iterable[dict]) -> str:
    """Write one JSON object per line; returns the file's SHA-256 (recorded with a training run)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    path.write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
