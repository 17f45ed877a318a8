"""The report of a training run (`medpanel report TRAINING_RUN_ID`): its settings, data hashes and seed,
and its curves, step by step from the store: the loss, and for GRPO the reward, its format term and the
validation reward at each checkpoint. As report.json + report.md + curves.png, or one HTML page.

Read from the store, not from training.json: a run that crashed or is still going has its curve so far.
"""

from __future__ import annotations

import json
from pathlib import Path

from medpanel.errors import UsageError
from medpanel.runs.store import Store
from medpanel.train.records import training_run

# (key in the logged metrics, what the report calls it), in the order they are tabled and drawn
TRAIN_SERIES = (("loss", "loss"), ("reward", "reward"), ("reward_format", "format term"), ("reward_match", "match term"),
                ("reward_judged", "share judged"))
EVAL_SERIES = (("eval_loss", "validation loss"), ("eval_reward", "validation reward"))


def training_report(store: Store, run_id: str) -> dict:
    run = training_run(store, run_id)
    curves: dict[str, list[tuple[int, float]]] = {}
    for row in run["steps"]:
        series = TRAIN_SERIES if row["phase"] == "train" else EVAL_SERIES if row["phase"] == "eval" else ()
        for key, name in series:
            value = row["metrics"].get(key)
            if isinstance(value, (int, float)):
                curves.setdefault(name, []).append((row["step"], float(value)))
    summary = run.get("summary") or {}
    return {"kind": "training", "run_id": run_id, "training": run["kind"], "status": run["status"], "out_dir": run["out_dir"],
            "settings": run["settings"], "data": run["data"], "seed": run["seed"], "curves": curves,
            "steps": max((r["step"] for r in run["steps"] if r["phase"] == "train"), default=0),
            "best_checkpoint": summary.get("best_checkpoint"), "best_validation_reward": summary.get("best_validation_reward"),
            "final": summary.get("final"), "files": {}}


def _num(value) -> str:
    return "" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(report: dict) -> str:
    lines = [f"# Training run `{report['run_id']}` ({report['training']}, {report['status']})", "",
             f"- Steps: {report['steps']}; seed {report['seed']}; output folder `{report['out_dir']}`"]
    if report.get("final"):
        lines.append(f"- Final model: `{report['final']}`")
    if report.get("best_checkpoint"):
        lines.append(f"- Best checkpoint by validation reward: `{report['best_checkpoint']}` ({_num(report['best_validation_reward'])})")
    lines += ["- Data: " + ", ".join(f"{k} `{(v or '-')[:12]}`" for k, v in report["data"].items()), "", "## Settings", "",
              "| setting | value |", "| --- | --- |"]
    lines += [f"| {_cell(k)} | {_cell(json.dumps(v))} |" for k, v in report["settings"].items()]
    names = list(report["curves"])
    if names:
        by_step: dict[int, dict[str, float]] = {}
        for name, points in report["curves"].items():
            for step, value in points:
                by_step.setdefault(step, {})[name] = value
        lines += ["", "## Curves", "", "| step | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
        lines += [f"| {step} | " + " | ".join(_num(row.get(n)) for n in names) + " |" for step, row in sorted(by_step.items())]
    return "\n".join(lines) + "\n"


def draw_curves(report: dict, fmt: str = "png", path: Path | None = None) -> str | None:
    """The curves in one figure (loss on its own axes, the rewards on another): written to `path` as PNG,
    or returned as inline SVG. None when there is nothing to draw."""
    from medpanel.runs.plots import figure, label, to_svg

    curves = report["curves"]
    if not curves:
        return None
    losses = {n: p for n, p in curves.items() if "loss" in n}
    rewards = {n: p for n, p in curves.items() if "loss" not in n}
    panels = [part for part in (losses, rewards) if part]
    with figure(f"training-{report['run_id']}", 7.0, 3.0 * len(panels)) as fig:
        for i, part in enumerate(panels):
            ax = fig.add_subplot(len(panels), 1, i + 1)
            for name, points in part.items():
                ax.plot([s for s, _ in points], [v for _, v in points], marker="o" if len(points) < 40 else None, label=label(name))
            ax.xaxis.get_major_locator().set_params(integer=True)  # steps are whole numbers
            ax.set_xlabel("step")
            ax.set_ylabel("loss" if part is losses else "reward")
            ax.legend(fontsize=8)
        fig.suptitle(label(f"{report['run_id']} ({report['training']})", 80), fontsize=10)
        if fmt == "svg":
            return to_svg(fig)
        assert path is not None
        fig.savefig(path, format="png", dpi=110)
        return str(path)


def write_training_report(report: dict, folder: Path, *, plot: bool = True) -> dict:
    report = {**report, "files": {"json": str(folder / "report.json"), "markdown": str(folder / "report.md"), "plot": None}}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if plot:
            report["files"]["plot"] = draw_curves(report, "png", folder / "curves.png")
        (folder / "report.md").write_text(render_markdown(report), encoding="utf-8")
        (folder / "report.json").write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"Cannot write the report into {folder}: {exc.strerror or exc}.", "Pass --out a folder you can write to.") from None
    return report


def training_html(report: dict, *, plot: bool = True) -> str:
    from medpanel.runs.report_html import esc, page

    rows = "".join(f"<tr><td>{esc(k)}</td><td><code>{esc(json.dumps(v))}</code></td></tr>" for k, v in report["settings"].items())
    svg = draw_curves(report, "svg") if plot else None
    figure = svg or ("<p>No plot: it needs matplotlib (pip install 'medpanel[report]').</p>" if not plot else "<p>No steps logged yet.</p>")
    best = (f"<p>Best checkpoint by validation reward: <code>{esc(report['best_checkpoint'])}</code> "
            f"({esc(_num(report['best_validation_reward']))})</p>") if report.get("best_checkpoint") else ""
    body = (f"<main style='max-width:60rem;margin:auto;padding:1rem;background:#fff'><h1>Training run {esc(report['run_id'])}</h1>"
            f"<p>{esc(report['training'])}, {esc(report['status'])}, {esc(report['steps'])} step(s), seed {esc(report['seed'])}</p>{best}"
            f"<figure>{figure}</figure><h2>Settings</h2><table>{rows}</table>"
            f"<h2>Data</h2><ul>{''.join(f'<li>{esc(k)}: <code>{esc(v)}</code></li>' for k, v in report['data'].items())}</ul></main>")
    return page(body, f"medpanel training report: {report['run_id']}")
