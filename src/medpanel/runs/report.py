"""The run report: each run's scores with intervals, failures, tokens, dollars and time per item, and
paired comparisons between runs over the same dataset, written as report.json, report.md and an
accuracy-vs-cost plot.

Failed items are reported by kind and left out of every score: a failure is never a wrong answer.
Which test is used where is explained in docs/statistics.md.
"""

from __future__ import annotations

import html
import json
import re
from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import numpy as np

from medpanel.errors import MissingExtraError, UsageError
from medpanel.literal import visible
from medpanel.redact import redact, redact_data
from medpanel.protocols import expands_cases
from medpanel.runs import stats
from medpanel.runs.runner import failure_digest, run_roles
from medpanel.runs.store import Store
from medpanel.runs.scoring import declared_kind
from medpanel.scoring.metrics import MetricKind

PLOT_FILE = "accuracy_vs_cost.png"


@dataclass
class RunData:
    """One run as the report needs it: its record, its items, and each score by (item, repeat)."""

    run: dict
    label: str
    items: list[dict]
    scores: dict[str, dict[tuple[str, int], float]]

    @property
    def id(self) -> str:
        return self.run["id"]


def load_runs(store: Store, refs: list[str]) -> list[RunData]:
    if not refs:
        raise UsageError("No run given.", "Name one or more runs: medpanel report RUN [RUN ...] (see `medpanel runs`).")
    ids = [store.resolve_run_id(ref) for ref in refs]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise UsageError(f"Run {', '.join(repeated)} is given more than once.", "Name each run once.")
    runs = []
    for run_id in ids:
        run, items = store.get_run(run_id), store.items(run_id)
        done = {(i["item_id"], i["repeat"]) for i in items if i["status"] == "done"}
        scores: dict[str, dict[tuple[str, int], float]] = defaultdict(dict)
        for row in store.scores(run_id):
            key = (row["item_id"], row["repeat"])
            if row["value"] is not None and key in done:
                scores[row["name"]][key] = float(row["value"])
        label = f"{run['protocol']}: {', '.join(run['models'])}"
        runs.append(RunData(run, label, items, dict(scores)))
    labels = [r.label for r in runs]
    for r in runs:  # two runs with the same protocol and models are told apart by their ids
        if labels.count(r.label) > 1:
            r.label = f"{r.label} ({r.id})"
    return runs


# ---------------------------------------------------------------- one run


def score_report(by_key: dict[tuple[str, int], float], kind: MetricKind, confidence: float, seed: int = 0) -> dict:
    """A score's intervals as its declared kind says (stats.metric_interval), over items and repeats."""
    values = list(by_key.values())
    by_repeat: dict[int, list[float]] = defaultdict(list)
    for (_, repeat), value in sorted(by_key.items()):
        by_repeat[repeat].append(value)
    overall = stats.metric_interval(values, kind, confidence, seed).to_dict()
    out = {"kind": kind.describe(), "overall": overall, "per_repeat": [], "across_repeats": None}
    if len(by_repeat) > 1:
        overall["note"] = (overall["note"] + "; " if overall["note"] else "") + \
            "pools every item x repeat as if independent: quote across_repeats"
        out["per_repeat"] = [{"repeat": r, **stats.metric_interval(v, kind, confidence, seed).to_dict()} for r, v in sorted(by_repeat.items())]
        out["across_repeats"] = across_repeats(by_key, by_repeat, kind, confidence, seed)
    return out


def across_repeats(by_key: dict[tuple[str, int], float], by_repeat: dict[int, list[float]], kind: MetricKind, confidence: float,
                   seed: int) -> dict:
    """The interval to quote for a run with repeats. A clipped mean (HealthBench) is simple-evals' number, the
    clipped mean over every item x repeat, with a bootstrap that resamples items with their repeats together:
    a t over per-repeat raw means would leave [0, 1] (a mean below 0 is what the clip is for). Every other
    kind: Student t over the per-repeat means, clipped to the kind's range."""
    if kind.clip is not None:
        keys = sorted(by_key)
        interval = stats.clipped_mean_bootstrap([by_key[k] for k in keys], kind.clip, kind.resamples, seed, confidence,
                                                clusters=[item for item, _ in keys])
        out = interval.to_dict()
        out["note"] = "; ".join(n for n in (out["note"], "simple-evals' number: one clipped mean over every item x repeat, "
                                            "items resampled with their repeats") if n)
        return out
    means = [float(np.mean(v)) for _, v in sorted(by_repeat.items())]
    return stats.bounded_t_interval(means, kind, confidence).to_dict()


def headline(score: dict) -> dict:
    """The interval to quote: across repeats when there are repeats, else over the items."""
    return score["across_repeats"] or score["overall"]


def run_report(data: RunData, confidence: float, seed: int = 0) -> dict:
    items = data.items
    done = [i for i in items if i["status"] == "done"]
    failed = [i for i in items if i["status"] == "failed"]
    settings = data.run["settings"] or {}
    declared = settings.get("repeats") if isinstance(settings.get("repeats"), int) else None
    limit = settings.get("limit")
    n_done = len(done)

    def per_item(total: float) -> float | None:
        return total / n_done if n_done else None

    by_kind: dict[str, int] = defaultdict(int)
    for i in failed:
        by_kind[i["error_kind"] or "error"] += 1
    cost_total = sum(i["cost_usd"] or 0.0 for i in items)
    wall = [(i["finished_at"] or 0) - (i["started_at"] or 0) for i in done]
    return {
        "run_id": data.id,
        "label": data.label,
        "status": data.run["status"],
        "dataset": data.run["dataset"],
        "protocol": data.run["protocol"],
        "models": data.run["models"],
        "roles": run_roles(data.run),
        "repeats": declared or len({i["repeat"] for i in items}) or 1,
        "items": {"recorded": len(items), "done": n_done, "failed": len(failed),
                  # --limit counts cases; a protocol that expands a case into several items makes that no item count.
                  "expected": limit * (declared or 1) if isinstance(limit, int) and not expands_cases(data.run["protocol"]) else None},
        "failures": {
            "by_kind": dict(sorted(by_kind.items())),
            "digest": failure_digest(items),
            "items": [{"item": i["item_id"], "repeat": i["repeat"], "kind": i["error_kind"] or "error",
                       "error": (i["error"] or "").partition("\n")[0]} for i in failed],
        },
        "scores": {name: score_report(by_key, declared_kind(name, data.run["protocol"]), confidence, seed)
                   for name, by_key in sorted(data.scores.items())},
        "tokens": {"input_total": sum(i["input_tokens"] or 0 for i in items), "output_total": sum(i["output_tokens"] or 0 for i in items),
                   "input_per_item": per_item(sum(i["input_tokens"] or 0 for i in done)),
                   "output_per_item": per_item(sum(i["output_tokens"] or 0 for i in done))},
        "cost_usd": {"total": round(cost_total, 8), "per_item": per_item(sum(i["cost_usd"] or 0.0 for i in done))},
        "wall_s": {"per_item": per_item(sum(wall)), "items_total": round(sum(wall), 3)},
        "message": data.run["message"],
    }


# ---------------------------------------------------------------- comparisons


def _by_item(by_key: dict[tuple[str, int], float]) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = defaultdict(dict)
    for (item, repeat), value in by_key.items():
        out[item][repeat] = value
    return out


def compare_pair(a: RunData, b: RunData, name: str, *, confidence: float, seed: int, resamples: int) -> dict:
    """Paired tests of run a against run b on one score, over the items both scored."""
    items_a, items_b = _by_item(a.scores[name]), _by_item(b.scores[name])
    shared = sorted(set(items_a) & set(items_b))
    values = [v for item in shared for v in (*items_a[item].values(), *items_b[item].values())]
    kind = declared_kind(name, a.run["protocol"])
    # McNemar is for declared 0/1 outcomes; a proportion holding other values gets the graded tests.
    binary = kind.kind == "proportion" and all(v in (0.0, 1.0) for v in values)
    single = all(len(items_a[i]) == 1 and len(items_b[i]) == 1 for i in shared)
    result = {"score": name, "a": a.id, "b": b.id, "a_label": a.label, "b_label": b.label, "shared_items": len(shared),
              "kind": kind.describe(), "repeats": not single, "tests": [], "difference": None}
    if not shared:
        result["note"] = "the runs share no scored items"
        return result
    # One value per item and run: the item mean is that value; with repeats it is the item's mean over them.
    mean_a = [float(np.mean(list(items_a[i].values()))) for i in shared]
    mean_b = [float(np.mean(list(items_b[i].values()))) for i in shared]
    diffs = [x - y for x, y in zip(mean_a, mean_b)]
    # Resampling items (not item x repeat) keeps each item's repeats together.
    result["difference"] = stats.bootstrap_interval(diffs, resamples=resamples, seed=seed, confidence=confidence).to_dict()
    result["mean_a"], result["mean_b"] = float(np.mean(mean_a)), float(np.mean(mean_b))
    tests = []
    if single and binary:
        tests.append(stats.mcnemar_exact(mean_a, mean_b))
    else:
        tests += [stats.paired_t_test(mean_a, mean_b), stats.wilcoxon_signed_rank(mean_a, mean_b)]
    if not single:
        keys = [(i, r) for i in shared for r in sorted(set(items_a[i]) & set(items_b[i]))]
        tests.append(stats.permutation_test_clustered([items_a[i][r] for i, r in keys], [items_b[i][r] for i, r in keys],
                                                      [i for i, _ in keys], resamples=resamples, seed=seed))
        repeats = sorted({r for i in shared for r in items_a[i]} & {r for i in shared for r in items_b[i]})
        if len(repeats) >= 2:  # MCC's comparison: each repeat's mean, matched by repeat index
            per_a = [float(np.mean([items_a[i][r] for i in shared if r in items_a[i]])) for r in repeats]
            per_b = [float(np.mean([items_b[i][r] for i in shared if r in items_b[i]])) for r in repeats]
            across = stats.paired_t_test(per_a, per_b)
            tests.append(stats.TestResult(across.statistic, across.p_value, "paired t-test across repeats (matched by repeat index)",
                                          across.n, across.note, across.details))
    result["tests"] = [t.to_dict() for t in tests]
    if kind.clip is not None:
        result["note"] = CLIPPED_COMPARISON
    return result


# A paired test needs per-item differences, and HealthBench clips only the run's mean, never an item's score.
CLIPPED_COMPARISON = ("compared on the unclipped per-item scores: A − B is the difference of unclipped means, which can differ from "
                      "the difference of the clipped scores reported for each run (where a run's mean falls outside the clip)")


def friedman_block(runs: list[RunData], name: str) -> dict:
    """Friedman over ≥3 runs on the items all of them scored (item means over repeats), with
    Bonferroni-adjusted pairwise Wilcoxon tests."""
    per_run = [_by_item(r.scores[name]) for r in runs]
    shared = sorted(set.intersection(*(set(p) for p in per_run)))
    table = {r.label: [float(np.mean(list(p[i].values()))) for i in shared] for r, p in zip(runs, per_run)}
    out = stats.friedman_with_bonferroni(table).to_dict()
    return {"score": name, "runs": [r.id for r in runs], "labels": [r.label for r in runs], "shared_items": len(shared), **out}


COMPARED_ROLES = ("patient", "judge")  # roles that shape or grade the outcome, beside the seats under test


def role_warnings(a: RunData, b: RunData) -> list[str]:
    """A warning for each role the two runs filled with different models: a different judge grades
    differently, a different patient tells a different story, so their scores are not like for like."""
    roles_a, roles_b = run_roles(a.run), run_roles(b.run)
    return [f"Warning: {a.id} and {b.id} had different {role}s ({roles_a.get(role) or 'none recorded'} vs "
            f"{roles_b.get(role) or 'none recorded'}): scores that depend on the {role} are not comparable between them."
            for role in COMPARED_ROLES if roles_a.get(role) != roles_b.get(role)]


def comparisons(runs: list[RunData], *, confidence: float, seed: int, resamples: int) -> tuple[list[dict], list[dict], list[str]]:
    by_dataset: dict[str, list[RunData]] = defaultdict(list)
    for r in runs:
        by_dataset[r.run["dataset"]].append(r)
    pairs, friedman, notes = [], [], []
    if len(by_dataset) > 1 and len(runs) > 1:
        notes.append("Runs over different datasets are not compared: " +
                     "; ".join(f"{d}: {', '.join(r.id for r in group)}" for d, group in by_dataset.items()))
    for group in by_dataset.values():
        for a, b in combinations(group, 2):
            notes += role_warnings(a, b)
            for name in sorted(set(a.scores) & set(b.scores)):
                pairs.append(compare_pair(a, b, name, confidence=confidence, seed=seed, resamples=resamples))
        if len(group) >= 3:
            for name in sorted(set.intersection(*(set(r.scores) for r in group))):
                friedman.append(friedman_block(group, name))
    clipped = sorted({p["score"] for p in pairs if p.get("note") == CLIPPED_COMPARISON})
    if clipped:  # said once, not once per HealthBench tag score
        shown = ", ".join(clipped[:3]) + (f" and {len(clipped) - 3} more" if len(clipped) > 3 else "")
        notes.append(f"{shown} (clipped means) are {CLIPPED_COMPARISON}.")
    return pairs, friedman, notes


# ---------------------------------------------------------------- the report


def pick_score(runs: list[RunData], score: str | None) -> str | None:
    names = sorted({n for r in runs for n in r.scores})
    if score is not None:
        if score not in names:
            raise UsageError(f"No run has a score named '{score}'.", f"Pick one of: {', '.join(names) or '(no scores recorded)'}.")
        return score
    return "accuracy" if "accuracy" in names else (names[0] if names else None)


def build_report(store: Store, refs: list[str], *, score: str | None = None, confidence: float = 0.95,
                 seed: int = 0, resamples: int = 10_000) -> dict:
    """Everything the report shows, as plain JSON-ready data."""
    return report_from_runs(load_runs(store, refs), score=score, confidence=confidence, seed=seed, resamples=resamples)


def report_from_runs(runs: list[RunData], *, score: str | None = None, confidence: float = 0.95, seed: int = 0,
                     resamples: int = 10_000) -> dict:
    """build_report on runs already loaded (the HTML report reads their items again for its figures)."""
    pairs, friedman, notes = comparisons(runs, confidence=confidence, seed=seed, resamples=resamples)
    return {
        "confidence": confidence,
        "seed": seed,
        "resamples": resamples,
        "plot_score": pick_score(runs, score),
        "runs": [run_report(r, confidence, seed) for r in runs],
        "comparisons": pairs,
        "friedman": friedman,
        "notes": notes,
    }


def plot_accuracy_vs_cost(report: dict, path: Path) -> Path:
    """Each run a point: dollars per item against its score, with the score's interval as an error bar."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingExtraError("The accuracy-vs-cost plot", "report", "matplotlib") from None
    name = report["plot_score"]
    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)  # draw off-screen; no pyplot, no display needed
    ax = fig.add_subplot()
    for run in report["runs"]:
        score = run["scores"].get(name)
        cost = run["cost_usd"]["per_item"]
        if score is None or cost is None or headline(score)["estimate"] is None:
            continue
        h = headline(score)
        low = h["estimate"] - h["low"] if h["low"] is not None else 0.0
        high = h["high"] - h["estimate"] if h["high"] is not None else 0.0
        ax.errorbar([cost], [h["estimate"]], yerr=[[low], [high]], fmt="o", capsize=4, label=run["label"])
    ax.set_xlim(left=0)  # dollars are never negative; free runs (cached, local) sit on the axis
    ax.set_xlabel("dollars per item (USD)")
    ax.set_ylabel(f"{name} (mean, {report['confidence']:.0%} interval)" if name else "score")
    ax.set_title(f"{name or 'score'} vs cost per item")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def _num(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


_MD_INLINE = re.compile(r"([\\`*_\[\]|~])")


def _cell(text) -> str:
    """Data (a case id, model spec, error, label) as literal Markdown text: HTML characters as entities,
    Markdown's inline punctuation backslash-escaped (a '|' would split a table cell, '[x](y)' make a link),
    lines joined (a newline would end a table row or list item), control characters visible, keys redacted."""
    shown = html.escape(visible(redact(str(text))), quote=False)
    return _MD_INLINE.sub(r"\\\1", " ".join(shown.splitlines()))


def _code(text) -> str:
    """An id as inline code when it can be one (code spans show everything literally), else as escaped text."""
    shown = visible(redact(str(text)))
    return f"`{shown}`" if shown and "`" not in shown and "\n" not in shown and shown.strip() == shown else _cell(shown)


def _interval_text(iv: dict) -> str:
    if iv is None or iv["estimate"] is None:
        return "–"
    span = f" [{_num(iv['low'])}, {_num(iv['high'])}]" if iv["low"] is not None else ""
    return f"{_num(iv['estimate'])}{span} ({iv['method']}, n={iv['n']})"


def render_markdown(report: dict) -> str:
    c = f"{report['confidence']:.0%}"
    lines = ["# medpanel report", ""]
    for run in report["runs"]:
        items = run["items"]
        lines += [f"## {_cell(run['label'])}", "",
                  f"run {_code(run['run_id'])} · {_cell(run['protocol'])} on {_cell(run['dataset'])} · {_cell(run['status'])} · "
                  f"{items['done']} done, {items['failed']} failed" + (f" of {items['expected']} expected" if items["expected"] else "")
                  + (f" · {run['repeats']} repeats" if run["repeats"] > 1 else ""), "",
                  "panel: " + _cell(", ".join(run["models"])) + "".join(f" · {_cell(role)} {_cell(spec)}" for role, spec in run["roles"].items()), "",
                  f"| score | mean [{c} interval] | across repeats | kind |", "|---|---|---|---|"]
        for name, s in run["scores"].items():
            lines.append(f"| {name} | {_interval_text(s['overall'])} | {_interval_text(s['across_repeats'])} | {s['kind']} |")
        lines.append("")
        t, cost, wall = run["tokens"], run["cost_usd"], run["wall_s"]
        lines.append(f"Per finished item: {_num(t['input_per_item'], 1)} tokens in, {_num(t['output_per_item'], 1)} out, "
                     f"${_num(cost['per_item'], 6)}, {_num(wall['per_item'], 2)} s. Whole run: ${_num(cost['total'], 6)}, "
                     f"{t['input_total']} tokens in, {t['output_total']} out.")
        if run["failures"]["items"]:
            kinds = ", ".join(f"{_cell(k)} {v}" for k, v in run["failures"]["by_kind"].items())
            d = run["failures"]["digest"]
            lines += ["", f"Failed items (left out of the scores): {d['failed']} of {d['of']} ({kinds}); "
                          f"commonest: {_cell(d['commonest_kind'])}: {_cell(d['message'])}"]
            lines += [f"- {_cell(f['item'])}#{f['repeat']} ({_cell(f['kind'])}): {_cell(f['error'])}" for f in run["failures"]["items"][:20]]
        lines.append("")
    if report["comparisons"]:
        method = (f"A − B is the mean difference on the shared items with a {c} percentile-bootstrap interval "
                  f"({report['resamples']} resamples of items, seed {report['seed']}).")
        lines += ["## Paired comparisons", "", method, "",
                  "| score | A | B | items | A − B | tests (two-sided p) |", "|---|---|---|---|---|---|"]
        for cmp in report["comparisons"]:
            diff = cmp["difference"]
            tests = "; ".join(f"{t['method'].split(' (')[0]} p={_num(t['p_value'], 4)}" for t in cmp["tests"]) or cmp.get("note", "–")
            span = (f"{_num(diff['estimate'])} [{_num(diff['low'])}, {_num(diff['high'])}]" if diff and diff["estimate"] is not None else "–")
            lines.append(f"| {cmp['score']} | {_cell(cmp['a_label'])} | {_cell(cmp['b_label'])} | {cmp['shared_items']} | {span} | {tests} |")
        lines.append("")
    for block in report["friedman"]:
        o = block["overall"]
        lines += [f"## Friedman test on {block['score']} ({block['shared_items']} shared items)", "",
                  f"chi² = {_num(o['statistic'])}, p = {_num(o['p_value'], 4)}" + (f" ({o['note']})" if o["note"] else ""), "",
                  "| A | B | Wilcoxon p | Bonferroni p |", "|---|---|---|---|"]
        lines += [f"| {_cell(p['a'])} | {_cell(p['b'])} | {_num(p['p_value'], 4)} | {_num(p['p_adjusted'], 4)} |" for p in block["pairwise"]]
        lines.append("")
    lines += [f"- {_cell(note)}" for note in report["notes"]]
    if report.get("files", {}).get("plot"):
        lines += ["", f"![{report['plot_score']} vs cost per item]({PLOT_FILE})"]
    return "\n".join(lines).rstrip() + "\n"


def write_report(report: dict, out_dir: Path, *, plot: bool = True) -> dict:
    """Write the plot (first, so a missing matplotlib stops before anything is half-written),
    report.md and report.json into `out_dir`; returns the report with its file paths added."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"Cannot create the report folder {out_dir}: {exc}.", "Pass a writable folder with --out.") from None
    files = {"json": str(out_dir / "report.json"), "markdown": str(out_dir / "report.md"), "plot": None}
    if plot and report["plot_score"] is not None:
        files["plot"] = str(plot_accuracy_vs_cost(report, out_dir / PLOT_FILE))
    report = {**report, "files": files}
    report = redact_data(report)  # a key a server echoed into an error never reaches a report file
    Path(files["markdown"]).write_text(render_markdown(report))
    Path(files["json"]).write_text(json.dumps(report, indent=2, allow_nan=False))
    return report

