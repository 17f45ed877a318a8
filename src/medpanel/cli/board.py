"""Tumor-board commands."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from medpanel.cli.common import (JsonOpt, NoCacheOpt, StoreOpt,
                                 TimeoutOpt, app, err, make_runtime, open_store, out, print_json)
from medpanel.errors import MedpanelError



@app.command()
def board(
    case: Annotated[Path, typer.Argument(help="Case file (YAML/JSON) or a folder holding case.yaml.")],
    model: Annotated[str, typer.Option("--model", "-m", envvar="MEDPANEL_MODEL", help="Model spec that writes the meeting.")] = "local",
    max_tokens: Annotated[int, typer.Option("--max-tokens", envvar="MEDPANEL_MAX_TOKENS", min=16)] = 600,
    store: StoreOpt = None,
    no_cache: NoCacheOpt = False,
    timeout: TimeoutOpt = 300.0,
    as_json: JsonOpt = False,
) -> None:
    """Simulate a tumor board on one case: a written meeting and its conclusion, stored as a run."""
    from medpanel.cases import load_case
    from medpanel.protocols import get_protocol
    from medpanel.runs.runner import RunConfig, run_benchmark

    loaded = load_case(case)
    db = open_store(store)
    runtime = make_runtime(db, no_cache=no_cache, timeout=timeout)
    config = RunConfig(dataset=str(case), protocol="board", models=[model], settings={"max_tokens": max_tokens})
    if not as_json:
        err.print(f"[dim]Tumor board on {loaded.id} with {model} (the first local run loads the model)...[/]")
    result = asyncio.run(run_benchmark(db, config, runtime, protocol=get_protocol("board"), cases=[loaded]))
    items = db.items(result.run_id)
    events = db.events(result.run_id, loaded.id)
    if as_json:
        print_json({"run_id": result.run_id, "item": items[0] if items else None, "events": events})
        return
    if not items or items[0]["status"] != "done":
        raise MedpanelError(f"The board failed: {items[0]['error'] if items else 'no result'}", "See `medpanel show last`.")
    outcome = items[0]["outcome"]
    turns = [e for e in events if e["kind"] == "turn" and e["phase"] == "discussion"]
    if turns:
        for e in turns:
            out.print(f"[bold cyan]{e['speaker']}[/]: {e['text']}")
    else:
        out.print(outcome["data"].get("raw", ""))
    out.print(f"\n[bold green]Conclusion[/]: {outcome.get('answer') or '(the model wrote no conclusion block)'}")
    err.print(f"[dim]run {result.run_id} · parse {outcome['data'].get('parse_status')} · see it again with: medpanel show {result.run_id} --item {loaded.id}[/]")


