"""Specialist Turn and the rubric judges: `medpanel ask` and `medpanel judge equivalence|board|run`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from medpanel.cli.common import (JsonOpt, MaxCallsOpt, MaxDollarsOpt, MaxTokensOpt, NoCacheOpt, PricesOpt, ReasksOpt, StoreOpt,
                                 TimeoutOpt, app, err, make_runtime, open_store, out, print_json, styled)
from medpanel.errors import UsageError

judge_app = typer.Typer(no_args_is_help=True, help="Grade responses with OpenTumorBoard's rubric judges (LLM as judge, temperature 0).")
app.add_typer(judge_app, name="judge")

JudgeOpt = Annotated[str, typer.Option("--judge", "-j", envvar="MEDPANEL_JUDGE", help="Model spec of the judge, e.g. openai:gpt-4o-mini or local.")]
CaseOpt = Annotated[Path, typer.Option("--case", envvar="MEDPANEL_CASE", help="Case file (YAML/JSON) or a folder holding case.yaml.")]
ReferenceOpt = Annotated[Optional[str], typer.Option("--reference", envvar="MEDPANEL_REFERENCE", help="Reference TEXT or @FILE (default: the case's own).")]
PromptFilesOpt = Annotated[Optional[list[str]], typer.Option(
    "--prompt-file", envvar="MEDPANEL_JUDGE_PROMPT_FILE",
    help="Replace a rubric's system prompt: RUBRIC=PATH (equivalence, alignment, decisions, scope, consistency); repeatable.")]
ScopeFileOpt = Annotated[Optional[Path], typer.Option("--scope-file", envvar="MEDPANEL_SCOPE_FILE", help="JSON file that keeps frozen four-decision scopes across runs.")]
JudgeTokensOpt = Annotated[int, typer.Option("--max-tokens", envvar="MEDPANEL_JUDGE_MAX_TOKENS", min=16, help="Tokens for each judge reply (medpanel mode; released mode uses the release's budgets).")]
JudgeModeOpt = Annotated[str, typer.Option("--judge-mode", envvar="MEDPANEL_JUDGE_MODE",
                                           help="medpanel (default) or released: reproduce the benchmark's own evaluation (docs/judges.md).")]


def _mode(value: str) -> str:
    from medpanel.scoring.judges import check_mode

    return check_mode(value.strip().lower())


def read_text_arg(value: str, what: str) -> str:
    """TEXT as given, or @FILE's contents."""
    if not value.startswith("@"):
        return value
    path = Path(value[1:])
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"Cannot read {what} from {path}: {getattr(exc, 'strerror', None) or exc}.", f"Pass {what} as text, or @PATH of a readable file.") from None


def parse_prompt_files(values: list[str] | None, default_rubric: str | None) -> dict[str, Path]:
    """RUBRIC=PATH pairs; a bare PATH names the command's only rubric."""
    from medpanel.scoring.judges import RUBRICS, check_prompt_files

    files: dict[str, Path] = {}
    for value in values or []:
        rubric, sep, path = value.partition("=")
        if sep and rubric.strip() in RUBRICS:
            files[rubric.strip()] = Path(path)
        elif default_rubric:
            files[default_rubric] = Path(value)
        else:
            raise UsageError(f"--prompt-file '{value}' does not say which rubric it is for.", f"Write RUBRIC=PATH, RUBRIC one of: {', '.join(RUBRICS)}.")
    return check_prompt_files(files)


def _print_results(results: dict[str, Any]) -> None:
    for name, r in results.items():
        shown = ", ".join(f"{k} {v:g}" if v is not None else f"{k} -" for k, v in r.scores.items())
        colour = {"ok": "green", "format_failure": "yellow", "failed": "red"}[r.status]
        out.print(styled((name, "bold"), " ", (r.status, colour), f": {shown}"))
        if r.rationale:
            out.print(f"  {r.rationale}")


def _finish(results: dict[str, Any], as_json: bool, extra: dict | None = None) -> None:
    """Print judgements; exit 1 when any is unscored, so scripts notice."""
    from medpanel.scoring.judges import merged_scores

    if as_json:
        print_json({**(extra or {}), "scores": merged_scores(results), "results": {k: r.model_dump(mode="json") for k, r in results.items()}})
    else:
        _print_results(results)
    if any(r.status == "failed" for r in results.values()):
        raise typer.Exit(1)


async def _closing(model, coro):
    try:
        return await coro
    finally:
        await model.aclose()


# ---------------------------------------------------------------- medpanel ask

@app.command()
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
    max_tokens: Annotated[int, typer.Option("--max-tokens", envvar="MEDPANEL_MAX_TOKENS", min=16)] = 300,
    judge_mode: JudgeModeOpt = "medpanel",
    store: StoreOpt = None,
    no_cache: NoCacheOpt = False,
    timeout: TimeoutOpt = 300.0,
    max_reasks: ReasksOpt = 2,
    as_json: JsonOpt = False,
) -> None:
    """Specialist Turn: one specialist answers one question about a case, in at most three sentences."""
    from medpanel.cases import load_case
    from medpanel.models import build_model
    from medpanel.protocols import Panel
    from medpanel.protocols.specialist import SPEC, SpecialistSettings, specialist_item

    if sentence_limit not in ("score", "trim"):
        raise UsageError(f"--sentence-limit '{sentence_limit}' is not score or trim.", "Use --sentence-limit score (default) or trim.")
    item = specialist_item(load_case(case), question, role, read_text_arg(reference, "the reference") if reference else None)
    if judge and not item.reference.answer:
        raise UsageError(f"No reference answer for this question in {case}.", "Pass one with --reference TEXT|@FILE, or ask one of the case's own questions.")
    settings = SpecialistSettings(prompt_file=prompt_file, sentence_limit=sentence_limit, judge=judge, judge_prompt_file=judge_prompt_file,
                                  max_tokens=max_tokens, judge_mode=_mode(judge_mode))
    runtime = make_runtime(open_store(store), no_cache=no_cache, timeout=timeout, max_reasks=max_reasks)
    specialist = build_model(model, runtime)
    outcome = asyncio.run(_closing(specialist, SPEC.run(item, Panel.of([specialist], [model]), settings)))
    scores = SPEC.score(item, outcome)
    if as_json:
        print_json({"case": item.id, "role": role, "question": question, "answer": outcome.answer, "scores": scores, "data": outcome.data})
        return
    out.print(styled((role, "bold cyan"), ": ", outcome.answer or "(no answer)"))
    data = outcome.data
    notes = [f"{data['sentences']} sentence(s)" + (" (trimmed to 3)" if data["trimmed"] else " (over the limit of 3)" if not data["within_limit"] else "")]
    if not data["format_ok"]:
        notes.append("not valid JSON: read leniently")
    err.print(" · ".join(notes), style="dim")
    if "judge" in data:
        from medpanel.scoring.judges import JudgeResult

        _finish({"clinical_equivalence": JudgeResult.model_validate(data["judge"])}, False)


# ---------------------------------------------------------------- medpanel judge ...

def _judge_runtime(store, no_cache, timeout, max_reasks, **caps):
    return make_runtime(open_store(store), no_cache=no_cache, timeout=timeout, max_reasks=max_reasks, **caps)


@judge_app.command("equivalence")
def judge_equivalence_cmd(
    case: CaseOpt,
    candidate: Annotated[str, typer.Option("--candidate", envvar="MEDPANEL_CANDIDATE", help="The answer to grade: TEXT or @FILE (a JSON {\"answer\": ...} is read too).")],
    judge: JudgeOpt,
    reference: ReferenceOpt = None,
    question: Annotated[Optional[str], typer.Option("--question", envvar="MEDPANEL_QUESTION", help="The question (default: the case's).")] = None,
    role: Annotated[Optional[str], typer.Option("--role", "-r", envvar="MEDPANEL_ROLE", help="The specialist role (default: the case's).")] = None,
    prompt_file: PromptFilesOpt = None,
    max_tokens: JudgeTokensOpt = 512,
    judge_mode: JudgeModeOpt = "medpanel",
    store: StoreOpt = None,
    no_cache: NoCacheOpt = False,
    timeout: TimeoutOpt = 300.0,
    max_reasks: ReasksOpt = 2,
    as_json: JsonOpt = False,
) -> None:
    """Clinical equivalence of a specialist's answer to the reference answer (score 1-5, critical error, unsupported claim)."""
    from medpanel.cases import load_case
    from medpanel.models import build_model
    from medpanel.protocols.specialist import answer_text, specialist_item
    from medpanel.scoring.judges import judge_equivalence

    loaded = load_case(case)
    item = specialist_item(loaded, question or loaded.question, role or loaded.target_role,
                           read_text_arg(reference, "the reference") if reference else None)
    if not item.question or not item.target_role:
        raise UsageError(f"Case {case} has no question or target role.", "Pass --question and --role.")
    if not item.reference.answer:
        raise UsageError(f"No reference answer for this question in {case}.", "Pass one with --reference TEXT|@FILE.")
    files = parse_prompt_files(prompt_file, "equivalence")
    _mode(judge_mode)
    model = build_model(judge, _judge_runtime(store, no_cache, timeout, max_reasks))
    result = asyncio.run(_closing(model, judge_equivalence(model, item, answer_text(read_text_arg(candidate, "the candidate")),
                                                           prompt_file=files.get("equivalence"), max_tokens=max_tokens,
                                                           mode=_mode(judge_mode))))
    _finish({"clinical_equivalence": result}, as_json, {"case": item.id})


@judge_app.command("board")
def judge_board_cmd(
    case: CaseOpt,
    response: Annotated[str, typer.Option("--response", envvar="MEDPANEL_RESPONSE", help="The board response to grade (discussion and conclusion): TEXT or @FILE.")],
    judge: JudgeOpt,
    reference: ReferenceOpt = None,
    prompt_file: PromptFilesOpt = None,
    scope_file: ScopeFileOpt = None,
    max_tokens: JudgeTokensOpt = 512,
    judge_mode: JudgeModeOpt = "medpanel",
    store: StoreOpt = None,
    no_cache: NoCacheOpt = False,
    timeout: TimeoutOpt = 300.0,
    max_reasks: ReasksOpt = 2,
    as_json: JsonOpt = False,
) -> None:
    """Conclusion alignment, the four decisions and discussion-to-conclusion consistency of one board response."""
    from medpanel.cases import load_case
    from medpanel.models import build_model
    from medpanel.scoring.judges import ScopeBook, judge_board

    loaded = load_case(case)
    ref = read_text_arg(reference, "the reference") if reference else loaded.reference.conclusion
    if not ref:
        raise UsageError(f"Case {case} has no reference conclusion.", "Pass one with --reference TEXT|@FILE.")
    files = parse_prompt_files(prompt_file, None)
    mode = _mode(judge_mode)
    model = build_model(judge, _judge_runtime(store, no_cache, timeout, max_reasks))
    results = asyncio.run(_closing(model, judge_board(model, loaded, read_text_arg(response, "the response"), ref,
                                                      scopes=ScopeBook(scope_file), prompt_files=files, max_tokens=max_tokens,
                                                      mode=mode)))
    _finish(results, as_json, {"case": loaded.id})


@judge_app.command("run")
def judge_run_cmd(
    run: Annotated[str, typer.Argument(help="Run id of a specialist, board or board-live run, a unique prefix, or 'last'.")],
    judge: JudgeOpt,
    prompt_file: PromptFilesOpt = None,
    scope_file: ScopeFileOpt = None,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", envvar="MEDPANEL_CONCURRENCY", min=1, max=256, help="Items judged at once.")] = 4,
    max_tokens: JudgeTokensOpt = 512,
    judge_mode: JudgeModeOpt = "medpanel",
    store: StoreOpt = None,
    no_cache: NoCacheOpt = False,
    prices: PricesOpt = None,
    max_calls: MaxCallsOpt = None,
    max_tokens_total: MaxTokensOpt = None,
    max_dollars: MaxDollarsOpt = None,
    timeout: TimeoutOpt = 300.0,
    max_reasks: ReasksOpt = 2,
    as_json: JsonOpt = False,
) -> None:
    """Judge the stored outcomes of a run and add the scores to it (see them with `medpanel show RUN`)."""
    from medpanel.models import build_model
    from medpanel.runs.summary import mean_interval
    from medpanel.scoring.judges import ScopeBook, judge_stored_run

    mode = _mode(judge_mode)
    db = open_store(store)
    run_id = db.resolve_run_id(run)
    protocol = db.get_run(run_id)["protocol"]
    files = parse_prompt_files(prompt_file, "equivalence" if protocol == "specialist" else None)
    runtime = make_runtime(db, no_cache=no_cache, prices=prices, max_calls=max_calls, max_tokens=max_tokens_total,
                           max_dollars=max_dollars, timeout=timeout, max_reasks=max_reasks)
    model = build_model(judge, runtime)

    def progress(row: dict) -> None:
        if not as_json:
            failed = row["scores"].get("judge_failed")
            err.print(f"judged {row['item']}#{row['repeat']}{' (unscored: judge failed)' if failed else ''}", style="dim")

    rows = asyncio.run(_closing(model, judge_stored_run(db, run_id, model, scopes=ScopeBook(scope_file), prompt_files=files,
                                                        max_tokens=max_tokens, concurrency=concurrency, on_item=progress,
                                                        mode=mode)))
    names = sorted({k for r in rows for k in r["scores"]})
    summary = {name: mean_interval([r["scores"][name] for r in rows if r["scores"].get(name) is not None], name, protocol=protocol)
               for name in names}
    if as_json:
        print_json({"run_id": run_id, "judge": model.id, "items": len(rows), "summary": summary, "judged": rows})
        return
    out.print(styled((f"run {run_id}", "bold"), f" · {protocol} · judged {len(rows)} item(s) with {model.id}"))
    for name, st in summary.items():
        if st["mean"] is None:
            out.print(f"  {name}: unscored (n=0)")
            continue
        interval = f" [{st['low']:.3f}, {st['high']:.3f}]" if st["low"] is not None else ""
        out.print(f"  {name}: {st['mean']:.3f}{interval} n={st['n']}")
    err.print(f"scores added to the run; see them with: medpanel show {run_id}", style="dim")
