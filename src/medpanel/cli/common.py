"""What every command module shares: the Typer app, consoles, common options and small helpers."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Optional

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


def make_runtime(store, *, no_cache=False, prices=None, max_calls=None, max_tokens=None, max_dollars=None, timeout=120.0, max_reasks=2):
    from medpanel.models.budget import Budget
    from medpanel.models.pricing import PriceTable
    from medpanel.models.runtime import Runtime

    table = PriceTable.default()
    if prices:
        table.load(prices)
    return Runtime(cache=store, use_cache=not no_cache, budget=Budget(max_calls, max_tokens, max_dollars),
                   prices=table, timeout_s=timeout, max_reasks=max_reasks)


# json.dumps escapes C0 controls itself, not DEL, C1 or lone surrogates (which stdout cannot even encode).
_JSON_RAW_CONTROLS = re.compile(r"[\x7f-\x9f\ud800-\udfff]")


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


