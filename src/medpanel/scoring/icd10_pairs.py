"""Scoring many (prediction, gold) pairs at once: `medpanel score icd10 --pairs FILE.jsonl`.

Each line is `{"id": ..., "pred": ..., "gold": ...}`; pred and gold are strings as typed or lists
of codes. `pred: null` (or no "pred") is a consult that never submitted: under `unfinished="empty"`
it scores as an empty prediction, under "exclude" it is left out of the means. Either way it is
listed, and the counts say how many of each the means hold.

Presets: "corrected" (medpanel's scoring, `icd10_scores`) and "released" (MedSyn's released
scoring, `icd10_released`). A pair the released code would have crashed on is recorded as failed
with the reason and left out of the means, never scored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np

from medpanel.cases.loaders import jsonl_records
from medpanel.errors import UsageError
from medpanel.scoring.icd10 import EmptyPolicy, code_table, icd10_scores, metric_names, parse_codes
from medpanel.scoring.icd10_released import ReleasedCrash, released_scores

Preset = Literal["corrected", "released"]
PRESETS = ("corrected", "released")
UNFINISHED = ("empty", "exclude")


def read_pairs(path: str | Path) -> list[dict[str, Any]]:
    """The pairs of a JSONL file, each checked: an id, a gold (string or list), a pred (string, list or null)."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"Pairs file {path} does not exist.", 'Give a JSONL file with one {"id", "pred", "gold"} object a line.')
    pairs = []
    for number, pair in jsonl_records(path):  # UTF-8 (a BOM allowed), one object a line, bounded
        if "gold" not in pair:
            raise UsageError(f"{path} line {number} has no \"gold\".", 'Write one {"id", "pred", "gold"} object a line.')
        for key in ("pred", "gold"):
            value = pair.get(key)
            ok = isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))
            if not ok and not (key == "pred" and value is None):
                raise UsageError(f"{path} line {number}: \"{key}\" must be a string or a list of strings.",
                                 'Write codes as typed ("E11.9, I10") or as a list (["E11.9", "I10"]); pred may be null for an unfinished consult.')
        pairs.append({"id": pair.get("id", number), "pred": pair.get("pred"), "gold": pair["gold"], "line": number})
    if not pairs:
        raise UsageError(f"{path} holds no pairs.", 'Write one {"id", "pred", "gold"} object a line.')
    return pairs


def score_pair(pred: Any, gold: Any, *, preset: Preset = "corrected", empty: EmptyPolicy = "zero") -> dict[str, Any]:
    """One pair's metrics under a preset (pred None is scored as an empty prediction)."""
    if preset == "released":
        return released_scores("" if pred is None else pred, gold)
    if not parse_codes(gold):
        raise UsageError(f"No ICD-10 codes found in gold {gold!r}.", "Give gold codes such as 'E11.9, I10'.")
    return icd10_scores([] if pred is None else pred, gold, empty=empty, table=code_table())


def score_pairs(pairs: list[dict[str, Any]], *, preset: Preset = "corrected", empty: EmptyPolicy = "zero",
                unfinished: str = "empty") -> dict[str, Any]:
    """Every pair's metrics in input order, the means over scored pairs, and the counts behind them."""
    if preset not in PRESETS:
        raise UsageError(f"Unknown preset '{preset}'.", f"Use one of: {', '.join(PRESETS)}.")
    if unfinished not in UNFINISHED:
        raise UsageError(f"Unknown unfinished policy '{unfinished}'.", "Use unfinished=empty (count as an empty prediction) or unfinished=exclude.")
    rows = []
    counts = {"pairs": len(pairs), "unfinished": 0, "excluded_unfinished": 0, "failed": 0}
    for pair in pairs:
        row: dict[str, Any] = {"id": pair["id"], "status": "scored"}
        if pair["pred"] is None:
            counts["unfinished"] += 1
            if unfinished == "exclude":
                counts["excluded_unfinished"] += 1
                rows.append(row | {"status": "unfinished, excluded", "scores": None})
                continue
            row["status"] = "unfinished, scored as empty"
        try:
            row["scores"] = score_pair(pair["pred"], pair["gold"], preset=preset, empty=empty)
        except UsageError as exc:
            raise UsageError(f"Pair {pair['id']!r} (line {pair['line']}): {exc}", "Fix that line of the pairs file.") from None
        except ReleasedCrash as exc:
            counts["failed"] += 1
            row |= {"status": "failed", "scores": None, "error": str(exc)}
        rows.append(row)
    means, n = {}, {}
    for name in metric_names():
        values = [r["scores"][name] for r in rows if r["scores"] is not None and r["scores"].get(name) is not None]
        n[name] = len(values)
        means[name] = float(np.mean(values)) if values else None  # numpy's mean, as the release averaged
    result = {"preset": preset, "empty": empty, "unfinished": unfinished, "counts": counts | {"scored": n["code_f1"]},
              "pairs": rows, "means": means, "n": n}
    result["warnings"] = []
    empties = counts["unfinished"] - counts["excluded_unfinished"]
    if preset == "released" and empties:
        # The release cannot produce these numbers: its eval.py drops a row whose prediction is NaN.
        result["warnings"].append(
            f"{empties} pair(s) with pred null were scored as empty predictions (the placeholder \"Not assigned\", "
            "which the released scoring matches at chapter level with gold N codes); the release's eval.py drops such rows "
            "instead: --set unfinished=exclude reproduces that.")
    if preset == "released":  # as the paper's tables print them
        result["means_rounded"] = {k: None if v is None else round(v, 3) for k, v in means.items()}
    return result
