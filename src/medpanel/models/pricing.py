"""Dollar cost of a call from a price table (USD per 1,000 input and output tokens) the user can extend.

Prices are keyed per server and model: `MODEL@BASE_URL` (as in the spec `openai:MODEL@BASE_URL`), so
the same model name on two servers can cost two different prices. A bare `MODEL` entry is the fallback
for a model on any server (the vendors' list prices below are such entries).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from medpanel.errors import UsageError

# List prices in USD per 1K tokens (input, output) as published by the vendors; extend or override
# with a YAML/JSON file ({model: {input: .., output: ..}}, or {model@base_url: ...}) via --prices or MEDPANEL_PRICES.
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o": (0.0025, 0.010),
    "gpt-4o-mini": (0.00015, 0.0006),
    "gpt-4.1": (0.002, 0.008),
    "gpt-4.1-mini": (0.0004, 0.0016),
    "o1-mini": (0.0011, 0.0044),
    "o3-mini": (0.0011, 0.0044),
    "deepseek-chat": (0.00027, 0.0011),
    "deepseek-reasoner": (0.00055, 0.00219),
}


def split_key(key: str) -> tuple[str, str | None]:
    """'model@http://host/v1' -> ('model', 'http://host/v1'); a bare 'model' -> ('model', None). Only an '@'
    before a URL separates the server, so a model name may itself hold an '@'."""
    at = key.find("@http")
    return (key, None) if at < 0 else (key[:at], key[at + 1:])


def price_key(model: str, server: str | None = None) -> str:
    """The table key of a model on a server: `model@base_url` (trailing slash and case of the host ignored)."""
    return f"{model}@{normalise_server(server)}" if server else model


def normalise_server(server: str) -> str:
    scheme, sep, rest = server.strip().rstrip("/").partition("://")
    if not sep:
        return server.strip().rstrip("/")
    host, slash, path = rest.partition("/")
    return f"{scheme.lower()}://{host.lower()}{slash}{path}"


@dataclass
class PriceTable:
    prices: dict[str, tuple[float, float]] = field(default_factory=dict)

    @classmethod
    def default(cls) -> "PriceTable":
        return cls(dict(DEFAULT_PRICES))

    def load(self, path: str | Path) -> "PriceTable":
        """Add the prices in a YAML or JSON file; later entries win."""
        file = Path(path)
        try:
            data = yaml.safe_load(file.read_text()) if file.suffix in (".yaml", ".yml") else json.loads(file.read_text())
        except (OSError, ValueError, yaml.YAMLError) as exc:
            raise UsageError(f"Cannot read price table {file}: {exc}", "Give a YAML or JSON file mapping model (or model@base_url) -> {input: USD per 1K, output: USD per 1K}.") from None
        if not isinstance(data, dict):
            raise UsageError(f"Price table {file} is not a mapping.", "Write it as {model: {input: 0.001, output: 0.002}}.")
        for model, entry in data.items():
            try:
                name, server = split_key(str(model))
                self.set(name, (float(entry["input"]), float(entry["output"])), server)
            except (TypeError, KeyError, ValueError):
                raise UsageError(f"Price table {file}: entry for {model!r} needs numeric 'input' and 'output'.", "Prices are USD per 1,000 tokens.") from None
        return self

    def set(self, model: str, price: tuple[float, float], server: str | None = None) -> None:
        self.prices[price_key(model, server)] = price

    def cost(self, model: str, input_tokens: int, output_tokens: int, server: str | None = None) -> float:
        price = self.lookup(model, server)
        if price is None:
            return 0.0
        return input_tokens / 1000 * price[0] + output_tokens / 1000 * price[1]

    def lookup(self, model: str, server: str | None = None) -> tuple[float, float] | None:
        """This server's entry for the model, else the bare model's; each by exact name first, then the
        longest known prefix (so 'gpt-4o-mini-2024-07-18' finds 'gpt-4o-mini'). Asked twice a call, so the
        answers are kept until the table changes (set, load, or an edit of `prices` in place)."""
        memo = self.__dict__.setdefault("_memo", {})
        if self.__dict__.get("_memo_of") != self.prices:
            memo.clear()
            self.__dict__["_memo_of"] = dict(self.prices)
        if (model, server) not in memo:
            memo[(model, server)] = self._lookup(model, server)
        return memo[(model, server)]

    def _lookup(self, model: str, server: str | None) -> tuple[float, float] | None:
        keyed = [(split_key(key), price) for key, price in self.prices.items()]
        if server:
            here = normalise_server(server)
            found = _by_name({name: price for (name, at), price in keyed if at is not None and normalise_server(at) == here}, model)
            if found is not None:
                return found
        return _by_name({name: price for (name, at), price in keyed if at is None}, model)


def _by_name(prices: dict[str, tuple[float, float]], model: str) -> tuple[float, float] | None:
    if model in prices:
        return prices[model]
    matches = [name for name in prices if model.startswith(name)]
    return prices[max(matches, key=len)] if matches else None
