"""The rubric judges: `medpanel judge equivalence|board|run` (and what `medpanel ask` shares with them)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from medpanel.cli.common import JsonOpt, RunOptions, app, bind_options, err, out, print_json, styled
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
JudgeTokensOpt = Annotated[Optional[int], typer.Option("--max-tokens", envvar="MEDPANEL_JUDGE_MAX_TOKENS", min=16,
                                                       help="Tokens for each judge reply (medpanel mode; released mode uses the release's budgets). "
                                                            "`judge run`: default the run's own setting (a HealthBench run's grader_max_tokens).")]
JudgeModeOpt = Annotated[Optional[str], typer.Option("--judge-mode", envvar="MEDPANEL_JUDGE_MODE",
                                                     help="medpanel or released: reproduce the benchmark's own evaluation (docs/judges.md). "
                                                          "`judge run`: default the run's own setting.")]


@dataclass(frozen=True)
class JudgeOptions:
    """The judge and how it is asked, shared by every `judge` command: its model, prompt files, reply budget, mode."""

    judge: JudgeOpt
    prompt_file: PromptFilesOpt = None
    max_tokens: JudgeTokensOpt = 512
    judge_mode: JudgeModeOpt = "medpanel"

    def files(self, default_rubric: str | None) -> dict[str, Path]:
        return parse_prompt_files(self.prompt_file, default_rubric)

    @property
    def mode(self) -> str | None:
        return _mode(self.judge_mode) if self.judge_mode is not None else None


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


# ---------------------------------------------------------------- medpanel judge ...

def judge_command(name: str, **defaults: Any):
    """A `medpanel judge NAME` command with the run options and the judge options bound (timeout 300 s)."""
    def register(command):
        return judge_app.command(name)(bind_options(timeout=300.0, **defaults)(command))
    return register


@judge_command("equivalence")
def judge_equivalence_cmd(
    case: CaseOpt,
    candidate: Annotated[str, typer.Option("--candidate", envvar="MEDPANEL_CANDIDATE", help="The answer to grade: TEXT or @FILE (a JSON {\"answer\": ...} is read too).")],
    reference: ReferenceOpt = None,
    question: Annotated[Optional[str], typer.Option("--question", envvar="MEDPANEL_QUESTION", help="The question (default: the case's).")] = None,
    role: Annotated[Optional[str], typer.Option("--role", "-r", envvar="MEDPANEL_ROLE", help="The specialist role (default: the case's).")] = None,
    as_json: JsonOpt = False,
    *,
    judging: JudgeOptions,
    opts: RunOptions,
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
    files, mode = judging.files("equivalence"), judging.mode
    model = build_model(judging.judge, opts.start()[1])
    result = asyncio.run(_closing(model, judge_equivalence(model, item, answer_text(read_text_arg(candidate, "the candidate")),
                                                           prompt_file=files.get("equivalence"), max_tokens=judging.max_tokens,
                                                           mode=mode)))
    _finish({"clinical_equivalence": result}, as_json, {"case": item.id})


@judge_command("board")
def judge_board_cmd(
    case: CaseOpt,
    response: Annotated[str, typer.Option("--response", envvar="MEDPANEL_RESPONSE", help="The board response to grade (discussion and conclusion): TEXT or @FILE.")],
    reference: ReferenceOpt = None,
    scope_file: ScopeFileOpt = None,
    as_json: JsonOpt = False,
    *,
    judging: JudgeOptions,
    opts: RunOptions,
) -> None:
    """Conclusion alignment, the four decisions and discussion-to-conclusion consistency of one board response."""
    from medpanel.cases import load_case
    from medpanel.models import build_model
    from medpanel.scoring.judges import ScopeBook, judge_board

    loaded = load_case(case)
    ref = read_text_arg(reference, "the reference") if reference else loaded.reference.conclusion
    if not ref:
        raise UsageError(f"Case {case} has no reference conclusion.", "Pass one with --reference TEXT|@FILE.")
    files, mode = judging.files(None), judging.mode
    model = build_model(judging.judge, opts.start()[1])
    results = asyncio.run(_closing(model, judge_board(model, loaded, read_text_arg(response, "the response"), ref,
                                                      scopes=ScopeBook(scope_file), prompt_files=files, max_tokens=judging.max_tokens,
                                                      mode=mode)))
    _finish(results, as_json, {"case": loaded.id})


@judge_command("run", max_tokens=None, judge_mode=None)
def judge_run_cmd(
    run: Annotated[str, typer.Argument(help="Run id of a specialist, board or board-live run (an ask included), or of a HealthBench run (single, longform), a unique prefix, or 'last'.")],
    scope_file: ScopeFileOpt = None,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", envvar="MEDPANEL_CONCURRENCY", min=1, max=256, help="Items judged at once.")] = 4,
    as_json: JsonOpt = False,
    *,
    judging: JudgeOptions,
    opts: RunOptions,
) -> None:
    """Judge the stored outcomes of a run and add the scores to it (see them with `medpanel show RUN`).
    The judge runs the protocol's own judging scorers, as they run when a run is judged while it runs."""
    from medpanel.context import RunContext
    from medpanel.models import build_model
    from medpanel.runs.judging import judge_stored_run
    from medpanel.runs.summary import mean_interval

    db, runtime = opts.start()
    run_id = db.resolve_run_id(run)
    protocol = db.get_run(run_id)["protocol"]
    update = _judge_settings(protocol, judging.files("equivalence" if protocol == "specialist" else None), judging.max_tokens, judging.mode)
    model = build_model(judging.judge, runtime)
    context = RunContext()
    if scope_file is not None:  # the judges' run-wide scope book, kept in the file across runs
        from medpanel.scoring.judges import ScopeBook

        context.caches["scope_book"] = ScopeBook(scope_file)

    def progress(row: dict) -> None:
        if not as_json:
            failed = row["scores"].get("judge_failed")
            err.print(f"judged {row['item']}#{row['repeat']}{' (unscored: judge failed)' if failed else ''}", style="dim")

    rows = asyncio.run(_closing(model, judge_stored_run(db, run_id, model, settings_update=update, concurrency=concurrency,
                                                        on_item=progress, context=context)))
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


def _judge_settings(protocol: str, files: dict[str, Path], max_tokens: int | None, mode: str | None) -> dict[str, Any]:
    """What the command line changes in the run's judge settings: only what was given, under the names the
    protocol's settings use (one prompt file for the specialist's single rubric, a file per rubric for a board)."""
    from medpanel.protocols import PROTOCOLS, get_protocol
    from medpanel.protocols.base import setting_names

    spec = get_protocol(protocol) if protocol in PROTOCOLS else None
    if spec is None or not any(s.role == "judge" for s in spec.scorers):
        return {}  # judge_stored_run refuses the run, naming the protocols a judge scores
    names = setting_names(spec.settings)
    update: dict[str, Any] = {}
    if files:
        if "judge_prompt_files" in names:
            update["judge_prompt_files"] = {rubric: str(path) for rubric, path in files.items()}
        elif "judge_prompt_file" in names and set(files) == {"equivalence"}:
            update["judge_prompt_file"] = str(files["equivalence"])
        else:
            raise UsageError(f"The {protocol} protocol's judges take no prompt file for {', '.join(sorted(files))}.",
                             "Give a prompt file only for a rubric this run is judged with.")
    # A HealthBench run's judge is the rubric grader, whose budget is grader_max_tokens: --max-tokens sets it there.
    tokens_key = next((k for k in ("judge_max_tokens", "grader_max_tokens") if k in names), "judge_max_tokens")
    for key, value, flag in ((tokens_key, max_tokens, "--max-tokens"), ("judge_mode", mode, "--judge-mode")):
        if value is None:
            continue
        if key not in names:
            raise UsageError(f"The {protocol} protocol's judges have no setting {key}, so {flag} cannot change it.", f"Drop {flag}.")
        update[key] = value
    return update
