"""Consult commands: `medpanel consult NOTE_FILE` (MedSyn) and `medpanel score icd10`."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from medpanel.cli.common import JsonOpt, RunOptions, app, bind_options, err, out, parse_sets, print_json, score_app, styled
from medpanel.errors import UsageError
from medpanel.cli.core import loads_local, progress_event, single_item_failed  # noqa: E402

CONSULT_PROTOCOLS = ("consult", "baseline", "baseline-note")


def _consult_protocol(name: str):
    """The consult protocol or baseline named by --protocol; any other protocol is refused."""
    from medpanel.protocols import get_protocol

    if name not in CONSULT_PROTOCOLS:
        raise UsageError(f"'{name}' is not a consult protocol.", f"Use one of: {', '.join(CONSULT_PROTOCOLS)}.")
    return get_protocol(name)


def _seat_spec(spec: str, seat: str) -> str:
    # A bare "human" is named after the chair, so the terminal says whose turn it is.
    return f"human:{seat}" if spec.strip().lower() == "human" else spec


def _say(*parts) -> None:
    # Whole lines (the terminal wraps them), so what was said can be searched for as it was written.
    out.print(styled(*parts), soft_wrap=True)


def _show_event(event) -> None:
    data = event.data
    if event.kind == "turn" and event.speaker == "Physician":
        verb = "submits" if data.get("action") == "submit" else "asks"
        _say((f"turn {event.round}", "dim"), " ", ("Physician", "bold cyan"), f" {verb}: ", str(data.get("message", event.text)))
    elif event.kind == "turn":
        _say((f"turn {event.round}", "dim"), " ", (event.speaker, "bold magenta"), ": ", event.text.strip())
    elif event.kind == "decision":
        _say(("Discharge", "bold green"), ": ", str(data.get("diagnosis")), " | codes: ", ", ".join(data.get("codes") or []) or "(none)")
    else:
        _say((event.text, "yellow"))


def _code_rows(codes: list[str]) -> list[dict[str, Any]]:
    from medpanel.scoring.icd10 import code_table

    table = code_table()  # a missing table is a UsageError naming the data folder, never blank columns
    rows = []
    for code in codes:
        info = table.info(code)
        rows.append({"code": info.code, "valid": info.valid, "description": info.description or (
            f"(no such code; category {info.category}: {info.category_description})" if info.category_description else "(no such code)"),
            "category": info.category, "block": info.block, "chapter": info.chapter})
    return rows


def _print_codes(title: str, rows: list[dict[str, Any]]) -> None:
    table = Table("code", "exists", "chapter", "description", title=title, title_justify="left")
    for r in rows:
        exists = "?" if r["valid"] is None else ("yes" if r["valid"] else styled(("no", "red")))
        table.add_row(r["code"], exists, str(r.get("chapter") or ""), r["description"] or "")
    out.print(table)


def _print_metrics(scores: dict[str, Any]) -> None:
    from medpanel.scoring.icd10 import LEVELS, METRICS

    table = Table("level", *METRICS, title="ICD-10 metrics", title_justify="left")
    for level in LEVELS:
        table.add_row(level, *("-" if scores.get(f"{level}_{m}") is None else f"{scores[f'{level}_{m}']:.3f}" for m in METRICS))
    out.print(table)
    if scores.get("invalid_rate") is not None:
        out.print(f"invalid (non-existent) predicted codes: {scores['invalid_rate']:.1%}")


@app.command()
@bind_options(timeout=300.0)
def consult(
    note_file: Annotated[str, typer.Argument(help="A case YAML/JSON, a plain-text note with MIMIC-style 'Heading:' sections, or codiesp:<dev index or document id>.")],
    physician: Annotated[str, typer.Option("--physician", envvar="MEDPANEL_PHYSICIAN", help="Model spec in the physician's chair, or 'human'.")] = "local",
    assistant: Annotated[Optional[str], typer.Option("--assistant", envvar="MEDPANEL_ASSISTANT", help="Model spec in the assistant's chair, or 'human' (default: the physician's model; 'local' when the physician is human).")] = None,
    protocol: Annotated[str, typer.Option("--protocol", "-p", envvar="MEDPANEL_CONSULT_PROTOCOL", help="consult, or a baseline: baseline (chief complaint only), baseline-note (full note).")] = "consult",
    max_turns: Annotated[int, typer.Option("--max-turns", envvar="MEDPANEL_CONSULT_MAX_TURNS", min=3, max=200, help="Messages in all, the discharge included; past it the consult is unfinished.")] = 20,
    max_tokens: Annotated[Optional[int], typer.Option("--max-tokens", envvar="MEDPANEL_CONSULT_MAX_TOKENS", min=16, help="Tokens per question, answer and discharge (default: fit the seat; 256 on the embedded model, 1024 on others, reasoning models 16000 more).")] = None,
    sections: Annotated[Optional[str], typer.Option("--sections", envvar="MEDPANEL_SECTIONS", help="For a text note: sections the assistant sees, comma-separated (default: chief complaint, history of present illness, physical exam, pertinent results).")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", envvar="MEDPANEL_CONSULT_SET", help="Protocol setting KEY=VALUE (repeatable), e.g. --set min_questions=2.")] = None,
    as_json: JsonOpt = False,
    *,
    opts: RunOptions,
) -> None:
    """A physician with only the chief complaint consults an assistant holding the note, then writes the discharge (MedSyn); stored as a run."""
    from medpanel.cases.notes import load_consult_case
    from medpanel.context import RunContext
    from medpanel.protocols.base import build_settings
    from medpanel.protocols.consult import ASSISTANT, PHYSICIAN, briefing
    from medpanel.runs.runner import RunConfig, run_benchmark

    spec = _consult_protocol(protocol)
    from medpanel.scoring.icd10 import code_table

    visible = tuple(s.strip().lower() for s in sections.split(",") if s.strip()) if sections else None
    case = load_consult_case(note_file, visible)
    code_table()  # before any model call: scoring needs the ICD-10-CM table, and a missing one is a UsageError
    physician_spec = _seat_spec(physician, PHYSICIAN)
    assistant_spec = _seat_spec(assistant or ("local" if physician_spec.startswith("human") else physician), ASSISTANT)
    settings = ({"max_tokens": max_tokens, "discharge_max_tokens": max_tokens} if max_tokens is not None else {}) | parse_sets(set_)
    if protocol == "consult":
        settings["max_turns"] = max_turns
    else:
        settings.pop("max_tokens", None)
    build_settings(spec.settings, settings, spec.name)  # unknown keys and bad values: a usage error naming the settings

    db, runtime = opts.start()
    # One chair's spec for both: one model in both chairs (the protocol seats the first twice), as `bench -m M` does.
    chairs = [physician_spec] if assistant_spec == physician_spec else [physician_spec, assistant_spec]
    config = RunConfig(dataset=note_file, protocol=protocol, models=chairs, settings=settings)
    if not as_json:
        err.print(f"{protocol} on {case.id}: physician {physician_spec}"
                  + (f", assistant {assistant_spec}" if protocol == "consult" else "") + f"{loads_local(physician_spec, assistant_spec)}...", style="dim")
        _say(("Chief complaint", "bold"), ": ", case.chief_complaint)
        for seat, seat_spec in ((PHYSICIAN, physician_spec), (ASSISTANT, assistant_spec)):
            if seat_spec.startswith("human") and (seat == PHYSICIAN or protocol == "consult"):
                _say(f"\n{briefing(case, seat)}\n")
    # The dialogue as it happens (--json: a line per turn on stderr, stdout stays JSON).
    context = RunContext(on_event=progress_event if as_json else _show_event)
    result = asyncio.run(run_benchmark(db, config, runtime, protocol=spec, cases=[case], context=context))
    items = db.items(result.run_id)
    item = items[0] if items else None
    if item is None or item["status"] != "done":
        single_item_failed(result, f"The consult failed: {item['error'] if item else 'no result'}", f"See `medpanel show {result.run_id} --item {case.id}`.")
    outcome = item["outcome"]
    scores = {row["name"]: row["value"] for row in db.scores(result.run_id) if row["item_id"] == case.id}
    codes = outcome["data"].get("codes") or []
    if as_json:
        print_json({"run_id": result.run_id, "case": case.id, "status": outcome["status"], "diagnosis": outcome.get("answer"),
                    "codes": _code_rows(codes), "unread": outcome["data"].get("unread", []), "gold_codes": case.reference.codes, "scores": scores,
                    "turns": outcome["data"].get("turns"), "events": db.events(result.run_id, case.id)})
        return
    if outcome["status"] != "ok":
        policy = outcome["data"].get("unfinished", "empty")
        _say("\n", ("Unfinished", "bold yellow"), f": no discharge within {outcome['data'].get('max_turns')} turns; "
             + ("scored as an empty prediction (--set unfinished=exclude leaves it out)." if policy == "empty"
                else "left out of the ICD-10 scores (unfinished=exclude)."))
    else:
        _say("\n", ("Diagnosis", "bold green"), ": ", str(outcome.get("answer")))
        _print_codes("Discharge codes", _code_rows(codes))
        if outcome["data"].get("unread"):
            _say("Not read as codes: ", "; ".join(outcome["data"]["unread"]))
    if case.reference.codes and any(v is not None for k, v in scores.items() if k.startswith("code_")):
        _say(f"Gold codes: {', '.join(case.reference.codes)}")
        _print_metrics(scores)
    err.print(f"run {result.run_id} · {outcome['data'].get('turns')} turns · see it again with: medpanel show {result.run_id} --item {case.id}", style="dim")


@score_app.command("icd10")
def score_icd10(
    pred: Annotated[Optional[str], typer.Option("--pred", envvar="MEDPANEL_PRED", help="Predicted codes, as text: 'E11.9, I10 and J18.9'.")] = None,
    gold: Annotated[Optional[str], typer.Option("--gold", envvar="MEDPANEL_GOLD", help="Gold codes, as text.")] = None,
    pairs: Annotated[Optional[str], typer.Option("--pairs", envvar="MEDPANEL_PAIRS", help='A JSONL file of {"id", "pred", "gold"} lines (strings as typed, or lists; pred null for an unfinished consult) to score at once.')] = None,
    preset: Annotated[str, typer.Option("--preset", envvar="MEDPANEL_ICD10_PRESET", help="corrected (medpanel's scoring) or released (MedSyn's released scoring, bugs included, to compare with the paper).")] = "corrected",
    empty: Annotated[str, typer.Option("--empty", envvar="MEDPANEL_EMPTY", help="Corrected preset: an empty prediction scores 'zero', or is 'exclude'd (None).")] = "zero",
    set_: Annotated[Optional[list[str]], typer.Option("--set", envvar="MEDPANEL_ICD10_SET", help="unfinished=empty (a null pred scores as an empty prediction) or unfinished=exclude (left out of the means).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Precision, recall, F1 and Jaccard of predicted ICD-10 codes at code, category and chapter level."""
    from medpanel.scoring.icd10 import icd10_scores, parse_codes
    from medpanel.scoring.icd10_pairs import PRESETS, read_pairs, score_pairs

    if preset not in PRESETS:
        raise UsageError(f"Unknown preset '{preset}'.", f"Use one of: {', '.join(PRESETS)}.")
    if empty not in ("zero", "exclude"):
        raise UsageError(f"Unknown empty-prediction policy '{empty}'.", "Use --empty zero or --empty exclude.")
    options = parse_sets(set_)
    unknown = set(options) - {"unfinished"}
    if unknown:
        raise UsageError(f"Unknown setting(s) {', '.join(sorted(unknown))} for score icd10.", "The only one is --set unfinished=empty|exclude.")
    if pairs is not None:
        if pred is not None or gold is not None:
            raise UsageError("Give either --pairs or --pred and --gold, not both.", "Put single pairs in the JSONL file too.")
        result = score_pairs(read_pairs(pairs), preset=preset, empty=empty, unfinished=str(options.get("unfinished", "empty")))  # type: ignore[arg-type]
        for warning in result["warnings"]:
            err.print(f"warning: {warning}", style="yellow")
        if as_json:
            print_json(result)
            return
        _print_pair_means(result)
        return
    if pred is None or gold is None:
        raise UsageError("Give --pred and --gold (or --pairs FILE.jsonl).", "e.g. medpanel score icd10 --pred 'E11.9, I10' --gold 'E11.9'")
    if preset == "released":
        result = score_pairs([{"id": 1, "pred": pred, "gold": gold, "line": 1}], preset="released")
        row = result["pairs"][0]
        if as_json:
            print_json({"preset": "released", "scores": row["scores"], "status": row["status"], "error": row.get("error")})
            return
        if row["scores"] is None:
            raise UsageError(f"The released scoring cannot score this pair: {row['error']}.", "Use the corrected preset (the default).")
        out.print("preset released: MedSyn's released scoring, bugs included (see docs/consult.md)")
        _print_metrics(row["scores"])
        return
    predicted, golden = parse_codes(pred), parse_codes(gold)
    if not golden:
        raise UsageError(f"No ICD-10 codes found in --gold '{gold}'.", "Give codes such as --gold 'E11.9, I10'.")
    scores = icd10_scores(pred, gold, empty=empty)  # type: ignore[arg-type]
    if as_json:
        print_json({"predicted": _code_rows(predicted), "gold": _code_rows(golden), "scores": scores})
        return
    _print_codes("Predicted", _code_rows(predicted))
    _print_codes("Gold", _code_rows(golden))
    _print_metrics(scores)


def _print_pair_means(result: dict[str, Any]) -> None:
    from medpanel.scoring.icd10 import LEVELS, METRICS

    c = result["counts"]
    table = Table("level", *METRICS, title=f"Mean ICD-10 metrics over {c['scored']} of {c['pairs']} pairs (preset {result['preset']})",
                  title_justify="left")
    for level in LEVELS:
        values = [result["means"][f"{level}_{m}"] for m in METRICS]
        table.add_row(level, *("-" if v is None else f"{v:.3f}" for v in values))
    out.print(table)
    out.print(f"unfinished (pred null): {c['unfinished']}, "
              + (f"left out of the means: {c['excluded_unfinished']}" if result["unfinished"] == "exclude" else "scored as empty predictions")
              + f"; failed under the released scoring: {c['failed']}")
    for row in result["pairs"]:
        if row.get("error"):
            out.print(styled(("failed", "red"), f" {row['id']}: {row['error']}"))
