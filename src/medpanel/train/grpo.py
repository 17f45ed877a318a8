"""Dr.GRPO on Board Simulation prompts (OpenTumorBoard section 3.3, appendix E), with TRL's GRPOTrainer.

The paper's settings are the defaults: 16 samples per case, temperature 0.7, a response budget of 8,192
tokens, learning rate 1e-6, no KL term (beta 0) and no entropy bonus. Dr.GRPO means `loss_type="dr_grpo"`
(no per-sequence length normalisation) with advantages that are the reward minus the group's mean, not
divided by the group's standard deviation (`scale_rewards="none"`).

The reward is `train/reward.py`'s BoardReward: the same scorer `bench` runs (released_code preset by
default). With validation prompts, each checkpoint is scored on them (TRL's evaluation: num_generations
samples per prompt, the same reward) and the best checkpoint by validation reward is copied to OUT/best.

A run writes OUT/training.json (settings, data hashes, seed, every logged step) and OUT/rewards.jsonl
(every scored sample), and records itself and each step in the store (train/records.py).
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from medpanel.errors import MissingExtraError, UsageError
from medpanel.train.sft import check_resume, sha256_of, write_run_settings

TRAINER_STATE = ("optimizer.", "scheduler.", "rng_state", "scaler.", "trainer_state.json", "training_args.bin")


@dataclass
class GrpoSettings:
    data: str  # a folder from `medpanel train data` (train.jsonl, validation.jsonl, cases.jsonl)
    out: str
    judge: str  # the judge model spec (any the model layer builds)
    start: str | None = None  # a Hugging Face folder (an SFT output too), a .gguf file; None: the bundled SmolLM2
    preset: str = "released_code"
    steps: int = 100
    group_size: int = 16  # samples per prompt (num_generations)
    prompts_per_step: int = 1
    temperature: float = 0.7
    max_prompt_length: int = 4096  # prompts longer than this are left out (and counted)
    max_completion_length: int = 8192
    learning_rate: float = 1e-6
    lr_scheduler: str = "constant"  # verl's default for the paper's runs (TRL's own default decays it linearly)
    judge_concurrency: int = 8  # judge calls in flight at once (a batch is group x prompts x 4 calls)
    gradient_accumulation: int = 1
    beta: float = 0.0  # KL coefficient: 0, no reference model
    seed: int = 0
    lora: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    save_steps: int = 50
    resume: bool = False


def _load_cases(folder: Path) -> dict:
    from medpanel.cases import load_dataset

    path = folder / "cases.jsonl"
    if not path.is_file():
        raise UsageError(f"No cases.jsonl in {folder}: GRPO's judges read each case's reference.",
                         "Rebuild the folder with `medpanel train data CASES --out FOLDER` (it now writes cases.jsonl).")
    return {case.id: case for case in load_dataset(str(path))}


def _prompts(folder: Path, name: str, cases: dict):
    """The split's prompts as a dataset with the case id each reward needs; None when the split is empty."""
    from datasets import Dataset

    path = folder / f"{name}.jsonl"
    if not path.is_file() or not path.stat().st_size:
        return None
    rows = []
    try:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                rows.append({"prompt": record["prompt"], "case_id": record["id"]})
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"Cannot read {path}: {exc}.", "Rebuild it with `medpanel train data`.") from None
    missing = sorted({r["case_id"] for r in rows} - set(cases))
    if missing:
        raise UsageError(f"{path} has prompts for cases not in cases.jsonl ({', '.join(missing[:3])}).", "Rebuild the folder with `medpanel train data`.")
    unjudgeable = sorted({r["case_id"] for r in rows if not (cases[r["case_id"]].reference.conclusion or "").strip()})
    if unjudgeable:  # every judged sample of theirs would go unscored: no signal, and nothing would say why
        raise UsageError(f"{len(unjudgeable)} case(s) in {path} have no reference conclusion for the reward's judges ({', '.join(unjudgeable[:3])}).",
                         "Give cases with reference.conclusion, or rebuild the folder with `medpanel train data` (it takes it from the target).")
    return Dataset.from_list(rows)


def run_grpo(settings: GrpoSettings, judge: Any, store: Any) -> dict:
    """Train; save OUT/final (and OUT/best with validation prompts); return (and write) the run's record.
    `judge` is a built Model; `store` the Store the run and its steps are recorded in (its cache serves the judge)."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from trl import GRPOConfig, GRPOTrainer
    except ImportError:
        raise MissingExtraError("GRPO training", "train", "trl") from None
    from transformers.trainer_utils import get_last_checkpoint

    from medpanel.errors import BudgetExceeded
    from medpanel.train import records
    from medpanel.train.reward import BoardReward
    from medpanel.train.weights import lora_config, start_folder

    if settings.group_size < 2:
        raise UsageError(f"--group-size {settings.group_size}: a group needs at least 2 samples (advantages are reward minus the group mean).",
                         "Give --group-size 2 or more (the paper: 16).")
    if not settings.temperature > 0:
        raise UsageError(f"--temperature {settings.temperature}: GRPO samples its group, so the temperature must be above 0.",
                         "Give e.g. --temperature 0.7 (the paper's).")
    out, data = Path(settings.out).resolve(), Path(settings.data)
    cases = _load_cases(data)
    train, held = _prompts(data, "train", cases), _prompts(data, "validation", cases)
    if train is None:
        raise UsageError(f"No training prompts in {data}.", "Build them with `medpanel train data CASES --out FOLDER`.")
    start = start_folder(settings.start, out.parent / ".start-weights")
    resume = settings.resume and out.is_dir() and get_last_checkpoint(str(out)) is not None
    data_hashes = {"train_sha256": sha256_of(data / "train.jsonl"), "validation_sha256": sha256_of(data / "validation.jsonl"),
                   "cases_sha256": sha256_of(data / "cases.jsonl")}
    fixed = ("lora", "lora_r", "group_size", "prompts_per_step", "max_completion_length", "preset", "judge")
    done_before = check_resume(out, asdict(settings), start, data_hashes, fixed) if resume else 0
    run_id = records.run_id_for(out, "grpo")
    write_run_settings(out, asdict(settings), start, data_hashes)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(start))
        model = AutoModelForCausalLM.from_pretrained(str(start))
    except (OSError, ValueError) as exc:
        raise UsageError(f"Cannot load the starting model from {start}: {exc}", "Give a complete Hugging Face folder (config, weights, tokenizer).") from None
    if not tokenizer.chat_template:
        raise UsageError(f"The tokenizer in {start} has no chat template, so the Board Simulation prompt cannot be written for it.",
                         "Start from an instruct (chat) model, or one finetuned from it.")
    tokenizer.padding_side = "left"  # generation pads on the left
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    def fits(row) -> bool:
        ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
        return len(ids["input_ids"] if hasattr(ids, "keys") else ids) <= settings.max_prompt_length

    counts = {"train": len(train), "validation": len(held) if held is not None else 0}
    train = train.filter(fits)
    held = held.filter(fits) if held is not None else None
    if len(train) == 0:
        raise UsageError(f"Every one of the {counts['train']} training prompts is longer than --max-prompt-length {settings.max_prompt_length} tokens.",
                         "Raise --max-prompt-length.")
    too_long = {"train": counts["train"] - len(train), "validation": counts["validation"] - (len(held) if held is not None else 0)}
    if held is not None and len(held) == 0:
        held = None
    peft_config = lora_config(settings.lora_r, settings.lora_alpha, "LoRA training") if settings.lora else None
    log_path = out / "rewards.jsonl"
    if resume:
        _drop_rows_from(log_path, done_before)  # the crashed attempt's samples from the steps about to be redone
    elif log_path.exists():
        log_path.unlink()
    reward = BoardReward(cases, judge, preset=settings.preset, run_id=run_id, length_limit=settings.max_completion_length,
                         log_path=log_path, concurrency=settings.judge_concurrency)
    batch = settings.group_size * settings.prompts_per_step
    config = GRPOConfig(
        output_dir=str(out), loss_type="dr_grpo", scale_rewards="none", beta=settings.beta, num_generations=settings.group_size,
        temperature=settings.temperature, max_completion_length=settings.max_completion_length, learning_rate=settings.learning_rate,
        lr_scheduler_type=settings.lr_scheduler, per_device_train_batch_size=batch, gradient_accumulation_steps=settings.gradient_accumulation,
        max_steps=settings.steps, seed=settings.seed, data_seed=settings.seed, logging_steps=1, save_steps=settings.save_steps,
        save_strategy="steps", eval_strategy="steps" if held is not None else "no", eval_steps=settings.save_steps if held is not None else None,
        per_device_eval_batch_size=settings.group_size, metric_for_best_model="eval_reward" if held is not None else None,
        greater_is_better=True if held is not None else None, report_to=[], use_cpu=not torch.cuda.is_available(),
        dataloader_num_workers=0, disable_tqdm=True,
        gradient_checkpointing=torch.cuda.is_available())  # on CPU memory is plenty and recomputing costs a third
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=config, train_dataset=train, eval_dataset=held,
                          processing_class=tokenizer, peft_config=peft_config,
                          callbacks=[records.store_callback(store, run_id), _unscored_validation_callback()])
    reward.phase = lambda: "train" if trainer.model.training else "eval"
    # A completion ended when its last token is one the trainer stops on (eos of the model's generation config too).
    reward.eos_ids = set(getattr(trainer, "eos_token_ids", None) or [tokenizer.eos_token_id]) | {tokenizer.pad_token_id}
    records.start_run(store, run_id, kind="grpo", out=out, settings={**asdict(settings), "judge_model": getattr(judge, "id", str(judge))},
                      data=data_hashes, seed=settings.seed)
    final = out / "final"
    with records.marked(store, run_id):
        try:
            result = trainer.train(resume_from_checkpoint=True if resume else None)
        except BudgetExceeded:  # a cap on the judge's spend: keep the policy as it is, then stop as the cap says
            trainer.save_model(str(final))
            tokenizer.save_pretrained(str(final))
            raise
        trainer.save_model(str(final))
        tokenizer.save_pretrained(str(final))
        best = _copy_best(trainer.state.best_model_checkpoint, out / "best")
        steps = [dict(h) for h in trainer.state.log_history]
        losses = [h["loss"] for h in steps if "loss" in h]
        validation = [{"step": h["step"], "reward": h["eval_reward"]} for h in steps if "eval_reward" in h]
        record = {"kind": "grpo", "run_id": run_id, "settings": asdict(settings), "judge_model": getattr(judge, "id", None),
                  "start": str(start), "data": data_hashes, "seed": settings.seed, "resumed": resume,
                  "prompts": {"train": len(train), "validation": len(held) if held is not None else 0}, "prompts_too_long": too_long,
                  "steps_this_run": trainer.state.global_step - done_before, "global_step": trainer.state.global_step,
                  "train_loss": result.training_loss, "steps": steps, "validation_reward": validation,
                  "best_checkpoint": trainer.state.best_model_checkpoint, "best_validation_reward": trainer.state.best_metric,
                  "best": str(best) if best else None, "final": str(final), "samples_judged_once": reward.distinct,
                  "finite": bool(losses) and all(math.isfinite(x) for x in losses)}
        (out / "training.json").write_text(json.dumps(record, indent=1, default=str))
    records.finish_run(store, run_id, "done", record)
    return record


def _unscored_validation_callback():
    from transformers import TrainerCallback

    class UnscoredValidation(TrainerCallback):
        """A validation pass whose every sample went unscored (the judge failed) logs eval_reward None, which
        the trainer's best-checkpoint comparison cannot order: NaN instead, which is never the best."""

        def on_evaluate(self, args, state, control, metrics=None, **kwargs):
            if metrics is not None and metrics.get("eval_reward", 0.0) is None:
                metrics["eval_reward"] = float("nan")

    return UnscoredValidation()


def _drop_rows_from(path: Path, step: int) -> None:
    """Keep rewards.jsonl's rows sampled before `step` (a resumed run samples the later steps again)."""
    if not path.is_file():
        return
    def before(row: dict) -> bool:  # a checkpoint at step N was validated at N, then saved
        return row.get("step", 0) < step or (row.get("phase") == "eval" and row.get("step", 0) <= step)

    kept = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip() and before(json.loads(line))]
    path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")


def _copy_best(checkpoint: str | None, to: Path) -> Path | None:
    """The best checkpoint as a plain model folder: every file but the trainer's own state (optimizer,
    scheduler, random states, trainer state and arguments)."""
    if not checkpoint or not Path(checkpoint).is_dir():
        return None
    if to.exists():
        shutil.rmtree(to)
    to.mkdir(parents=True)
    for path in Path(checkpoint).iterdir():
        if path.is_file() and not path.name.startswith(TRAINER_STATE):
            shutil.copy2(path, to / path.name)
    (to / "from_checkpoint.txt").write_text(str(checkpoint) + "\n")
    return to
