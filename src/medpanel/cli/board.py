"""Tumor-board commands."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Optional

import typer

from medpanel.cli.common import JsonOpt, RunOptions, app, bind_options, err, out, print_json, styled
from medpanel.errors import UsageError
from medpanel.cli.core import exit_on_failed_items, loads_local, progress_event, single_item_failed  # noqa: E402


def board_roles(seat: list[str] | None, human: list[str] | None, judge: str | None) -> dict[str, str]:
    """RunConfig.roles from --seat ROLE=MODEL, --human ROLE and --judge: a titled seat by its title, the
    moderator as the function role `moderator`, a person as `human:<Title>`."""
    roles: dict[str, str] = {}
    for pair in seat or []:
        title, sep, spec = pair.partition("=")
        if not sep or not title.strip() or not spec.strip():
            raise UsageError(f"--seat '{pair}' is not ROLE=MODEL.", 'Write e.g. --seat "Radiation Oncologist=openai:gpt-4o-mini".')
        roles["moderator" if title.strip().lower() == "moderator" else title.strip()] = spec.strip()
    for title in (h.strip() for h in human or []):
        key = "moderator" if title.lower() == "moderator" else title
        if key in roles:
            raise UsageError(f"'{title}' is given both a model (--seat) and a person (--human).", "Give each role one of them.")
        roles[key] = f"human:{title}"
    if judge:
        roles["judge"] = judge
    return roles



# Not streamed: a discarded attempt that was asked again, and the plan, which the Conclusion line states once.
UNSTREAMED_PHASES = ("asked again", "conclusion")


def stream_event(e, default_model: str) -> None:
    """One event of a live board as it happens, its seat's model named when it is not the default one."""
    if e.phase in UNSTREAMED_PHASES:
        return
    out.print(styled((e.speaker, "bold cyan"), f" ({e.model})" if e.model not in ("", default_model) else "", ": ", e.text))

@app.command()
@bind_options(timeout=300.0)
def board(
    case: Annotated[Path, typer.Argument(help="Case file (YAML/JSON) or a folder holding case.yaml.")],
    model: Annotated[str, typer.Option("--model", "-m", envvar="MEDPANEL_MODEL", help="Model spec (the writer, or the default for every seat with --live).")] = "local",
    live: Annotated[bool, typer.Option("--live", envvar="MEDPANEL_LIVE", help="Hold the meeting with a moderator agent and one agent per specialist.")] = False,
    seat: Annotated[Optional[list[str]], typer.Option("--seat", envvar="MEDPANEL_SEAT", help="ROLE=MODEL: give a role (Moderator included) its own model (repeatable; implies --live).")] = None,
    human: Annotated[Optional[list[str]], typer.Option("--human", envvar="MEDPANEL_HUMAN", help="ROLE a person takes at this terminal (repeatable; implies --live).")] = None,
    judge: Annotated[Optional[str], typer.Option("--judge", "-j", envvar="MEDPANEL_JUDGE", help="Also grade the meeting with this judge model: conclusion alignment, four decisions, consistency.")] = None,
    max_turns: Annotated[int, typer.Option("--max-turns", envvar="MEDPANEL_BOARD_MAX_TURNS", min=1, max=40, help="Live board: bound on specialist turns.")] = 6,
    max_tokens: Annotated[Optional[int], typer.Option("--max-tokens", envvar="MEDPANEL_BOARD_MAX_TOKENS", min=16, help="Written board: tokens for the meeting; live: per turn, at most 400 (default: fit the seat; written 600 on the embedded model, 4096 on others; live 400 per turn on the embedded model, 1024 on others; reasoning models 16000 more).")] = None,
    reward: Annotated[str, typer.Option("--reward", envvar="MEDPANEL_BOARD_REWARD", help="With --judge: also score the meeting with the Dr.GRPO training reward, released_code or paper (off: not).")] = "off",
    as_json: JsonOpt = False,
    *,
    opts: RunOptions,
) -> None:
    """Hold a tumor board on one case and store it as a run: one model writes the meeting, or (--live) a
    moderator agent gives the floor to specialist agents and people, turn by turn."""
    from medpanel.cases import load_case
    from medpanel.context import RunContext
    from medpanel.models import build_model
    from medpanel.protocols import get_protocol
    from medpanel.runs.runner import RunConfig, run_benchmark

    loaded = load_case(case)
    live = live or bool(seat) or bool(human)
    roles = board_roles(seat, human, judge)
    if reward not in ("off", "released_code", "paper"):
        raise UsageError(f"--reward {reward!r} is not a reward preset.", "Use --reward released_code, --reward paper, or leave it off.")
    if reward != "off" and not judge:
        raise UsageError("--reward needs a judge for its judged terms.", "Add --judge MODEL (e.g. --judge local).")
    db, runtime = opts.start()
    protocol = get_protocol("board-live" if live else "board")
    on_event = progress_event  # --json: one line per turn on stderr
    if live:
        stored: dict = {"max_turns": max_turns}
        default = build_model(model, runtime)  # read for its capabilities and id only; the runner builds the seats
        if max_tokens is not None:
            stored["turn_tokens"] = min(max_tokens, 400)
        elif default.small:
            stored["turn_tokens"] = 400  # what this command always gave a small model per turn: its meetings stay as they were
        if not as_json:
            on_event = lambda e: stream_event(e, default.id)  # noqa: E731
    else:
        stored = {"max_tokens": max_tokens} if max_tokens is not None else {}
        on_event = progress_event if as_json else None  # the written meeting is printed whole at the end
    if reward != "off":
        stored["reward"] = reward
    config = RunConfig(dataset=str(case), protocol=protocol.name, models=[model], settings=stored, roles=roles)
    if not as_json:
        err.print(f"{'Live tumor board' if live else 'Tumor board'} on {loaded.id} with {model}{loads_local(model, judge, *(seat or []))}...", style="dim")
    result = asyncio.run(run_benchmark(db, config, runtime, protocol=protocol, cases=[loaded], context=RunContext(on_event=on_event)))
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
    judging = [s for s in protocol.scorers if s.role == "judge"]
    judged = {row["name"]: row["value"] for row in db.scores(result.run_id) if any(s.declares(row["name"]) for s in judging)}
    if judged:
        out.print("judges: " + ", ".join(f"{name} {'-' if value is None else f'{value:g}'}" for name, value in judged.items()))
    err.print(f"run {result.run_id} · parse {outcome['data'].get('parse_status')} · see it again with: medpanel show {result.run_id} --item {loaded.id}", style="dim")
