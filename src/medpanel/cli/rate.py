"""`medpanel rate new|list|show|rubrics`: blinded human rating sessions over stored runs (docs/rating.md).

People rate in the web app (`medpanel serve`, /ratings); these commands set a session up and read it back.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from rich import box
from rich.table import Column, Table

from medpanel.cli.common import JsonOpt, StoreOpt, app, err, open_store, out, print_json, styled
from medpanel.errors import UsageError

rate_app = typer.Typer(no_args_is_help=True, help="Blinded human rating of stored runs' answers, and judges checked against people.")
app.add_typer(rate_app, name="rate")


def _names(value: str | None, what: str) -> list[str]:
    names = [n.strip() for n in (value or "").split(",")]
    if not value or any(not n for n in names):
        raise UsageError(f"{what} {'is empty' if not value else 'has an empty name'}: {value!r}.", f"Give names, comma-separated, e.g. {what} alice,bob.")
    return names


def _f(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _est(est: dict | None) -> str:
    if not est:
        return "-"
    return _f(est["value"]) if est["value"] is not None else f"undefined ({est['reason']})"


def _store(store):
    from medpanel.runs.store import default_store_path

    if not (store or default_store_path()).exists():
        raise UsageError(f"There is no store at {store or default_store_path()}.",
                         "Check --store / MEDPANEL_STORE; rate runs where they are stored.")
    return open_store(store, create=False)


@rate_app.command("new")
def new(
    runs: Annotated[list[str], typer.Argument(help="Run ids (or unique prefixes, or 'last') over the same items; each is one blinded system.")],
    rubric: Annotated[str, typer.Option("--rubric", envvar="MEDPANEL_RUBRIC", help="mcc-physician, mcc-layperson, pick-best or otb-audit (see `medpanel rate rubrics`).")],
    raters: Annotated[str, typer.Option("--raters", envvar="MEDPANEL_RATERS", help="Two or more rater names, comma-separated (the names they sign in with).")],
    adjudicator: Annotated[Optional[str], typer.Option("--adjudicator", envvar="MEDPANEL_ADJUDICATOR", help="A third person, asked only where an item's two raters disagree.")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", envvar="MEDPANEL_RATE_SEED", help="Seed of the letter order per item and the item order per rater (default: random, stored).")] = None,
    dimensions: Annotated[Optional[str], typer.Option("--dimensions", envvar="MEDPANEL_RATE_DIMENSIONS", help="Ask only these rubric dimensions, comma-separated (default: all).")] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a blinded rating session over RUNS and print its id. Raters then rate in the web app at /ratings/ID."""
    from medpanel.rating.sessions import create_session, progress
    from medpanel.rating.store import get_session

    db = _store(store)
    sid = create_session(db, runs, rubric=rubric.strip(), raters=_names(raters, "--raters"), adjudicator=adjudicator, seed=seed,
                         dimensions=_names(dimensions, "--dimensions") if dimensions is not None else None)
    info, note = progress(db, sid), get_session(db, sid)["note"]
    if as_json:
        print_json({"session_id": sid, "progress": info, "note": note})
        return
    out.print(sid)
    err.print(styled((f"{info['items']} items x {info['systems']} answers, rubric {info['rubric']}", "dim")))
    if note:
        err.print(styled(("note: ", "yellow"), note))
    err.print(styled((f"Raters sign in to `medpanel serve` and open /ratings/{sid}; results: medpanel rate show {sid}", "dim")))


@rate_app.command("list")
def list_sessions(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """List rating sessions, newest first, with their progress."""
    from medpanel.rating.sessions import sessions_for

    rows = sessions_for(_store(store))
    if as_json:
        print_json(rows)
        return
    if not rows:
        out.print("No rating sessions yet. Create one with: medpanel rate new RUN [RUN ...] --rubric otb-audit --raters alice,bob")
        return
    table = Table(Column("session", no_wrap=True), Column("rubric", no_wrap=True), Column("items", no_wrap=True), Column("settled", no_wrap=True),
                  Column("waiting", no_wrap=True), Column("raters: rated (adjudicated)", overflow="fold"), box=box.SIMPLE_HEAD, pad_edge=False)
    for r in rows:
        states = r["items_by_state"]
        done = ", ".join(f"{name} {p['done']}/{p['assigned']}" + (f" ({p['adjudicated']}/{p['adjudications']})" if p["adjudications"] or not p["assigned"] else "")
                         for name, p in r["raters"].items())
        table.add_row(r["session_id"], r["rubric"], f"{r['items']} x {r['systems']}", str(states["settled"]),
                      str(states["pending"] + states["awaiting"]), done)
    out.print(table)


@rate_app.command("show")
def show(
    session: Annotated[str, typer.Argument(help="Session id, a unique prefix of it, or 'last'.")] = "last",
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A session's progress and analysis, unblinded: per-system mean ratings, the raters' agreement and kappa per
    dimension, permutation tests between systems, and the judge's agreement with the people."""
    from medpanel.rating.report import rating_summary
    from medpanel.rating.store import resolve_session_id

    db = _store(store)
    summary = rating_summary(db, resolve_session_id(db, session))
    if as_json:
        print_json(summary)
        return
    _print_summary(summary)


@rate_app.command("rubrics")
def rubrics(as_json: JsonOpt = False) -> None:
    """The rubrics a session can use, with their dimensions and scales."""
    from medpanel.rating.rubrics import RUBRICS

    if as_json:
        print_json([r.as_dict() for r in RUBRICS.values()])
        return
    for r in RUBRICS.values():
        out.print(styled((r.name, "bold"), f"  {r.title}: {r.description}"))
        for d in r.dimensions:
            out.print(f"  {d.name}: {d.question}  [{' / '.join(f'{lv.value} {lv.label}' for lv in d.scale.levels)}]")
        out.print("")


def _print_summary(summary: dict[str, Any]) -> None:
    s, prog = summary["session"], summary["progress"]
    out.print(styled((s["title"], "bold"), f"  {s['id']}  ({s['rubric']}, seed {s['seed']})"))
    states = prog["items_by_state"]
    out.print(f"{prog['items']} items, {len(summary['systems'])} systems: {states['settled']} settled, {states['pending']} waiting for a rater, "
              f"{states['awaiting']} for the adjudicator, {states['unresolved']} unresolved ({prog['items_with_disagreement']} with a disagreement)")
    for name, p in prog["raters"].items():
        line = f"  {name}: {p['done']}/{p['assigned']} items"
        if p["adjudications"]:
            line += f", {p['adjudicated']}/{p['adjudications']} adjudications"
        out.print(line)
    if s["note"]:
        out.print(styled(("note: ", "yellow"), s["note"]))
    pick = s["kind"] == "pick_best"
    for dim in summary["dimensions"]:
        out.print("")
        out.print(styled((dim["label"], "bold"), f"  ({dim['name']})"))
        table = Table(Column("system", overflow="fold"), Column("run", no_wrap=True), "settled", "win rate" if pick else "mean", "mean (all ratings)",
                      *([] if pick else ["flawed"]), box=box.SIMPLE_HEAD, pad_edge=False)
        for x in dim["systems"]:
            table.add_row(x["label"], x["run_id"], str(x["n"]), _f(x["mean"]), _f(x["mean_ratings"]), *([] if pick else [_f(x["flawed_share"])]))
        out.print(table)
        ag = dim["agreement"]
        parts = [f"agreement {_est(ag['percent'])}", f"kappa {_est(ag['kappa'])}"]
        if "kappa_linear" in ag:
            parts += [f"linear {_est(ag['kappa_linear'])}", f"quadratic {_est(ag['kappa_quadratic'])}"]
        parts.append(f"Fleiss {_est(ag['fleiss_kappa'])}")
        if "spearman" in ag:
            parts.append(f"Spearman {_est(ag['spearman'])}")
        out.print(f"raters ({ag['pairs']} pairs): " + ", ".join(parts))
        for c in dim["comparisons"]:
            out.print(f"  {c['a']} vs {c['b']}: difference {_f(c['difference'])}, p {_f(c['p_value'], 4)} (Holm {_f(c['p_holm'], 4)}, "
                      f"{c['permutations']} permutations{', all' if c['exact'] else ''})")
    for j in summary["judge_agreement"]:
        out.print("")
        out.print(styled(("judge vs people: ", "bold"), f"{j['dimension']} <- {j['score']}, judge {j['judge']}, {j['n']} pairs"))
        out.print(f"  mapping {j['mapping']}")
        out.print(f"  agreement {_est(j['agreement'])}, kappa {_est(j['kappa'])}, linear {_est(j['kappa_linear'])}, "
                  f"quadratic {_est(j['kappa_quadratic'])}, Spearman {_est(j['spearman'])}")
        left = j.get("left_out") or {}
        if any(left.values()):
            out.print(f"  left out: {left.get('no_consensus', 0)} no consensus yet, {left.get('no_judge_score', 0)} no judge score, "
                      f"{left.get('no_judge_verdict', 0)} no judge verdict (empty answer: the judge's floor score)")
        conf = j["confusion"]
        table = Table("judge \\ people", *conf["labels"], box=box.SIMPLE_HEAD, pad_edge=False)
        for label, row in zip(conf["labels"], conf["counts"]):
            table.add_row(label, *(str(c) for c in row))
        out.print(table)
