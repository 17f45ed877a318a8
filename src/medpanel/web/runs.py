"""Run browsing: the stored runs, one run (summary, failures, items), one item's transcript, the HTML report.

Every page reads the store (`request.app.state.store`) and nothing else. Whatever came from a model, a
case or a run reaches the page through Jinja's autoescaping, with control characters made visible
(medpanel.literal.visible) before rendering; structured data is laid out as tables and definition lists.
A bad address (an unknown run or item, a repeat that is not a number) gets a page saying so, with a way back.
"""

from __future__ import annotations

import json
import socket
from collections import defaultdict
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Query, Request

from medpanel.errors import UsageError
from medpanel.literal import visible
from medpanel.web.templating import render

router = APIRouter()

LIST_LIMIT = 200  # runs shown on /runs unless ?limit= says otherwise
MAX_LIST_LIMIT = 5000
PAGE_SIZE = 200  # items per page of a run
# The score(s) an item list shows, in order of preference; a run with none of these shows its first two.
MAIN_SCORES = ("accuracy", "code_f1", "rouge_l", "healthbench", "pda", "consensus", "answered", "finished")
# Words for the outcome's short answer, by protocol.
ANSWER_LABELS = {"board": "Conclusion", "board-live": "Conclusion", "longform": "Final answer", "consult": "Diagnosis",
                 "baseline": "Diagnosis", "baseline-note": "Diagnosis", "dialogue": "Diagnosis", "osce": "Diagnosis"}
LONG_TEXT = 160  # a string longer than this (or with a newline) is shown as a block, not inline
EVENT_CLASSES = {"turn": "", "note": "note", "error": "error", "decision": "conclusion", "score": "score", "vote": "vote"}


# ---------------------------------------------------------------- helpers


def literal(value: Any) -> Any:
    """Data from the store with every string (keys too) made visible: control characters, lone surrogates
    and the like become visible stand-ins, so the page always encodes and shows exactly what was said."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {literal(k) if isinstance(k, str) else k: literal(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [literal(v) for v in value]
    return value


def fmt(value: Any, digits: int = 3) -> str:
    """A number as a page shows it: integers whole, others to `digits` decimals; nothing as an en dash."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e12):
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def run_url(run_id: str) -> str:
    return f"/runs/{quote(run_id, safe='')}"


def item_url(run_id: str, item_id: str, repeat: int) -> str:
    return f"{run_url(run_id)}/items/{quote(item_id, safe='')}?repeat={int(repeat)}"


def problem_page(request: Request, status: int, title: str, problem: str, fix: str = "", back: tuple[str, str] = ("/runs", "All runs")):
    return render(request, "runs/missing.html", status_code=status, title=title, problem=problem, fix=fix,
                  back_href=back[0], back_label=back[1])


ALL_RUNS = None  # blinded_runs' answer for a rater: every run is hidden


def blinded_runs(request: Request) -> set[str] | None:
    """The runs this person may not see while rating them blind: for a rater every run (None); for anyone else
    the runs of each unfinished rating session they are named in (their model names and the ratings would unblind
    them); for an admin none."""
    from medpanel.rating import sessions as rating_sessions
    from medpanel.rating import store as rating_store

    user, store = request.state.user, request.app.state.store
    if user.is_admin:
        return set()
    if user.role == "rater":
        return ALL_RUNS
    return {row["run_id"] for info in rating_sessions.sessions_for(store, user.name) if not info["complete"]
            for row in rating_store.session_systems(store, info["session_id"])}


def hidden_page(request: Request):
    return problem_page(request, 403, "Hidden while you rate", "Runs are hidden from raters, and a run from anyone rating it in an "
                        "unfinished session: its models and answers would tell which system wrote what.",
                        "Finish your rating session; an admin sees every run.", back=("/ratings", "Your rating sessions"))


def resolve(request: Request, ref: str) -> tuple[str | None, Any]:
    """(run id, None) for a full id, a unique prefix or 'last'; (None, a 404/400/403 page) otherwise."""
    store = request.app.state.store
    hidden = blinded_runs(request)
    if hidden is ALL_RUNS:
        return None, hidden_page(request)
    try:
        found = store.resolve_run_id(ref)
        return (found, None) if found not in hidden else (None, hidden_page(request))
    except UsageError as exc:
        if exc.problem.startswith("No run"):
            return None, problem_page(request, 404, "No such run", f"There is no run '{visible(ref)}' in this store.",
                                      "Check the id: the list of runs shows every stored run.")
        return None, problem_page(request, 400, "Which run?", f"'{visible(ref)}' matches more than one run.",
                                  "Give more characters of the run id.")


def shown_status(store, run: dict) -> tuple[str, str | None]:
    """A run's status as /runs shows it: a 'running' run whose writer is gone is interrupted (with why)."""
    if run["status"] != "running":
        return run["status"], None
    lease = store.lease(run["id"])
    gone = "no writer holds its lease" if lease is None else store.lease_stale(lease, host=socket.gethostname())
    return ("interrupted", gone) if gone else ("running", None)


def main_scores(names: set[str]) -> list[str]:
    chosen = [n for n in MAIN_SCORES if n in names][:2]
    return chosen or sorted(n for n in names if "." not in n)[:2] or sorted(names)[:2]


def seconds(item: dict) -> float | None:
    if item.get("finished_at") and item.get("started_at"):
        return max(0.0, item["finished_at"] - item["started_at"])
    return None


def first_line(text: str | None, limit: int = 120) -> str:
    line = (text or "").strip().partition("\n")[0]
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def parse_whole(value: str, minimum: int) -> int | None:
    value = value.strip()
    if not (value.isascii() and value.isdigit()) or int(value) < minimum:
        return None
    return int(value)


def resolve_with_number(request: Request, run_id: str, value: str, name: str, minimum: int):
    """(run id, the whole number in query field `name`, None), or (.., .., the 404/400 page to show instead)."""
    found, missing = resolve(request, run_id)
    if missing is not None:
        return found, None, missing
    number = parse_whole(value, minimum)
    if number is None:
        least = ", 1 or more" if minimum == 1 else ""
        return found, None, problem_page(request, 400, f"Bad {name}", f"{name} must be a whole number{least}; got '{visible(value)}'.",
                                         back=(run_url(found), "Back to the run"))
    return found, number, None


def shape(value: Any) -> str:
    """How the templates lay a value out (runs/_macros.html): never as raw JSON."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "block" if len(value) > LONG_TEXT or "\n" in value else "text"
    if isinstance(value, dict):
        return "map" if value else "empty"
    if isinstance(value, (list, tuple)):
        if not value:
            return "empty"
        if all(isinstance(v, dict) for v in value):
            return "records"
        if all(shape(v) in ("none", "bool", "number", "text") for v in value):
            return "scalars"
        return "list"
    return "text"


def columns(records: list[dict]) -> list[str]:
    """The keys of a list of records, in first-seen order: the columns of its table."""
    return list(dict.fromkeys(k for r in records for k in r))


TEMPLATE_HELPERS = {"fmt": fmt, "shape": shape, "columns": columns}


# ---------------------------------------------------------------- /runs


@router.get("/runs")
def runs_list(request: Request, limit: str = Query(str(LIST_LIMIT))):
    count = parse_whole(limit, 1)
    if count is None:
        return problem_page(request, 400, "Bad limit", f"limit must be a whole number of runs (at least 1); got '{visible(limit)}'.",
                            back=("/runs", "All runs"))
    count = min(count, MAX_LIST_LIMIT)
    store = request.app.state.store
    hidden = blinded_runs(request)
    if hidden is ALL_RUNS:
        return hidden_page(request)
    rows = [r for r in store.list_runs(limit=count + 1 + len(hidden)) if r["id"] not in hidden][: count + 1]
    more = len(rows) > count
    runs = []
    for r in rows[:count]:
        r = literal(r)
        r["url"] = run_url(r["id"])
        runs.append(r)
    return render(request, "runs/list.html", runs=runs, more=more, limit=count, next_limit=min(count * 4, MAX_LIST_LIMIT))


# ---------------------------------------------------------------- /runs/{run_id}


def score_rows(report: dict) -> list[dict]:
    rows = []
    for name, score in report["scores"].items():
        overall, across = score["overall"], score["across_repeats"]
        rows.append({"name": name, "kind": score["kind"], "overall": interval_view(overall), "across": interval_view(across) if across else None})
    return rows


def interval_view(iv: dict | None) -> dict | None:
    if iv is None:
        return None
    has_span = iv.get("low") is not None and iv.get("high") is not None
    return {"estimate": fmt(iv.get("estimate")), "low": fmt(iv.get("low")), "high": fmt(iv.get("high")), "has_span": has_span,
            "method": iv.get("method") or "", "n": iv.get("n"), "note": iv.get("note") or "",
            "confidence": iv.get("confidence")}


def failure_groups(run_id: str, report: dict, items: list[dict]) -> list[dict]:
    """Failed items grouped by kind, each kind with its distinct errors and the items that gave them."""
    full = {(i["item_id"], i["repeat"]): i for i in items}
    kinds: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for f in report["failures"]["items"]:
        kinds[f["kind"]][f["error"]].append({"item": f["item"], "repeat": f["repeat"], "url": item_url(run_id, f["item"], f["repeat"]),
                                             "detail": (full.get((f["item"], f["repeat"])) or {}).get("error") or ""})
    groups = []
    for kind, errors in sorted(kinds.items(), key=lambda kv: -sum(len(v) for v in kv[1].values())):
        groups.append({"kind": kind, "count": sum(len(v) for v in errors.values()),
                       "errors": [{"error": error, "items": its} for error, its in sorted(errors.items(), key=lambda kv: -len(kv[1]))]})
    return groups


def item_rows(run_id: str, items: list[dict], by_item: dict[tuple[str, int], dict[str, float | None]], main: list[str]) -> list[dict]:
    rows = []
    for i in items:
        key = (i["item_id"], i["repeat"])
        outcome = i["outcome"] or {}
        answer = outcome.get("answer")
        rows.append({
            "item_id": i["item_id"], "repeat": i["repeat"], "status": i["status"], "url": item_url(run_id, *key),
            "outcome_status": outcome.get("status"),
            "answer": first_line(answer if isinstance(answer, str) else (None if answer is None else str(answer)), 90),
            "error_kind": i["error_kind"], "error": first_line(i["error"], 90),
            "scores": [fmt(by_item.get(key, {}).get(name)) for name in main],
            "cost_usd": i["cost_usd"], "tokens": (i["input_tokens"] or 0) + (i["output_tokens"] or 0), "seconds": fmt(seconds(i), 1),
        })
    return rows


def run_header(store, run: dict) -> dict:
    from medpanel.runs.panel import run_roles

    status, stale = shown_status(store, run)
    settings = run.get("settings") or {}
    try:
        roles = run_roles(run)
    except Exception:  # an old or odd stored config: show what was stored rather than fail the page
        roles = settings.get("roles") or {}
    config = {k: settings[k] for k in ("repeats", "limit", "concurrency") if settings.get(k) is not None}
    return literal({"id": run["id"], "url": run_url(run["id"]), "protocol": run["protocol"], "dataset": run["dataset"],
                    "models": run["models"], "roles": roles, "status": status, "stale": stale, "message": run.get("message"),
                    "created_at": run.get("created_at"), "finished_at": run.get("finished_at"),
                    "config": config, "protocol_settings": settings.get("settings") or {}})


@router.get("/runs/{run_id}")
def run_page(request: Request, run_id: str, page: str = Query("1")):
    from medpanel.runs.report import load_runs, report_from_runs
    from medpanel.runs.summary import score_notes

    found, page_no, missing = resolve_with_number(request, run_id, page, "page", 1)
    if missing is not None:
        return missing
    store = request.app.state.store
    loaded = load_runs(store, [found])[0]  # the run and its items read once, for the report and for the page
    full = report_from_runs([loaded], seed=0)
    run, items, report = loaded.run, loaded.items, full["runs"][0]
    by_item: dict[tuple[str, int], dict[str, float | None]] = defaultdict(dict)
    values: dict[str, list[float]] = defaultdict(list)
    for row in store.scores(found):
        by_item[(row["item_id"], row["repeat"])][row["name"]] = row["value"]
        if row["value"] is not None:
            values[row["name"]].append(row["value"])
    main = main_scores(set(values) or {n for s in by_item.values() for n in s})
    pages = max(1, -(-len(items) // PAGE_SIZE))
    if page_no > pages:
        return problem_page(request, 404, "No such page", f"Run {visible(found)} has {len(items)} items: {pages} page(s), not {page_no}.",
                            back=(run_url(found), "Back to the run"))
    shown = items[(page_no - 1) * PAGE_SIZE: page_no * PAGE_SIZE]
    return render(
        request, "runs/run.html",
        run=run_header(store, run),
        report=literal(report),
        scores=literal(score_rows(report)),
        confidence=f"{full['confidence']:.0%}",
        notes=literal(score_notes(values)),
        failures=literal(failure_groups(found, report, items)),
        items=literal(item_rows(found, shown, by_item, main)),
        main=literal(main),
        page=page_no, pages=pages, total_items=len(items),
        per_item={"tokens_in": fmt(report["tokens"]["input_per_item"], 1), "tokens_out": fmt(report["tokens"]["output_per_item"], 1),
                  "seconds": fmt(report["wall_s"]["per_item"], 2), "seconds_total": fmt(report["wall_s"]["items_total"], 1)},
        report_url=f"{run_url(found)}/report",
        **TEMPLATE_HELPERS,
    )


# ---------------------------------------------------------------- /runs/{run_id}/items/{item_id}


def as_json(text: str) -> dict | list | None:
    """A reply written as a JSON object or list (a structured call), parsed, so it is laid out as fields."""
    text = text.strip()
    if not text or text[0] not in "{[" or text[-1] not in "}]":
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, (dict, list)) and value else None


def event_view(event: dict) -> dict:
    kind = event.get("kind") or "turn"
    classes = ["turn"]
    if EVENT_CLASSES.get(kind):
        classes.append(EVENT_CLASSES[kind])
    who = f"{event.get('speaker', '')} {event.get('role', '')}".lower()
    model = str(event.get("model") or "")
    if "moderator" in who:
        classes.append("moderator")
    if model == "human" or model.startswith("human:"):
        classes.append("human")
    data = dict(event.get("data") or {})
    flags = []
    if data.get("truncated"):
        flags.append(("warn", "cut off at its token limit"))
    if event.get("cached"):
        flags.append(("", "from the cache"))
    chips = []
    if kind in ("turn", "vote") and "choice" in data:
        chips.append(("choice", f"answer {data['choice']}" if data.get("choice") else "no clear answer"))
        if data.get("changed"):
            chips.append(("changed", f"changed from {data.get('previous_choice') or 'none'}"))
    if kind == "error" and data.get("error_kind"):
        chips.append(("bad", data["error_kind"]))
    written = as_json(event.get("text") or "")
    where = []
    if event.get("round"):
        where.append(f"round {event['round']}")
    if event.get("phase"):
        where.append(str(event["phase"]))
    return {
        "kind": kind, "classes": " ".join(classes), "speaker": event.get("speaker") or ("Runner" if kind == "error" else ""),
        "role": "" if str(event.get("role") or "").lower() == str(event.get("speaker") or "").lower() else event.get("role") or "",
        "model": model, "where": " · ".join(where),
        "input_tokens": event.get("input_tokens") or 0, "output_tokens": event.get("output_tokens") or 0,
        "cost_usd": event.get("cost_usd") or 0.0, "latency": fmt(event.get("latency_s"), 2) if event.get("latency_s") else None,
        "text": "" if written is not None else event.get("text") or "", "written": written, "flags": flags, "chips": chips,
        "data": {k: v for k, v in data.items() if k not in ("truncated",)},
    }


def is_debate(protocol: str, outcome: dict | None) -> bool:
    data = (outcome or {}).get("data") or {}
    return protocol == "debate" or (isinstance(data.get("rounds"), list) and "seats" in data and "decision" in data)


def debate_summary(outcome: dict | None, events: list[dict]) -> dict:
    """The condensed debate: per round, each seat's answer (and whether it spoke or held), and whether the
    panel agreed; the decision in words; who changed their answer. From the outcome where there is one,
    else (a failed item) from the turns recorded before the failure."""
    data = (outcome or {}).get("data") or {}
    turns = [e for e in events if e.get("kind") == "turn" and e.get("phase") in ("initial", "debate")]
    seats = list(data.get("seats") or dict.fromkeys(e.get("speaker", "") for e in turns))
    models = dict(data.get("models") or {})
    for e in turns:
        models.setdefault(e.get("speaker", ""), e.get("model", ""))
    spoke: dict[int, dict[str, dict]] = defaultdict(dict)
    for e in turns:
        spoke[int(e.get("round") or 0)][e.get("speaker", "")] = e.get("data") or {}
    rounds = data.get("rounds")
    if not isinstance(rounds, list):  # rebuilt from the turns: standing answers carried forward
        standing: dict[str, Any] = {}
        rounds = []
        for r in sorted(spoke):
            for seat, d in spoke[r].items():
                standing[seat] = d.get("choice")
            choices = {s: standing.get(s) for s in seats}
            agreed = len(set(choices.values())) == 1 and None not in choices.values() and len(choices) == len(seats)
            rounds.append({"round": r, "choices": choices, "consensus": agreed, "consensus_choice": next(iter(choices.values())) if agreed else None})
    rows = []
    previous: dict[str, Any] = {}
    for r in rounds:
        number = int(r.get("round") or 0)
        cells = []
        for seat in seats:
            choice = (r.get("choices") or {}).get(seat)
            in_round = seat in spoke.get(number, {})
            cells.append({"choice": choice or "–", "spoke": in_round, "changed": number > 0 and in_round and choice != previous.get(seat)})
            if in_round:
                previous[seat] = choice
        rows.append({"round": number, "label": "first answers" if number == 0 else f"round {number}", "cells": cells,
                     "agreed": bool(r.get("consensus")), "agreed_on": r.get("consensus_choice")})
    decision = data.get("decision") or {}
    return {"seats": [{"seat": s, "model": models.get(s, "")} for s in seats], "rows": rows,
            "decision": decision_text(decision) if decision else None,
            "votes": sorted((decision.get("votes") or {}).items()),
            "shifts": data.get("shifts") if isinstance(data.get("shifts"), list) else
            [(e.get("data") or {}).get("shift") for e in events if e.get("kind") == "note" and (e.get("data") or {}).get("shift")],
            "complete": bool(data)}


def decision_text(decision: dict) -> str:
    method, answer, rnd = decision.get("method"), decision.get("answer"), decision.get("round")
    votes = " · ".join(f"{c} {n}" for c, n in sorted((decision.get("votes") or {}).items()))
    tied = ", ".join(decision.get("tied") or [])
    if method == "consensus":
        return f"The panel agreed on {answer} in its first answers: no debate was needed." if not rnd else \
            f"The panel agreed on {answer} in debate round {rnd}."
    if method == "majority":
        return f"No consensus after {rnd} round(s): {answer} by majority vote ({votes})."
    if method == "tie":
        return f"No consensus after {rnd} round(s): the vote tied between {tied} ({votes}); tie policy '{decision.get('tie_policy')}': no answer."
    if method == "tie-broken":
        return f"No consensus after {rnd} round(s): the vote tied between {tied} ({votes}); tie policy '{decision.get('tie_policy')}' chose {answer}."
    if method == "no-votes":
        return "No seat gave a readable answer: the panel has no answer."
    return f"Decided by {method}: {answer if answer is not None else 'no answer'}."


def outcome_view(protocol: str, outcome: dict | None, debate: bool) -> dict | None:
    if outcome is None:
        return None
    data = dict(outcome.get("data") or {})
    codes = data.pop("codes", None)
    unread = data.pop("unread", None)
    raw = data.pop("raw", None)
    answer = outcome.get("answer")
    for key in ("diagnosis", "conclusion", "answer", "choice"):  # the answer itself, shown once, above
        if key in data and data[key] == answer:
            data.pop(key)
    if debate:  # shown in the debate summary above; the rest stays under "all outcome data"
        shown, rest = {}, data
    else:
        shown, rest = data, {}
    return {"status": outcome.get("status") or "ok", "answer": outcome.get("answer"), "answer_label": ANSWER_LABELS.get(protocol, "Answer"),
            "codes": codes if isinstance(codes, list) else ([] if codes is None else [codes]), "has_codes": codes is not None,
            "unread": unread or [], "raw": raw if isinstance(raw, str) else None, "data": shown, "rest": rest}


@router.get("/runs/{run_id}/items/{item_id:path}")
def item_page(request: Request, run_id: str, item_id: str, repeat: str = Query("0")):
    from medpanel.runs.scoring import declared_kind

    found, missing = resolve(request, run_id)
    if missing is not None:
        return missing
    back = (run_url(found), f"Back to run {visible(found)}")
    number = parse_whole(repeat, 0)
    if number is None:
        return problem_page(request, 400, "Bad repeat", f"repeat must be a whole number, 0 or more; got '{visible(repeat)}'.",
                            "Use ?repeat=0 for the first (or only) repeat.", back=back)
    store = request.app.state.store
    run = store.get_run(found)
    items = store.items(found, item_id)
    if not items:
        return problem_page(request, 404, "No such item", f"Run {visible(found)} has no item '{visible(item_id)}'.",
                            "The run page lists its items.", back=back)
    item = next((i for i in items if i["repeat"] == number), None)
    if item is None:
        held = ", ".join(str(i["repeat"]) for i in items)
        return problem_page(request, 404, "No such repeat", f"Item '{visible(item_id)}' of run {visible(found)} has no repeat {number}.",
                            f"It has repeat {held}.", back=back)
    events = store.events(found, item_id, number)
    scores = [{"name": r["name"], "value": fmt(r["value"]), "kind": declared_kind(r["name"], run["protocol"]).describe()}
              for r in store.scores(found, item_id, number)]
    debate = is_debate(run["protocol"], item["outcome"])
    repeats = [{"repeat": i["repeat"], "url": item_url(found, item_id, i["repeat"]), "status": i["status"]} for i in items] if len(items) > 1 else []
    return render(
        request, "runs/item.html",
        run=run_header(store, run),
        item=literal({**{k: item[k] for k in ("item_id", "repeat", "status", "error", "error_kind", "input_tokens", "output_tokens",
                                             "cost_usd", "calls", "cached_calls")},
                      "seconds": fmt(seconds(item), 2), "error_first": first_line(item["error"], 400),
                      "error_more": (item["error"] or "").strip().partition("\n")[2].strip()}),
        outcome=literal(outcome_view(run["protocol"], item["outcome"], debate)),
        events=literal([event_view(e) for e in events]),
        debate=literal(debate_summary(item["outcome"], events)) if debate else None,
        scores=literal(scores),
        repeats=literal(repeats),
        **TEMPLATE_HELPERS,
    )


# ---------------------------------------------------------------- /runs/{run_id}/report


@router.get("/runs/{run_id}/report")
def report_page(request: Request, run_id: str, score: str | None = Query(None), seed: str = Query("0")):
    found, seed_no, missing = resolve_with_number(request, run_id, seed, "seed", 0)
    if missing is not None:
        return missing
    store = request.app.state.store
    header = run_header(store, store.get_run(found))
    from medpanel.rating.report import rating_section_html
    from medpanel.runs.report_html import render_report_body

    ratings = rating_section_html(store, [found]) if request.state.user.is_admin else ""  # unblinded results: admins only
    body = render_report_body(store, [found], score=score or None, seed=seed_no, extra=ratings)
    return render(request, "runs/report.html", run=header, body=body)
