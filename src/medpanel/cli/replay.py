"""`medpanel replay mcc DIR`: re-settle MCC's published debate logs and compare with what they report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from medpanel.cli.common import JsonOpt, StoreOpt, err, open_store, out, print_json, replay_app, styled
from medpanel.errors import UsageError


@replay_app.command("mcc")
def replay_mcc(
    source: Annotated[Path, typer.Argument(help="Folder of MCC logs (case_N.txt; long-form logs are detected), or one log file.")],
    long_form: Annotated[Optional[Path], typer.Option("--long-form", envvar="MEDPANEL_MCC_LONG_FORM",
                                                      help="Also replay this long-form log (e.g. table_s14_complete_log.txt).")] = None,
    order: Annotated[str, typer.Option("--order", envvar="MEDPANEL_MCC_ORDER",
                                       help="sequential: consensus checked after every response (MCC's runs); simultaneous: after each round.")] = "sequential",
    tie: Annotated[str, typer.Option("--tie", envvar="MEDPANEL_MCC_TIE",
                                     help="Tie policy of the final vote: first-model (MCC's logs), abstain (MCC's released code), random-seeded.")] = "first-model",
    max_rounds: Annotated[Optional[int], typer.Option("--max-rounds", envvar="MEDPANEL_MCC_MAX_ROUNDS", min=0,
                                                      help="Count only the first N debate rounds (default: all that were held).")] = None,
    choice_reading: Annotated[str, typer.Option("--choice-reading", envvar="MEDPANEL_CHOICE_READING",
                                                help="How initial choices are read: mcc (only their 'Choice:' line, as MCC counted) "
                                                     "or lenient (also an option on the conclusion heading, extraction traces, the reasoning).")] = "mcc",
    seats: Annotated[str, typer.Option("--seats", envvar="MEDPANEL_MCC_SEATS", help="Seat names in speaking order, comma-separated.")] = "GPT,Qwen,DeepSeek",
    save: Annotated[bool, typer.Option("--save", envvar="MEDPANEL_MCC_SAVE", help="Save the parsed transcripts as a run in the store.")] = False,
    run_id: Annotated[Optional[str], typer.Option("--run-id", envvar="MEDPANEL_RUN_ID", help="Id of the saved run (with --save).")] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Parse MCC's debate logs into transcripts, re-apply consensus and voting, and report the paper's figures."""
    from medpanel.replay import VoteRules, replay_mcc_folder

    seat_names = tuple(s.strip() for s in seats.split(",") if s.strip())
    if len(seat_names) < 2:
        raise UsageError(f"--seats '{seats}' names fewer than two seats.", "Give the panel's seat names, e.g. --seats GPT,Qwen,DeepSeek.")
    rules = VoteRules(order=order, max_rounds=max_rounds, tie=tie)
    db = open_store(store) if save else None
    report = replay_mcc_folder(source, rules, seat_names, long_form=long_form, store=db, run_id=run_id, choice_reading=choice_reading)
    if as_json:
        print_json(report)
    else:
        print_report(report, seat_names)


def _pct(k: int, n: int) -> str:
    return f"{k}/{n} ({100 * k / n:.1f}%)" if n else f"{k}/0"


def _fields(d: dict) -> str:
    """One disagreement as `case_363 · round 3 · problem: ...` (the case first), never a raw dict."""
    head = [str(d[k]) for k in ("case", "path") if k in d]
    rest = [f"{k}: {v}" for k, v in d.items() if k not in ("case", "path")]
    return " · ".join(head + rest)


def print_report(report: dict, seats: tuple[str, ...]) -> None:
    mc = report["multiple_choice"]
    if mc:
        n, ini, rules = mc["items"], mc["initial"], mc["rules"]
        out.print(styled(("MCC replay", "bold"), f" of {n} logs in {report['source']}  (order {rules['order']}, ties {rules['tie']}, "
                  f"{report['choice_reading']} choice reading"
                  + (f", max {rules['max_rounds']} rounds" if rules["max_rounds"] is not None else "") + ")"))
        out.print(f"initial answers: consensus on {ini['consensus']} ({ini['consensus_correct']} correct); correct "
                  + ", ".join(f"{s} {ini['correct'][s]}" for s in seats)
                  + f"; majority vote {ini['majority_vote_correct']} ({ini['majority_vote_ties']} ties)")
        wo = ini["without_consensus"]
        out.print(f"  without initial consensus ({wo['items']}): " + ", ".join(f"{s} {wo['correct'][s]}" for s in seats)
                  + f", majority vote {wo['majority_vote_correct']}")
        rounds = " · ".join(f"round {r}: {v['consensus']} ({v['correct']} correct)" for r, v in mc["consensus_by_round"].items())
        vote = mc["majority_vote"]
        out.print(f"consensus by round: {rounds} · vote: {vote['items']} ({vote['correct']} correct, {vote['ties']} tied)")
        out.print(f"final: {_pct(mc['final']['correct'], n)} correct", style="bold")
        sh = mc["stance_shifts"]
        per = "; ".join(f"{s} " + ", ".join(f"r{r} {k}" for r, k in sorted(sh["by_seat_round"][s].items())) for s in seats)
        out.print(f"stance shifts: {sh['total']} ({sh['to_correct']} to the gold answer, {sh['from_correct']} away from it): {per}")
        ag = mc["agreement_with_logs"]
        out.print(f"agreement with the logs: final answer {ag['final_agree']}/{ag['final_logged']}, "
                  f"correctness {ag['verdict_agree']}/{ag['verdict_logged']}, round summaries {ag['round_summaries_agree']}/{ag['round_summaries']}, "
                  f"initial consensus {ag['initial_status_agree']}/{ag['initial_status_logged']}")
        unread = ag["results_unread"]
        out.print(styled(f"logged result lines: {ag['results_read']}/{ag['results_logged']} read, {ag['results_agree']} agree with the replay, ",
                         (f"{len(unread)} could not be read", "bold red") if unread else "0 unread"))
        for d in unread[:20]:
            out.print(styled("  ", ("unread result", "red"), f" {d['case']} line {d['line']}: {d['text']}"))
        for name in ("final_disagreements", "result_disagreements", "verdict_disagreements", "round_summary_disagreements",
                     "initial_status_disagreements"):
            for d in ag[name][:20]:
                out.print(styled("  ", (name.replace("_", " "), "yellow"), " " + _fields(d)))
        for w in mc["warnings"][:20]:
            err.print(f"note {w['case']}: {w['warning']}", style="dim")
        if len(mc["warnings"]) > 20:
            err.print(f"... {len(mc['warnings']) - 20} more notes (see --json)", style="dim")
    for path in report.get("skipped", []):
        err.print(f"skipped {path}: no model turns found, not an MCC debate log", style="yellow")
    cut = report.get("ended_mid_debate", [])
    if cut:
        out.print(styled((f"{len(cut)} logs end mid-debate", "bold yellow"), ": not counted in the figures above"))
        for d in cut[:20]:
            out.print(styled("  ", ("ends mid-debate", "yellow"), f" {d['path']}: {d['warning']}"))
    for cid, paths in report.get("duplicate_case_ids", {}).items():
        out.print(styled("  ", ("duplicate case id", "yellow"), f" {cid}: {len(paths)} files, each counted: {', '.join(paths)}"))
    for lf in report["long_form"]:
        out.print(styled(("long-form", "bold"), f" {lf['path']}"))
        for r in lf["rounds"]:
            if r.get("computed") is None:
                out.print(f"  round {r['round']}: no scores found")
                continue
            mark = {True: "agrees", False: "DIFFERS", None: "not logged"}[r["agrees"]]
            dims = ", ".join(f"{d} {v:.3f}" for d, v in r["computed_by_dimension"].items())
            logged = f"{r['logged']:.2f}" if r["logged"] is not None else "-"
            out.print(f"  round {r['round']}: consensus score {r['computed']:.4f} (logged {logged}, {mark}); {dims}")
        out.print(f"  the log stopped after round {lf['logged_stop_after_round']}; first round at or above {lf['threshold']}: "
                  f"{lf['first_round_at_threshold']}")
    if report.get("stored_run"):
        out.print(f"saved as run {report['stored_run']} (medpanel show {report['stored_run']})")
    out.print(f"{report['timing_s']['total']:.2f} s", style="dim")
