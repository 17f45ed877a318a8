"""Dollar cost of a call from a price table (USD per 1,000 input and output tokens) the user can extend."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from medpanel.errors import UsageError

# List prices in USD per 1K tokens (input, output) as published by the vendors; extend or override
# with a YAML/JSON file ({model: {input: .., output: ..}}) via --prices or MEDPANEL_PRICES.
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
            raise UsageError(f"Cannot read price table {file}: {exc}", "Give a YAML or JSON file mapping model -> {input: USD per 1K, output: USD per 1K}.") from None
        if not isinstance(data, dict):
            raise UsageError(f"Price table {file} is not a mapping.", "Write it as {model: {input: 0.001, output: 0.002}}.")
        for model, entry in data.items():
            try:
                self.prices[str(model)] = (float(entry["input"]), float(entry["output"]))
            except (TypeError, KeyError, ValueError):
                raise UsageError(f"Price table {file}: entry for {model!r} needs numeric 'input' and 'output'.", "Prices are USD per 1,000 tokens.") from None
        return self

    def cost(self, model: str, input_tokens: int, output_tokens: int) -> float:
        price = self.lookup(model)
        if price is None:
            return 0.0
        return input_tokens / 1000 * price[0] + output_tokens / 1000 * price[1]

    def lookup(self, model: str) -> tuple[float, float] | None:
        """Exact name first, then the longest known prefix (so 'gpt-4o-mini-2024-07-18' finds 'gpt-4o-mini')."""
        if model in self.prices:
            return self.prices[model]
        matches = [name for name in self.prices if model.startswith(name)]
        return self.prices[max(matches, key=len)] if matches else None
