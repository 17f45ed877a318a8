"""A toy Dr.GRPO run on CPU: does the format reward rise on the bundled SmolLM2-135M?

Toy scale, so a few dozen steps fit on two cores: the example cases cut short (each summary to its first
sentences, each reference meeting to its first turns and the first sentences of its conclusion, no slides),
then the commands a user runs:

    medpanel train data  TOY --out DATA
    medpanel train sft   DATA --out SFT  (a few steps: the bundled model never writes the tags unprompted)
    medpanel train grpo  DATA --out GRPO --start SFT/final --judge scripted:examples/training/scripted_judge.yaml

The scripted judge gives every judged meeting the same scores, so what the run can learn is the format and
length terms: a meeting cut at the response budget, or without both blocks, fails closed (reward -0.30 or
-0.275), a well-formed one earns the judged match plus 0.1 x format. Reported: the per-step mean of the
reward and of its format term (from GRPO's rewards.jsonl, every sample), their first and last quarters,
and the seconds per step.

    .venv/bin/python bench/bench_grpo_toy.py [--steps 30] [--group-size 4] [--sft-steps 10] [--analyse WORK]

Writes bench/results/grpo_toy.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEDPANEL = str(Path(sys.executable).parent / "medpanel")

from medpanel.cases import load_dataset  # noqa: E402
from medpanel.scoring.sentences import first_sentences  # noqa: E402
from medpanel.train.data import case_record  # noqa: E402


def toy_cases(turns: int = 3, summary_sentences: int = 2) -> list[dict]:
    """The example cases, cut short: the same patients and plans, a fraction of the tokens."""
    records = []
    for case in load_dataset(str(ROOT / "examples")):
        short = case.model_copy(deep=True)
        short.summary = first_sentences(case.summary, summary_sentences)[0]
        short.slides = []
        short.reference.discussion = [t.model_copy(update={"text": first_sentences(t.text, 1)[0]}) for t in case.reference.discussion[:turns]]
        short.reference.conclusion = first_sentences(case.reference.conclusion or "", 2)[0]
        records.append(case_record(short))
    return records


def run(command: list[str], env: dict) -> None:
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command[:3])} failed ({done.returncode}):\n{done.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--sft-steps", type=int, default=10)
    parser.add_argument("--max-completion-length", type=int, default=160)
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "grpo_toy.json")
    parser.add_argument("--analyse", type=Path, default=None, help="Only read the results of an earlier run's work folder.")
    args = parser.parse_args()
    if args.analyse is None:
        work = Path(tempfile.mkdtemp(prefix="grpo-toy-"))
        env = {**os.environ, "MEDPANEL_STORE": str(work / "store.db")}
        cases = work / "toy.jsonl"
        cases.write_text("".join(json.dumps(r) + "\n" for r in toy_cases()))
        run([MEDPANEL, "train", "data", str(cases), "--out", str(work / "data"), "--validation", "0", "--json"], env)
        run([MEDPANEL, "train", "sft", str(work / "data"), "--out", str(work / "sft"), "--steps", str(args.sft_steps),
             "--learning-rate", "5e-5", "--max-length", "512", "--save-steps", str(max(args.sft_steps, 1)), "--json"], env)
        run([MEDPANEL, "train", "grpo", str(work / "data"), "--out", str(work / "grpo"), "--start", str(work / "sft" / "final"),
             "--judge", "scripted:" + str(ROOT / "examples" / "training" / "scripted_judge.yaml"), "--steps", str(args.steps),
             "--group-size", str(args.group_size), "--max-completion-length", str(args.max_completion_length),
             "--learning-rate", str(args.learning_rate), "--save-steps", str(args.steps), "--json"], env)
    else:
        work = args.analyse
    sft, grpo = (json.loads((work / name / "training.json").read_text()) for name in ("sft", "grpo"))
    grpo_seconds = next(s["train_runtime"] for s in grpo["steps"] if "train_runtime" in s)
    rows = [r for r in map(json.loads, (work / "grpo" / "rewards.jsonl").read_text().splitlines()) if r["phase"] == "train"]
    by_step: dict[int, list[dict]] = {}
    for row in rows:
        by_step.setdefault(row["step"], []).append(row)
    # Sampled at global step k, trained on in step k + 1.
    curve = [{"step": step + 1, "reward": round(statistics.fmean(r["reward"] for r in got), 4),
              "format": round(statistics.fmean(r["reward_format"] for r in got), 4),
              "well_formed": round(statistics.fmean(1.0 if r["reward_judged"] else 0.0 for r in got), 4),
              "mean_tokens": round(statistics.fmean(r["tokens"] for r in got), 1)}
             for step, got in sorted(by_step.items())]
    quarter = max(1, len(curve) // 4)

    def mean(key: str, part: list[dict]) -> float:
        return round(statistics.fmean(p[key] for p in part), 4)

    report = {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "work": str(work),
              "sft": {"steps": sft["global_step"], "losses": [round(s["loss"], 4) for s in sft["steps"] if "loss" in s]},
              "grpo_seconds": round(grpo_seconds, 1), "seconds_per_step": round(grpo_seconds / max(1, grpo["global_step"]), 1),
              "grpo_settings": grpo["settings"],
              "curve": curve,
              "first_quarter": {k: mean(k, curve[:quarter]) for k in ("reward", "format", "well_formed")},
              "last_quarter": {k: mean(k, curve[-quarter:]) for k in ("reward", "format", "well_formed")}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: report[k] for k in ("first_quarter", "last_quarter", "seconds_per_step")}, indent=1))


if __name__ == "__main__":
    main()
