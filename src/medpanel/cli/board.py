"""Tumor-board commands."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Optional

import typer

from medpanel.cli.common import (JsonOpt, NoCacheOpt, StoreOpt,
                                 TimeoutOpt, app, err, make_runtime, open_store, out, print_json, styled)
from medpanel.errors import UsageError
from medpanel.cli.core import exit_on_failed_items, loads_local, progress_event, single_item_failed  # noqa: E402



def _seats(pairs: list[str] | None) -> dict[str, str]:
    seats: dict[str, str] = {}
    for pair in pairs or []:
        role, sep, spec = pair.partition("=")
        if not sep or not role.strip() or not spec.strip():
            raise UsageError(f"--seat '{pair}' is not ROLE=MODEL.", 'Write e.g. --seat "Radiation Oncologist=openai:gpt-4o-mini".')
        seats[role.strip()] = spec.strip()
    return seats


@app.command()
def board(
    case: Annotated[Path, typer.Argument(help="Case file (YAML/JSON) or a folder holding case.yaml.")],
    model: Annotated[str, typer.Option("--model", "-m", envvar="MEDPANEL_MODEL", help="Model spec (the writer, or the default for every seat with --live).")] = "local",
    live: Annotated[bool, typer.Option("--live", envvar="MEDPANEL_LIVE", help="Hold the meeting with a moderator agent and one agent per specialist.")] = False,
    seat: Annotated[Optional[list[str]], typer.Option("--seat", envvar="MEDPANEL_SEAT", help="ROLE=MODEL: give a role its own model (repeatable; implies --live).")] = None,
    human: Annotated[Optional[list[str]], typer.Option("--human", envvar="MEDPANEL_HUMAN", help="ROLE a person takes at this terminal (repeatable; implies --live).")] = None,
    max_turns: Annotated[int, typer.Option("--max-turns", envvar="MEDPANEL_MAX_TURNS", min=1, max=40, help="Live board: bound on specialist turns.")] = 6,
    max_tokens: Annotated[Optional[int], typer.Option("--max-tokens", envvar="MEDPANEL_MAX_TOKENS", min=16, help="Written board: tokens for the meeting; live: per turn, at most 400 (default: fit the seat; written 600 on the embedded model, 4096 on others; live 400 per turn on the embedded model, 1024 on others; reasoning models 16000 more).")] = None,
    store: StoreOpt = None,
    no_cache: NoCacheOpt = False,
    timeout: TimeoutOpt = 300.0,
    as_json: JsonOpt = False,
) -> None:
    """Hold a tumor board on one case and store it as a run: one model writes the meeting, or (--live) a
    moderator agent gives the floor to specialist agents and people, turn by turn."""
    from medpanel.cases import load_case
    from medpanel.protocols import get_protocol
    from medpanel.protocols.base import build_settings
    from medpanel.runs.runner import RunConfig, run_benchmark

    loaded = load_case(case)
    db = open_store(store)
    runtime = make_runtime(db, no_cache=no_cache, timeout=timeout)
    live = live or bool(seat) or bool(human)
    protocol = get_protocol("board-live" if live else "board")
    if live:
        stored = {"max_turns": max_turns, "seats": _seats(seat), "humans": list(human or [])}
        from medpanel.models import build_model

        if max_tokens is not None:
            stored["turn_tokens"] = min(max_tokens, 400)
        elif build_model(model, runtime).small:
            stored["turn_tokens"] = 400  # what this command always gave a small model per turn: its meetings stay as they were
        settings = build_settings(protocol.settings, stored, protocol.name)
        settings.on_event = progress_event  # --json: one line per turn on stderr
        if not as_json:  # stream the meeting as it happens; name a seat's model when it is not the default one
            default_id = build_model(model, runtime).id
            settings.on_event = lambda e: out.print(styled((e.speaker, "bold cyan"), f" ({e.model})" if e.model not in ("", default_id) else "", ": ", e.text))
    else:
        stored = {"max_tokens": max_tokens} if max_tokens is not None else {}
        settings = build_settings(protocol.settings, stored, protocol.name)
    config = RunConfig(dataset=str(case), protocol=protocol.name, models=[model], settings=stored)
    if not as_json:
        err.print(f"{'Live tumor board' if live else 'Tumor board'} on {loaded.id} with {model}{loads_local(model, *(seat or []))}...", style="dim")
    result = asyncio.run(run_benchmark(db, config, runtime, protocol=protocol, cases=[loaded], settings=settings))
    items = db.items(result.run_id)
    events = db.events(result.run_id, loaded.id)
    if as_json:
        print_json({"run_id": result.run_id, "item": items[0] if items else None, "events": events})
        exit_on_failed_items(result)
        return
    if not items or items[0]["status"] != "done":
        single_item_failed(result, f"The board failed: {items[0]['error'] if items else 'no result'}", "See `medpanel show last`.")
    outcome = items[0]["outcome"]
    if not live:
        turns = [e for e in events if e["kind"] == "turn" and e["phase"] == "discussion"]
        for e in turns:
            out.print(styled((e["speaker"], "bold cyan"), ": ", e["text"]))
        if not turns:
            out.print(outcome["data"].get("raw", ""))
        out.print(styled("\n", ("Conclusion", "bold green"), ": ", outcome.get("answer") or "(the model wrote no conclusion block)"))
    else:
        out.print(styled("\n", ("Conclusion", "bold green"), ": ", str(outcome.get("answer"))))
    err.print(f"run {result.run_id} · parse {outcome['data'].get('parse_status')} · see it again with: medpanel show {result.run_id} --item {loaded.id}", style="dim")
