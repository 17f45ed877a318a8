"""`medpanel train export`: SFT and preference data from stored debate and consult runs (train/export.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from medpanel.cli.common import JsonOpt, StoreOpt, err, open_store, out, print_json
from medpanel.cli.train import train_app


@train_app.command("export")
def export(
    runs: Annotated[list[str], typer.Argument(help="Debate or consult runs: ids, unique prefixes, or 'last'; several allowed.")],
    out_dir: Annotated[Path, typer.Option("--out", "-o", envvar="MEDPANEL_TRAIN_EXPORT_OUT",
                                          help="Folder for sft_*.jsonl, preferences_*.jsonl (train and validation) and manifest.json.")],
    score: Annotated[Optional[str], typer.Option("--score", envvar="MEDPANEL_TRAIN_EXPORT_SCORE",
                                                 help="The item score a winning transcript needs (default: accuracy for debate, code_f1 for consult).")] = None,
    min_score: Annotated[Optional[float], typer.Option("--min-score", envvar="MEDPANEL_TRAIN_EXPORT_MIN_SCORE",
                                                       help="Lowest --score of an exported transcript (default: 1.0 for debate, 0.5 for consult).")] = None,
    min_gap: Annotated[float, typer.Option("--min-gap", envvar="MEDPANEL_TRAIN_EXPORT_MIN_GAP", min=0.0,
                                           help="A consult is preferred over another of the same case only when it scores more than this above it.")] = 0.1,
    validation: Annotated[float, typer.Option("--validation", envvar="MEDPANEL_TRAIN_EXPORT_VALIDATION", help="Share of cases held out for validation.")] = 0.1,
    seed: Annotated[int, typer.Option("--seed", envvar="MEDPANEL_TRAIN_EXPORT_SEED", help="Seed of the split by case.")] = 0,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Winning transcripts as SFT conversations and per-seat outcomes as preference pairs (TRL's formats), split by case."""
    from medpanel.train.export import export_runs, write_export

    db = open_store(store, create=False)
    run_ids = [db.resolve_run_id(r) for r in runs]
    exported = export_runs(db, run_ids, score=score, min_score=min_score, min_gap=min_gap)
    manifest = write_export(out_dir, exported, validation=validation, seed=seed, min_gap=min_gap)
    if validation > 0 and not manifest["counts"]["sft_validation"] and not manifest["counts"]["preferences_validation"]:
        err.print(f"No case went to validation ({len(manifest['cases'])} case(s) at --validation {validation}): "
                  "training will report no validation loss.")
    if as_json:
        print_json(manifest)
        return
    n = manifest["counts"]
    out.print(f"{n['sft_train'] + n['sft_validation']} SFT conversation(s) ({n['sft_train']} train, {n['sft_validation']} validation) and "
              f"{n['preferences_train'] + n['preferences_validation']} preference pair(s) ({n['preferences_train']} train, "
              f"{n['preferences_validation']} validation) from {len(manifest['runs'])} run(s) in {out_dir}")
    for why, count in manifest["skipped"].items():
        err.print(f"{count} skipped: {why}")
