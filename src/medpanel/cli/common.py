"""What every command module shares: the Typer app, consoles, common options and small helpers."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer
from rich.console import Console
from rich.text import Text

from medpanel.errors import UsageError
from medpanel.literal import visible
from medpanel.redact import redact, redact_data

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Seat a panel of AI and human clinicians around a patient case, and measure how well they deliberate.")
# Command groups: `medpanel score format|icd10 ...`, `medpanel replay mcc ...`; modules add their commands.
score_app = typer.Typer(no_args_is_help=True, help="Score a response or predictions without running a panel.")
replay_app = typer.Typer(no_args_is_help=True, help="Replay recorded deliberations (e.g. MCC's published debate logs).")
app.add_typer(score_app, name="score")
app.add_typer(replay_app, name="replay")


class LiteralConsole(Console):
    """A console that prints every string literally: no markup, no emoji codes, no highlighting, and
    control characters made visible (medpanel.literal.visible). This holds for strings given to
    print() and for strings inside tables and other renderables, since all go through render_str.
    Our own styled messages are built with `styled(...)`, never by writing markup into a string."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.update(markup=False, emoji=False, highlight=False)
        super().__init__(**kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:  # type: ignore[override]
        kwargs.update(markup=False, emoji=False, highlight=False)
        return super().render_str(visible(redact(text)), **kwargs)


def styled(*parts: str | tuple[object, str] | Text) -> Text:
    """One styled line from parts: a plain value (shown literally) or a (value, style) pair, e.g.
    styled(("Conclusion", "bold green"), ": ", answer). Every value is made visible first, so model or
    case text in any part can neither be markup nor reach the terminal as a control character."""
    line = Text()
    for part in parts:
        if isinstance(part, Text):
            line.append_text(part)
        elif isinstance(part, tuple):
            line.append(visible(redact(str(part[0]))), style=part[1])
        else:
            line.append(visible(redact(str(part))))
    return line


out = LiteralConsole()
err = LiteralConsole(stderr=True, soft_wrap=True)  # messages stay whole lines, greppable in logs

# ---------------------------------------------------------------- shared options

StoreOpt = Annotated[Optional[Path], typer.Option("--store", envvar="MEDPANEL_STORE", help="SQLite store file (runs, transcripts, model-call cache).")]
JsonOpt = Annotated[bool, typer.Option("--json", envvar="MEDPANEL_JSON", help="Print machine-readable JSON.")]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", envvar="MEDPANEL_NO_CACHE", help="Do not serve model calls from the cache (they are still recorded).")]
PricesOpt = Annotated[Optional[Path], typer.Option("--prices", envvar="MEDPANEL_PRICES", help="YAML/JSON price table: model (or model@base_url) -> {input, output} USD per 1K tokens.")]
MaxCallsOpt = Annotated[Optional[int], typer.Option("--max-calls", envvar="MEDPANEL_MAX_CALLS", min=0, help="Hard cap on (uncached) model calls.")]
MaxTokensOpt = Annotated[Optional[int], typer.Option("--max-tokens-total", envvar="MEDPANEL_MAX_TOKENS_TOTAL", min=0, help="Hard cap on tokens in + out.")]
MaxDollarsOpt = Annotated[Optional[float], typer.Option("--max-dollars", envvar="MEDPANEL_MAX_DOLLARS", min=0, help="Hard cap on dollars spent; every billed model needs a known price (see --prices).")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", envvar="MEDPANEL_TIMEOUT", min=0.1,
                                           help="Seconds one request attempt may take in all (a total deadline, body included; then it is retried). "
                                                "Worst case of one call: 6 attempts x TIMEOUT + 5 waits x 30 s (870 s at the default).")]
ReasksOpt = Annotated[int, typer.Option("--max-reasks", envvar="MEDPANEL_MAX_REASKS", min=0, max=10, help="Re-asks after a reply that fails its schema.")]


def open_store(path: Path | None, *, create: bool = True):
    """The store at --store (or the default). Read-only commands pass create=False: a missing store is an
    error, never an empty new file. A path given by the user must be in an existing folder (a typo is not
    a new folder); a new store is announced on stderr."""
    from medpanel.runs.store import Store

    db = Store(path, create=create, make_folder=path is None)
    if db.created:
        err.print(f"Created a new store: {db.path}", markup=False, highlight=False)
    return db


@dataclass(frozen=True)
class RunOptions:
    """What every command that calls a model shares: where calls are stored and cached, how long one may
    take, how often a bad reply is re-asked, what they cost and the caps on them. Each field is declared
    once here, with its flag, MEDPANEL_ variable and help; a command takes `*, opts: RunOptions` and
    `@bind_options()` turns the fields into its options. It builds its store and runtime with `opts.start()`."""

    store: StoreOpt = None
    no_cache: NoCacheOpt = False
    timeout: TimeoutOpt = 120.0
    max_reasks: ReasksOpt = 2
    prices: PricesOpt = None
    max_calls: MaxCallsOpt = None
    max_tokens_total: MaxTokensOpt = None
    max_dollars: MaxDollarsOpt = None

    def open_store(self):
        return open_store(self.store)

    def runtime(self, store):
        """A runtime over `store` (its cache and call log) with these options' prices, caps and limits."""
        from medpanel.models.budget import Budget
        from medpanel.models.pricing import PriceTable
        from medpanel.models.runtime import Runtime

        table = PriceTable.default()
        if self.prices:
            table.load(self.prices)
        return Runtime(cache=store, use_cache=not self.no_cache, budget=Budget(self.max_calls, self.max_tokens_total, self.max_dollars),
                       prices=table, timeout_s=self.timeout, max_reasks=self.max_reasks)

    def start(self):
        """(store, runtime): the store opened (created if new) and a runtime over it."""
        db = self.open_store()
        return db, self.runtime(db)


def _option_group(annotation: Any) -> bool:
    return isinstance(annotation, type) and dataclasses.is_dataclass(annotation)


def bind_options(**defaults: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Bind option groups to a command. Each keyword-only parameter annotated with an options dataclass
    (RunOptions, the judges' JudgeOptions) is replaced, in the signature Typer reads, by that class's
    fields (each a Typer-annotated option), put before --json so help keeps --json last; the command is
    called with the group built from them. `defaults` give this command its own default for a field
    (a deliberation's --timeout is longer than a chat's)."""

    def bind(command: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(command, eval_str=True)  # Typer reads annotations as objects, not strings
        groups = {name: p.annotation for name, p in signature.parameters.items()
                  if p.kind is inspect.Parameter.KEYWORD_ONLY and _option_group(p.annotation)}
        own = [p for name, p in signature.parameters.items() if name not in groups]
        fields = {name: [(f, typing.get_type_hints(cls, include_extras=True)[f.name]) for f in dataclasses.fields(cls)]
                  for name, cls in groups.items()}
        # Keyword-only, so a required field (no default) may follow options that have one.
        added = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=hint,
                                   default=defaults.get(f.name, inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default))
                 for group in fields.values() for f, hint in group]
        clash = ({p.name for p in added} & {p.name for p in own}) | (set(defaults) - {p.name for p in added})
        if not groups or clash:
            raise TypeError(f"{command.__name__}: bind_options needs a keyword-only options parameter; clashing or unknown: {sorted(clash)}")
        at = next((i for i, p in enumerate(own) if p.name == "as_json"), len(own))
        parameters = [*own[:at], *added, *(p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own[at:])]

        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            built = {name: groups[name](**{f.name: kwargs.pop(f.name) for f, _ in group if f.name in kwargs}) for name, group in fields.items()}
            return command(*args, **kwargs, **built)

        wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": signature.return_annotation}
        return wrapper

    return bind


# json.dumps escapes C0 controls itself, not DEL, C1 or lone surrogates (which stdout cannot even encode).
_JSON_RAW_CONTROLS = re.compile(r"[\x7f-\x9f\ud800-\udfff]")


# Options only a Ray run reads: (flag, what it does). Their environment variables may stay set for local runs.
RAY_ONLY_OPTIONS = {"address": ("--address", "names a Ray cluster"), "gpus_per_task": ("--gpus-per-task", "sizes Ray tasks")}


def check_executor(ctx: typer.Context, executor: str) -> None:
    """--executor is local or ray; a Ray-only option the user typed for a local run is refused, not ignored."""
    if executor not in ("local", "ray"):
        raise UsageError(f"--executor {executor!r} is not one of: local, ray.", "Use --executor local (the default) or --executor ray.")
    if executor == "ray":
        return
    for param, (flag, what) in RAY_ONLY_OPTIONS.items():
        source = ctx.get_parameter_source(param) if param in ctx.params else None
        if source is not None and source.name == "COMMANDLINE":  # typed, not merely set in the environment
            raise UsageError(f"{flag} {what}, which only --executor ray uses.", f"Add --executor ray, or drop {flag}.")


def print_json(data: Any) -> None:
    """`data` as indented JSON on stdout; a string's DEL and C1 characters are written as \\u escapes, so
    no control character from model text reaches the terminal and the output still parses the same."""
    # Redact the data, not its serialisation: a key starting with n or t could otherwise eat a JSON escape.
    text = _JSON_RAW_CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(redact_data(data), default=str, indent=2, ensure_ascii=False))
    out.print(Text(text), soft_wrap=True)


def split_models(models: list[str] | None) -> list[str]:
    """Model specs from --models (comma-separated or repeated). Given but empty, or with an empty entry
    (`a,,b`), is refused: silently seating fewer models, or the default one, changes the experiment."""
    if models is None:
        return []
    specs = [m.strip() for spec in models for m in spec.split(",")]
    if not specs or any(not m for m in specs):
        where = "is empty" if not any(specs) else f"has an empty entry (position {specs.index('') + 1} of {len(specs)})"
        raise UsageError(f"--models {where}: {','.join(models)!r}.",
                         "Give one spec per seat, comma-separated, e.g. --models local,local or --models openai:gpt-4o-mini.")
    return specs


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


