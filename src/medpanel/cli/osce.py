"""OSCE dialogue and debate-summary commands: `medpanel osce`, `medpanel summarize`."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from medpanel.cli.common import JsonOpt, RunOptions, app, bind_options, err, out, parse_sets, print_json, split_models, styled
from medpanel.errors import UsageError
from medpanel.cli.core import exit_on_failed_items, loads_local, progress_event, single_item_failed  # noqa: E402

DEFAULT_DOCTORS = ["local", "local", "local"]
SPOKEN = {"opening": "Patient", "patient": "Patient", "direct-reply": "Doctor", "consolidation": "Doctor"}


def show_event(event) -> None:
    """One event of a running consultation: what is said to and by the patient in bold, the panel's work dimmed."""
    text = event.text
    if event.phase in SPOKEN:
        who = SPOKEN[event.phase]
        colour = "magenta" if who == "Patient" else "cyan"
        consensus = event.data.get("consensus")
        note = (f" (panel consensus {consensus:.2f})", "dim") if isinstance(consensus, float) else ""
        out.print(styled((who, f"bold {colour}"), note, ": ", text))
    elif event.kind == "decision":
        differentials = "; ".join(event.data.get("differentials") or []) or "none"
        out.print(styled(("Diagnosis", "bold green"), f" ({event.data.get('status')}): ", text, "\n", ("Differentials", "green"), ": ", differentials))
    elif event.kind == "score" and event.phase == "evaluation":
        return  # the metrics are printed once, with the gold diagnosis, when the run ends
    else:
        short = text if len(text) <= 160 else text[:159] + "…"
        out.print(f"  {event.phase} · {event.speaker}: {short}", style="dim")


@app.command()
@bind_options(timeout=300.0)
def osce(
    scenario: Annotated[str, typer.Argument(help="agentclinic:INDEX, agentclinic-extended:INDEX, a case id (agentclinic-3) or a case file.")],
    patient: Annotated[str, typer.Option("--patient", envvar="MEDPANEL_PATIENT", help="Who plays the patient: a model spec, or 'human' to play it yourself.")] = "local",
    models: Annotated[list[str] | None, typer.Option("--models", "-m", envvar="MEDPANEL_MODELS", help="The doctors: model specs, comma-separated or repeated (default: three local seats).")] = None,
    moderator: Annotated[str | None, typer.Option("--moderator", envvar="MEDPANEL_MODERATOR", help="Moderator model spec (default: the first doctor's model).")] = None,
    judge: Annotated[str | None, typer.Option("--judge", envvar="MEDPANEL_JUDGE", help="Model that judges the metrics (default: the moderator's model).")] = None,
    max_exchanges: Annotated[int, typer.Option("--max-exchanges", envvar="MEDPANEL_MAX_EXCHANGES", min=1, max=50, help="Rounds of history-taking questions.")] = 5,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", envvar="MEDPANEL_OSCE_MAX_TOKENS", min=16, help="Tokens per proposal, revision, merge or diagnosis (default: fit the seat; 600 on the embedded model, 1024 on others, reasoning models 16000 more).")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", envvar="MEDPANEL_SET", help="Other protocol setting KEY=VALUE (repeatable), e.g. max_rounds=2.")] = None,
    as_json: JsonOpt = False,
    *,
    opts: RunOptions,
) -> None:
    """Run an OSCE consultation: the panel takes the history from a simulated (or human) patient, diagnoses,
    and is scored on PICR, PRQR, PDA and SDA. Streams the dialogue; stored as a run."""
    from medpanel.cases.osce import resolve_scenario
    from medpanel.context import RunContext
    from medpanel.protocols import get_protocol
    from medpanel.protocols.base import build_settings
    from medpanel.protocols.dialogue import render_record
    from medpanel.runs.runner import RunConfig, run_benchmark

    case = resolve_scenario(scenario)
    doctors = split_models(models) or DEFAULT_DOCTORS
    stored = {**parse_sets(set_), "max_exchanges": max_exchanges} | ({"max_tokens": max_tokens} if max_tokens else {})
    # The patient, moderator and judge are panel roles; those not given take the protocol's defaults.
    roles = {"patient": patient} | {k: v for k, v in (("moderator", moderator), ("judge", judge)) if v}
    protocol = get_protocol("osce")
    build_settings(protocol.settings, stored, protocol.name)  # unknown keys and bad values: a usage error naming the settings
    db, runtime = opts.start()
    if not as_json:
        err.print(f"OSCE on {case.id} · doctors {', '.join(doctors)} · patient {patient}{loads_local(patient, moderator, judge, *doctors)}...", style="dim")
        if patient.strip() == "human":
            actor = (case.metadata.get("osce") or {}).get("patient_actor") or {}
            out.print(styled(("You play the patient.", "bold"), " Answer only from this role; say \"I don't know\" to anything else.\n", render_record(actor), "\n"))
    config = RunConfig(dataset=scenario, protocol="osce", models=doctors, settings=stored, roles=roles)
    context = RunContext(on_event=progress_event if as_json else show_event)  # --json: one line per event on stderr
    result = asyncio.run(run_benchmark(db, config, runtime, protocol=protocol, cases=[case], context=context))
    items = db.items(result.run_id)
    item = items[0] if items else None
    scores = {r["name"]: r["value"] for r in db.scores(result.run_id)}
    if as_json:
        print_json({"run_id": result.run_id, "case": case.id, "status": item["status"] if item else None,
                    "error": item["error"] if item else None, "scores": scores,
                    "outcome": item["outcome"] if item else None, "events": db.events(result.run_id, case.id)})
        exit_on_failed_items(result)
        return
    if item is None or item["status"] != "done":
        single_item_failed(result, f"The consultation failed: {item['error'] if item else 'no result'}", f"See `medpanel show {result.run_id}`.")
    metrics = "  ".join(f"{name.upper()} {'n/a' if scores.get(name) is None else f'{scores[name]:.2f}'}" for name in ("picr", "prqr", "pda", "sda"))
    out.print(styled("\n", ("Gold diagnosis", "bold"), ": ", case.reference.answer_text or "(none given)", "\n", (metrics, "bold")))
    err.print(f"run {result.run_id} · transcript: medpanel show {result.run_id} --item {case.id} · "
              f"summary: medpanel summarize {result.run_id}", style="dim")


@app.command()
@bind_options(timeout=300.0)
def summarize(
    run: Annotated[str, typer.Argument(help="Run id, a unique prefix of it, or 'last'.")] = "last",
    item: Annotated[str | None, typer.Option("--item", envvar="MEDPANEL_ITEM", help="Item id (default: the run's only item).")] = None,
    repeat: Annotated[int, typer.Option("--repeat", envvar="MEDPANEL_REPEAT", min=0, help="Which repeat of the item.")] = 0,
    model: Annotated[str | None, typer.Option("--model", "-m", envvar="MEDPANEL_SUMMARY_MODEL", help="Model that writes the summary; without it, a deterministic outline.")] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", envvar="MEDPANEL_SUMMARY_MAX_TOKENS", min=16, help="Tokens for the summary (default: 600 on the embedded model, 2048 on others).")] = None,
    as_json: JsonOpt = False,
    *,
    opts: RunOptions,
) -> None:
    """Summarise one stored deliberation for a clinician: key reasoning, stance shifts, evidence, consensus."""
    from medpanel.models import build_model
    from medpanel.protocols.summary import outline_debate, summarize_debate

    db = opts.open_store()
    run_id = db.resolve_run_id(run)
    if item is None:
        ids = sorted({i["item_id"] for i in db.items(run_id)})
        if len(ids) != 1:
            raise UsageError(f"Run {run_id} has {len(ids)} items; say which one.", f"Add --item ID, e.g. --item {ids[0] if ids else 'ID'}.")
        item = ids[0]
    events = db.events(run_id, item, repeat)
    if not events:
        raise UsageError(f"Run {run_id} has no transcript for item '{item}' (repeat {repeat}).", "Item ids are listed by `medpanel show RUN --json`.")
    outline = outline_debate(events)
    summary = None
    if model:
        summariser = build_model(model, opts.runtime(db))

        async def go() -> str:
            try:
                return await summarize_debate(events, summariser, max_tokens=max_tokens)
            finally:
                await summariser.aclose()

        summary = asyncio.run(go())
    if as_json:
        print_json({"run_id": run_id, "item": item, "repeat": repeat, "outline": outline, "summary": summary, "model": model})
        return
    out.print(summary if summary is not None else outline)


__all__ = ["osce", "show_event", "summarize"]
