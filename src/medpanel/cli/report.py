"""`medpanel report RUN [RUN ...]`: scores with intervals, failures, cost, paired comparisons, plots;
as a folder (report.json, report.md, a PNG) or as one self-contained HTML page (--html)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated, Optional

import typer

from medpanel.cli.common import JsonOpt, StoreOpt, app, err, open_store, out, print_json
from medpanel.errors import UsageError

NO_MATPLOTLIB = "it needs matplotlib (pip install 'medpanel[report]')"


@app.command("report")
def report(
    runs: Annotated[list[str], typer.Argument(help="Run ids (or unique prefixes, or 'last'); several runs over one dataset are compared.")],
    out_dir: Annotated[Optional[Path], typer.Option("--out", envvar="MEDPANEL_OUT",
                                                    help="Folder for report.json, report.md and the plot (default: ./FIRST_RUN_ID; "
                                                         "with --html, written only when --out is given).")] = None,
    html_file: Annotated[Optional[Path], typer.Option("--html", envvar="MEDPANEL_HTML",
                                                      help="Write the report as one self-contained HTML page (tables and every plot inline, "
                                                           "opens offline) and print its path, instead of the folder (both with --out).")] = None,
    score: Annotated[Optional[str], typer.Option("--score", envvar="MEDPANEL_SCORE", help="Score to plot (default: accuracy, if recorded).")] = None,
    no_plot: Annotated[bool, typer.Option("--no-plot", envvar="MEDPANEL_NO_PLOT", help="Skip the plots (they need matplotlib).")] = False,
    seed: Annotated[int, typer.Option("--seed", envvar="MEDPANEL_SEED", help="Seed of the bootstrap and permutation tests.")] = 0,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Report runs: each score with its interval, failures by kind, tokens, dollars and seconds per item,
    and paired tests between runs over the same dataset. Writes report.json, report.md and a PNG into a
    folder; with --html FILE, one self-contained HTML page with every plot instead (both with --out too)."""
    from medpanel.runs.report import render_markdown, write_report
    from medpanel.runs.report_html import document_from_report, prepare_report

    if html_file is not None and html_file.is_dir():
        raise UsageError(f"--html {html_file} is a folder.", "Give a file name, e.g. --html report.html.")
    db = open_store(store)
    if _training_report(db, runs, out_dir, html_file, no_plot, as_json):
        return
    data, gathered = prepare_report(db, runs, score=score, seed=seed)
    plot = not no_plot
    if plot and importlib.util.find_spec("matplotlib") is None:  # the report itself needs no extra: only its plots do
        err.print(f"note: no plots: {NO_MATPLOTLIB}; the report is written without them", style="dim", markup=False)
        plot = False
    written = []
    if html_file is not None:
        from medpanel.rating.report import rating_section_html

        ratings = rating_section_html(db, [r["run_id"] for r in data["runs"]])  # blinded human ratings of these runs, if any
        page = document_from_report(data, gathered, plots_drawn=not no_plot, extra=ratings)  # without matplotlib the page says so itself
        _write_html(html_file, page)
        written.append(str(html_file))
    if html_file is None or out_dir is not None:
        folder = out_dir if out_dir is not None else Path.cwd() / data["runs"][0]["run_id"]
        data = write_report(data, folder, plot=plot)
        written += [p for p in data["files"].values() if p]
    else:
        data = {**data, "files": {}}
    if html_file is not None:
        data["files"]["html"] = str(html_file)
    if as_json:
        print_json(data)
        return
    if html_file is not None:
        out.print(str(html_file), soft_wrap=True)  # the page is the report: print where it is, whole
        if out_dir is not None:
            err.print(f"wrote {', '.join(written)}", style="dim")
        return
    from rich.markdown import Markdown

    from medpanel.literal import visible

    out.print(Markdown(visible(render_markdown(data))))
    err.print(f"wrote {', '.join(written)}", style="dim")


def _write_html(path: Path, page: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"Cannot write the HTML report {path}: {exc.strerror or exc}.", "Pass a writable file path with --html.") from None


def _training_report(db, refs: list[str], out_dir: Path | None, html_file: Path | None, no_plot: bool, as_json: bool) -> bool:
    """Report a training run (`medpanel train sft|grpo`): its settings and its loss and reward curves.
    False when the ids name evaluation runs (the usual report)."""
    from medpanel.train.records import resolve_training_run

    found = [resolve_training_run(db, ref) for ref in refs if ref != "last"]
    if not any(found):
        return False
    if len(refs) != 1:
        raise UsageError("A training run is reported on its own.", "Give one training run id (medpanel train runs lists them).")
    from medpanel.train.report import training_html, training_report, write_training_report

    report = training_report(db, found[0])
    plot = not no_plot and importlib.util.find_spec("matplotlib") is not None
    if not no_plot and not plot:
        err.print(f"note: no plots: {NO_MATPLOTLIB}; the report is written without them", style="dim", markup=False)
    written = []
    if html_file is not None:
        _write_html(html_file, training_html(report, plot=plot))
        written.append(str(html_file))
        report["files"]["html"] = str(html_file)
    if html_file is None or out_dir is not None:
        html = report["files"].get("html")
        report = write_training_report(report, out_dir if out_dir is not None else Path.cwd() / report["run_id"], plot=plot)
        written += [p for p in report["files"].values() if p]
        if html:
            report["files"]["html"] = html
    if as_json:
        print_json(report)
    elif html_file is not None:
        out.print(str(html_file), soft_wrap=True)
    else:
        from rich.markdown import Markdown

        from medpanel.literal import visible
        from medpanel.train.report import render_markdown

        out.print(Markdown(visible(render_markdown(report))))
        err.print(f"wrote {', '.join(written)}", style="dim")
    return True
