"""What every command module shares: the Typer app, consoles, common options and small helpers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from medpanel.errors import UsageError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Seat a panel of AI and human clinicians around a patient case, and measure how well they deliberate.")
# Command groups: `medpanel score format|icd10 ...`, `medpanel replay mcc ...`; modules add their commands.
score_app = typer.Typer(no_args_is_help=True, help="Score a response or predictions without running a panel.")
replay_app = typer.Typer(no_args_is_help=True, help="Replay recorded deliberations (e.g. MCC's published debate logs).")
app.add_typer(score_app, name="score")
app.add_typer(replay_app, name="replay")
out = Console()
err = Console(stderr=True, soft_wrap=True)  # messages stay whole lines, greppable in logs

# ---------------------------------------------------------------- shared options

StoreOpt = Annotated[Optional[Path], typer.Option("--store", envvar="MEDPANEL_STORE", help="SQLite store file (runs, transcripts, model-call cache).")]
JsonOpt = Annotated[bool, typer.Option("--json", envvar="MEDPANEL_JSON", help="Print machine-readable JSON.")]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", envvar="MEDPANEL_NO_CACHE", help="Do not serve model calls from the cache (they are still recorded).")]
PricesOpt = Annotated[Optional[Path], typer.Option("--prices", envvar="MEDPANEL_PRICES", help="YAML/JSON price table: model -> {input, output} USD per 1K tokens.")]
MaxCallsOpt = Annotated[Optional[int], typer.Option("--max-calls", envvar="MEDPANEL_MAX_CALLS", min=0, help="Hard cap on (uncached) model calls.")]
MaxTokensOpt = Annotated[Optional[int], typer.Option("--max-tokens-total", envvar="MEDPANEL_MAX_TOKENS_TOTAL", min=0, help="Hard cap on tokens in + out.")]
MaxDollarsOpt = Annotated[Optional[float], typer.Option("--max-dollars", envvar="MEDPANEL_MAX_DOLLARS", min=0, help="Hard cap on dollars spent.")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", envvar="MEDPANEL_TIMEOUT", min=0.1, help="Seconds before one model request times out (it is then retried).")]
ReasksOpt = Annotated[int, typer.Option("--max-reasks", envvar="MEDPANEL_MAX_REASKS", min=0, max=10, help="Re-asks after a reply that fails its schema.")]


def open_store(path: Path | None):
    from medpanel.runs.store import Store

    return Store(path)


def make_runtime(store, *, no_cache=False, prices=None, max_calls=None, max_tokens=None, max_dollars=None, timeout=120.0, max_reasks=2):
    from medpanel.models.budget import Budget
    from medpanel.models.pricing import PriceTable
    from medpanel.models.runtime import Runtime

    table = PriceTable.default()
    if prices:
        table.load(prices)
    return Runtime(cache=store, use_cache=not no_cache, budget=Budget(max_calls, max_tokens, max_dollars),
                   prices=table, timeout_s=timeout, max_reasks=max_reasks)


def print_json(data: Any) -> None:
    out.print_json(json.dumps(data, default=str))


def split_models(models: list[str] | None) -> list[str]:
    return [m.strip() for spec in models or [] for m in spec.split(",") if m.strip()]


def parse_sets(pairs: list[str] | None) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--set '{pair}' is not KEY=VALUE.", "Write protocol settings as --set max_tokens=256.")
        try:
            settings[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            settings[key.strip()] = value
    return settings


