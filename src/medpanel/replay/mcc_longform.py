"""Replay MCC's long-form log (Table S14): read each round's cross-evaluation scores, recompute the
consensus score, and set it beside the score the log printed.

In each debate round every model scores every other model's answer on factual accuracy,
completeness and safety (1-10). The log prints each evaluation twice: as raw "SAFETY_SCORE: 9"
lines and as a "GPT's dimension scores for Qwen:" block of "- safety: 9/10" lines; the blocks are
read, the raw lines only where a round has no block. After the round, "Overall consensus score:
0.89" and one "* dimension: 0.88" line per dimension give the logged values.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from medpanel.scoring.consensus import MCC_SCALE, MCC_THRESHOLD, consensus_score, dimension_agreements

_ROUND_BANNER = re.compile(r"^=+\s*(?i:debate\s+round)\s*(\d+)\s*=+$|^=+\s*辩论第\s*(\d+)\s*轮\s*=+$")
_BLOCK_HEADER = re.compile(r"^(?P<rater>\w+)(?:'s|’s|的)?\s*(?i:dimension\s+scores?\s+for)\s*(?P<target>\w+)")
_BLOCK_LINE = re.compile(r"^[-*•]\s*(?P<dim>[A-Za-z_ ]+?)\s*[:：]\s*(?P<score>\d+(?:\.\d+)?)\s*(?:/\s*10)?\s*$")
_RAW_HEADER = re.compile(r"^(?P<rater>\w+)(?:'s|’s|的)?\s*(?i:evaluation\s+results?\s+(?:on|for|of))\s*(?P<target>\w+)")
_RAW_LINE = re.compile(r"^(?P<dim>[A-Z][A-Z_]+?)_SCORE\s*[:：]\s*(?P<score>\d+(?:\.\d+)?)")
_OVERALL = re.compile(r"(?i:overall\s+consensus\s+score)\s*[:：]\s*(?P<v>\d+(?:\.\d+)?)")
_STATUS = re.compile(r"(?i:consensus\s+status)")
_DIM_LOGGED = re.compile(r"^[*\-•]\s*(?P<dim>[a-z_]+)\s*[:：]\s*(?P<v>\d+(?:\.\d+)?)\s*$")
_STOP = re.compile(r"(?i:reached\s+sufficient\s+consensus|ending\s+debate|consensus\s+reached)")


def is_long_form(text: str) -> bool:
    """A long-form log carries per-dimension cross-evaluation scores and a consensus score."""
    head = text[:400_000]
    return bool(_OVERALL.search(head)) and bool(re.search(r"(?i:dimension\s+scores?\s+for|_SCORE\s*:)", head))


def _dim_name(name: str) -> str:
    return re.sub(r"\s+", "_", name.strip().lower())


def parse_long_form(text: str) -> dict:
    """{'rounds': [{round, scores{dim: [..]}, evaluations[...], logged, logged_by_dimension}], 'stopped_after': r}."""
    rounds: list[dict] = []
    current: dict | None = None
    block: dict | None = None
    raw: dict | None = None
    in_status = False
    stopped_after = None
    for line in text.splitlines():
        key = unicodedata.normalize("NFKC", line).strip()
        banner = _ROUND_BANNER.match(key)
        if banner:
            current = {"round": int(banner.group(1) or banner.group(2)), "blocks": [], "raw": [], "logged": None, "logged_by_dimension": {}}
            rounds.append(current)
            block = raw = None
            in_status = False
            continue
        if current is None:
            continue
        if m := _BLOCK_HEADER.match(key):
            block = {"rater": m.group("rater"), "target": m.group("target"), "scores": {}}
            current["blocks"].append(block)
            raw = None
            continue
        if block is not None and (m := _BLOCK_LINE.match(key)):
            block["scores"][_dim_name(m.group("dim"))] = float(m.group("score"))
            continue
        block = None if key else block
        if m := _RAW_HEADER.match(key):
            raw = {"rater": m.group("rater"), "target": m.group("target"), "scores": {}}
            current["raw"].append(raw)
            continue
        if raw is not None and (m := _RAW_LINE.match(key)):
            raw["scores"][_dim_name(m.group("dim"))] = float(m.group("score"))
            continue
        if _STATUS.search(key):
            in_status = current["logged"] is None  # a repeated "final consensus status" restates the last round
            continue
        if in_status and (m := _OVERALL.search(key)):
            current["logged"] = float(m.group("v"))
            continue
        if in_status and (m := _DIM_LOGGED.match(key)):
            current["logged_by_dimension"][m.group("dim")] = float(m.group("v"))
            continue
        if _STOP.search(key):
            stopped_after = current["round"]
    out = []
    for r in rounds:
        evaluations = r["blocks"] or r["raw"]  # the blocks restate the raw lines; never count both
        scores: dict[str, list[float]] = {}
        for ev in evaluations:
            for dim, value in ev["scores"].items():
                scores.setdefault(dim, []).append(value)
        out.append({"round": r["round"], "scores": scores,
                    "evaluations": [{"rater": e["rater"], "target": e["target"], "scores": e["scores"]} for e in evaluations],
                    "logged": r["logged"], "logged_by_dimension": r["logged_by_dimension"]})
    return {"rounds": out, "stopped_after": stopped_after}


def _agrees(computed: float, logged: float | None) -> bool | None:
    return None if logged is None else abs(computed - logged) <= 0.005 + 1e-9  # the log prints 2 decimals


def replay_long_form(text: str, path: str | Path = "long_form.txt", scale: float = MCC_SCALE, threshold: float = MCC_THRESHOLD) -> dict:
    """Each round's recomputed consensus score beside the logged one, and where the stop rule would end the debate."""
    parsed = parse_long_form(text)
    rounds = []
    for r in parsed["rounds"]:
        if not r["scores"]:
            rounds.append({**r, "computed": None, "computed_by_dimension": {}, "agrees": None, "warning": "no scores found in this round"})
            continue
        by_dim = dimension_agreements(r["scores"], scale)
        computed = consensus_score(r["scores"], scale)
        rounds.append({
            "round": r["round"], "scores": r["scores"], "evaluations": r["evaluations"],
            "computed": computed, "logged": r["logged"], "agrees": _agrees(computed, r["logged"]),
            "computed_by_dimension": by_dim, "logged_by_dimension": r["logged_by_dimension"],
            "dimensions_agree": {d: _agrees(v, r["logged_by_dimension"].get(d)) for d, v in by_dim.items()},
            "reaches_threshold": computed >= threshold,
        })
    first_reaching = next((r["round"] for r in rounds if r.get("computed") is not None and r["reaches_threshold"]), None)
    return {"path": str(path), "scale": scale, "threshold": threshold, "rounds": rounds,
            "logged_stop_after_round": parsed["stopped_after"], "first_round_at_threshold": first_reaching,
            "all_agree": all(r.get("agrees") for r in rounds) if rounds else False}


__all__ = ["is_long_form", "parse_long_form", "replay_long_form"]
