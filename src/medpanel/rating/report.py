"""The analysis of a rating session, unblinded: each hidden system named by its run again.

    rating_summary(store, session_id) -> dict       everything below, as plain data (`medpanel rate show --json`)
    rating_section_html(store, run_ids) -> str      an HTML fragment for the run report: every session that rated
                                                    any of these runs, or "" when none did

Per dimension: each system's mean settled (consensus) rating, the mean of all its first-hand ratings, the
share rated at a flawed level, and the distribution; agreement of the two primary raters before
adjudication (exact agreement, Cohen's kappa unweighted and, on scales of three or more levels, linear and
quadratic weighted, Fleiss' kappa, Spearman's rho, the confusion table); and every pair of systems compared
by a permutation test on the first-hand ratings clustered by answer (MCC's analysis), with Holm-adjusted
p-values across the pairs of one dimension. For pick-best the "rating" of an answer is 1 when picked, so the
mean is a win rate, and the raters' agreement is on which system they picked. Then the judge-human
agreement tables (judge_agreement.py).
"""

from __future__ import annotations

import itertools
from typing import Any

from medpanel.rating import agreement
from medpanel.rating import store as rstore
from medpanel.rating.judge_agreement import judge_agreement
from medpanel.rating.rubrics import PICK_BEST
from medpanel.rating.sessions import Session, load, progress_of
from medpanel.runs.store import Store
from medpanel.runs.report_html import esc

MAX_PERMUTATIONS = 10_000


def _system_label(run: dict | None, run_id: str) -> str:
    if not run:
        return f"{run_id} (run no longer in the store)"
    return f"{run['protocol']}: {', '.join(run['models'])}"


def _primary_pairs(session: Session, dimension: str) -> tuple[list, list, list[list]]:
    """First and second primary rater's value per rated cell (per item for pick-best: the system picked)."""
    first, second, subjects = [], [], []
    for n, info in session.items.items():
        r1, r2 = info["raters"]
        if not (session.rated(n, r1) and session.rated(n, r2)):
            continue
        if session.rubric.kind == PICK_BEST:
            pair = [session.choice(n, r1), session.choice(n, r2)]
            first.append(pair[0])
            second.append(pair[1])
            subjects.append(pair)
            continue
        for system in sorted(session.systems(n)):
            a, b = session.by[(n, r1)].get((system, dimension)), session.by[(n, r2)].get((system, dimension))
            if a is not None and b is not None:
                first.append(a)
                second.append(b)
                subjects.append([a, b])
    return first, second, subjects


def _first_hand(session: Session, item: int, system: int, dimension: str) -> list[int]:
    raters = session.items[item]["raters"]
    return [v for r in raters if (v := session.by.get((item, r), {}).get((system, dimension))) is not None]


def _dimension_summary(session: Session, dim, systems: list[dict]) -> dict[str, Any]:
    scale = dim.scale
    pick = session.rubric.kind == PICK_BEST
    per_system = []
    sources: dict[str, int] = {}
    for s in systems:
        settled, ratings = [], []
        for n in session.items:
            value, how = session.consensus(n, s["system"], dim.name)
            sources[how] = sources.get(how, 0) + 1
            if value is not None:
                settled.append(value)
            ratings += _first_hand(session, n, s["system"], dim.name)
        per_system.append({
            "system": s["system"], "run_id": s["run_id"], "label": s["label"], "n": len(settled),
            "mean": sum(settled) / len(settled) if settled else None,
            "ratings": len(ratings), "mean_ratings": sum(ratings) / len(ratings) if ratings else None,
            "flawed_share": (sum(scale.flawed(v) for v in settled) / len(settled)) if settled and not pick else None,
            "distribution": {scale.label(v): settled.count(v) for v in scale.values},
        })
    first, second, subjects = _primary_pairs(session, dim.name)
    categories = sorted(s["system"] for s in systems) if pick else scale.values
    agree: dict[str, Any] = {
        "pairs": len(first),
        "on": "the system each rater picked, per item" if pick else "each answer's rating by the item's two primary raters",
        "percent": agreement.percent_agreement(first, second).as_dict(),
        "kappa": agreement.cohen_kappa(first, second, categories).as_dict(),
        "fleiss_kappa": agreement.fleiss_kappa(subjects, categories).as_dict(),
    }
    if not pick and scale.ordinal:
        agree["kappa_linear"] = agreement.cohen_kappa(first, second, categories, "linear").as_dict()
        agree["kappa_quadratic"] = agreement.cohen_kappa(first, second, categories, "quadratic").as_dict()
        agree["spearman"] = agreement.spearman(first, second).as_dict()
    table = agreement.confusion(first, second, categories)
    label_of = {s["system"]: s["label"] for s in systems}
    table["labels"] = [label_of[c] for c in categories] if pick else [scale.label(c) for c in categories]
    table["rows"], table["columns"] = "first rater", "second rater"
    agree["confusion"] = table

    comparisons = []
    seed = int(session.row["seed"])
    for a, b in itertools.combinations(systems, 2):
        clusters = [(_first_hand(session, n, a["system"], dim.name), _first_hand(session, n, b["system"], dim.name)) for n in session.items]
        test = agreement.permutation_test(clusters, max_permutations=MAX_PERMUTATIONS, seed=seed)
        comparisons.append({"a": a["run_id"], "b": b["run_id"], "a_label": a["label"], "b_label": b["label"], **test})
    for row, adjusted in zip(comparisons, agreement.holm([c["p_value"] for c in comparisons])):
        row["p_holm"] = adjusted
    return {"name": dim.name, "label": dim.label, "question": dim.question, "scale": scale.as_dict(), "systems": per_system,
            "settled_by": sources, "agreement": agree, "comparisons": comparisons}


def rating_summary(store: Store, session_id: str) -> dict[str, Any]:
    """The whole analysis of one session (see the module doc), as plain JSON-ready data."""
    session = load(store, session_id)
    systems = []
    for s in rstore.session_systems(store, session.id):
        run = store.get_run(s["run_id"])
        systems.append({"system": s["system"], "run_id": s["run_id"], "label": _system_label(run, s["run_id"]),
                        "protocol": run["protocol"] if run else None, "models": run["models"] if run else []})
    row = session.row
    return {
        "session": {"id": row["id"], "rubric": session.rubric.name, "title": session.rubric.title, "created_at": row["created_at"],
                    "seed": row["seed"], "raters": row["raters"], "adjudicator": row["adjudicator"], "dimensions": row["dimensions"],
                    "note": row["note"], "kind": session.rubric.kind},
        "progress": progress_of(session),
        "systems": systems,
        "dimensions": [_dimension_summary(session, dim, systems) for dim in session.dimensions],
        "judge_agreement": judge_agreement(store, session.id, session),
    }


# ---------------------------------------------------------------- the HTML fragment


def _e(value: Any) -> str:
    """As the report it sits in escapes: control characters visible, keys redacted, then HTML-escaped."""
    return esc("" if value is None else value)


def _num(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _stat(est: dict | None) -> str:
    """An Estimate as a table cell: the value, or a dash with the reason it is undefined."""
    if not est:
        return "<td class=\"num\">—</td>"
    if est.get("value") is None:
        return f"<td class=\"num\" title=\"{_e(est.get('reason'))}\">— <small>{_e(est.get('reason'))}</small></td>"
    return f"<td class=\"num\">{_e(_num(est['value']))}</td>"


def _confusion_html(table: dict, caption: str) -> str:
    head = "".join(f"<th class=\"num\">{_e(label)}</th>" for label in table["labels"])
    body = "".join(f"<tr><th>{_e(label)}</th>" + "".join(f"<td class=\"num\">{_e(c)}</td>" for c in row) + "</tr>"
                   for label, row in zip(table["labels"], table["counts"]))
    return (f"<table class=\"table mp-confusion\"><caption>{_e(caption)}: {_e(table['rows'])} (rows) by {_e(table['columns'])} (columns)</caption>"
            f"<thead><tr><th></th>{head}</tr></thead><tbody>{body}</tbody></table>")


def _session_html(summary: dict) -> str:
    s, prog = summary["session"], summary["progress"]
    pick = s["kind"] == PICK_BEST
    parts = [f"<div class=\"card mp-rating-session\"><h3>{_e(s['title'])} <span class=\"badge\">{_e(s['rubric'])}</span> "
             f"<small class=\"mono\">{_e(s['id'])}</small></h3>",
             f"<p>{_e(prog['items'])} items, {_e(len(summary['systems']))} systems; raters {_e(', '.join(s['raters']))}"
             + (f", adjudicator {_e(s['adjudicator'])}" if s["adjudicator"] else "")
             + f". Settled: {_e(prog['items_by_state']['settled'])} of {_e(prog['items'])} items"
             + f" ({_e(prog['items_with_disagreement'])} with a disagreement).</p>"]
    if s["note"]:
        parts.append(f"<p class=\"notice\">{_e(s['note'])}</p>")
    for dim in summary["dimensions"]:
        parts.append(f"<h4>{_e(dim['label'])}</h4>")
        head = "<tr><th>system</th><th class=\"num\">answers settled</th><th class=\"num\">" + ("win rate" if pick else "mean (settled)") + \
               "</th><th class=\"num\">mean (all ratings)</th>" + ("" if pick else "<th class=\"num\">flawed</th>") + "</tr>"
        rows = "".join(
            f"<tr><td>{_e(x['label'])} <small class=\"mono\">{_e(x['run_id'])}</small></td><td class=\"num\">{_e(x['n'])}</td>"
            f"<td class=\"num\">{_e(_num(x['mean']))}</td><td class=\"num\">{_e(_num(x['mean_ratings']))}</td>"
            + ("" if pick else f"<td class=\"num\">{_e(_num(x['flawed_share']))}</td>") + "</tr>" for x in dim["systems"])
        parts.append(f"<table class=\"table mp-means\"><thead>{head}</thead><tbody>{rows}</tbody></table>")
        ag = dim["agreement"]
        cols = [("exact agreement", ag["percent"]), ("Cohen's kappa", ag["kappa"])]
        if "kappa_linear" in ag:
            cols += [("kappa linear", ag["kappa_linear"]), ("kappa quadratic", ag["kappa_quadratic"])]
        cols.append(("Fleiss' kappa", ag["fleiss_kappa"]))
        if "spearman" in ag:
            cols.append(("Spearman rho", ag["spearman"]))
        parts.append("<table class=\"table mp-agreement\"><caption>Raters before adjudication, on " + _e(ag["on"]) + f" ({_e(ag['pairs'])} pairs)</caption>"
                     "<thead><tr>" + "".join(f"<th class=\"num\">{_e(name)}</th>" for name, _ in cols) + "</tr></thead><tbody><tr>"
                     + "".join(_stat(est) for _, est in cols) + "</tr></tbody></table>")
        if dim["comparisons"]:
            rows = "".join(
                f"<tr><td>{_e(c['a_label'])} <small class=\"mono\">{_e(c['a'])}</small></td><td>{_e(c['b_label'])} <small class=\"mono\">{_e(c['b'])}</small></td>"
                f"<td class=\"num\">{_e(_num(c['difference']))}</td><td class=\"num\">{_e(_num(c['p_value'], 4))}</td>"
                f"<td class=\"num\">{_e(_num(c['p_holm'], 4))}</td><td class=\"num\">{_e(c['permutations'])}{' (all)' if c['exact'] else ''}</td></tr>"
                for c in dim["comparisons"])
            parts.append("<table class=\"table mp-comparisons\"><caption>Permutation tests, ratings clustered by answer</caption><thead><tr>"
                         "<th>A</th><th>B</th><th class=\"num\">mean A − B</th><th class=\"num\">p</th><th class=\"num\">p (Holm)</th>"
                         f"<th class=\"num\">permutations</th></tr></thead><tbody>{rows}</tbody></table>")
    if summary["judge_agreement"]:
        parts.append("<h4>Judge against people</h4>")
        rows = "".join(
            f"<tr><td>{_e(j['dimension'])}</td><td class=\"mono\">{_e(j['judge'])}</td><td>{_e(j['mapping'])}</td><td class=\"num\">{_e(j['n'])}</td>"
            f"<td class=\"num\">{_e((j.get('left_out') or {}).get('no_judge_verdict', 0))}</td>"
            + _stat(j["agreement"]) + _stat(j["kappa"]) + _stat(j["kappa_linear"]) + _stat(j["kappa_quadratic"]) + _stat(j["spearman"]) + "</tr>"
            for j in summary["judge_agreement"])
        parts.append("<table class=\"table mp-judge\"><thead><tr><th>dimension</th><th>judge</th><th>mapping</th><th class=\"num\">pairs</th>"
                     "<th class=\"num\" title=\"empty answers: the judge was not called, its floor score left out\">no judge verdict</th>"
                     "<th class=\"num\">exact</th><th class=\"num\">kappa</th><th class=\"num\">kappa linear</th><th class=\"num\">kappa quadratic</th>"
                     f"<th class=\"num\">Spearman rho</th></tr></thead><tbody>{rows}</tbody></table>")
        for j in summary["judge_agreement"]:
            parts.append(_confusion_html(j["confusion"], f"{j['dimension']}, {j['judge']}"))
    parts.append("</div>")
    return "".join(parts)


def rating_section_html(store: Store, run_ids: list[str]) -> str:
    """An HTML fragment with every rating session that rated any of `run_ids` (all values escaped), or ""."""
    sessions = rstore.sessions_of_runs(store, list(run_ids))
    if not sessions:
        return ""
    body = "".join(_session_html(rating_summary(store, sid)) for sid in sessions)
    return f"<section class=\"mp-ratings\"><h2>Human ratings</h2>{body}</section>"


__all__ = ["MAX_PERMUTATIONS", "rating_section_html", "rating_summary"]
