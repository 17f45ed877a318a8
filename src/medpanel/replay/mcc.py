"""Replay a folder of MCC's published debate logs: parse every log, re-settle it, summarise.

    report = replay_mcc_folder(Path("../shared/data/mcc_logs/MedQA"))
    report["multiple_choice"]["final"]["correct"]   # 1179 on MedQA
    report["multiple_choice"]["initial"]["correct"]  # GPT 1084, Qwen 1040, DeepSeek 1143 (choice_reading="mcc")

A folder may hold multiple-choice logs (one question per file) and long-form logs (cross-evaluation
scores); each .txt file is sniffed and replayed the way its content calls for.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict
from pathlib import Path
from collections.abc import Sequence

from medpanel.errors import UsageError
from medpanel.replay.mcc_longform import is_long_form, replay_long_form
from medpanel.replay.mcc_parse import SEAT_MODELS, SEATS, ChoiceReading, ParsedLog, check_choice_reading, parse_log
from medpanel.replay.mcc_replay import DebateReplay, replay_debate, summarize_replays
from medpanel.replay.voting import MCC_RULES, VoteRules


def _natural_key(path: Path) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig", errors="replace")
    except OSError as exc:
        raise UsageError(f"Cannot read {path}: {exc.strerror or exc}.", "Check the path and its permissions.") from None


def load_logs(source: Path) -> tuple[list[tuple[Path, str]], list[tuple[Path, str]]]:
    """(multiple-choice logs, long-form logs) as (path, text), in natural file order."""
    source = Path(source)
    if source.is_file():
        files = [source]
    elif source.is_dir():
        files = sorted((p for p in source.iterdir() if p.is_file() and p.suffix.lower() == ".txt"), key=_natural_key)
    else:
        raise UsageError(f"{source} does not exist.", "Point at a folder of MCC logs, e.g. ../shared/data/mcc_logs/MedQA.")
    if not files:
        raise UsageError(f"{source} holds no .txt logs.", "Point at a folder of case_N.txt files, e.g. ../shared/data/mcc_logs/MedQA.")
    choice_logs, long_logs = [], []
    for path in files:
        text = _read(path)
        (long_logs if is_long_form(text) else choice_logs).append((path, text))
    return choice_logs, long_logs


def replay_logs(texts: Sequence[tuple[Path, str]], rules: VoteRules = MCC_RULES, seats: tuple[str, ...] = SEATS,
                choice_reading: ChoiceReading = "mcc") -> tuple[list[ParsedLog], list[DebateReplay]]:
    logs = [parse_log(text, path, seats, choice_reading) for path, text in texts]
    return logs, [replay_debate(log.transcript, seats, rules, key=log.id) for log in logs]


def replay_mcc_folder(source: Path, rules: VoteRules = MCC_RULES, seats: tuple[str, ...] = SEATS,
                      long_form: Path | None = None, store=None, run_id: str | None = None,
                      choice_reading: ChoiceReading = "mcc") -> dict:
    """The full report: multiple-choice summary (if any such logs), long-form replays, and timings.
    With a `store`, the parsed transcripts are also saved as a run (one item per log).
    `choice_reading` says how initial choices are read: "mcc" (their choice line only, as MCC counted)
    or "lenient" (any statement of the log); see medpanel.replay.mcc_parse."""
    check_choice_reading(choice_reading)
    started = time.perf_counter()
    choice_texts, long_texts = load_logs(source)
    if long_form is not None:
        if not Path(long_form).is_file():
            raise UsageError(f"Long-form log {long_form} not found.", "Pass the path of a file such as table_s14_complete_log.txt.")
        long_texts.append((Path(long_form), _read(Path(long_form))))
    read_s = time.perf_counter() - started
    report: dict = {"source": str(source), "choice_reading": choice_reading, "multiple_choice": None, "long_form": [], "skipped": []}
    parsed, settled = replay_logs(choice_texts, rules, seats, choice_reading)
    debates = [(log, rep) for log, rep in zip(parsed, settled, strict=True) if log.transcript.turns() and not log.ends_mid_debate]
    report["skipped"] = [str(log.path) for log in parsed if not log.transcript.turns()]  # a .txt without turns is no debate log
    # a log cut off before its result is no finished debate: reported apart, never counted in the figures
    report["ended_mid_debate"] = [{"path": str(log.path), "case": log.id, "warning": next(w for w in log.warnings if w.startswith("log ends mid-debate"))}
                                  for log in parsed if log.transcript.turns() and log.ends_mid_debate]
    by_id: dict[str, list[str]] = {}
    for log, _ in debates:
        by_id.setdefault(log.id, []).append(str(log.path))
    report["duplicate_case_ids"] = {cid: paths for cid, paths in by_id.items() if len(paths) > 1}
    if debates:
        logs, replays = [log for log, _ in debates], [rep for _, rep in debates]
        report["multiple_choice"] = summarize_replays(logs, replays, seats, rules)
        report["multiple_choice"]["warnings"] += [
            {"case": cid, "warning": f"{len(paths)} files share case id {cid} (each counted): {', '.join(Path(p).name for p in paths)}"}
            for cid, paths in report["duplicate_case_ids"].items()]
        if store is not None:
            report["stored_run"] = store_replay(store, logs, replays, source=source, rules=rules, seats=seats, run_id=run_id,
                                                choice_reading=choice_reading)
    report["long_form"] = [replay_long_form(text, path) for path, text in long_texts]
    report["timing_s"] = {"read": round(read_s, 3), "total": round(time.perf_counter() - started, 3)}
    return report


def store_replay(store, logs: Sequence[ParsedLog], replays: Sequence[DebateReplay], *, source: Path, rules: VoteRules,
                 seats: tuple[str, ...] = SEATS, run_id: str | None = None, choice_reading: ChoiceReading = "mcc") -> str:
    """Save parsed logs as a run: each item's transcript (turns, the logged decision, the replayed
    decision) and its scores, so `medpanel show` and reports read a replay like any other run."""
    run_id = run_id or f"mcc-replay-{time.strftime('%Y%m%d-%H%M%S')}"
    store.create_run(run_id, dataset=f"mcc-logs:{Path(source).name}", protocol="mcc-replay", models=[SEAT_MODELS.get(s, s) for s in seats],
                     settings={"source": str(source), "rules": asdict(rules), "seats": list(seats), "replay": True,
                                "choice_reading": choice_reading})
    for log, rep in zip(logs, replays, strict=True):
        gold = log.case.reference.answer
        events = [e.model_dump(mode="json") for e in log.transcript] + [rep.decision_event().model_dump(mode="json")]
        scores = {"accuracy": None if gold is None else float(rep.final == gold)}
        scores.update({f"initial_{seat}": None if gold is None else float(rep.initial.get(seat) == gold) for seat in seats})
        outcome = {"answer": rep.final, "method": rep.method, "consensus_round": rep.consensus_round, "gold": gold,
                   "logged_answer": log.logged.final, "case": log.case.model_dump(mode="json", include={"id", "question", "options"})}
        store.write_item(run_id, log.id, 0, status="done", outcome=outcome, events=events, scores=scores, started_at=time.time())
    store.set_run_status(run_id, "done", f"replayed {len(logs)} MCC logs from {source}")
    return run_id


__all__ = ["load_logs", "replay_logs", "replay_mcc_folder", "store_replay"]
