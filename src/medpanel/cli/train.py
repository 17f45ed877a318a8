"""`medpanel train data`: Board Simulation training data from cases (train/data.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from medpanel.cli.common import JsonOpt, RunOptions, StoreOpt, app, bind_options, err, open_store, out, print_json
from medpanel.errors import MissingExtraError, UsageError

train_app = typer.Typer(no_args_is_help=True, help="Train a small model to hold a tumor board (training data first).")
app.add_typer(train_app, name="train")


@train_app.command("data")
def data(
    cases: Annotated[list[str], typer.Argument(help="Case folders, case files, JSONL of cases, OpenTumorBoard records, or a curated split folder; several allowed.")],
    out_dir: Annotated[Path, typer.Option("--out", "-o", envvar="MEDPANEL_TRAIN_OUT", help="Folder for train.jsonl, validation.jsonl and manifest.json.")],
    validation: Annotated[float, typer.Option("--validation", envvar="MEDPANEL_TRAIN_VALIDATION", help="Share of recordings held out for validation.")] = 0.1,
    seed: Annotated[int, typer.Option("--seed", envvar="MEDPANEL_TRAIN_SEED", help="Seed of the split by recording.")] = 0,
    system_file: Annotated[Optional[Path], typer.Option("--system-file", envvar="MEDPANEL_TRAIN_SYSTEM_FILE", help="System prompt file (e.g. the paper's), instead of medpanel's Board Simulation prompt.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Board Simulation examples (prompt: the case; target: its recorded discussion and conclusion), split by recording."""
    import json

    from medpanel.cases import load_dataset
    from medpanel.train.data import case_record, split_examples, sft_examples, write_jsonl

    system = None
    if system_file is not None:
        try:
            system = system_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"Cannot read --system-file {system_file}: {exc.strerror}.", "Give a readable text file.") from None
    loaded = [case for name in cases for case in load_dataset(name)]
    examples, skipped = sft_examples(loaded, system)
    if not examples:
        raise UsageError(f"None of the {len(loaded)} case(s) has a reference discussion and conclusion to learn from.",
                         "Give cases with reference.discussion and reference.conclusion (e.g. from `medpanel curate`), "
                         "or OpenTumorBoard's training rows.")
    manifest_path = out_dir / "manifest.json"
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--out {out_dir} is a file.", "Give a folder (it is created if missing).")
    earlier: dict[str, str] = {}
    if manifest_path.is_file():  # a rebuild keeps each recording on the side it was on, present or not
        try:
            earlier = dict(json.loads(manifest_path.read_text(encoding="utf-8"))["recordings"])
            if not all(isinstance(r, str) and side in ("train", "validation") for r, side in earlier.items()):
                raise ValueError("a recording's side is not train or validation")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UsageError(f"Cannot read the earlier placements in {manifest_path}: {exc}.",
                             "Fix or remove that manifest (removing it re-splits every recording), or give another --out.") from None
    previous = {r: ("train" if side == "train" else "dev") for r, side in earlier.items()}
    train, held, placed = split_examples(examples, validation, seed, previous)
    if not train:
        raise UsageError(f"Every one of the {len(set(placed))} recording(s) went to validation: nothing is left to train on.",
                         "Give more recordings or a smaller --validation.")
    # The cases themselves, for GRPO's judges (the reference and the evidence they read); slide images are left
    # out (the prompts already hold the captions, and a path would point outside this folder).
    used = {e["id"] for e in examples}
    kept = [case_record(c) for c in loaded if c.id in used]
    try:
        manifest = {"sources": list(cases), "seed": seed, "validation_share": validation, "system_file": str(system_file) if system_file else None,
                    "train": {"examples": len(train), "sha256": write_jsonl(out_dir / "train.jsonl", train)},
                    "validation": {"examples": len(held), "sha256": write_jsonl(out_dir / "validation.jsonl", held)},
                    "cases": {"cases": len(kept), "sha256": write_jsonl(out_dir / "cases.jsonl", kept)},
                    "recordings": {**{r: side for r, side in earlier.items() if r not in placed}, **placed},
                    "skipped": [{"case": s.case_id, "why": s.why} for s in skipped]}
        manifest_path.write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"Cannot write to {out_dir}: {exc.strerror}.", "Give --out a folder you can write to.") from None
    if not held and validation > 0:
        err.print(f"No recording went to validation ({len(set(placed))} recording(s) at --validation {validation}): "
                  "training will report no validation loss.")
    if as_json:
        print_json(manifest)
        return
    out.print(f"{len(train)} training and {len(held)} validation example(s) from {len(set(placed))} recording(s) in {out_dir}")
    if skipped:
        err.print(f"{len(skipped)} case(s) skipped: no reference discussion and conclusion ({', '.join(s.case_id for s in skipped[:5])}"
                  + (", ..." if len(skipped) > 5 else "") + ")")


def check_folders(data_dir: Path, out_dir: Path, resume: bool, needs: tuple[str, ...]) -> None:
    """Before anything loads: the data folder holds what training reads, and --out holds no earlier run unless resuming."""
    for name in needs:
        if not (data_dir / name).is_file():
            raise UsageError(f"No {name} in {data_dir}.", "Build the folder with `medpanel train data CASES --out FOLDER`.")
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--out {out_dir} is a file.", "Give a folder (it is created if missing).")
    if out_dir.exists() and any(out_dir.glob("checkpoint-*")) and not resume:
        raise UsageError(f"{out_dir} already holds checkpoints.", "Pass --resume to go on from the last one, or give another --out.")


@train_app.command("sft")
def sft(
    data_dir: Annotated[Path, typer.Argument(help="A folder from `medpanel train data` (train.jsonl, validation.jsonl).")],
    out_dir: Annotated[Path, typer.Option("--out", "-o", envvar="MEDPANEL_SFT_OUT", help="Folder for checkpoints, the final model and training.json.")],
    start: Annotated[Optional[str], typer.Option("--start", envvar="MEDPANEL_SFT_START", help="A Hugging Face model folder or a .gguf file (default: the bundled SmolLM2).")] = None,
    steps: Annotated[int, typer.Option("--steps", envvar="MEDPANEL_SFT_STEPS", min=0, help="Optimizer steps (0: --epochs passes over the data).")] = 100,
    epochs: Annotated[float, typer.Option("--epochs", envvar="MEDPANEL_SFT_EPOCHS", min=0.0)] = 1.0,
    learning_rate: Annotated[float, typer.Option("--learning-rate", envvar="MEDPANEL_SFT_LEARNING_RATE", min=0.0)] = 1e-5,
    batch_size: Annotated[int, typer.Option("--batch-size", envvar="MEDPANEL_SFT_BATCH_SIZE", min=1)] = 1,
    gradient_accumulation: Annotated[int, typer.Option("--gradient-accumulation", envvar="MEDPANEL_SFT_GRADIENT_ACCUMULATION", min=1)] = 1,
    max_length: Annotated[int, typer.Option("--max-length", envvar="MEDPANEL_SFT_MAX_LENGTH", min=32, help="Tokens of prompt + target; longer examples are cut.")] = 2048,
    seed: Annotated[int, typer.Option("--seed", envvar="MEDPANEL_SFT_SEED")] = 0,
    lora: Annotated[bool, typer.Option("--lora", envvar="MEDPANEL_SFT_LORA", help="Train LoRA adapters (peft) instead of every weight.")] = False,
    lora_r: Annotated[int, typer.Option("--lora-r", envvar="MEDPANEL_SFT_LORA_R", min=1)] = 16,
    save_steps: Annotated[int, typer.Option("--save-steps", envvar="MEDPANEL_SFT_SAVE_STEPS", min=1, help="A checkpoint (and a validation loss) every this many steps.")] = 50,
    resume: Annotated[bool, typer.Option("--resume", envvar="MEDPANEL_SFT_RESUME", help="Go on from the last checkpoint in --out.")] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Supervised finetuning with TRL's SFTTrainer (full or LoRA) on Board Simulation examples; needs the `train` extra.
    The run and each logged step are recorded in the store (`medpanel train runs`, `medpanel report ID`)."""
    from medpanel.train.sft import SftSettings, run_sft

    check_folders(data_dir, out_dir, resume, ("train.jsonl",))
    settings = SftSettings(data=str(data_dir), out=str(out_dir), start=start, steps=steps, epochs=epochs, learning_rate=learning_rate,
                           batch_size=batch_size, gradient_accumulation=gradient_accumulation, max_length=max_length, seed=seed,
                           lora=lora, lora_r=lora_r, lora_alpha=2 * lora_r, save_steps=save_steps, resume=resume)
    import contextlib
    import sys

    db = open_store(store)
    with contextlib.redirect_stdout(sys.stderr):  # the trainer prints its logs: stdout stays the result (and --json's)
        record = run_sft(settings, db)
    if as_json:
        print_json(record)
        return
    losses = [s["loss"] for s in record["steps"] if "loss" in s]
    out.print(f"{record['global_step']} step(s); loss {losses[0]:.4f} -> {losses[-1]:.4f}; final model in {record['final']}" if losses
              else f"{record['global_step']} step(s); final model in {record['final']}")


@train_app.command("grpo")
@bind_options(timeout=300.0)
def grpo(
    data_dir: Annotated[Path, typer.Argument(help="A folder from `medpanel train data` (train.jsonl, validation.jsonl, cases.jsonl).")],
    out_dir: Annotated[Path, typer.Option("--out", "-o", envvar="MEDPANEL_GRPO_OUT", help="Folder for checkpoints, final/, best/, rewards.jsonl and training.json.")],
    judge: Annotated[str, typer.Option("--judge", "-j", envvar="MEDPANEL_GRPO_JUDGE", help="Model spec of the reward's judge (any spec: openai:..., local, scripted:judge.yaml).")],
    start: Annotated[Optional[str], typer.Option("--start", envvar="MEDPANEL_GRPO_START", help="A Hugging Face model folder (an SFT run's final too), a LoRA adapter folder or a .gguf file (default: the bundled SmolLM2).")] = None,
    preset: Annotated[str, typer.Option("--preset", envvar="MEDPANEL_GRPO_PRESET", help="Reward rules: released_code (OpenTumorBoard's reward code) or paper (its appendix E.2).")] = "released_code",
    steps: Annotated[int, typer.Option("--steps", envvar="MEDPANEL_GRPO_STEPS", min=1, help="Optimizer steps.")] = 100,
    group_size: Annotated[int, typer.Option("--group-size", envvar="MEDPANEL_GRPO_GROUP_SIZE", min=2, help="Samples per prompt (the paper: 16).")] = 16,
    prompts_per_step: Annotated[int, typer.Option("--prompts-per-step", envvar="MEDPANEL_GRPO_PROMPTS_PER_STEP", min=1)] = 1,
    temperature: Annotated[float, typer.Option("--temperature", envvar="MEDPANEL_GRPO_TEMPERATURE", help="Sampling temperature, above 0 (the paper: 0.7).")] = 0.7,
    max_prompt_length: Annotated[int, typer.Option("--max-prompt-length", envvar="MEDPANEL_GRPO_MAX_PROMPT_LENGTH", min=16, help="Prompt budget in tokens; longer prompts are left out.")] = 4096,
    max_completion_length: Annotated[int, typer.Option("--max-completion-length", envvar="MEDPANEL_GRPO_MAX_COMPLETION_LENGTH", min=8, help="Response budget in tokens (the paper: 8192).")] = 8192,
    learning_rate: Annotated[float, typer.Option("--learning-rate", envvar="MEDPANEL_GRPO_LEARNING_RATE", min=0.0, help="The paper: 1e-6.")] = 1e-6,
    gradient_accumulation: Annotated[int, typer.Option("--gradient-accumulation", envvar="MEDPANEL_GRPO_GRADIENT_ACCUMULATION", min=1)] = 1,
    lr_scheduler: Annotated[str, typer.Option("--lr-scheduler", envvar="MEDPANEL_GRPO_LR_SCHEDULER", help="Learning-rate schedule, as transformers names them (constant, linear, cosine, ...).")] = "constant",
    judge_concurrency: Annotated[int, typer.Option("--judge-concurrency", envvar="MEDPANEL_GRPO_JUDGE_CONCURRENCY", min=1, max=256, help="Judge calls in flight at once.")] = 8,
    beta: Annotated[float, typer.Option("--beta", envvar="MEDPANEL_GRPO_BETA", min=0.0, help="KL coefficient (the paper: 0, no KL term).")] = 0.0,
    seed: Annotated[int, typer.Option("--seed", envvar="MEDPANEL_GRPO_SEED")] = 0,
    lora: Annotated[bool, typer.Option("--lora", envvar="MEDPANEL_GRPO_LORA", help="Train LoRA adapters (peft) instead of every weight.")] = False,
    lora_r: Annotated[int, typer.Option("--lora-r", envvar="MEDPANEL_GRPO_LORA_R", min=1)] = 16,
    save_steps: Annotated[int, typer.Option("--save-steps", envvar="MEDPANEL_GRPO_SAVE_STEPS", min=1, help="A checkpoint (and the validation reward) every this many steps.")] = 50,
    resume: Annotated[bool, typer.Option("--resume", envvar="MEDPANEL_GRPO_RESUME", help="Go on from the last checkpoint in --out.")] = False,
    *,
    opts: RunOptions,
    as_json: JsonOpt = False,
) -> None:
    """Dr.GRPO with TRL's GRPOTrainer on Board Simulation prompts, rewarded by the tumor-board reward (the scorer
    `bench --set reward=PRESET` runs) with the judge's terms through the model layer; needs the `train` extra."""
    import contextlib
    import sys

    from medpanel.models.registry import build_model
    from medpanel.scoring.board_format import FormatSettings
    from medpanel.train.grpo import GrpoSettings, run_grpo

    FormatSettings.for_preset(preset)  # an unknown preset is refused before anything loads
    try:
        from transformers import SchedulerType
    except ImportError:
        raise MissingExtraError("GRPO training", "train", "transformers") from None

    if lr_scheduler not in {t.value for t in SchedulerType}:
        raise UsageError(f"--lr-scheduler {lr_scheduler!r} is not a schedule transformers knows.",
                         f"Use one of: {', '.join(sorted(t.value for t in SchedulerType))}.")
    check_folders(data_dir, out_dir, resume, ("train.jsonl", "cases.jsonl"))
    db, runtime = opts.start()
    judge_model = build_model(judge, runtime)
    runtime.check_prices([judge_model])
    settings = GrpoSettings(data=str(data_dir), out=str(out_dir), judge=judge, start=start, preset=preset, steps=steps, group_size=group_size,
                            prompts_per_step=prompts_per_step, temperature=temperature, max_prompt_length=max_prompt_length,
                            max_completion_length=max_completion_length, learning_rate=learning_rate,
                            gradient_accumulation=gradient_accumulation, lr_scheduler=lr_scheduler, judge_concurrency=judge_concurrency,
                            beta=beta, seed=seed, lora=lora, lora_r=lora_r,
                            lora_alpha=2 * lora_r, save_steps=save_steps, resume=resume)
    with contextlib.redirect_stdout(sys.stderr):  # the trainer prints its logs: stdout stays the result (and --json's)
        record = run_grpo(settings, judge_model, db)
    if as_json:
        print_json(record)
        return
    rewards = [s["reward"] for s in record["steps"] if s.get("reward") is not None]
    best = f"; best checkpoint {record['best_checkpoint']} (validation reward {record['best_validation_reward']:.3f})" if record["best_checkpoint"] else ""
    out.print((f"{record['global_step']} step(s); reward {rewards[0]:.3f} -> {rewards[-1]:.3f}" if rewards else f"{record['global_step']} step(s)")
              + f"; final model in {record['final']}{best}", markup=False)


@train_app.command("runs")
def runs(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Training runs in the store, newest first: id, kind, status, steps, and the output folder."""
    from medpanel.train.records import training_run, training_runs

    db = open_store(store, create=False)
    listed = []
    for run in training_runs(db):
        steps = [s for s in training_run(db, run["id"])["steps"] if s["phase"] == "train"]
        listed.append({"id": run["id"], "kind": run["kind"], "status": run["status"], "steps": len(steps), "out": run["out_dir"]})
    if as_json:
        print_json(listed)
        return
    if not listed:
        out.print("No training runs in this store. Start one with `medpanel train sft` or `medpanel train grpo`.", markup=False)
    for run in listed:
        out.print(f"{run['id']}  {run['kind']}  {run['status']}  {run['steps']} step(s)  {run['out']}", markup=False)
