"""RABBITS: how much accuracy drops when generic drug names are swapped for brand names.

Only complete pairs count: an item whose original or brand-swapped twin is missing or unscored (a
failed item) is left out of both sides, so the two accuracies are over the same questions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from scipy.stats import binomtest

_PAIR_ID = re.compile(r"^rabbits-(\d+)-(orig|brand)$")


def accuracy_drop(correct_by_item: Mapping[str, float | None]) -> dict:
    """Item id ('rabbits-<i>-orig' / 'rabbits-<i>-brand') -> 1.0 / 0.0 (None: unscored) to the paired comparison.

    drop = original accuracy - brand accuracy (positive: brand names hurt). `p_value` is the exact
    McNemar test (two-sided binomial test on the pairs that changed), None when no pair changed.
    """
    pairs: dict[str, dict[str, float]] = {}
    for item_id, value in correct_by_item.items():
        match = _PAIR_ID.match(item_id)
        if match and value is not None:
            pairs.setdefault(match.group(1), {})[match.group(2)] = float(value)
    complete = [p for p in pairs.values() if len(p) == 2]
    n = len(complete)
    if n == 0:
        return {"pairs": 0, "original": None, "brand": None, "drop": None, "lost": 0, "gained": 0, "p_value": None}
    original = sum(p["orig"] for p in complete) / n
    brand = sum(p["brand"] for p in complete) / n
    lost = sum(1 for p in complete if p["orig"] == 1.0 and p["brand"] == 0.0)  # right with the generic, wrong with the brand
    gained = sum(1 for p in complete if p["orig"] == 0.0 and p["brand"] == 1.0)
    p_value = binomtest(lost, lost + gained, 0.5).pvalue if lost + gained else None
    return {"pairs": n, "original": original, "brand": brand, "drop": original - brand, "lost": lost, "gained": gained, "p_value": p_value}
