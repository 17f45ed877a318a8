"""Blinded rating sessions: which answers are rated, by whom, in what order, and what the raters said.

A session rates the answers of one or more stored runs over the same items (each item's outcome answer:
an option, a conclusion, a diagnosis, a long-form reply). Raters never see a run id, a protocol or a model
name: each run is a hidden system number, shown per item as "Answer A", "Answer B", ... in an order drawn
from the session's stored seed, and each rater meets the items in an order of their own, drawn from the
same seed. Answers are shown as the user would read them (a long-form consolidation without the tags that
credit its panelists, any other mention of a panelist and any model spec named inside a text masked).

Assignment, as OpenTumorBoard's audit: two primary raters per item (everyone when there are two; with more,
a seeded rotation that spreads the items evenly), and a third person, the adjudicator, asked only about the
cells where the two disagree once both have rated the item. With no adjudicator named, a third rater from
the pool adjudicates (with three or more raters); with two raters and none named, disagreements stay
unresolved and the analysis says so. Each verdict is stored as (rater, item, hidden system, dimension,
value, role, time). Run ids come back only in analysis (report.py, judge_agreement.py).
"""

from __future__ import annotations

import random
import re
import secrets
import string
from dataclasses import dataclass, field
from typing import Any, Mapping

from medpanel.errors import MedpanelError, UsageError
from medpanel.rating import store as rstore
from medpanel.rating.rubrics import PICK_BEST, Dimension, Rubric, get_rubric, pick_dimensions
from medpanel.runs.store import Store

NO_ANSWER = "(No answer was given.)"
MASK = "[a model]"
BEST = "best"
MAX_SYSTEMS = len(string.ascii_uppercase)
MAX_SEED = 2 ** 63  # seeds are stored in SQLite's signed 64-bit INTEGER: 0 <= seed < 2**63
PANELIST = "a panelist"
PANELISTS = "panelists"
# "Panelist 2", "Panelists 1-3", "Panelist 1 and Panelist 3", "Panelists 1, 2 and 4", any case.
_PANELIST_NAMES = re.compile(r"\bpanelists?\s*\d+(?:\s*(?:,|&|\band\b|\bor\b|\bto\b|-|\u2013)\s*(?:panelists?\s*)?\d+)*\b", re.IGNORECASE)
_NAME = re.compile(r"^[\w.@ -]{1,64}$")


# ---------------------------------------------------------------- what a rater sees


@dataclass(frozen=True)
class ShownAnswer:
    letter: str
    text: str


@dataclass
class Task:
    """One item as one rater rates it: the prompt, the answers in this item's letter order, and which
    cells to fill: `cells[dimension]` lists the letters asked on that dimension (for pick-best: every
    letter, of which the rater picks one)."""

    session_id: str
    item: int
    role: str  # primary | adjudicator
    prompt: dict[str, Any]
    answers: list[ShownAnswer]
    dimensions: list[Dimension]
    cells: dict[str, list[str]]
    rubric: Rubric
    number: int  # this task's place in the rater's list (1-based)
    total: int  # tasks the rater has now (more adjudications may come as others finish)

    @property
    def pick_best(self) -> bool:
        """The form then has one field, "best" = a letter; otherwise one per cell, "LETTER:dimension" = a value."""
        return self.rubric.kind == PICK_BEST


# ---------------------------------------------------------------- creating a session


def _clean_name(name: str, what: str) -> str:
    name = " ".join(str(name).split())
    if not _NAME.match(name):
        raise UsageError(f"{what} '{name}' is not a usable name.", "Use up to 64 letters, digits, spaces and . _ - @ (the names people sign in with).")
    return name


def _rng(seed: int, *parts: object) -> random.Random:
    return random.Random(":".join(str(p) for p in (seed, *parts)))  # str seeds are hashed with SHA-512: stable across runs


def new_session_id() -> str:
    """Random, and unlike a run id (no timestamp), so it can never be mistaken for one on a rater's page."""
    return "rate-" + secrets.token_hex(4)


def answer_text(outcome: dict | None) -> str | None:
    """What a user would read of an outcome: a conversation's response; a long-form consolidation without its
    panelist tags; else the answer. Panelists named anywhere in it (a seat's label, or "Panelist N",
    "Panelists 1-3", "Panelist 1 and Panelist 3", any case) are masked: tags naming only them are dropped,
    other mentions become "a panelist" (or "panelists")."""
    if not outcome:
        return None
    data = outcome.get("data") or {}
    labels = data.get("labels")
    seats = [str(v) for v in labels.values()] if isinstance(labels, dict) else []
    if isinstance(data.get("response"), str) and data["response"].strip():
        return mask_panelists(data["response"], seats).strip()
    answer = outcome.get("answer")
    if not isinstance(answer, str) or not answer.strip():
        return None
    if seats:
        from medpanel.protocols.longform import without_attributions

        answer = without_attributions(answer, seats)
    return mask_panelists(answer, seats).strip()


def _seat_pattern(seats: list[str]) -> re.Pattern[str]:
    names = sorted({s.strip() for s in seats if s and s.strip()}, key=len, reverse=True)
    alternatives = [_PANELIST_NAMES.pattern] + [r"(?<!\w)" + re.escape(n) + r"(?!\w)" for n in names]
    return re.compile("|".join(f"(?:{a})" for a in alternatives), re.IGNORECASE)


def mask_panelists(text: str, seats: list[str] | None = None) -> str:
    """`text` with no panelist named: a bracketed tag that names only panelists (seat labels or "Panelist N",
    any case) is dropped; any other mention of them becomes "a panelist", or "panelists" for several."""
    pattern = _seat_pattern(list(seats or []))

    def drop(match: re.Match[str]) -> str:
        parts = [p.strip() for p in re.split(r",|;|\band\b", match.group(1), flags=re.IGNORECASE) if p.strip()]
        return "" if parts and all(pattern.fullmatch(p) for p in parts) else match.group(0)

    text = re.sub(r"[ \t]*\[([^\[\]\n]{1,200})\]", drop, text)

    def neutral(match: re.Match[str]) -> str:
        several = len(re.findall(r"\d+", match.group(0))) > 1 and bool(_PANELIST_NAMES.fullmatch(match.group(0)))
        word = PANELISTS if several else PANELIST
        before = text[:match.start()].rstrip()
        return word[0].upper() + word[1:] if not before or before[-1] in ".!?\n" else word

    text = pattern.sub(neutral, text)
    return re.sub(r"[ \t]+([.,;:!?])", r"\1", re.sub(r"[ \t]{2,}", " ", text))


def model_names(runs: list[dict]) -> list[str]:
    """What could name a model inside a text: every seat's and role's spec, and the model part of a spec when it
    looks like a model id (a digit, '-', '.', '/' or '_' in it: gpt-4o, qwen2.5-7b), never a plain word."""
    from medpanel.runs.panel import run_roles

    specs: set[str] = set()
    for run in runs:
        specs.update(str(m) for m in run.get("models") or [])
        try:
            specs.update(str(s) for s in run_roles(run).values())
        except MedpanelError:
            pass
    names = set()
    for spec in specs:
        model = spec.partition(":")[2].split("@")[0]
        short = model.partition(":")[0]  # without an ollama-style :tag (llama3.1:8b -> llama3.1)
        undated = re.sub(r"[-_@]?(?:\d{8}|\d{4}-\d{2}-\d{2})$", "", short)  # without a release date (claude-3-5-sonnet-20241022)
        for part in (spec, *spec.split("@"), model, short, undated):
            part = part.strip()
            if len(part) >= 3 and (part == spec or re.search(r"[\d./_-]", part)):
                names.add(part)
    return sorted(names, key=len, reverse=True)


def mask_names(text: str, names: list[str]) -> str:
    for name in names:
        text = re.sub(re.escape(name), MASK, text, flags=re.IGNORECASE)
    return text


def _cases_of(run: dict, given: list | None) -> dict[str, Any]:
    """The run's items as cases, by id: the caller's, else the run's dataset read again (expanded as its protocol
    expands it); empty when the dataset cannot be read here (the prompt then comes from the outcome)."""
    if given is not None:
        return {c.id: c for c in given}
    try:
        from medpanel.cases import load_dataset
        from medpanel.protocols import get_protocol
        from medpanel.runs.runner import expand_items

        return {c.id: c for c in expand_items(get_protocol(run["protocol"]), load_dataset(run["dataset"]))}
    except (MedpanelError, OSError, ValueError, KeyError):
        return {}


def item_prompt(case: Any, outcome: dict | None) -> dict[str, Any]:
    """What the rater reads before the answers, from the case (or, lacking it, the outcome's own record)."""
    data = (outcome or {}).get("data") or {}
    prompt: dict[str, Any] = {}
    if case is not None:
        prompt = {
            "summary": case.summary, "chief_complaint": case.chief_complaint, "question": case.question,
            "options": dict(case.options), "target_role": case.target_role,
            "conversation": [{"role": t.role, "text": t.text} for t in case.conversation if t.role != "system"],
            "slides": [s.caption for s in case.slides if s.caption],
            "reference": case.reference.answer_text or case.reference.answer or case.reference.conclusion or "",
        }
        if case.reference.conclusion and case.reference.answer and case.reference.conclusion != prompt["reference"]:
            prompt["reference_conclusion"] = case.reference.conclusion
    for key in ("question", "target_role"):
        if not prompt.get(key) and isinstance(data.get(key), str):
            prompt[key] = data[key]
    return {k: v for k, v in prompt.items() if v}


def _assign(items: list[int], raters: list[str], adjudicator: str | None, seed: int) -> dict[int, tuple[list[str], str | None]]:
    """Two primary raters per item and its adjudicator. Two raters: both rate everything. More: the raters (in
    a seeded order) take the items (in a seeded order) in rotation, item k going to raters k and k+1, and
    rater k+2 adjudicates unless an adjudicator is named; every rater gets the same number of items, +-1."""
    if len(raters) == 2:
        return {item: (list(raters), adjudicator) for item in items}
    pool = list(raters)
    _rng(seed, "raters").shuffle(pool)
    order = list(items)
    _rng(seed, "assignment").shuffle(order)
    n = len(pool)
    return {item: ([pool[k % n], pool[(k + 1) % n]], adjudicator or pool[(k + 2) % n]) for k, item in enumerate(order)}


def create_session(store: Store, run_ids: list[str], *, rubric: str, raters: list[str], adjudicator: str | None = None,
                   seed: int | None = None, dimensions: list[str] | None = None, cases: list | None = None,
                   session_id: str | None = None) -> str:
    """Create a blinded rating session over the runs' shared items and return its id.

    run_ids: ids (or unique prefixes, or 'last') of runs over the same items; an item is rated when it
    finished in every run (its lowest shared repeat), the rest are left out and noted. rubric: a name in
    RUBRICS; dimensions: a subset of its dimensions (default all). raters: two or more names; adjudicator:
    someone else, asked only about disagreements. seed: orders the systems, letters and items (random when
    not given; stored). cases: the runs' cases, when their dataset cannot be read again (inline runs)."""
    chosen = get_rubric(rubric)
    dims = pick_dimensions(chosen, dimensions)
    names = [_clean_name(r, "Rater") for r in raters if str(r).strip()]
    if len(names) < 2 or len(set(names)) != len(names):
        raise UsageError(f"A session needs two or more different raters; got {', '.join(names) or 'none'}.",
                         "Name them with --raters alice,bob (each item is rated by two of them).")
    judge = _clean_name(adjudicator, "Adjudicator") if adjudicator and adjudicator.strip() else None
    if judge in names:
        raise UsageError(f"The adjudicator {judge} is also a rater.", "The adjudicator settles the raters' disagreements: name someone else.")
    if seed is not None:
        try:
            seed = int(seed)
        except (TypeError, ValueError):
            pass  # refused just below, with the reason
    if seed is not None and (not isinstance(seed, int) or not 0 <= seed < MAX_SEED):
        raise UsageError(f"The seed {seed!r} is out of range: it must be a whole number with 0 <= seed < 2**63.",
                         "Give a smaller seed, e.g. --seed 7, or leave it out for a random one.")
    if not run_ids:
        raise UsageError("No runs to rate.", "Name one or more runs: medpanel rate new RUN [RUN ...].")
    resolved = [store.resolve_run_id(r) for r in run_ids]
    if len(set(resolved)) != len(resolved):
        raise UsageError("The same run is named twice.", "Name each run once: every run is one blinded system.")
    if len(resolved) < chosen.min_systems:
        raise UsageError(f"The {chosen.name} rubric compares answers: it needs at least {chosen.min_systems} runs; got {len(resolved)}.",
                         "Name the runs to compare: medpanel rate new RUN_A RUN_B --rubric pick-best ...")
    if len(resolved) > MAX_SYSTEMS:
        raise UsageError(f"At most {MAX_SYSTEMS} runs fit in one session (answers are lettered A-Z); got {len(resolved)}.", "Rate fewer runs at once.")
    runs = [store.get_run(r) for r in resolved]
    datasets = sorted({str(run.get("dataset")) for run in runs})
    if len(datasets) > 1:
        raise UsageError(f"These runs are over different datasets ({', '.join(datasets)}): items would be paired by id alone.",
                         "Rate runs made over one same dataset (medpanel show RUN shows a run's dataset).")

    done: list[dict[tuple[str, int], dict | None]] = []
    for run_id in resolved:
        done.append({(i["item_id"], i["repeat"]): i["outcome"] for i in store.items(run_id) if i["status"] == "done"})
    all_ids = sorted({item_id for d in done for item_id, _ in d})
    keys: list[tuple[str, int]] = []
    left_out: list[str] = []
    for item_id in all_ids:
        shared = set.intersection(*({rep for iid, rep in d if iid == item_id} for d in done))
        if shared:
            keys.append((item_id, min(shared)))
        else:
            left_out.append(item_id)
    if not keys:
        raise UsageError("These runs have no finished item in common.", "Rate runs over the same dataset, each with finished items (medpanel show RUN).")

    seed = secrets.randbelow(2 ** 31) if seed is None else int(seed)
    order = list(range(len(resolved)))
    _rng(seed, "systems").shuffle(order)
    system_of = {run_index: number + 1 for number, run_index in enumerate(order)}  # hidden numbers 1..k, not the order named
    masked = model_names(runs)
    by_case = _cases_of(runs[0], cases)

    items, answers = [], []
    numbers = list(range(1, len(keys) + 1))
    assignment = _assign(numbers, names, judge, seed)
    for number, (item_id, repeat) in zip(numbers, keys):
        outcomes = [d[(item_id, repeat)] for d in done]
        items.append({"item": number, "item_id": item_id, "repeat": repeat, "prompt": item_prompt(by_case.get(item_id), outcomes[0]),
                      "raters": assignment[number][0], "adjudicator": assignment[number][1]})
        systems = [system_of[i] for i in range(len(resolved))]
        letters = sorted(systems)
        _rng(seed, "letters", number).shuffle(letters)  # letters[j] is the system shown as the j-th letter
        for letter, system in zip(string.ascii_uppercase, letters):
            outcome = outcomes[systems.index(system)]
            answers.append((number, system, letter, mask_names(answer_text(outcome) or NO_ANSWER, masked)))
    note = None
    if left_out:
        note = f"{len(left_out)} item(s) left out, not finished in every run: {', '.join(left_out[:10])}{' ...' if len(left_out) > 10 else ''}"
    sid = session_id or new_session_id()
    rstore.insert_session(store, {"id": sid, "rubric": chosen.name, "dimensions": dims, "seed": seed, "raters": names,
                                  "adjudicator": judge, "note": note},
                          [(system_of[i], run_id) for i, run_id in enumerate(resolved)], items, answers)
    return sid


# ---------------------------------------------------------------- the state of a session


@dataclass
class Session:
    """A session read whole: its rubric, items, answers and ratings (no run ids: see report.py)."""

    row: dict[str, Any]
    rubric: Rubric
    items: dict[int, dict[str, Any]]
    answers: dict[int, list[dict[str, Any]]]  # item -> answers in letter order
    ratings: list[dict[str, Any]]
    by: dict[tuple[int, str], dict[tuple[int, str], int]] = field(default_factory=dict)  # (item, rater) -> {(system, dim): value}
    _open: dict[int, list[tuple[int | None, str]] | None] = field(default_factory=dict, repr=False)

    @property
    def id(self) -> str:
        return self.row["id"]

    @property
    def dimensions(self) -> list[Dimension]:
        return [self.rubric.dimension(d) for d in self.row["dimensions"]]

    def systems(self, item: int) -> list[int]:
        return [a["system"] for a in self.answers[item]]

    def rated(self, item: int, rater: str) -> bool:
        return (item, rater) in self.by

    def choice(self, item: int, rater: str) -> int | None:
        """Pick-best: the system this rater picked."""
        picked = [s for (s, d), v in self.by.get((item, rater), {}).items() if d == BEST and v == 1]
        return picked[0] if picked else None

    def disagreements(self, item: int) -> list[tuple[int | None, str]] | None:
        """The cells the two primary raters rated differently: (system, dimension), or (None, 'best') for a
        pick-best item whose picks differ. None while either has not rated the item."""
        if item not in self._open:
            self._open[item] = self._disagreements(item)
        return self._open[item]

    def _disagreements(self, item: int) -> list[tuple[int | None, str]] | None:
        first, second = self.items[item]["raters"]
        if not (self.rated(item, first) and self.rated(item, second)):
            return None
        if self.rubric.kind == PICK_BEST:
            return [] if self.choice(item, first) == self.choice(item, second) else [(None, BEST)]
        a, b = self.by[(item, first)], self.by[(item, second)]
        return [(system, dim.name) for system in sorted(self.systems(item)) for dim in self.dimensions
                if a.get((system, dim.name)) != b.get((system, dim.name))]

    def consensus(self, item: int, system: int, dimension: str) -> tuple[int | None, str]:
        """The settled rating of one cell and how it was settled: agreed, adjudicated; or None with pending
        (a primary rating missing), awaiting (the adjudicator has not answered), unresolved (no adjudicator)."""
        info = self.items[item]
        if self.disagreements(item) is None:
            return None, "pending"
        first = info["raters"][0]
        if self.rubric.kind == PICK_BEST:
            if not self.disagreements(item):
                return int(self.choice(item, first) == system), "agreed"
            if info["adjudicator"] and self.rated(item, info["adjudicator"]):
                return int(self.choice(item, info["adjudicator"]) == system), "adjudicated"
        else:
            if (system, dimension) not in self.disagreements(item):
                return self.by[(item, first)].get((system, dimension)), "agreed"
            if info["adjudicator"] and self.rated(item, info["adjudicator"]):
                value = self.by[(item, info["adjudicator"])].get((system, dimension))
                if value is not None:
                    return value, "adjudicated"
        return None, "awaiting" if info["adjudicator"] else "unresolved"

    # ------------------------------------------------------------ a rater's list

    def primary_items(self, rater: str) -> list[int]:
        """The items this rater rates first-hand, in this rater's own seeded order."""
        mine = [n for n, it in self.items.items() if rater in it["raters"]]
        _rng(self.row["seed"], "order", rater).shuffle(mine)
        return mine

    def adjudication_items(self, rater: str) -> list[int]:
        """Items this rater adjudicates that need it now (both primaries in, and they disagree), same order rule."""
        mine = [n for n, it in self.items.items() if it["adjudicator"] == rater and self.disagreements(n)]
        _rng(self.row["seed"], "order", rater).shuffle(mine)
        return mine

    def tasks(self, rater: str) -> list[tuple[int, str]]:
        return [(n, "primary") for n in self.primary_items(rater)] + [(n, "adjudicator") for n in self.adjudication_items(rater)]

    def task(self, rater: str, item: int, role: str, number: int, total: int) -> Task:
        answers = [ShownAnswer(a["letter"], a["text"]) for a in self.answers[item]]
        letters = [a.letter for a in answers]
        letter_of = {a["system"]: a["letter"] for a in self.answers[item]}
        if self.rubric.kind == PICK_BEST:
            cells = {BEST: letters}
        elif role == "primary":
            cells = {d.name: list(letters) for d in self.dimensions}
        else:
            open_cells = self.disagreements(item) or []
            cells = {d.name: sorted(letter_of[s] for s, dim in open_cells if dim == d.name) for d in self.dimensions}
            cells = {k: v for k, v in cells.items() if v}
        return Task(self.id, item, role, self.items[item]["prompt"], answers, [d for d in self.dimensions if d.name in cells], cells,
                    self.rubric, number, total)


def load(store: Store, session_id: str) -> Session:
    row = rstore.get_session(store, session_id)
    if row is None:
        raise UsageError(f"No rating session '{session_id}' in {store.path}.", "List sessions with `medpanel rate list`.")
    answers: dict[int, list[dict[str, Any]]] = {}
    for a in rstore.session_answers(store, session_id):
        answers.setdefault(a["item"], []).append(a)
    session = Session(row, get_rubric(row["rubric"]), {it["item"]: it for it in rstore.session_items(store, session_id)}, answers,
                      rstore.session_ratings(store, session_id))
    for r in session.ratings:
        session.by.setdefault((r["item"], r["rater"]), {})[(r["system"], r["dimension"])] = r["value"]
    return session


def people(session: Session) -> list[str]:
    """Everyone who rates in the session: the raters, then the adjudicators."""
    out = list(session.row["raters"])
    for it in session.items.values():
        if it["adjudicator"] and it["adjudicator"] not in out:
            out.append(it["adjudicator"])
    return out


def next_task(store: Store, session_id: str, rater: str) -> Task | None:
    """The rater's next item to rate (first-hand items first, then adjudications), or None when nothing is
    open for them now."""
    session = load(store, session_id)
    tasks = session.tasks(rater)
    for number, (item, role) in enumerate(tasks, 1):
        if not session.rated(item, rater):
            return session.task(rater, item, role, number, len(tasks))
    return None


def task_for(store: Store, session_id: str, rater: str, item: int) -> Task | None:
    """The rater's open task on one item (to show it again, e.g. after an incomplete form), or None."""
    session = load(store, session_id)
    tasks = session.tasks(rater)
    for number, (n, role) in enumerate(tasks, 1):
        if n == item and not session.rated(n, rater):
            return session.task(rater, n, role, number, len(tasks))
    return None


def record(store: Store, session_id: str, rater: str, item: int, form: Mapping[str, Any]) -> int:
    """Store one rater's verdicts on one item, read from form fields ("A:dimension" = value or label; for
    pick-best "best" = a letter). Every asked cell must be answered, on its scale; nothing else may be.
    Returns the number of ratings stored. AlreadyRated when the rater rated this item before."""
    session = load(store, session_id)
    if session.rated(item, rater):
        raise rstore.AlreadyRated(f"{rater} has already rated item {item} of this session.", "Go on to the next item.")
    roles = [role for n, role in session.tasks(rater) if n == item]
    if not roles:
        raise UsageError(f"{rater} is not asked to rate item {item} of this session.", "Open the session's page to get your next item.")
    task = session.task(rater, item, roles[0], 0, 0)
    system_of = {a["letter"]: a["system"] for a in session.answers[item]}
    rows: list[tuple[int, str, int]] = []
    if task.pick_best:
        picked = str(form.get(BEST, "")).strip().upper()
        if picked not in system_of:
            raise UsageError("Pick the best answer.", f"Choose one of {', '.join(sorted(system_of))}.")
        rows = [(system, BEST, int(letter == picked)) for letter, system in system_of.items()]
    else:
        asked = {(letter, dim) for dim, letters in task.cells.items() for letter in letters}
        for key in form:
            letter, sep, dim = str(key).partition(":")
            if sep and letter in system_of and (letter, dim) not in asked:
                raise UsageError(f"Answer {letter} on '{dim}' is not asked of you on this item.", "Rate only the questions shown.")
        missing = []
        for dim in task.dimensions:
            for letter in task.cells[dim.name]:
                raw = form.get(f"{letter}:{dim.name}")
                if raw is None or not str(raw).strip():
                    missing.append(f"Answer {letter}: {dim.label}")
                    continue
                try:
                    rows.append((system_of[letter], dim.name, dim.scale.read(raw)))
                except ValueError as exc:
                    raise UsageError(f"Answer {letter}, {dim.label}: {exc}.", "Choose one of the options shown.") from None
        if missing:
            raise UsageError(f"Not every question was answered: {'; '.join(missing)}.", "Choose an option for each one.")
    rstore.insert_ratings(store, session_id, rater, item, task.role, rows)
    return len(rows)


def progress(store: Store, session_id: str) -> dict[str, Any]:
    """How far the session is, blinded (no run ids): per person, first-hand items done of assigned and
    adjudications done of those asked; items settled, awaiting adjudication, or unresolved."""
    session = load(store, session_id)
    return progress_of(session)


def progress_of(session: Session) -> dict[str, Any]:
    per: dict[str, dict[str, int]] = {}
    for name in people(session):
        primary = session.primary_items(name)
        adjudicate = [n for n, it in session.items.items() if it["adjudicator"] == name and session.disagreements(n)]
        per[name] = {"assigned": len(primary), "done": sum(session.rated(n, name) for n in primary),
                     "adjudications": len(adjudicate), "adjudicated": sum(session.rated(n, name) for n in adjudicate)}
    states = {"settled": 0, "pending": 0, "awaiting": 0, "unresolved": 0}
    disagreed = 0
    for n, it in session.items.items():
        open_cells = session.disagreements(n)
        if open_cells is None:
            states["pending"] += 1
            continue
        disagreed += bool(open_cells)
        if not open_cells or (it["adjudicator"] and session.rated(n, it["adjudicator"])):
            states["settled"] += 1
        else:
            states["awaiting" if it["adjudicator"] else "unresolved"] += 1
    total = len(session.items)
    return {"session_id": session.id, "rubric": session.rubric.name, "title": session.rubric.title, "items": total,
            "systems": len(session.answers[next(iter(session.answers))]) if session.answers else 0,
            "raters": per, "items_by_state": states, "items_with_disagreement": disagreed,
            "complete": states["settled"] + states["unresolved"] == total,
            "share_settled": states["settled"] / total if total else 0.0}


def sessions_for(store: Store, rater: str | None = None) -> list[dict[str, Any]]:
    """Every session (or those `rater` takes part in), newest first, each with its blinded progress."""
    out = []
    for row in rstore.list_sessions(store):
        session = load(store, row["id"])
        if rater is not None and rater not in people(session):
            continue
        info = progress_of(session)
        info["created_at"] = row["created_at"]
        info["note"] = row["note"]
        if rater is not None:
            info["mine"] = info["raters"].get(rater)
            info["open"] = sum(not session.rated(n, rater) for n, _ in session.tasks(rater))
        out.append(info)
    return out


__all__ = ["BEST", "MASK", "NO_ANSWER", "Session", "ShownAnswer", "Task", "answer_text", "create_session", "item_prompt", "load",
           "mask_names", "mask_panelists", "model_names", "next_task", "task_for", "people", "progress", "progress_of", "record", "sessions_for"]
