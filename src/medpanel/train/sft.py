"""Supervised finetuning on Board Simulation examples (`medpanel train data`), with TRL's SFTTrainer:
full or LoRA (peft), a fixed seed, checkpoints every `save_steps`, and resume from the last one.

The run writes OUT/training.json: the settings, the data files' hashes, the seed, the metrics of every
logged step (loss, validation loss at each checkpoint), and the final model folder; the store records
the run and each step as it is logged (train/records.py), so a crash keeps the curve so far.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from medpanel.errors import MissingExtraError, UsageError


@dataclass
class SftSettings:
    data: str  # a folder from `medpanel train data` (train.jsonl, validation.jsonl)
    out: str
    start: str | None = None  # a Hugging Face folder or a .gguf file; None: the bundled SmolLM2
    steps: int = 100  # optimizer steps (max_steps); 0: `epochs` passes over the data
    epochs: float = 1.0
    learning_rate: float = 1e-5
    batch_size: int = 1
    gradient_accumulation: int = 1
    max_length: int = 2048  # tokens of prompt + completion; longer examples are truncated
    seed: int = 0
    lora: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    save_steps: int = 50
    resume: bool = False


def sha256_of(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def _datasets(folder: Path):
    try:
        from datasets import load_dataset
    except ImportError:
        raise MissingExtraError("training", "train", "datasets") from None
    train = folder / "train.jsonl"
    if not train.is_file():
        raise UsageError(f"No train.jsonl in {folder}.", "Build it with `medpanel train data CASES --out FOLDER`.")
    files = {"train": str(train)}
    if (folder / "validation.jsonl").is_file() and (folder / "validation.jsonl").stat().st_size:
        files["validation"] = str(folder / "validation.jsonl")
    try:
        loaded = load_dataset("json", data_files=files)
    except Exception as exc:  # datasets raises its own error types for a file that is not JSON lines
        raise UsageError(f"Cannot read the training data in {folder}: {exc}", "Rebuild it with `medpanel train data`.") from None
    keep = {"prompt", "completion"}
    return {name: split.remove_columns([c for c in split.column_names if c not in keep]) for name, split in loaded.items()}


def run_sft(settings: SftSettings, store=None) -> dict:
    """Train, save the final model to OUT/final, and return (and write) the run's record; with a `store`,
    the run and its steps are recorded there too."""
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from trl import SFTConfig, SFTTrainer
    except ImportError:
        raise MissingExtraError("supervised finetuning", "train", "trl") from None
    from transformers.trainer_utils import get_last_checkpoint

    from medpanel.train.weights import lora_config, start_folder

    out, data = Path(settings.out).resolve(), Path(settings.data)
    splits = _datasets(data)
    start = start_folder(settings.start, out.parent / ".start-weights")
    resume = settings.resume and get_last_checkpoint(str(out)) is not None if out.is_dir() else False
    data_hashes = {"train_sha256": sha256_of(data / "train.jsonl"), "validation_sha256": sha256_of(data / "validation.jsonl")}
    done_before = check_resume(out, asdict(settings), start, data_hashes, ("lora", "lora_r", "max_length")) if resume else 0
    write_run_settings(out, asdict(settings), start, data_hashes)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(start))
        model = AutoModelForCausalLM.from_pretrained(str(start))
    except (OSError, ValueError) as exc:
        raise UsageError(f"Cannot load the starting model from {start}: {exc}", "Give a complete Hugging Face folder (config, weights, tokenizer).") from None
    peft_config = lora_config(settings.lora_r, settings.lora_alpha, "LoRA finetuning") if settings.lora else None
    # An example whose prompt alone fills max_length leaves nothing to learn (TRL drops it, and a split left
    # empty fails deep inside the trainer): say so here instead.
    def tokens(messages, generation_prompt: bool) -> int:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True)
        return len(ids["input_ids"] if hasattr(ids, "keys") else ids)

    def fits(row) -> bool:
        return tokens(row["prompt"], True) < settings.max_length - 16

    # Prompt + target over max_length: TRL keeps the start, so the meeting's end (its conclusion) is cut.
    # Counted, not hidden: training.json says how many were.
    truncated = {name: sum(1 for row in split if tokens(row["prompt"] + row["completion"], False) > settings.max_length)
                 for name, split in splits.items()}
    before = len(splits["train"])
    splits = {name: split.filter(fits) for name, split in splits.items()}
    if len(splits["train"]) == 0:
        raise UsageError(f"Every one of the {before} training prompts is longer than --max-length {settings.max_length} tokens.",
                         "Raise --max-length (the prompt and its target must fit).")
    if "validation" in splits and len(splits["validation"]) == 0:
        del splits["validation"]
    has_validation = "validation" in splits
    config = SFTConfig(
        output_dir=str(out), max_steps=settings.steps if settings.steps > 0 else -1, num_train_epochs=settings.epochs,
        learning_rate=settings.learning_rate, per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.gradient_accumulation, max_length=settings.max_length, seed=settings.seed,
        data_seed=settings.seed, logging_steps=1, save_steps=settings.save_steps, save_strategy="steps",
        eval_strategy="steps" if has_validation else "no", eval_steps=settings.save_steps if has_validation else None,
        per_device_eval_batch_size=1, report_to=[], use_cpu=not _has_gpu(), dataloader_num_workers=0, disable_tqdm=True,
        gradient_checkpointing=_has_gpu())  # on CPU memory is plenty and recomputing costs a third
    from medpanel.train import records

    run_id = records.run_id_for(out, "sft")
    trainer = SFTTrainer(model=model, args=config, train_dataset=splits["train"], eval_dataset=splits.get("validation"),
                         processing_class=tokenizer, peft_config=peft_config,
                         callbacks=[records.store_callback(store, run_id)] if store is not None else None)
    if store is not None:
        records.start_run(store, run_id, kind="sft", out=out, settings=asdict(settings), data=data_hashes, seed=settings.seed)
    with records.marked(store, run_id):
        result = trainer.train(resume_from_checkpoint=True if resume else None)
        final = out / "final"
        trainer.save_model(str(final))
        tokenizer.save_pretrained(str(final))
        steps = [dict(h) for h in trainer.state.log_history]
        losses = [h["loss"] for h in steps if "loss" in h]
        record = {"kind": "sft", "run_id": run_id, "settings": asdict(settings), "start": str(start), "data": data_hashes,
                  "seed": settings.seed, "resumed": resume, "examples": {k: len(v) for k, v in splits.items()},
                  "examples_too_long": before - len(splits["train"]), "examples_truncated": truncated,
                  "steps_this_run": trainer.state.global_step - done_before, "global_step": trainer.state.global_step,
                  "train_loss": result.training_loss, "steps": steps, "final": str(final),
                  "finite": all(math.isfinite(x) for x in losses) and bool(losses)}
        (out / "training.json").write_text(json.dumps(record, indent=1, default=str))
    if store is not None:
        records.finish_run(store, run_id, "done", record)
    return record


RUN_SETTINGS = "run_settings.json"  # what a run started with, written before its first step (a crash keeps it)


def write_run_settings(out: Path, settings: dict, start: Path, data: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / RUN_SETTINGS).write_text(json.dumps({"settings": settings, "start": str(start), "data": data}, indent=1, default=str))


def check_resume(out: Path, settings: dict, start: Path, data: dict, fixed: tuple[str, ...]) -> int:
    """The step the last checkpoint in `out` reached; refuses to go on with another start, data, or any of the
    `fixed` settings than the run was started with (as written in RUN_SETTINGS when it began)."""
    from transformers.trainer_utils import get_last_checkpoint

    last = Path(get_last_checkpoint(str(out)))
    try:
        step = int(json.loads((last / "trainer_state.json").read_text())["global_step"])
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"Cannot read the state of checkpoint {last}: {exc}.", "Remove that checkpoint, or train into another --out.") from None
    try:
        earlier = json.loads((out / RUN_SETTINGS).read_text())
    except (OSError, ValueError):
        raise UsageError(f"{out} holds checkpoints but no readable {RUN_SETTINGS}, so a resume cannot be checked.",
                         "Train into another --out (or restore that file).") from None
    before = earlier.get("settings", {})
    changed = [name for name in fixed if name in before and before[name] != settings.get(name)]
    if earlier.get("start") != str(start):
        changed.append("start")
    changed += [f"data ({name})" for name, digest in (earlier.get("data") or {}).items() if digest != data.get(name)]
    if changed:
        raise UsageError(f"--resume with other {', '.join(changed)} than the run in {out} was made with.",
                         "Resume with the same settings and data, or train into another --out.")
    return step


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()
