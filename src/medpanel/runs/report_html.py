"""The run report as one self-contained HTML page: build_report's tables, and the figures inline as SVG.

    render_report_body(store, refs) -> an HTML fragment in <div class="mp-report">, its CSS scoped under it
                                       (the web app embeds it in its own page)
    render_report_html(store, refs) -> a complete HTML5 document around that fragment

The page opens offline: no script, no external URL, no web font. Everything that came from a model, a case or a
run (labels, model specs, errors, notes) is escaped here; numbers are formatted here. Without matplotlib the
report is still whole, with one line saying how to get its plots. Which figure shows what: docs/statistics.md.
"""

from __future__ import annotations

import html
import time

from medpanel import __version__
from medpanel.literal import visible
from medpanel.redact import redact
from medpanel.runs import plots as figs
from medpanel.runs import stats
from medpanel.runs import report_figures as rf
from medpanel.runs.report import headline, load_runs, report_from_runs
from medpanel.runs.scoring import declared_kind
from medpanel.runs.store import Store

NO_MATPLOTLIB = "The plots are left out: they need matplotlib (pip install 'medpanel[report]')."


def esc(value) -> str:
    """Data as HTML text: keys redacted, control characters shown, markup characters escaped."""
    return html.escape(visible(redact(str(value))), quote=True)


def _num(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _interval(iv: dict | None) -> tuple[str, str]:
    """(estimate, [low, high]) as text; a dash where there is none."""
    if not iv or iv.get("estimate") is None:
        return "–", ""
    span = f"[{_num(iv['low'])}, {_num(iv['high'])}]" if iv.get("low") is not None else ""
    return _num(iv["estimate"]), span


# ---------------------------------------------------------------- figures


def _bounds(name: str | None, report: dict) -> tuple[float, float] | None:
    protocols = {r["protocol"] for r in report["runs"]}
    found = {declared_kind(name, p).bounds for p in protocols} if name else set()
    return found.pop() if len(found) == 1 else None


def figures(report: dict, gathered: list[rf.RunFigures]) -> list[tuple[str, str, str]]:
    """(id, caption, svg) of every figure the runs hold data for, in reading order."""
    name, c = report["plot_score"], f"{report['confidence']:.0%}"
    bounds = _bounds(name, report)
    colours = run_colours(report)
    out = []
    scored = [(r, headline(r["scores"][name])) for r in report["runs"] if name in r["scores"]]
    scored = [(r, h) for r, h in scored if h["estimate"] is not None]
    if scored:
        rows = [{"label": r["label"], **h} for r, h in scored]
        out.append(("fig-score", f"Each run's {name} with its {c} interval over its finished items (failed items are left out; n is "
                    "the items scored).", figs.score_intervals(rows, name, report["confidence"], bounds, colours=colours)))
        points = [{"label": r["label"], "cost": r["cost_usd"]["per_item"], **h} for r, h in scored if r["cost_usd"]["per_item"] is not None]
        if any(p["cost"] > 0 for p in points):
            out.append(("fig-cost", f"{name} against the dollars each finished item cost (calls served from the cache cost nothing); "
                        f"bars: the {c} interval.", figs.score_vs_cost(points, name, report["confidence"], bounds, colours=colours)))
    flows = [(g.label, g.flow) for g in gathered if g.flow]
    if flows:
        out.append(("fig-debate-flow", "Debate runs: in each round, the items whose seats reached consensus there (right or wrong) and "
                    "those still without consensus; the last bar is how the final vote settled the rest.", figs.debate_flows(flows)))
    shift_rows = [(f"{model} ({g.label})" if len(flows) > 1 else model, row) for g in gathered if g.shifts for model, row in g.shifts.items()]
    if any(row["turns"] for _, row in shift_rows):
        out.append(("fig-stance-shifts", "Per model, the debate turns in which it changed its answer, by whether the change went "
                    f"wrong → right, right → wrong or wrong → wrong ({_key_source([g for g in gathered if g.shifts], len(flows) > 1)}).",
                    figs.stance_shifts(shift_rows)))
    typed = [g for g in gathered if g.by_type and any(t != "(none)" for t in g.by_type)]
    if typed:
        out.append(_by_type(typed, report, c, colours))
    icd = [(r["label"], rf.icd10_levels(r)) for r in report["runs"]]
    icd = [(run, levels) for run, levels in icd if levels]
    if icd:
        out.append(("fig-icd10", f"Consult runs: ICD-10 precision, recall, F1 and Jaccard against the reference codes at the full code, "
                    f"its category (first three characters) and its chapter, each a mean over items with its {c} interval.",
                    figs.icd10_levels(icd, colours=colours)))
    turns = [(g.label, rf.histogram(g.turns)) for g in gathered if g.turns and max(g.turns) > 1]
    if turns:
        out.append(("fig-turns", "How many turns each finished item took, counted from its transcript's turn events (a written "
                    "board meeting counts its discussion turns, not the reply they were read from).", figs.turn_counts(turns, colours=colours)))
    return out


KEY_SOURCES = {
    "dataset": "right and wrong read from the dataset's answer key",
    "scores": "right and wrong inferred from the item's scores, the dataset not being at hand: a change to a letter no score "
              "judged is counted as not scored",
    "mixed": "right and wrong read from the dataset's answer key where it holds the item, else inferred from the item's scores",
}


def _key_source(debates: list[rf.RunFigures], several: bool) -> str:
    """Where the stance-shift figure's key came from, per run where the runs differ."""
    sources = {g.key_source or "scores" for g in debates}
    if len(sources) == 1 or not several:
        return KEY_SOURCES[sources.pop()]
    return "; ".join(f"{g.label}: {KEY_SOURCES[g.key_source or 'scores']}" for g in debates)


def _type_interval(values: list[float], kind, confidence: float, seed: int) -> dict:
    """A 0/1 score's share per type over item means: Wilson where every item mean is 0 or 1, else (repeats that
    disagree) Student t over the item means, clipped to [0, 1]."""
    if all(v in (0.0, 1.0) for v in values):
        return stats.metric_interval(values, kind, confidence, seed).to_dict()
    return stats.bounded_t_interval(values, kind, confidence).to_dict()


def _by_type(typed: list[rf.RunFigures], report: dict, c: str, colours: dict[str, str]) -> tuple[str, str, str]:
    name = typed[0].type_score
    groups: dict[str, dict[str, list[float]]] = {}
    for g in typed:
        for kind, values in g.by_type.items():
            groups.setdefault(kind, {})[g.label] = values
    kinds = {g.label: declared_kind(name, g.protocol) for g in typed}
    binary = all(k.kind == "proportion" for k in kinds.values())
    intervals = None
    if binary:  # a 0/1 score per type: the share with its interval, as the score tables give it
        intervals = {t: {s: _type_interval(v, kinds[s], report["confidence"], report["seed"]) for s, v in by.items()}
                     for t, by in groups.items()}
    bounds = {k.bounds for k in kinds.values()}
    keys = ", ".join(sorted({g.type_key for g in typed}))
    averaged = any(g.repeats_averaged for g in typed)
    caption = (f"{name} per question type (the items' {keys})" + (f", as a share with its {c} interval" if binary else
               ": each box spans the middle half of the items, the line is the median, whiskers reach 1.5 box-lengths")
               + ("; each item counted once, as the mean of its repeats, so n is the items." if averaged else "."))
    return "fig-by-type", caption, figs.by_type(dict(sorted(groups.items())), name, intervals=intervals,
                                                bounds=bounds.pop() if len(bounds) == 1 else None, colours=colours)


# ---------------------------------------------------------------- tables


def run_colours(report: dict) -> dict[str, str]:
    """One colour per run, the same in the summary table and in every figure."""
    return {r["label"]: figs.PALETTE[i % len(figs.PALETTE)] for i, r in enumerate(report["runs"])}


def _summary(report: dict) -> str:
    name, colours = report["plot_score"], run_colours(report)
    c = f"{report['confidence']:.0%}"
    head = ("<tr><th>run</th><th>protocol · dataset</th><th>status</th><th class='n'>done</th><th class='n'>failed</th>"
            + (f"<th class='n'>{esc(name)}</th><th>{c} interval</th>" if name else "")
            + "<th class='n'>$ / item</th><th class='n'>s / item</th></tr>")
    rows = []
    for run in report["runs"]:
        items = run["items"]
        swatch = f"<span class='mp-swatch' style='background:{colours[run['label']]}'></span>"
        cells = [f"<td>{swatch}<a href='#run-{esc(run['run_id'])}'>{esc(run['label'])}</a></td>",
                 f"<td>{esc(run['protocol'])} · {esc(run['dataset'])}</td>", f"<td>{_status(run['status'])}</td>",
                 f"<td class='n'>{items['done']}</td>", f"<td class='n{' bad' if items['failed'] else ''}'>{items['failed']}</td>"]
        if name:
            est, span = _interval(headline(run["scores"][name]) if name in run["scores"] else None)
            cells += [f"<td class='n'>{est}</td>", f"<td class='iv'>{span}</td>"]
        cells += [f"<td class='n'>{_num(run['cost_usd']['per_item'], 5)}</td>", f"<td class='n'>{_num(run['wall_s']['per_item'], 2)}</td>"]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table class='mp-table'><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>"


def _status(status: str) -> str:
    tone = "ok" if status == "done" else ("warn" if status in ("done_with_failures", "running", "interrupted", "stopped") else "bad")
    return f"<span class='mp-badge mp-{tone}'>{esc(status.replace('_', ' '))}</span>"


def _run(run: dict, confidence: float) -> str:
    items, c = run["items"], f"{confidence:.0%}"
    meta = (f"run <code>{esc(run['run_id'])}</code> · {esc(run['protocol'])} on {esc(run['dataset'])} · {_status(run['status'])} · "
            f"{items['done']} done, {items['failed']} failed" + (f" of {items['expected']} expected" if items["expected"] else "")
            + (f" · {run['repeats']} repeats" if run["repeats"] > 1 else ""))
    panel = ", ".join(f"<code>{esc(m)}</code>" for m in run["models"])
    roles = "".join(f" · {esc(role)} <code>{esc(spec)}</code>" for role, spec in run["roles"].items())
    repeats = any(s["across_repeats"] for s in run["scores"].values())
    head = (f"<tr><th>score</th><th class='n'>mean</th><th>{c} interval</th><th class='n'>n</th><th>method</th>"
            + ("<th>across repeats</th>" if repeats else "") + "<th>kind</th></tr>")
    rows = []
    for name, s in run["scores"].items():
        est, span = _interval(s["overall"])
        cells = [f"<td>{esc(name)}</td>", f"<td class='n'>{est}</td>", f"<td class='iv'>{span}</td>",
                 f"<td class='n'>{s['overall']['n']}</td>", f"<td class='dim'>{esc(s['overall']['method'])}</td>"]
        if repeats:
            a_est, a_span = _interval(s["across_repeats"])
            cells.append(f"<td>{a_est} <span class='iv'>{a_span}</span></td>")
        cells.append(f"<td class='dim'>{esc(s['kind'])}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    scores = (f"<table class='mp-table'><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>" if rows
              else "<p class='dim'>No scores recorded.</p>")
    t, cost, wall = run["tokens"], run["cost_usd"], run["wall_s"]
    spend = (f"<p class='mp-spend'>Per finished item: <b>{_num(t['input_per_item'], 1)}</b> tokens in, <b>{_num(t['output_per_item'], 1)}</b> out, "
             f"<b>${_num(cost['per_item'], 5)}</b>, <b>{_num(wall['per_item'], 2)} s</b>. Whole run: ${_num(cost['total'], 5)}, "
             f"{t['input_total']:,} tokens in, {t['output_total']:,} out.</p>")
    return (f"<section class='mp-run' id='run-{esc(run['run_id'])}'><h2>{esc(run['label'])}</h2><p class='mp-meta'>{meta}</p>"
            f"<p class='mp-meta'>panel: {panel}{roles}</p>{scores}{spend}{_failures(run)}"
            + (f"<p class='mp-note'>{esc(run['message'])}</p>" if run.get("message") else "") + "</section>")


def _failures(run: dict) -> str:
    failures = run["failures"]
    if not failures["items"]:
        return ""
    kinds = ", ".join(f"{esc(k)} {v}" for k, v in failures["by_kind"].items())
    shown = failures["items"][:20]
    rows = "".join(f"<tr><td><code>{esc(f['item'])}</code></td><td class='n'>{f['repeat']}</td><td>{esc(f['kind'])}</td>"
                   f"<td class='err'>{esc(f['error'])}</td></tr>" for f in shown)
    left = len(failures["items"]) - len(shown)
    more = f"<p class='dim'>… and {left} more (medpanel show {esc(run['run_id'])}).</p>" if left else ""
    return (f"<div class='mp-failures'><h3>Failed items: {len(failures['items'])} ({kinds})</h3>"
            "<p class='dim'>Left out of every score above: a failure is neither right nor wrong.</p>"
            f"<table class='mp-table'><thead><tr><th>item</th><th class='n'>repeat</th><th>kind</th><th>error (first line)</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>{more}</div>")


def _comparisons(report: dict) -> str:
    parts = []
    c = f"{report['confidence']:.0%}"
    if report["comparisons"]:
        rows = []
        for cmp in report["comparisons"]:
            diff = cmp["difference"]
            est, span = _interval(diff)
            tests = "; ".join(f"{esc(t['method'].split(' (')[0])} p = {_num(t['p_value'], 4)}" for t in cmp["tests"]) or esc(cmp.get("note", "–"))
            rows.append(f"<tr><td>{esc(cmp['score'])}</td><td>{esc(cmp['a_label'])}</td><td>{esc(cmp['b_label'])}</td>"
                        f"<td class='n'>{cmp['shared_items']}</td><td class='n'>{est}</td><td class='iv'>{span}</td><td>{tests}</td></tr>")
        parts.append(f"<h2>Paired comparisons</h2><p class='mp-meta'>A − B is the mean difference over the items both runs scored, with a {c} "
                     f"percentile-bootstrap interval ({report['resamples']:,} resamples of items, seed {report['seed']}). "
                     "All p-values are two-sided.</p>"
                     "<table class='mp-table'><thead><tr><th>score</th><th>A</th><th>B</th><th class='n'>items</th><th class='n'>A − B</th>"
                     f"<th>{c} interval</th><th>tests</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")
    for block in report["friedman"]:
        o = block["overall"]
        rows = "".join(f"<tr><td>{esc(p['a'])}</td><td>{esc(p['b'])}</td><td class='n'>{_num(p['p_value'], 4)}</td>"
                       f"<td class='n'>{_num(p['p_adjusted'], 4)}</td></tr>" for p in block["pairwise"])
        parts.append(f"<h3>Friedman test on {esc(block['score'])} ({block['shared_items']} shared items)</h3>"
                     f"<p class='mp-meta'>χ² = {_num(o['statistic'])}, p = {_num(o['p_value'], 4)}"
                     + (f" ({esc(o['note'])})" if o.get("note") else "")
                     + "</p><table class='mp-table'><thead><tr><th>A</th><th>B</th><th class='n'>Wilcoxon p</th><th class='n'>Bonferroni p</th>"
                     f"</tr></thead><tbody>{rows}</tbody></table>")
    if report["notes"]:
        parts.append("<ul class='mp-notes'>" + "".join(f"<li>{esc(n)}</li>" for n in report["notes"]) + "</ul>")
    return f"<section class='mp-compare'>{''.join(parts)}</section>" if parts else ""


# ---------------------------------------------------------------- the page

CSS = """
.mp-report{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,"Liberation Sans","DejaVu Sans",sans-serif;
 color:#1d2733;line-height:1.45;font-size:15px;max-width:1180px;margin:0 auto;padding:24px 28px 40px;background:#fff}
.mp-report h1{font-size:26px;margin:0 0 4px}
.mp-report h2{font-size:20px;margin:32px 0 6px;padding-top:14px;border-top:1px solid #dde3ea}
.mp-report h3{font-size:16px;margin:18px 0 6px}
.mp-report .mp-meta{color:#4a5866;margin:2px 0 8px}
.mp-report code{font-family:ui-monospace,"DejaVu Sans Mono","Liberation Mono",Menlo,Consolas,monospace;font-size:13px;
 background:#f1f4f7;padding:1px 4px;border-radius:3px;overflow-wrap:anywhere}
.mp-report .mp-table{border-collapse:collapse;margin:8px 0 12px;font-size:14px;width:100%}
.mp-report .mp-table th{text-align:left;font-weight:600;color:#33404d;border-bottom:2px solid #c9d2dc;padding:6px 10px;white-space:nowrap}
.mp-report .mp-table td{border-bottom:1px solid #e6ebf0;padding:5px 10px;vertical-align:top;overflow-wrap:anywhere}
.mp-report .mp-table tbody tr:nth-child(even){background:#f8fafb}
.mp-report .n,.mp-report .mp-table th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.mp-report .iv{color:#4a5866;font-variant-numeric:tabular-nums;white-space:nowrap}
.mp-report .dim{color:#5d6b78}
.mp-report .bad{color:#b3261e;font-weight:600}
.mp-report .err{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:13px;color:#7a1f17}
.mp-report .mp-badge{display:inline-block;padding:0 7px;border-radius:9px;font-size:12.5px;font-weight:600;white-space:nowrap}
.mp-report .mp-ok{background:#e3f3ec;color:#0b5e3c}.mp-report .mp-warn{background:#fdf1dc;color:#7a4b00}
.mp-report .mp-bad{background:#fbe4e2;color:#8c1d16}
.mp-report .mp-failures{border-left:4px solid #D55E00;background:#fff8f4;padding:4px 14px 6px;margin:10px 0}
.mp-report .mp-spend{margin:4px 0 10px}
.mp-report .mp-note,.mp-report .mp-notes{color:#4a5866}
.mp-report .mp-figure{margin:18px 0 26px;padding:12px;border:1px solid #e1e6ec;border-radius:6px;background:#fff}
.mp-report .mp-figure svg{display:block;max-width:100%;height:auto;margin:0 auto}
.mp-report .mp-figure figcaption{color:#3d4a57;font-size:14px;margin-top:6px;text-align:center}
.mp-report .mp-swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:7px;vertical-align:baseline}
.mp-report a{color:#0b5c99;text-decoration:none}.mp-report a:hover{text-decoration:underline}
.mp-report footer{margin-top:36px;color:#5d6b78;font-size:13px;border-top:1px solid #dde3ea;padding-top:10px}
""".strip()


def _figures_html(report: dict, gathered: list[rf.RunFigures], draw: bool) -> str:
    if not draw:
        return "<p class='mp-note'>The plots were left out (--no-plot).</p>"
    if not figs.available():
        return f"<p class='mp-note'>{esc(NO_MATPLOTLIB)}</p>"
    return "".join(f"<figure class='mp-figure' id='{fid}'>{svg}<figcaption>{esc(caption)}</figcaption></figure>"
                   for fid, caption, svg in figures(report, gathered))


def body_from_report(report: dict, gathered: list[rf.RunFigures], *, plots_drawn: bool = True, extra: str = "") -> str:
    """The fragment from build_report's data and the gathered figure data. `extra`: sections a higher layer made,
    already escaped (the blinded human ratings of these runs, medpanel.rating.report)."""
    n = len(report["runs"])
    lead = (f"{n} run{'s' if n != 1 else ''} · intervals at {report['confidence']:.0%} · bootstrap seed {report['seed']} · "
            f"made {time.strftime('%Y-%m-%d %H:%M')} by medpanel {esc(__version__)}")
    return (f"<div class='mp-report'><style>{CSS}</style><header><h1>medpanel report</h1><p class='mp-meta'>{lead}</p></header>"
            f"<section class='mp-summary'>{_summary(report)}</section>"
            f"<section class='mp-figures'>{_figures_html(report, gathered, plots_drawn)}</section>"
            + "".join(_run(r, report["confidence"]) for r in report["runs"]) + _comparisons(report) + extra
            + "<footer>Failed items are counted apart and left out of every score. Each interval is chosen by the score's declared kind "
              "(Wilson for a proportion, Student t for a count or a scale, clipped to its range); docs/statistics.md explains each "
              "test and figure.</footer></div>")


def prepare_report(store: Store, refs: list[str], score: str | None = None, seed: int = 0) -> tuple[dict, list[rf.RunFigures]]:
    """build_report's data and the figures' data, from one reading of the runs (the CLI writes both from it)."""
    runs = load_runs(store, refs)
    report = report_from_runs(runs, score=score, seed=seed)
    return report, rf.gather(store, runs, report["plot_score"])


def render_report_body(store: Store, refs: list[str], *, score: str | None = None, seed: int = 0, plots: bool = True,
                       extra: str = "") -> str:
    """The report as an HTML fragment: a <div class="mp-report"> with its CSS scoped under it.
    plots=False leaves the figures out (and says so)."""
    report, gathered = prepare_report(store, refs, score, seed)
    return body_from_report(report, gathered, plots_drawn=plots, extra=extra)


def page(body: str, title: str) -> str:
    """A complete HTML5 document around a report fragment."""
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{esc(title)}</title><style>body{{margin:0;background:#eef1f4}}</style></head><body>{body}</body></html>\n")


def render_report_html(store: Store, refs: list[str], *, score: str | None = None, seed: int = 0, plots: bool = True,
                       extra: str = "") -> str:
    """The report as a complete HTML5 document that opens offline."""
    report, gathered = prepare_report(store, refs, score, seed)
    return document_from_report(report, gathered, plots_drawn=plots, extra=extra)


def document_from_report(report: dict, gathered: list[rf.RunFigures], *, plots_drawn: bool = True, extra: str = "") -> str:
    title = "medpanel report: " + ", ".join(r["run_id"] for r in report["runs"])
    return page(body_from_report(report, gathered, plots_drawn=plots_drawn, extra=extra), title)
