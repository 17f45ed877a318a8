"""`medpanel score healthbench-meta FILE --judge SPEC`: HealthBench's grader checked against physicians.

The judge grades every row of the meta-evaluation file (a completion and one criterion) with the same call a
run's grading makes; its met / not-met calls are compared with the physicians' labels (docs/healthbench.md).
Nothing is stored but the judge's calls, logged and cached as every call is; no run is created.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Column, Table

from medpanel.cli.common import JsonOpt, RunOptions, bind_options, err, out, print_json, score_app, styled
from medpanel.cli.judge import JudgeOpt
from medpanel.errors import UsageError


def pick_rows(rows: list, limit: int | None, sample: int | None) -> list:
    """The first `limit` rows, or the `sample` rows simple-evals draws for `--examples N` (random.Random(0).sample)."""
    if limit is not None and sample is not None:
        raise UsageError("Give --limit or --sample, not both.", "--limit takes the first rows; --sample the ones simple-evals picks.")
    if sample is not None and sample < len(rows):
        return random.Random(0).sample(rows, sample)
    return rows[:limit] if limit is not None else rows


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _print(report: dict, judge: str, file: Path, graded: int, unscored: int) -> None:
    g, doctors = report["grader"], report["physicians"]
    out.print(styled(("HealthBench meta-evaluation", "bold"), f" of {judge} on {file}: {graded} rows graded"
                     + (f", {unscored} unscored" if unscored else "") + f"; against the physicians' labels {report['against']}"))
    out.print(f"grader: macro F1 {_f(g['macro_f1'])} (met F1 {_f(g['met_f1'])}, not met F1 {_f(g['not_met_f1'])}; "
              f"macro precision {_f(g['macro_precision'])}, macro recall {_f(g['macro_recall'])}; {g['pairs']} label pairs)")
    out.print(f"physicians: mean macro F1 {_f(doctors['macro_f1'])} over {doctors['physicians']} physicians, each against the others")
    if report["without_majority"]:
        out.print(f"{report['without_majority']} rows left out: their physicians split evenly, so they have no majority")
    table = Table(Column("category", overflow="fold"), "rows", "grader macro F1", "met F1", "not met F1", "physicians' macro F1")  # names whole
    for category, row in report["by_category"].items():
        table.add_row(category, str(row["rows"]), _f(row["macro_f1"]), _f(row["met_f1"]), _f(row["not_met_f1"]),
                      f"{_f(row['physicians_macro_f1'])} (of {row['physicians']})")
    out.print(table)


@score_app.command("healthbench-meta")
@bind_options(timeout=300.0)
def healthbench_meta_command(
    file: Annotated[Path, typer.Argument(help="HealthBench's meta-evaluation JSONL (not shipped: see docs/healthbench.md).")],
    judge: JudgeOpt,
    limit: Annotated[Optional[int], typer.Option("--limit", envvar="MEDPANEL_LIMIT", min=1, help="Only the first N rows.")] = None,
    sample: Annotated[Optional[int], typer.Option("--sample", envvar="MEDPANEL_HEALTHBENCH_SAMPLE", min=1,
                                                  help="N rows drawn as simple-evals draws them for --examples N (seed 0).")] = None,
    against: Annotated[str, typer.Option("--against", envvar="MEDPANEL_HEALTHBENCH_AGAINST",
                                         help="pairwise (every physician label, as HealthBench reports it) or majority (the physicians' majority label).")] = "pairwise",
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", envvar="MEDPANEL_CONCURRENCY", min=1, max=256, help="Rows graded at once.")] = 8,
    max_tokens: Annotated[Optional[int], typer.Option("--max-tokens", envvar="MEDPANEL_JUDGE_MAX_TOKENS", min=16,
                                                      help="Tokens for each grade (default: 1024, 256 on a small judge).")] = None,
    as_json: JsonOpt = False,
    *,
    opts: RunOptions,
) -> None:
    """Agreement of a grader with physicians on HealthBench's meta-evaluation file: macro F1 of met / not met, per category.
    Exits 1 when any row could not be graded (it is left out of the F1, and listed)."""
    from medpanel.cases.healthbench import meta_rows
    from medpanel.models import build_model
    from medpanel.scoring.healthbench_grader import grade_meta_rows
    from medpanel.scoring.healthbench_meta import AGAINST, meta_report

    if against not in AGAINST:
        raise UsageError(f"Unknown --against '{against}'.", "Use --against pairwise (HealthBench's own) or --against majority.")
    rows = pick_rows(meta_rows(file), limit, sample)
    model = build_model(judge, opts.start()[1])
    shown = {"done": 0, "at": time.monotonic()}

    def progress() -> None:  # a line at most every 5 s on stderr: a full file is some 30,000 grades
        shown["done"] += 1
        if time.monotonic() - shown["at"] >= 5 or shown["done"] == len(rows):
            shown["at"] = time.monotonic()
            err.print(f"graded {shown['done']}/{len(rows)}", style="dim")

    async def go():
        try:
            return await grade_meta_rows(model, rows, concurrency, max_tokens, on_graded=progress)
        finally:
            await model.aclose()

    grades = asyncio.run(go())
    failed = [{"prompt_id": row.prompt_id, "completion_id": row.completion_id, "error": error}
              for row, (verdict, error) in zip(rows, grades) if verdict is None]
    # The grader's agreement is over the rows it graded; the physicians' over every row picked.
    report = meta_report([v.criteria_met if v is not None else None for v, _ in grades], [r.labels for r in rows],
                         [r.physicians for r in rows], [r.category for r in rows], against)  # type: ignore[arg-type]
    graded = len(rows) - len(failed)
    if as_json:
        print_json({"file": str(file), "judge": model.id, "rows": len(rows), "graded": graded, "unscored": failed, **report})
    else:
        _print(report, model.id, file, graded, len(failed))
        for f in failed[:10]:
            out.print(styled(("  unscored", "red"), f" {f['prompt_id']} {f['completion_id']}: {f['error']}"))
    if failed:
        raise typer.Exit(1)
