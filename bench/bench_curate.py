"""Curation's speed and the quality of its offline stages, on a synthetic meeting whose truth is known.

The meeting is testing/meeting.py's two-case script said N times over (--repeat; 4 gives about 4.4
minutes of recording, every slide shown N or 2N times). The offline stages (audio, speakers, slides,
align) run R times, each in a fresh output folder of one process, with the models loaded again for
each run (the first run also pays one-off compilation, reported on its own). Reported, as medians over the R runs:

- speed per stage and for the four together, as minutes of recording per minute of wall time
  (goal: the offline stages together at 5x real time or more on this 2-core machine);
- quality against the truth: word error rate, diarization error rate, slide recall, precision and
  duplicate rate, alignment accuracy (curate/quality.py says how each is counted).

With --model SPEC the model stages run once after them (e.g. --model local for the embedded model), and
their speed is reported too.

    .venv/bin/python bench/bench_curate.py [--repeat 4] [--runs 3] [--model local]

Writes bench/results/curate.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from medpanel.curate.align import Utterance  # noqa: E402
from medpanel.curate.pipeline import FILES, MODEL_STAGES, OFFLINE, CurateSettings, curate  # noqa: E402
from medpanel.curate.quality import alignment_accuracy, diarization_error_rate, slide_quality, word_error_rate  # noqa: E402
from medpanel.curate.slides import slides_from_json  # noqa: E402
from medpanel.testing.meeting import SCRIPT, build_meeting  # noqa: E402


def stage_data(out: Path, stage: str):
    return json.loads((out / "work" / "meeting" / FILES[stage]).read_text())["data"]


def quality(out: Path, truth) -> dict:
    found = [Utterance(**u) for u in stage_data(out, "speakers")["utterances"]]
    said = [Utterance(u["start"], u["end"], u["speaker"], u["text"]) for u in truth.utterances]
    slides = slide_quality(truth.showings, slides_from_json(stage_data(out, "slides")))
    links = [(u, a["slide_id"]) for u, a in zip(found, stage_data(out, "align"))]
    return {"word_error_rate": round(word_error_rate([u.text for u in said], [u.text for u in found]), 4),
            "diarization_error_rate": round(diarization_error_rate(said, found), 4),
            "speakers_found": len({u.speaker for u in found}), "speakers_true": len({u.speaker for u in said}),
            "slide_recall": round(slides["recall"], 4), "slide_precision": round(slides["precision"], 4),
            "slide_duplicate_rate": round(slides["duplicate_rate"], 4), "slides_kept": slides["kept"], "slides_shown": slides["shown"],
            "alignment_accuracy": round(alignment_accuracy(truth.utterances, links, slides["truth_of"]), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=4, help="times the two-case script is said")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--model", default=None, help="also run the model stages with this model spec")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-curate-"))
    started = time.perf_counter()
    video, truth = build_meeting(work / "video", script=SCRIPT * args.repeat)
    print(f"meeting: {truth.duration / 60:.2f} min, {len(truth.utterances)} utterances, built in {time.perf_counter() - started:.1f} s",
          file=sys.stderr)
    runs = []
    for r in range(args.runs):
        out = work / f"run{r}"
        t0 = time.perf_counter()
        report = asyncio.run(curate(video, out, stages=list(OFFLINE)))
        wall = time.perf_counter() - t0
        result = report.results[0]
        assert result.state == "done", result.error
        runs.append({"wall_s": wall, "seconds": result.seconds, "quality": quality(out, truth)})
        print(f"run {r + 1}: {wall:.1f} s " + " ".join(f"{k} {v:.1f}" for k, v in result.seconds.items()), file=sys.stderr)
    minutes = truth.duration / 60

    def speed(seconds: float) -> float:
        return round(minutes / (seconds / 60), 2) if seconds > 0 else float("inf")

    per_stage = {s: statistics.median(r["seconds"][s] for r in runs) for s in OFFLINE}
    total = statistics.median(r["wall_s"] for r in runs)
    summary = {
        "recording_minutes": round(minutes, 3), "runs": args.runs, "machine_cores": __import__("os").cpu_count(),
        "offline_wall_s_median": round(total, 2), "offline_x_real_time": speed(total), "goal_x_real_time": 5.0,
        # The first run in a fresh process also pays one-off compilation (librosa's numba kernels, torch's warm-up).
        "first_run_wall_s": round(runs[0]["wall_s"], 2), "first_run_x_real_time": speed(runs[0]["wall_s"]),
        "per_stage_s_median": {k: round(v, 3) for k, v in per_stage.items()},
        "per_stage_x_real_time": {k: speed(v) for k, v in per_stage.items()},
        "quality": runs[-1]["quality"],
        "quality_same_every_run": all(r["quality"] == runs[0]["quality"] for r in runs),
    }
    if args.model:
        from medpanel.models.registry import build_model
        from medpanel.models.runtime import Runtime

        out = work / f"run{args.runs - 1}"
        t0 = time.perf_counter()
        report = asyncio.run(curate(video, out, stages=[*MODEL_STAGES, "write"], settings=CurateSettings(model=args.model),
                                    make_model=lambda: build_model(args.model, Runtime())))
        result = report.results[0]
        summary["model_stages"] = {"model": args.model, "state": result.state, "error": result.error,
                                   "wall_s": round(time.perf_counter() - t0, 2),
                                   "per_stage_s": result.seconds,
                                   "x_real_time": speed(sum(result.seconds.values())) if result.seconds else None,
                                   "cases_written": sum(len(v) for v in (report.split or {"cases": {}})["cases"].values())}
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "curate.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
