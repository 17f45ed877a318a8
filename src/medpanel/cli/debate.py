"""`medpanel debate`: a panel debates one question (MCC), each turn printed as it lands; stored as a run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from medpanel.cli.common import JsonOpt, RunOptions, app, bind_options, err, out, parse_sets, print_json, split_models, styled
from medpanel.errors import UsageError
from medpanel.cli.core import exit_on_failed_items, loads_local, progress_event, single_item_failed  # noqa: E402

MODES = ("mcq", "longform")


def _inline_case(question: str | None, options: list[str] | None, answer: str | None, mode: str):
    from medpanel.cases import Case, Reference

    if not question:
        raise UsageError("No question given.", "Pass a case file, or --question 'TEXT' with --option A=... --option B=... .")
    parsed: dict[str, str] = {}
    for item in options or []:
        letter, sep, text = item.partition("=")
        letter = letter.strip().upper()
        if not sep or len(letter) != 1 or not letter.isalpha() or not text.strip():
            raise UsageError(f"--option '{item}' is not LETTER=TEXT.", "Write each option as --option A='Aspirin'.")
        if letter in parsed:
            raise UsageError(f"Option {letter} is given twice.", "Give each letter once.")
        parsed[letter] = text.strip()
    if mode == "mcq" and len(parsed) < 2:
        raise UsageError("A multiple-choice debate needs at least two options.", "Add --option A=... --option B=..., or use --mode longform.")
    return Case(id="question", source="command line", question=question, options=parsed, reference=Reference(answer=answer))


def _settings(mode: str, spec, base: dict[str, Any]) -> dict[str, Any]:
    """Only the settings the chosen protocol has; an explicit option it lacks is an error, not silently dropped."""
    from medpanel.protocols.base import setting_names

    fields = setting_names(spec.settings)
    unknown = [k for k, v in base.items() if v is not None and k not in fields]
    if unknown:
        raise UsageError(f"The {mode} debate has no setting {', '.join(unknown)}.", f"Its settings: {', '.join(fields)}.")
    return {k: v for k, v in base.items() if v is not None}


def _printer(options: dict[str, str]):
    def show(event) -> None:
        if event.kind == "turn":
            choice = event.data.get("choice")
            label = f" → {choice}" if "choice" in event.data else ""
            out.print(styled("\n", (event.speaker, "bold cyan"), " ", (f"round {event.round} · {event.phase}{label}", "dim")))
            out.print(event.text.strip())
        elif event.kind == "note":
            out.print(event.text, style="yellow")
        elif event.kind == "decision":
            text = event.text or "(no answer)"
            how = event.data.get("method") or event.data.get("stopped_by") or ""
            shown = f"{text}. {options[text]}" if text in options else text
            out.print(styled("\n", ("Decision", "bold green"), " ", (how, "dim"), ": ", shown))
    return show


@app.command("debate")
@bind_options(timeout=300.0)
def debate_command(
    case_file: Annotated[Optional[Path], typer.Argument(metavar="CASE", help="Case file (YAML/JSON) with a question (and options). Or use --question.")] = None,
    question: Annotated[Optional[str], typer.Option("--question", "-q", envvar="MEDPANEL_QUESTION", help="The question, when no case file is given.")] = None,
    option: Annotated[Optional[list[str]], typer.Option("--option", "-o", envvar="MEDPANEL_OPTION", help="An option LETTER=TEXT (repeatable).")] = None,
    answer: Annotated[Optional[str], typer.Option("--answer", envvar="MEDPANEL_ANSWER", help="The key's letter, if known: the result says whether the panel got it.")] = None,
    models: Annotated[Optional[list[str]], typer.Option("--models", "-m", envvar="MEDPANEL_MODELS", help="Seats: model specs, comma-separated (the same spec repeated makes replicas).")] = None,
    mode: Annotated[str, typer.Option("--mode", envvar="MEDPANEL_MODE", help="mcq (choose an option) or longform (open answer, scored review).")] = "mcq",
    rounds: Annotated[int, typer.Option("--rounds", envvar="MEDPANEL_ROUNDS", min=0, max=10, help="Most debate rounds before the vote.")] = 3,
    order: Annotated[Optional[str], typer.Option("--order", envvar="MEDPANEL_ORDER", help="simultaneous (the paper's rounds) or sequential (MCC's code: each seat sees this round's earlier answers).")] = None,
    peer_context: Annotated[Optional[str], typer.Option("--peer-context", envvar="MEDPANEL_PEER_CONTEXT", help="What seats see of their peers: full (answers with reasons) or choice.")] = None,
    tie_policy: Annotated[Optional[str], typer.Option("--tie-policy", envvar="MEDPANEL_TIE_POLICY", help="A tied final vote: abstain, first-model or random-seeded.")] = None,
    temperature: Annotated[float, typer.Option("--temperature", envvar="MEDPANEL_TEMPERATURE", min=0.0, max=2.0, help="Sampling temperature; replicas of one model differ only above 0.")] = 0.0,
    max_tokens: Annotated[Optional[int], typer.Option("--max-tokens", envvar="MEDPANEL_DEBATE_MAX_TOKENS", min=16, help="Most tokens per answer (default: fit the seat; mcq 512 on the embedded model, 2048 on others; reasoning models get 16000 more).")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", envvar="MEDPANEL_SEED", help="Seat i samples with seed + i.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", envvar="MEDPANEL_SET", help="Any other protocol setting KEY=VALUE (repeatable), e.g. peer_max_chars=2000.")] = None,
    as_json: JsonOpt = False,
    *,
    opts: RunOptions,
) -> None:
    """A panel of models debates one question: independent answers, debate where they differ, a vote if needed."""
    from medpanel.cases import load_case
    from medpanel.context import RunContext
    from medpanel.protocols import get_protocol
    from medpanel.protocols.base import build_settings
    from medpanel.runs.runner import RunConfig, run_benchmark

    if mode not in MODES:
        raise UsageError(f"Unknown mode '{mode}'.", f"Use --mode {' or --mode '.join(MODES)}.")
    if case_file is not None and (question or option):
        raise UsageError("Both a case file and --question/--option were given.", "Use one or the other.")
    case = load_case(case_file) if case_file is not None else _inline_case(question, option, answer, mode)
    if answer and case_file is not None:
        case.reference.answer = answer.strip().upper()
    seats = split_models(models)
    if len(seats) < 2 and mode == "mcq":
        raise UsageError(f"A debate needs at least two seats; got {len(seats)}.", "Pass --models a,b,c (e.g. --models local,local,local with --temperature 0.7).")
    spec = get_protocol("debate" if mode == "mcq" else "longform")

    settings = _settings(mode, spec, {
        "max_rounds": rounds, "order": order, "peer_context": peer_context, "tie_policy": tie_policy,
        "temperature": temperature, "max_tokens": max_tokens,
        "seeds": [seed + i for i in range(len(seats))] if seed is not None else None,
    }) | parse_sets(set_)
    build_settings(spec.settings, settings, spec.name)  # an unknown or invalid --set is a usage error here, before any call

    db, runtime = opts.start()
    config = RunConfig(dataset=str(case_file) if case_file else "command line", protocol=spec.name, models=seats, settings=settings)
    # --json: no transcript on stdout, but a line per answer and critique on stderr; else the debate as it happens.
    on_event = progress_event if as_json else _printer(case.options)
    if not as_json:
        err.print(f"{spec.name} on '{case.id}' with {', '.join(seats)}{loads_local(*seats)}...", style="dim")
    result = asyncio.run(run_benchmark(db, config, runtime, protocol=spec, cases=[case], context=RunContext(on_event=on_event)))
    items = db.items(result.run_id)
    item = items[0] if items else None
    if as_json:
        print_json({"run_id": result.run_id, "item": item, "events": db.events(result.run_id, case.id)})
        exit_on_failed_items(result)
        return
    if item is None or item["status"] != "done":
        single_item_failed(result, f"The debate failed: {item['error'] if item else 'no result'}", f"See `medpanel show {result.run_id}`.")
    scores = {s["name"]: s["value"] for s in db.scores(result.run_id)}
    if scores.get("accuracy") is not None:
        out.print(styled(("correct", "green")) if scores["accuracy"] == 1.0 else styled(("incorrect", "red"), f" (key: {case.reference.answer})"))
    totals = f"{item['input_tokens']}+{item['output_tokens']} tokens · ${item['cost_usd']:.6f}"
    err.print(f"run {result.run_id} · {totals} · see it again with: medpanel show {result.run_id} --item {case.id}", style="dim")
