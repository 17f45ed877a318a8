"""The report's figures, each drawn by matplotlib from plain data into an SVG string for inline HTML.

No function here reads the store: report_figures.py and report_html.py hand them lists and dicts. Every
figure is drawn off-screen (a bare Figure on the Agg canvas: no pyplot, no display, nothing to close in a
global registry), with its text kept as text (svg.fonttype "none"), and an Okabe-Ito palette, which stays
distinguishable under the common colour-vision deficiencies. Text from a model, a case or a run reaches
matplotlib through `label()`, which keeps mathtext from reading a '$' and wraps long names; matplotlib itself
escapes text as it writes the SVG.
"""

from __future__ import annotations

import importlib.util
import io
import re
import textwrap
from contextlib import contextmanager

from medpanel.errors import MissingExtraError
from medpanel.literal import visible
from medpanel.redact import redact

# Okabe & Ito (2008): blue, orange, bluish green, vermillion, sky blue, reddish purple, yellow, black.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442", "#000000")
RIGHT, WRONG, OPEN, NEUTRAL, UNKNOWN = "#009E73", "#D55E00", "#56B4E9", "#999999", "#DDDDDD"
MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*")

STYLE = {
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.size": 11,
    "axes.titlesize": 13,
    "axes.titleweight": "bold",
    "axes.labelsize": 11,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 10,
    "legend.frameon": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "axes.axisbelow": True,
}


def available() -> bool:
    """Whether matplotlib can be imported (a None in sys.modules, as tests use to hide it, counts as missing)."""
    return importlib.util.find_spec("matplotlib") is not None


def label(text, width: int = 36) -> str:
    """Data as plain figure text: keys redacted, control characters shown, '$' literal (not mathtext), wrapped."""
    shown = visible(redact(str(text))).replace("$", r"\$")
    return "\n".join(textwrap.wrap(shown, width, break_long_words=True, break_on_hyphens=False) or [""])


@contextmanager
def figure(name: str, width: float, height: float):
    """A figure styled for the report, named for its SVG ids; the name also salts matplotlib's hashed ids, so the SVG is the same on every run."""
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingExtraError("The report's plots", "report", "matplotlib") from None
    with matplotlib.rc_context({**STYLE, "svg.hashsalt": f"mp-{name}"}):
        fig = Figure(figsize=(width, height), layout="constrained")
        fig.set_label(name)
        FigureCanvasAgg(fig)
        try:
            yield fig
        finally:
            fig.clear()


_PROLOGUE = re.compile(r"\A.*?(?=<svg\b)", re.S)
_NAMESPACES = re.compile(r'\s+xmlns(?::\w+)?="[^"]*"')
_IDS = re.compile(r'(\bid="|href="#|url\(#)([^")]+)')


def to_svg(fig) -> str:
    """The figure as an <svg> element for inline HTML: no XML prologue or DOCTYPE and no namespace declarations
    (the HTML parser puts inline <svg> and xlink:href in their namespaces), so the page holds no URL; every id
    (and every reference to one) prefixed with the figure's name, so several figures on one page never share one."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    svg = _PROLOGUE.sub("", buf.getvalue(), count=1)
    head, sep, rest = svg.partition(">")
    prefix = f"mp-{fig.get_label()}-"
    return _IDS.sub(lambda m: m[1] + prefix + m[2], _NAMESPACES.sub("", head) + sep + rest)


def colour_of(colours: dict[str, str] | None, system: str, i: int) -> str:
    """A system's colour: the one the report gave it (the same in every figure), else the i-th of the palette."""
    return (colours or {}).get(system) or PALETTE[i % len(PALETTE)]


def _fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _span(row: dict) -> tuple[float, float]:
    est = row["estimate"]
    low = est - row["low"] if row.get("low") is not None else 0.0
    high = row["high"] - est if row.get("high") is not None else 0.0
    return max(low, 0.0), max(high, 0.0)


# ---------------------------------------------------------------- one score per system


def score_intervals(rows: list[dict], score: str, confidence: float, bounds: tuple[float, float] | None = None, *,
                    colours: dict[str, str] | None = None) -> str:
    """Each system's score as a point with its interval, one row per system (rows: label, estimate, low, high, n)."""
    with figure("intervals", 8.0, 1.3 + 0.55 * len(rows)) as fig:
        ax = fig.add_subplot()
        ys = list(range(len(rows)))[::-1]  # first run on top
        for i, (y, row) in enumerate(zip(ys, rows)):
            low, high = _span(row)
            ax.errorbar([row["estimate"]], [y], xerr=[[low], [high]], fmt=MARKERS[0], color=colour_of(colours, row["label"], i),
                        capsize=5, markersize=7, elinewidth=2)
            ax.annotate(f"{_fmt(row['estimate'])}  (n={row['n']})", (row["high"] if row.get("high") is not None else row["estimate"], y),
                        xytext=(8, 0), textcoords="offset points", va="center", fontsize=10)
        ax.set_yticks(ys, [label(r["label"], 44) for r in rows])
        ax.set_ylim(-0.6, len(rows) - 0.4)
        if bounds is not None:
            lo, hi = bounds
            ax.set_xlim(lo - (hi - lo) * 0.02, hi + (hi - lo) * 0.24)  # room for the annotations
            ax.set_xticks([t for t in ax.get_xticks() if lo <= t <= hi])  # no tick past the score's range
        ax.grid(axis="y", visible=False)
        ax.set_xlabel(f"{label(score)} (mean, {confidence:.0%} interval)")
        ax.set_title(f"{label(score)} by system")
        return to_svg(fig)


def score_vs_cost(points: list[dict], score: str, confidence: float, bounds: tuple[float, float] | None = None, *,
                  colours: dict[str, str] | None = None) -> str:
    """Each system a labelled point: dollars per finished item against its score, the score's interval as a bar
    (points: label, cost, estimate, low, high)."""
    with figure("cost", 8.0, 5.0) as fig:
        ax = fig.add_subplot()
        costs = [p["cost"] for p in points]
        for i, p in enumerate(points):
            low, high = _span(p)
            ax.errorbar([p["cost"]], [p["estimate"]], yerr=[[low], [high]], fmt=MARKERS[i % len(MARKERS)], color=colour_of(colours, p["label"], i),
                        capsize=5, markersize=8, elinewidth=1.6)
            ax.annotate(label(p["label"], 28), (p["cost"], p["estimate"]), xytext=(8, 6 if i % 2 == 0 else -14),
                        textcoords="offset points", fontsize=9.5, color="#222222")
        positive = [c for c in costs if c > 0]
        if positive and min(positive) == min(costs) and max(costs) / min(positive) > 100:
            ax.set_xscale("log")  # costs spanning orders of magnitude (a local model beside a frontier API)
        else:  # free runs (cached, local) sit on the zero line, kept clear of the frame
            right = max(costs) * 1.35 if max(costs) > 0 else 1.0
            ax.set_xlim(-right * 0.04, right)
            ax.axvline(0, color="#888888", linewidth=0.8, zorder=0)
        if bounds is not None:
            lo, hi = bounds
            ax.set_ylim(lo - (hi - lo) * 0.04, hi + (hi - lo) * 0.04)
        ax.spines["left"].set_visible(False)
        ax.set_xlabel("dollars per finished item (USD)")
        ax.set_ylabel(f"{label(score)} ({confidence:.0%} interval)")
        ax.set_title(f"{label(score)} against cost per item")
        return to_svg(fig)


# ---------------------------------------------------------------- debate


def _stack(ax, x, parts: list[tuple[int, str, str]], horizontal: bool = False, scale: float = 0.0) -> None:
    """One stacked bar of (count, colour, hatch) parts. A part's count is written inside it where it is at least
    6% of `scale` (the tallest bar) high, so small parts stay clean; a vertical bar's total goes on top."""
    base = 0
    for count, colour, hatch in parts:
        style = {"color": colour, "edgecolor": "white", "linewidth": 1, "hatch": hatch or None}
        if horizontal:
            ax.barh([x], [count], left=[base], height=0.6, **style)
        else:
            ax.bar([x], [count], bottom=[base], width=0.62, **style)
        if count and count >= 0.06 * scale:
            where = (base + count / 2, x) if horizontal else (x, base + count / 2)
            ax.text(*where, str(count), ha="center", va="center", fontsize=10, fontweight="bold",
                    color="white" if colour in (WRONG, NEUTRAL, PALETTE[0]) else "black",
                    bbox={"boxstyle": "round,pad=0.15", "facecolor": colour, "edgecolor": "none"} if hatch else None)
        base += count
    if not horizontal and base:
        ax.annotate(str(base), (x, base), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=10, color="#333333")


def _legend(fig, entries: list[tuple[str, str, str]], where: str = "outside lower center", ncols: int = 4) -> None:
    """A legend outside the axes, in the given order: (name, colour, hatch) of the parts that were drawn."""
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=colour, edgecolor="white", hatch=hatch or None, label=name) for name, colour, hatch in entries]
    if handles:
        fig.legend(handles=handles, loc=where, ncols=1 if "right" in where else min(ncols, len(handles)))


# Vote bars are hatched: the same right/wrong colours, told apart from a consensus without colour.
FLOW_PARTS = (("correct", "consensus, correct", RIGHT, ""), ("incorrect", "consensus, incorrect", WRONG, ""),
              ("unscored", "consensus, not scored", UNKNOWN, ""), ("open", "no consensus yet", OPEN, ""))
VOTE_PARTS = (("correct", "vote, correct", RIGHT, "//"), ("incorrect", "vote, incorrect", WRONG, "//"),
              ("unscored", "vote, not scored", UNKNOWN, "//"), ("no_answer", "vote, no answer (tie)", NEUTRAL, "//"))


def debate_flows(flows: list[tuple[str, dict]]) -> str:
    """Per debate run, per round: items reaching consensus (correct / incorrect) and those still open, then the
    vote on what stayed open (flows: label, report_figures.debate_flow)."""
    with figure("flows", min(6.4 + 3.4 * len(flows), 14.0), 4.8) as fig:
        axes = fig.subplots(1, len(flows), sharey=True, squeeze=False)[0]
        drawn: set[str] = set()
        for ax, (run, flow) in zip(axes, flows):
            ticks = []
            scale = max(flow["items"], 1)  # the first bar holds every item: the tallest
            for x, r in enumerate(flow["rounds"]):
                _stack(ax, x, [(r[k], c, h) for k, _, c, h in FLOW_PARTS if r[k]], scale=scale)
                drawn |= {k for k, *_ in FLOW_PARTS if r[k]}
                ticks.append("first\nanswers" if r["round"] == 0 else f"round {r['round']}")
            vote = flow["vote"]
            if sum(vote.values()):
                _stack(ax, len(ticks), [(vote[k], c, h) for k, _, c, h in VOTE_PARTS if vote[k]], scale=scale)
                drawn |= {f"vote:{k}" for k, *_ in VOTE_PARTS if vote[k]}
                ticks.append("vote")
            ax.set_xticks(range(len(ticks)), ticks)
            ax.grid(axis="x", visible=False)
            ax.set_title(label(run, 44), fontsize=10.5)
            ax.yaxis.get_major_locator().set_params(integer=True)
            ax.margins(y=0.08)  # room for the totals on top
        axes[0].set_ylabel("items")
        fig.suptitle("Debate flow per round", fontweight="bold", fontsize=13)
        _legend(fig, [(n, c, h) for k, n, c, h in FLOW_PARTS if k in drawn] + [(n, c, h) for k, n, c, h in VOTE_PARTS if f"vote:{k}" in drawn],
                where="outside right upper")
        return to_svg(fig)


SHIFT_PARTS = (("wrong_to_right", "wrong → right", RIGHT), ("right_to_wrong", "right → wrong", WRONG),
               ("wrong_to_wrong", "wrong → wrong", NEUTRAL), ("unscored", "not scored", UNKNOWN))


def stance_shifts(rows: list[tuple[str, dict]]) -> str:
    """Per model, its changed answers stacked by kind, with how many of its debate turns changed
    (rows: label, report_figures.stance_shifts row)."""
    with figure("shifts", 9.0, 2.1 + 0.6 * len(rows)) as fig:
        ax = fig.add_subplot()
        ys = list(range(len(rows)))[::-1]
        widest = max((r["changed"] for _, r in rows), default=0)
        for y, (model, r) in zip(ys, rows):
            _stack(ax, y, [(r[k], c, "") for k, _, c in SHIFT_PARTS if r[k]], horizontal=True, scale=widest)
            share = f"{r['changed']} of {r['turns']} turns changed" + (f" ({r['changed'] / r['turns']:.0%})" if r["turns"] else "")
            ax.annotate(share, (r["changed"], y), xytext=(8, 0), textcoords="offset points", va="center", fontsize=10)
        ax.set_yticks(ys, [label(m, 36) for m, _ in rows])
        ax.set_xlim(0, max(widest, 1) * 1.7)
        ax.set_ylim(-0.6, len(rows) - 0.4)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(axis="y", visible=False)
        ax.set_xlabel("changed answers in debate rounds")
        ax.set_title("Stance shifts per model")
        _legend(fig, [(n, c, "") for k, n, c in SHIFT_PARTS if any(r[k] for _, r in rows)])
        return to_svg(fig)


# ---------------------------------------------------------------- distributions


def by_type(groups: dict[str, dict[str, list[float]]], score: str, *, intervals: dict[str, dict[str, dict]] | None = None,
            bounds: tuple[float, float] | None = None, colours: dict[str, str] | None = None) -> str:
    """The score per question type, one colour per system: boxes of the per-item values, or, for a 0/1 score
    (`intervals` given: type -> system -> interval), the proportion with its interval, since a box of 0s and 1s says nothing."""
    types = list(groups)
    systems = sorted({s for by_system in groups.values() for s in by_system})
    with figure("types", min(4.0 + 1.4 * len(types) * max(1, len(systems)) ** 0.5, 13.0), 4.8) as fig:
        ax = fig.add_subplot()
        width = 0.8 / len(systems)
        for i, system in enumerate(systems):
            colour = colour_of(colours, system, i)
            xs = [t - 0.4 + width * (i + 0.5) for t in range(len(types))]
            present = [(x, kind) for x, kind in zip(xs, types) if groups[kind].get(system)]
            if intervals is not None:
                rows = [(x, intervals[kind][system]) for x, kind in present if intervals.get(kind, {}).get(system)]
                for x, iv in rows:
                    low, high = _span(iv)
                    ax.errorbar([x], [iv["estimate"]], yerr=[[low], [high]], fmt="o", color=colour, capsize=4, markersize=7)
                    ax.annotate(f"n={iv['n']}", (x, iv["low"] if iv.get("low") is not None else iv["estimate"]), xytext=(0, -14),
                                textcoords="offset points", ha="center", fontsize=9, color="#444444")
                ax.plot([], [], "o", color=colour, label=label(system, 40))
            else:
                box = ax.boxplot([groups[kind][system] for _, kind in present], positions=[x for x, _ in present], widths=width * 0.8,
                                 patch_artist=True, manage_ticks=False, medianprops={"color": "black"})
                for patch in box["boxes"]:
                    patch.set(facecolor=colour, alpha=0.75)
                ax.plot([], [], "s", color=colour, label=label(system, 40))
        ax.set_xticks(range(len(types)), [label(t, 18) for t in types])
        ax.set_xlim(-0.6, len(types) - 0.4)
        if bounds is not None:
            lo, hi = bounds
            ax.set_ylim(lo - (hi - lo) * 0.12, hi + (hi - lo) * 0.05)
        ax.grid(axis="x", visible=False)
        ax.set_xlabel("question type")
        ax.set_ylabel(label(score) + (" (share, with interval)" if intervals is not None else " per item"))
        ax.set_title(f"{label(score)} per question type")
        fig.legend(loc="outside lower center", ncols=min(len(systems), 3))  # names the system even when there is one
        return to_svg(fig)


METRIC_NAMES = {"precision": "precision", "recall": "recall", "f1": "F1", "jaccard": "Jaccard"}
LEVEL_NAMES = {"code": "full code", "category": "category", "chapter": "chapter"}


def icd10_levels(runs: list[tuple[str, dict[str, dict[str, dict]]]], *, colours: dict[str, str] | None = None) -> str:
    """ICD-10 metrics per level, a panel per metric, a bar per system at each level with its interval
    (runs: label, report_figures.icd10_levels)."""
    metrics = [m for m in METRIC_NAMES if any(m in levels.get(lv, {}) for _, levels in runs for lv in levels)]
    levels = [lv for lv in LEVEL_NAMES if any(lv in by_level for _, by_level in runs)]
    with figure("icd10", min(3.2 * len(metrics) + 1.0, 14.0), 4.4) as fig:
        axes = fig.subplots(1, len(metrics), sharey=True, squeeze=False)[0]
        width = 0.8 / len(runs)
        for ax, metric in zip(axes, metrics):
            for i, (run, by_level) in enumerate(runs):
                colour = colour_of(colours, run, i)
                for j, level in enumerate(levels):
                    iv = by_level.get(level, {}).get(metric)
                    if iv is None:
                        continue
                    x = j - 0.4 + width * (i + 0.5)
                    low, high = _span(iv)
                    ax.bar([x], [iv["estimate"]], width=width * 0.9, color=colour, alpha=0.85,
                           yerr=[[low], [high]], capsize=4, error_kw={"elinewidth": 1.2, "ecolor": "#333333"})
                    dark = colour in (PALETTE[0], PALETTE[3], PALETTE[7])
                    ax.text(x, 0.02, _fmt(iv["estimate"]), ha="center", va="bottom", fontsize=9, color="white" if dark else "black")
            ax.set_xticks(range(len(levels)), [LEVEL_NAMES[lv] for lv in levels])
            ax.set_ylim(0, 1.05)
            ax.grid(axis="x", visible=False)
            ax.set_title(METRIC_NAMES[metric], fontsize=11)
        axes[0].set_ylabel("mean over items (with interval)")
        fig.suptitle("ICD-10 codes per level", fontweight="bold", fontsize=13)
        _legend(fig, [(label(run, 40), colour_of(colours, run, i), "") for i, (run, _) in enumerate(runs)], ncols=3)  # one entry per system
        return to_svg(fig)


def turn_counts(runs: list[tuple[str, dict[int, int]]], *, colours: dict[str, str] | None = None) -> str:
    """How many items took each number of turns, one colour per system (runs: label, turns -> items)."""
    counts = sorted({t for _, hist in runs for t in hist})
    with figure("turns", min(5.0 + 0.35 * (counts[-1] - counts[0] + 1) * len(runs) ** 0.5, 13.0), 4.4) as fig:
        ax = fig.add_subplot()
        width = 0.8 / len(runs)
        for i, (run, hist) in enumerate(runs):
            xs = [t - 0.4 + width * (i + 0.5) for t in hist]
            ax.bar(xs, list(hist.values()), width=width * 0.95, color=colour_of(colours, run, i), label=label(run, 40))
        step = 5 if counts[-1] - counts[0] > 24 else 1  # long consults: every fifth count labelled
        ax.set_xticks([t for t in range(counts[0], counts[-1] + 1) if t % step == 0])
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.grid(axis="x", visible=False)
        ax.set_xlabel("turns in the item")
        ax.set_ylabel("items")
        ax.set_title("Turns per item")
        fig.legend(loc="outside lower center", ncols=min(len(runs), 3))
        return to_svg(fig)
