"""`medpanel report RUN [RUN ...]`: scores with intervals, failures, cost, paired comparisons, a plot."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated, Optional

import typer

from medpanel.cli.common import JsonOpt, StoreOpt, app, err, open_store, out, print_json


@app.command("report")
def report(
    runs: Annotated[list[str], typer.Argument(help="Run ids (or unique prefixes, or 'last'); several runs over one dataset are compared.")],
    out_dir: Annotated[Optional[Path], typer.Option("--out", envvar="MEDPANEL_OUT", help="Folder for report.json, report.md and the plot (default: ./FIRST_RUN_ID).")] = None,
    score: Annotated[Optional[str], typer.Option("--score", envvar="MEDPANEL_SCORE", help="Score to plot against cost (default: accuracy, if recorded).")] = None,
    no_plot: Annotated[bool, typer.Option("--no-plot", envvar="MEDPANEL_NO_PLOT", help="Skip the accuracy-vs-cost plot (needs matplotlib).")] = False,
    seed: Annotated[int, typer.Option("--seed", envvar="MEDPANEL_SEED", help="Seed of the bootstrap and permutation tests.")] = 0,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Report runs: each score with its interval, failures by kind, tokens, dollars and seconds per item,
    and paired tests between runs over the same dataset. Writes report.json, report.md and a PNG."""
    from medpanel.runs.report import build_report, render_markdown, write_report

    db = open_store(store)
    data = build_report(db, runs, score=score, seed=seed)
    folder = out_dir if out_dir is not None else Path.cwd() / data["runs"][0]["run_id"]
    plot = not no_plot
    if plot and importlib.util.find_spec("matplotlib") is None:  # the report itself needs no extra: only its plot does
        err.print("note: no accuracy-vs-cost plot: it needs matplotlib (pip install 'medpanel[report]'); the report is written without it",
                  style="dim", markup=False)
        plot = False
    data = write_report(data, folder, plot=plot)
    if as_json:
        print_json(data)
        return
    from rich.markdown import Markdown

    from medpanel.literal import visible

    out.print(Markdown(visible(render_markdown(data))))
    err.print(f"wrote {', '.join(p for p in data['files'].values() if p)}", style="dim")
