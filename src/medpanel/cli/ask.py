"""`medpanel ask`: Specialist Turn on one question, stored as a run of the specialist protocol.

The question is a one-item dataset built here, so the answer (and its judgement) lands in the store like
any other run: `show`, `report` and `judge run` work on it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Optional

import typer

from medpanel.cli.common import JsonOpt, RunOptions, app, bind_options, err, out, print_json, styled
from medpanel.cli.core import exit_on_failed_items, loads_local, single_item_failed
from medpanel.cli.judge import JudgeModeOpt, ReferenceOpt, _finish, _mode, read_text_arg
from medpanel.errors import UsageError


@app.command()
@bind_options(timeout=300.0)
def ask(
    case: Annotated[Path, typer.Argument(help="Case file (YAML/JSON) or a folder holding case.yaml.")],
    question: Annotated[str, typer.Argument(help="The question the board puts to the specialist.")],
    role: Annotated[str, typer.Option("--role", "-r", envvar="MEDPANEL_ROLE", help="The specialist who answers, e.g. 'Radiation Oncologist'.")],
    model: Annotated[str, typer.Option("--model", "-m", envvar="MEDPANEL_MODEL", help="Model spec of the specialist.")] = "local",
    judge: Annotated[Optional[str], typer.Option("--judge", "-j", envvar="MEDPANEL_JUDGE", help="Also grade the answer with this judge model.")] = None,
    reference: ReferenceOpt = None,
    prompt_file: Annotated[Optional[Path], typer.Option("--prompt-file", envvar="MEDPANEL_PROMPT_FILE", help="System prompt file for the specialist (e.g. the paper's).")] = None,
    judge_prompt_file: Annotated[Optional[Path], typer.Option("--judge-prompt-file", envvar="MEDPANEL_JUDGE_PROMPT_FILE", help="System prompt file for the clinical-equivalence judge.")] = None,
    sentence_limit: Annotated[str, typer.Option("--sentence-limit", envvar="MEDPANEL_SENTENCE_LIMIT", help="Over three sentences: 'score' the violation or 'trim'.")] = "score",
    max_tokens: Annotated[int, typer.Option("--max-tokens", envvar="MEDPANEL_ASK_MAX_TOKENS", min=16, help="Tokens for the specialist's answer.")] = 300,
    judge_mode: JudgeModeOpt = "medpanel",
    as_json: JsonOpt = False,
    *,
    opts: RunOptions,
) -> None:
    """Specialist Turn: one specialist answers one question about a case, in at most three sentences; stored as a run."""
    from medpanel.cases import load_case
    from medpanel.context import RunContext
    from medpanel.protocols import get_protocol
    from medpanel.protocols.specialist import specialist_item
    from medpanel.runs.runner import RunConfig, run_benchmark

    if sentence_limit not in ("score", "trim"):
        raise UsageError(f"--sentence-limit '{sentence_limit}' is not score or trim.", "Use --sentence-limit score (default) or trim.")
    item = specialist_item(load_case(case), question, role, read_text_arg(reference, "the reference") if reference else None)
    if judge and not item.reference.answer:
        raise UsageError(f"No reference answer for this question in {case}.", "Pass one with --reference TEXT|@FILE, or ask one of the case's own questions.")
    # The item is this one question: without the case's list of questions it does not expand into them.
    item = item.model_copy(update={"metadata": {k: v for k, v in item.metadata.items() if k != "specialist_questions"}})
    settings = {"sentence_limit": sentence_limit, "max_tokens": max_tokens, "judge_mode": _mode(judge_mode)}
    settings |= {k: str(v) for k, v in (("prompt_file", prompt_file), ("judge_prompt_file", judge_prompt_file)) if v is not None}
    spec = get_protocol("specialist")
    db, runtime = opts.start()
    config = RunConfig(dataset=str(case), protocol=spec.name, models=[model], settings=settings, roles={"judge": judge} if judge else {})
    if not as_json:
        err.print(f"{role} on {item.id} with {model}{loads_local(model, judge)}...", style="dim")
    result = asyncio.run(run_benchmark(db, config, runtime, protocol=spec, cases=[item], context=RunContext()))
    items = db.items(result.run_id)
    done = items[0] if items and items[0]["status"] == "done" else None
    if done is None:
        if as_json:
            print_json({"run_id": result.run_id, "case": item.id, "role": role, "question": question, "item": items[0] if items else None})
            exit_on_failed_items(result)
        single_item_failed(result, f"The specialist's turn failed: {items[0]['error'] if items else 'no result'}", f"See `medpanel show {result.run_id}`.")
    outcome, events = done["outcome"], db.events(result.run_id, item.id)
    scores = {row["name"]: row["value"] for row in db.scores(result.run_id)}
    if as_json:
        print_json({"run_id": result.run_id, "case": item.id, "role": role, "question": question, "answer": outcome.get("answer"),
                    "scores": scores, "data": outcome["data"]})
        return
    out.print(styled((role, "bold cyan"), ": ", outcome.get("answer") or "(no answer)"))
    data = outcome["data"]
    notes = [f"{data['sentences']} sentence(s)" + (" (trimmed to 3)" if data["trimmed"] else " (over the limit of 3)" if not data["within_limit"] else "")]
    if not data["format_ok"]:
        notes.append("not valid JSON: read leniently")
    err.print(" · ".join(notes) + f" · run {result.run_id} (medpanel show {result.run_id})", style="dim")
    verdicts = _verdicts(events)
    if verdicts:
        _finish(verdicts, False)


def _verdicts(events: list[dict]) -> dict:
    """The judge's verdicts the run recorded, by rubric (score events carry the whole judgement)."""
    from medpanel.scoring.judges import JudgeResult

    return {e["role"]: JudgeResult.model_validate(e["data"]) for e in events
            if e["kind"] == "score" and isinstance(e.get("data"), dict) and "rubric" in e["data"]}
