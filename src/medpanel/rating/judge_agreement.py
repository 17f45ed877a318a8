"""LLM judges checked against people: where a judge and the human raters scored the same dimension of the
same answers, how well the judge's stored score agrees with the people's settled (consensus) rating.

Which judge score stands for which human rubric dimension, and how its scale maps onto the human one, is
declared once, in JUDGE_LINKS:

    otb-audit response_correctness  <- clinical_equivalence (specialist_judge, 1-5):
                                       4-5 High, 3 Medium, 1-2 Low
    otb-audit consensus_fidelity    <- conclusion_alignment (board_judge, 1-5):
                                       4-5 High, 3 Medium, 1-2 Low
    otb-audit case_factuality       <- unsupported_claim (specialist_judge, 0/1):
                                       0 (no unsupported claim) High, 1 Low (the judge never says Medium);
                                       a decreasing link: a higher judge score is a worse answer

Discussion support has no judge link: the board judge's `consistency` score judges the whole board meeting
(discussion and conclusion), while raters see only the board's conclusion, so the two do not rate one thing.

A judge score x maps to the first band whose lower bound it reaches (bands are written highest first), so a
value between the whole numbers (there are none today) falls where its rounding would put it. The human
side is the cell's consensus: the two primary raters' rating where they agree, else the adjudicator's;
cells with no consensus yet (or a judge that failed, leaving the score empty) are left out and counted. So
are answers the judge never saw: for an empty answer (or a board response with no conclusion) the judge
is not called and the scorer stores a floor score (its score event's status is `format_failure`); such a
floor is no verdict of the judge, so it is left out and counted apart ("no judge verdict").

Per link and per judge model (the run's `judge` role, medpanel.runs.panel.run_roles), over the pairs of
(judge mapped onto the human scale, human consensus): exact agreement, Cohen's kappa unweighted, linear and
quadratic; Spearman's rho between the judge's raw score, oriented so that higher is better (negated for a
decreasing link such as unsupported_claim), and the human value (ranks: the mapping does not change them,
except where it merges levels, so rho uses the raw score); and the confusion table, judge's
mapped level in rows, the people's in columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from medpanel.errors import MedpanelError
from medpanel.rating import agreement
from medpanel.rating import store as rstore
from medpanel.rating.sessions import Session, load
from medpanel.runs.store import Store

UNKNOWN_JUDGE = "(judge not recorded)"


@dataclass(frozen=True)
class JudgeLink:
    rubric: str
    dimension: str
    score: str  # the score name the judge writes (store.scores)
    scorer: str  # the scorer that writes it (a protocol's scorer name)
    judge_scale: str
    bands: tuple[tuple[float, int], ...]  # (lowest judge value, human value), highest band first
    increasing: bool = True  # False when a higher judge score is a worse answer (unsupported_claim: 1 is a flaw)

    def oriented(self, value: float) -> float:
        """The raw judge score turned so that higher is better, as the human scale runs (for Spearman's rho)."""
        return value if self.increasing else -value

    def to_human(self, value: float | None) -> int | None:
        if value is None:
            return None
        for lowest, human in self.bands:
            if value >= lowest:
                return human
        return self.bands[-1][1]

    def describe(self, labels: dict[int, str]) -> str:
        """The mapping in words, e.g. 'clinical_equivalence >= 3.5: High; >= 2.5: Medium; lower: Low'."""
        parts = [f">= {lo:g}: {labels.get(h, h)}" for lo, h in self.bands[:-1]] + [f"lower: {labels.get(self.bands[-1][1], self.bands[-1][1])}"]
        return f"{self.score} ({self.judge_scale}) " + "; ".join(parts)


# High = 3, Medium = 2, Low = 1 on the otb-audit scale.
FIVE_POINT = ((3.5, 3), (2.5, 2), (float("-inf"), 1))  # 4-5 High, 3 Medium, 1-2 Low
JUDGE_LINKS: tuple[JudgeLink, ...] = (
    JudgeLink("otb-audit", "response_correctness", "clinical_equivalence", "specialist_judge", "1-5", FIVE_POINT),
    JudgeLink("otb-audit", "consensus_fidelity", "conclusion_alignment", "board_judge", "1-5", FIVE_POINT),
    # No link for discussion_support: the judge's `consistency` reads the whole board meeting, raters only its conclusion.
    JudgeLink("otb-audit", "case_factuality", "unsupported_claim", "specialist_judge", "0/1", ((0.5, 1), (float("-inf"), 3)), increasing=False),
)
FLOOR_STATUS = "format_failure"  # a judge score event's status when the judge was never called (the score is a floor)


def floor_scores(store: Store, run_id: str, item_id: str, repeat: int) -> set[str]:
    """The score names of one item that are floors, not verdicts: those in a judge score event whose status is
    format_failure (an empty answer, or a board response with no conclusion: the judge was not called)."""
    names: set[str] = set()
    for event in store.events(run_id, item_id, repeat):
        data = event.get("data") if isinstance(event, dict) else None
        if event.get("kind") != "score" or not isinstance(data, dict) or data.get("status") != FLOOR_STATUS:
            continue
        names.update(str(k) for k in (data.get("scores") or {}))
    return names


def links_for(rubric: str, dimensions: list[str]) -> list[JudgeLink]:
    return [link for link in JUDGE_LINKS if link.rubric == rubric and link.dimension in dimensions]


def _has_scorer(protocol: str, scorer: str) -> bool:
    from medpanel.protocols import PROTOCOLS, get_protocol

    return protocol in PROTOCOLS and any(s.name == scorer for s in get_protocol(protocol).scorers)


def judge_of(run: dict) -> str:
    from medpanel.runs.panel import run_roles

    try:
        return run_roles(run).get("judge") or UNKNOWN_JUDGE
    except MedpanelError:
        return UNKNOWN_JUDGE


def _no_verdict(store: Store, run_id: str, info: dict, system: int, score: str, session: Session,
                floors: dict[tuple[str, str, int], set[str]]) -> bool:
    """Whether the stored judge score of this answer is a floor the judge never gave: the answer was empty, or
    the item's judge score event says format_failure for this score."""
    from medpanel.rating.sessions import NO_ANSWER

    shown = [a for a in session.answers.get(info["item"], []) if a["system"] == system]
    if shown and shown[0]["text"] == NO_ANSWER:
        return True
    key = (run_id, info["item_id"], info["repeat"])
    if key not in floors:
        floors[key] = floor_scores(store, *key)
    return score in floors[key]


def judge_agreement(store: Store, session_id: str, session: Session | None = None) -> list[dict[str, Any]]:
    """One row per (linked dimension, judge model) with the agreement of judge and people (see the module doc)."""
    session = session or load(store, session_id)
    links = links_for(session.rubric.name, session.row["dimensions"])
    if not links:
        return []
    runs = {s["system"]: store.get_run(s["run_id"]) for s in rstore.session_systems(store, session.id)}
    scores = {system: {(r["item_id"], r["repeat"], r["name"]): r["value"] for r in store.scores(run["id"])} for system, run in runs.items() if run}
    floors: dict[tuple[str, str, int], set[str]] = {}
    rows = []
    for link in links:
        scale = session.rubric.dimension(link.dimension).scale
        labels = {lv.value: lv.label for lv in scale.levels}
        groups: dict[str, dict[str, Any]] = {}
        for system, run in runs.items():
            if not run or not _has_scorer(run["protocol"], link.scorer):
                continue
            group = groups.setdefault(judge_of(run), {"pairs": [], "no_consensus": 0, "no_score": 0, "no_verdict": 0, "run_ids": []})
            group["run_ids"].append(run["id"])
            for n, info in session.items.items():
                raw = scores[system].get((info["item_id"], info["repeat"], link.score))
                human, _how = session.consensus(n, system, link.dimension)
                if human is None:
                    group["no_consensus"] += 1
                elif raw is None:
                    group["no_score"] += 1
                elif _no_verdict(store, run["id"], info, system, link.score, session, floors):
                    group["no_verdict"] += 1
                else:
                    group["pairs"].append((link.oriented(float(raw)), link.to_human(float(raw)), human))
        for judge, group in groups.items():
            pairs = group["pairs"]
            mapped, human, raw = [p[1] for p in pairs], [p[2] for p in pairs], [p[0] for p in pairs]
            values = scale.values
            rows.append({
                "rubric": link.rubric, "dimension": link.dimension, "score": link.score, "scorer": link.scorer, "judge": judge,
                "run_ids": group["run_ids"], "mapping": link.describe(labels), "n": len(pairs),
                "left_out": {"no_consensus": group["no_consensus"], "no_judge_score": group["no_score"],
                             "no_judge_verdict": group["no_verdict"]},
                "agreement": agreement.percent_agreement(mapped, human).as_dict(),
                "kappa": agreement.cohen_kappa(mapped, human, values).as_dict(),
                "kappa_linear": agreement.cohen_kappa(mapped, human, values, "linear").as_dict(),
                "kappa_quadratic": agreement.cohen_kappa(mapped, human, values, "quadratic").as_dict(),
                "spearman": agreement.spearman(raw, human).as_dict(),
                "confusion": {**agreement.confusion(mapped, human, values), "labels": [labels[v] for v in values],
                              "rows": "judge (mapped)", "columns": "people (consensus)"},
            })
    return rows


__all__ = ["FLOOR_STATUS", "JUDGE_LINKS", "JudgeLink", "floor_scores", "judge_agreement", "judge_of", "links_for"]
