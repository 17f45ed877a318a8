"""Training data from stored debate and consult runs: winning transcripts as supervised targets, and
per-seat outcomes as preference pairs, in the conversational JSONL formats TRL reads.

- SFT (`{"messages": [...]}`): a seat's last call as it was sent, then the reply it gave.
  - debate: for an item the run scored correct (`accuracy`, or `--score`, at least `--min-score`), each
    seat whose last answer is the gold letter. Its last call is the question (round 0), or the question, its
    own previous answer and the debate round's prompt with its peers' answers (debate_messages: a round is
    one request of four messages, not a growing chat).
  - consult: the physician's whole dialogue with the assistant (its questions are the assistant turns,
    each answer comes back as a user turn) ending in the discharge it wrote, for a finished consult whose
    score (`code_f1`, or `--score`) is at least `--min-score`.
- Preferences (`{"prompt": [...], "chosen": [assistant], "rejected": [assistant]}`):
  - debate: replies to one identical prompt (in practice round 0, which every seat of an item is asked
    alike; repeats and other runs over the case add to the group), a right one chosen over a wrong one.
  - consult: two physicians over the same case (other runs, or repeats), the higher-scoring one chosen
    when the scores differ by more than `--min-gap`. The prompt is what both were shown alike: their
    dialogues up to the first physician message that differs, which is the pair's two replies.

The prompts are rebuilt from the case and the transcript with the protocols' own builders, then looked
up among the requests the store logged for the item (the call cache keeps each request of a cacheable
model): found, the record is `verified`; a model whose requests are logged but none matches skips the item
(the case or the prompts changed since the run). Scripted fakes and people are not logged: unverified.

Each record carries `id` (run/item/repeat/seat; a pair `chosen > rejected`) and `case`; the split is by
case (split.assign_recordings), one placement for both files, so no case is on both sides. Everything
not exported is counted with its reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any, Iterable, Sequence

from medpanel.cases import Case, load_dataset
from medpanel.curate.split import assign_recordings
from medpanel.errors import MedpanelError, UsageError
from medpanel.protocols import get_protocol
from medpanel.protocols.base import build_settings
from medpanel.protocols.consult import (DISCHARGE_REQUEST, PHYSICIAN, PHYSICIAN_SYSTEM, ConsultSettings, followup_prompt,
                                        opening_prompt)
from medpanel.protocols.debate import DebateSettings, Stance, debate_messages
from medpanel.protocols.single import answer_messages
from medpanel.runs.runner import RunConfig, expand_items
from medpanel.train.data import write_jsonl

SUPPORTED = ("debate", "consult")
DEFAULT_SCORE = {"debate": "accuracy", "consult": "code_f1"}
DEFAULT_MIN_SCORE = {"debate": 1.0, "consult": 0.5}
DEFAULT_MIN_GAP = 0.1

Messages = list[dict[str, str]]


@dataclass
class Export:
    sft: list[dict] = field(default_factory=list)
    preferences: list[dict] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)  # {"id", "why"}: an item, a seat's reply, or a pair not made
    runs: list[dict] = field(default_factory=list)

    def skip(self, ident: str, why: str) -> None:
        self.skipped.append({"id": ident, "why": why})

    def reasons(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for s in self.skipped:
            counts[s["why"]] = counts.get(s["why"], 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


@dataclass
class _Candidate:
    """One reply that may go into a preference pair."""

    ident: str
    case: str
    prompt: Messages
    reply: str
    score: float
    gold: str | None = None  # debate: the right letter (a pair is made only within one question)


def record_id(run_id: str, item_id: str, repeat: int, seat: str) -> str:
    return f"{run_id}/{item_id}/{repeat}/{seat}"


def _plain(messages: Iterable[Any]) -> Messages:
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def _key(messages: Messages) -> str:
    return json.dumps(messages, ensure_ascii=False, sort_keys=True)


class _Logged:
    """The requests the store logged for each item, by model: what was really sent, where it was kept."""

    def __init__(self, store: Any, run_id: str) -> None:
        self.by_item: dict[tuple[str, int], dict[str, set[str]]] = {}
        records: dict[str, dict | None] = {}
        for row in store.call_log(run_id):
            if row["key"] not in records:
                records[row["key"]] = store.get_call(row["key"])
            request = (records[row["key"]] or {}).get("request")
            if not request or row["item_id"] is None:
                continue
            messages = _plain(request.get("messages") or [])
            self.by_item.setdefault((row["item_id"], row["repeat"]), {}).setdefault(row["model"], set()).add(_key(messages))

    def check(self, item_id: str, repeat: int, model: str, messages: Messages) -> bool | None:
        """True: sent as rebuilt; False: the model's requests were logged and none is this; None: none logged."""
        sent = self.by_item.get((item_id, repeat), {}).get(model)
        if not sent:
            return None
        return _key(messages) in sent


@dataclass
class StoredRun:
    run_id: str
    protocol: str
    dataset: str
    settings: Any
    cases: dict[str, Case]
    items: list[dict]
    logged: _Logged


def load_run(store: Any, run_id: str, cases: Sequence[Case] | None = None) -> StoredRun:
    """A stored debate or consult run with its cases (from its dataset, or `cases` for a run of cases built
    in memory) and its logged requests; any other protocol, or a dataset that cannot be read, is refused."""
    run = store.get_run(run_id)
    if run is None:
        raise UsageError(f"No run '{run_id}' in {store.path}.", "List runs with `medpanel runs`.")
    config = RunConfig.model_validate(run["settings"])
    if config.protocol not in SUPPORTED:
        raise UsageError(f"Run {run_id} used the '{config.protocol}' protocol; training data is exported from "
                         f"{' and '.join(SUPPORTED)} runs only.",
                         "Give runs of `medpanel debate`, `medpanel consult`, or `medpanel bench --protocol debate|consult`.")
    spec = get_protocol(config.protocol)
    settings = build_settings(spec.settings, config.settings, spec.name)
    if cases is None:
        try:
            cases = load_dataset(config.dataset, config.limit)
        except MedpanelError as exc:
            raise UsageError(f"Cannot read run {run_id}'s dataset '{config.dataset}' to rebuild its prompts: {exc.problem}",
                             "Run the command from the folder the run was started in, with the same dataset files "
                             "(a question typed on the command line is not kept: save it as a case file and debate that).") from None
    return StoredRun(run_id, config.protocol, config.dataset, settings, {c.id: c for c in expand_items(spec, list(cases))},
                     store.items(run_id), _Logged(store, run_id))


def _scores(store: Any, run_id: str) -> dict[tuple[str, int], dict[str, float | None]]:
    out: dict[tuple[str, int], dict[str, float | None]] = {}
    for row in store.scores(run_id):
        out.setdefault((row["item_id"], row["repeat"]), {})[row["name"]] = row["value"]
    return out


# ---------------------------------------------------------------- debate


def _debate_item(run: StoredRun, item: dict, case: Case, events: list[dict], scores: dict, score_name: str, min_score: float,
                 export: Export, candidates: list[_Candidate]) -> None:
    item_id, repeat = item["item_id"], item["repeat"]
    where = f"{run.run_id}/{item_id}/{repeat}"
    gold = case.reference.answer
    if not gold:
        return export.skip(where, "the case has no reference answer")
    data = (item["outcome"] or {}).get("data") or {}
    seats = list(data.get("seats") or [])
    turns = [e for e in events if e.get("kind") == "turn" and e.get("speaker") in seats]
    if not seats or not turns:
        return export.skip(where, "no debate turns in the transcript")
    settings: DebateSettings = run.settings
    labels = {s: f"Panelist {i + 1}" for i, s in enumerate(seats)}
    by_round = {(e["speaker"], e.get("round", 0)): e for e in turns}
    for e in turns:  # the case read now must be the one the run scored
        if e.get("round", 0) == 0:
            scored = scores.get(f"initial_accuracy.{e['speaker']}")
            choice = (e.get("data") or {}).get("choice")
            if scored is not None and scored != (1.0 if choice == gold else 0.0):
                return export.skip(where, "the dataset's case is not the one the run scored (its answer differs)")

    def stance(e: dict) -> Stance:
        return Stance((e.get("data") or {}).get("choice"), e.get("text", ""), e.get("round", 0))

    def prompt_for(e: dict, small: bool) -> Messages | None:
        seat, rnd = e["speaker"], e.get("round", 0)
        if rnd == 0:
            return answer_messages(case, small)
        own = [t for t in turns if t["speaker"] == seat and t.get("round", 0) < rnd]
        saw = (e.get("data") or {}).get("saw") or {}
        view: dict[str, Stance] = {}
        for s in seats:
            shown = own[-1] if s == seat and own else by_round.get((s, saw.get(labels[s], -1)))
            if shown is None:
                return None
            view[s] = stance(shown)
        return debate_messages(case, seat, labels, view, settings, small)

    rebuilt: list[tuple[dict, Messages, bool]] = []  # (turn, prompt, verified)
    for e in turns:
        prompt, verified = None, False
        for small in (False, True):  # the small-model profile asks in its compact prompts
            prompt = prompt_for(e, small)
            if prompt is None:
                return export.skip(where, "the transcript does not say what a seat was shown")
            found = run.logged.check(item_id, repeat, e.get("model", ""), prompt)
            if found is None:
                break
            if found:
                verified = True
                break
        else:
            return export.skip(where, "a rebuilt prompt is not among the requests the store logged (the case or the prompts changed since the run)")
        rebuilt.append((e, prompt, verified))

    for e, prompt, _ in rebuilt:
        ident = record_id(run.run_id, item_id, repeat, e["speaker"])
        choice = (e.get("data") or {}).get("choice")
        if choice is None:
            export.skip(f"{ident}@{e.get('round', 0)}", "unparsed answer (left out of pairs)")
            continue
        candidates.append(_Candidate(ident, item_id, prompt, e.get("text", ""), 1.0 if choice == gold else 0.0, gold))

    value = scores.get(score_name)
    if value is None:
        return export.skip(where, f"no '{score_name}' score")
    if value < min_score:
        return export.skip(where, f"{score_name} below --min-score (no winning transcript)")
    last = {}
    for e, prompt, verified in rebuilt:
        last[e["speaker"]] = (e, prompt, verified)
    for seat in seats:
        if seat not in last:
            continue
        e, prompt, verified = last[seat]
        ident = record_id(run.run_id, item_id, repeat, seat)
        if (e.get("data") or {}).get("choice") != gold:
            export.skip(ident, "seat ended on a wrong or unparsed answer")
            continue
        export.sft.append({"id": ident, "case": item_id, "verified": verified,
                           "messages": [*prompt, {"role": "assistant", "content": e.get("text", "")}]})


# ---------------------------------------------------------------- consult


def physician_dialogue(case: Case, events: list[dict], settings: ConsultSettings) -> Messages:
    """The physician's side of a consult (MedSyn's profile) as it was sent: its system prompt and the opening,
    each of its replies, each answer as the follow-up prompt, then the discharge request and the discharge."""
    view: Messages = [{"role": "system", "content": PHYSICIAN_SYSTEM}, {"role": "user", "content": opening_prompt(case, settings.max_turns)}]
    questions = 0
    for e in events:
        if e.get("kind") == "turn" and e.get("speaker") == PHYSICIAN:
            view.append({"role": "assistant", "content": e.get("text", "")})
            if (e.get("data") or {}).get("action") == "ask":
                questions += 1
        elif e.get("kind") == "turn":
            view.append({"role": "user", "content": followup_prompt(e.get("text", "").strip(), settings.max_turns - e.get("round", 0),
                                                                     questions >= settings.min_questions)})
        elif e.get("kind") == "decision" and e.get("speaker") == PHYSICIAN:
            view += [{"role": "user", "content": DISCHARGE_REQUEST}, {"role": "assistant", "content": e.get("text", "")}]
    return view


def _consult_item(run: StoredRun, item: dict, case: Case, events: list[dict], scores: dict, score_name: str, min_score: float,
                  export: Export, candidates: list[_Candidate]) -> None:
    item_id, repeat = item["item_id"], item["repeat"]
    ident = record_id(run.run_id, item_id, repeat, PHYSICIAN)
    outcome = item["outcome"] or {}
    if (outcome.get("data") or {}).get("profile") == "small":
        return export.skip(ident, "small-model physician profile (its dialogue is held by code, not one conversation)")
    dialogue = physician_dialogue(case, events, run.settings)
    if len(dialogue) < 3 or dialogue[-1]["role"] != "assistant":
        return export.skip(ident, "no physician turns in the transcript")
    model = next((e.get("model", "") for e in events if e.get("speaker") == PHYSICIAN and e.get("kind") in ("turn", "decision")), "")
    found = run.logged.check(item_id, repeat, model, dialogue[:-1])
    if found is False:
        return export.skip(ident, "a rebuilt prompt is not among the requests the store logged (the case or the prompts changed since the run)")
    value = scores.get(score_name)
    if value is None:
        return export.skip(ident, f"no '{score_name}' score")
    candidates.append(_Candidate(ident, item_id, dialogue, "", float(value)))
    if outcome.get("status", "ok") != "ok":
        return export.skip(ident, "unfinished consult (no discharge)")
    if value < min_score:
        return export.skip(ident, f"{score_name} below --min-score (no winning transcript)")
    export.sft.append({"id": ident, "case": item_id, "verified": bool(found), "messages": dialogue})


def _consult_pair(a: _Candidate, b: _Candidate) -> tuple[Messages, str, str] | str:
    """(prompt, a's reply, b's reply) where the two dialogues part at a physician message, or why not."""
    x, y = a.prompt, b.prompt
    i = 0
    while i < min(len(x), len(y)) and x[i] == y[i]:
        i += 1
    if i == len(x) or i == len(y):
        return "one dialogue is the other's beginning"
    if x[i]["role"] != "assistant" or y[i]["role"] != "assistant":
        return "the dialogues part at what the physician was shown, not at what it said"
    return x[:i], x[i]["content"], y[i]["content"]


# ---------------------------------------------------------------- all runs


def _pairs(protocol: str, candidates: list[_Candidate], min_gap: float, export: Export) -> None:
    seen: set[tuple[str, str, str]] = set()

    def add(prompt: Messages, chosen: _Candidate, chosen_text: str, rejected: _Candidate, rejected_text: str) -> None:
        key = (_key(prompt), chosen_text, rejected_text)
        if key in seen:
            return
        seen.add(key)
        export.preferences.append({"id": f"{chosen.ident} > {rejected.ident}", "case": chosen.case,
                                   "chosen_id": chosen.ident, "rejected_id": rejected.ident,
                                   "chosen_score": chosen.score, "rejected_score": rejected.score, "prompt": prompt,
                                   "chosen": [{"role": "assistant", "content": chosen_text}],
                                   "rejected": [{"role": "assistant", "content": rejected_text}]})

    if protocol == "debate":
        groups: dict[tuple[str, str, str | None], list[_Candidate]] = {}
        for c in candidates:
            groups.setdefault((c.case, _key(c.prompt), c.gold), []).append(c)
        for group in groups.values():
            right = [c for c in group if c.score == 1.0]
            wrong = [c for c in group if c.score != 1.0]
            for r in right:
                for w in wrong:
                    add(r.prompt, r, r.reply, w, w.reply)
        return
    by_case: dict[str, list[_Candidate]] = {}
    for c in candidates:
        by_case.setdefault(c.case, []).append(c)
    for group in by_case.values():
        for a, b in combinations(group, 2):
            if abs(a.score - b.score) <= min_gap:
                continue
            hi, lo = (a, b) if a.score > b.score else (b, a)
            made = _consult_pair(hi, lo)
            if isinstance(made, str):
                export.skip(f"{hi.ident} > {lo.ident}", f"no pair: {made}")
                continue
            prompt, chosen, rejected = made
            add(prompt, hi, chosen, lo, rejected)


def export_runs(store: Any, run_ids: Sequence[str], *, score: str | None = None, min_score: float | None = None,
                min_gap: float = DEFAULT_MIN_GAP, cases: Sequence[Case] | None = None) -> Export:
    """SFT records and preference pairs from the stored runs (ids already resolved); see the module docstring.
    `score`, `min_score`: the item score a winning transcript needs (default per protocol: DEFAULT_SCORE,
    DEFAULT_MIN_SCORE); `min_gap`: how much more a consult must score to be chosen over another."""
    export = Export()
    candidates: dict[str, list[_Candidate]] = {p: [] for p in SUPPORTED}
    for run_id in dict.fromkeys(run_ids):
        run = load_run(store, run_id, cases)
        name = score or DEFAULT_SCORE[run.protocol]
        threshold = DEFAULT_MIN_SCORE[run.protocol] if min_score is None else min_score
        scores = _scores(store, run_id)
        recorded = {n for s in scores.values() for n in s}
        if score is not None and scores and name not in recorded:
            raise UsageError(f"Run {run_id} ({run.protocol}) has no score '{name}'.",
                             f"Its scores: {', '.join(sorted(recorded))}; or leave --score out for the protocol's default ({DEFAULT_SCORE[run.protocol]}).")
        export.runs.append({"id": run_id, "protocol": run.protocol, "dataset": run.dataset, "score": name, "min_score": threshold,
                            "items": len(run.items)})
        handle = _debate_item if run.protocol == "debate" else _consult_item
        for item in run.items:
            where = f"{run_id}/{item['item_id']}/{item['repeat']}"
            if item["status"] != "done":
                export.skip(where, "failed item")
                continue
            case = run.cases.get(item["item_id"])
            if case is None:
                export.skip(where, "the case is no longer in the run's dataset")
                continue
            events = store.events(run_id, item["item_id"], item["repeat"])
            handle(run, item, case, events, scores.get((item["item_id"], item["repeat"]), {}), name, threshold, export, candidates[run.protocol])
    unique: dict[str, dict] = {}
    for record in export.sft:  # replicas at temperature 0 say the same to the same prompt: one record
        key = _key(record["messages"])
        if key in unique:
            export.skip(record["id"], "the same conversation as an exported record")
        else:
            unique[key] = record
    export.sft = list(unique.values())
    for protocol, found in candidates.items():
        _pairs(protocol, found, min_gap, export)
    return export


def split_export(export: Export, validation: float = 0.1, seed: int = 0, previous: dict[str, str] | None = None
                 ) -> tuple[dict[str, list[dict]], dict[str, str]]:
    """{"sft_train", "sft_validation", "preferences_train", "preferences_validation"} and case -> side: one
    placement of the cases for both files; `previous` (case -> train|validation) keeps earlier placements."""
    if not 0 <= validation < 1:
        raise UsageError(f"--validation {validation} is not a share below 1.", "Give e.g. --validation 0.1.")
    names = [r["case"] for r in [*export.sft, *export.preferences]]
    earlier = {c: ("train" if side == "train" else "dev") for c, side in (previous or {}).items()}
    where = assign_recordings(names, seed, earlier, ratios=(1 - validation, validation, 0.0))
    placed = {c: "train" if side == "train" else "validation" for c, side in where.items()}
    files = {f"{kind}_{side}": [r for r in records if placed[r["case"]] == side]
             for kind, records in (("sft", export.sft), ("preferences", export.preferences)) for side in ("train", "validation")}
    return files, placed


def write_export(out_dir: Path, export: Export, *, validation: float = 0.1, seed: int = 0, min_gap: float = DEFAULT_MIN_GAP) -> dict:
    """Split and write the JSONL files (those with records: sft_train, sft_validation, preferences_train,
    preferences_validation) and manifest.json into `out_dir`; returns the manifest. A manifest already there
    keeps each case on the side it was on. Nothing exportable, or nothing left to train on,
    is a UsageError."""
    if not export.sft and not export.preferences:
        reasons = "; ".join(f"{why}: {n}" for why, n in export.reasons().items()) or "the runs hold no items"
        raise UsageError(f"Nothing to export from {', '.join(r['id'] for r in export.runs)} ({reasons}).",
                         "Export runs with correct answers (debate) or discharges scoring at least --min-score (consult), "
                         "or lower --min-score; pairs need right and wrong seats on one question, or two consults of a case.")
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--out {out_dir} is a file.", "Give a folder (it is created if missing).")
    manifest_path = out_dir / "manifest.json"
    earlier: dict[str, str] = {}
    if manifest_path.is_file():
        try:
            earlier = dict(json.loads(manifest_path.read_text(encoding="utf-8"))["cases"])
            if not all(isinstance(c, str) and side in ("train", "validation") for c, side in earlier.items()):
                raise ValueError("a case's side is not train or validation")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UsageError(f"Cannot read the earlier placements in {manifest_path}: {exc}.",
                             "Fix or remove that manifest (removing it re-splits every case), or give another --out.") from None
    files, placed = split_export(export, validation, seed, earlier)
    if not files["sft_train"] and not files["preferences_train"]:
        raise UsageError(f"Every one of the {len(placed)} case(s) went to validation: nothing is left to train on.",
                         "Export more cases or give a smaller --validation.")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        written = {}
        for name, records in files.items():  # datasets cannot load an empty JSONL file: an empty side is not written
            path = out_dir / f"{name}.jsonl"
            if records:
                written[path.name] = {"records": len(records), "sha256": write_jsonl(path, records)}
            elif path.exists():
                path.unlink()  # an earlier export's, now stale
        manifest = {"runs": export.runs, "seed": seed, "validation_share": validation, "min_gap": min_gap,
                    "files": written,
                    "counts": {**{name: len(records) for name, records in files.items()},
                               "verified_sft": sum(1 for r in export.sft if r["verified"])},
                    "skipped": export.reasons(), "skipped_items": export.skipped,
                    "cases": {**{c: side for c, side in earlier.items() if c not in placed}, **placed}}
        manifest_path.write_text(json.dumps(manifest, indent=1, ensure_ascii=False), encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"Cannot write to {out_dir}: {exc.strerror}.", "Give --out a folder you can write to.") from None
    return manifest
