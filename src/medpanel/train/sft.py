"""Supervised finetuning on Board Simulation examples (`medpanel train data`), with TRL's SFTTrainer:
full or LoRA (peft), a fixed seed, checkpoints every `save_steps`, and resume from the last one.

The run writes OUT/training.json: the settings, the data files' hashes, the seed, the metrics of every
logged step (loss, validation loss at each checkpoint), and the final model folder.
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


def _sha256(path: Path) -> str | None:
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
    loaded = load_dataset("json", data_files=files)
    keep = {"prompt", "completion"}
    return {name: split.remove_columns([c for c in split.column_names if c not in keep]) for name, split in loaded.items()}


def run_sft(settings: SftSettings) -> dict:
    """Train, save the final model to OUT/final, and return (and write) the run's record."""
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from trl import SFTConfig, SFTTrainer
    except ImportError:
        raise MissingExtraError("supervised finetuning", "train", "trl") from None
    from medpanel.train.weights import start_folder

    out, data = Path(settings.out), Path(settings.data)
    splits = _datasets(data)
    start = start_folder(settings.start, out.parent / ".start-weights")
    tokenizer = AutoTokenizer.from_pretrained(str(start))
    model = AutoModelForCausalLM.from_pretrained(str(start))
    peft_config = None
    if settings.lora:
        try:
            from peft import LoraConfig
        except ImportError:
            raise MissingExtraError("LoRA finetuning", "train", "peft") from None
        peft_config = LoraConfig(r=settings.lora_r, lora_alpha=settings.lora_alpha, task_type="CAUSAL_LM", target_modules="all-linear")
    # An example whose prompt alone fills max_length leaves nothing to learn (TRL drops it, and a split left
    # empty fails deep inside the trainer): say so here instead.
    def fits(row) -> bool:
        ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        return len(ids) < settings.max_length - 16

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
        per_device_eval_batch_size=1, report_to=[], use_cpu=not _has_gpu(), dataloader_num_workers=0, disable_tqdm=True)
    trainer = SFTTrainer(model=model, args=config, train_dataset=splits["train"], eval_dataset=splits.get("validation"),
                         processing_class=tokenizer, peft_config=peft_config)
    resume = settings.resume and any(out.glob("checkpoint-*"))
    result = trainer.train(resume_from_checkpoint=True if resume else None)
    final = out / "final"
    trainer.save_model(str(final))
    tokenizer.save_pretrained(str(final))
    steps = [{k: v for k, v in h.items()} for h in trainer.state.log_history]
    losses = [h["loss"] for h in steps if "loss" in h]
    record = {"kind": "sft", "settings": asdict(settings), "start": str(start),
              "data": {"train_sha256": _sha256(data / "train.jsonl"), "validation_sha256": _sha256(data / "validation.jsonl")},
              "seed": settings.seed, "resumed": resume, "examples": {k: len(v) for k, v in splits.items()}, "examples_too_long": before - len(splits["train"]), "global_step": trainer.state.global_step,
              "train_loss": result.training_loss, "steps": steps, "final": str(final),
              "finite": all(math.isfinite(x) for x in losses) and bool(losses)}
    (out / "training.json").write_text(json.dumps(record, indent=1, default=str))
    return record


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()
