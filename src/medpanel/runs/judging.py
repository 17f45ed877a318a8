"""Judging a stored run afterwards (`medpanel judge run`): the run's own judging scorers, on the same path.

Every finished item's outcome and transcript are read back from the store, the protocol's scorers that
call the `judge` role run on them through `score_outcome` (as during a run), and what they recorded is
added to the item with `Store.add_scored`: an item judged now is stored as it would have been had the
run been judged while it ran. Judge calls are logged against their item; items are written one by one,
so a budget stop keeps what was judged.
"""

from __future__ import annotations

from typing import Any, Callable

from medpanel.cases import load_dataset
from medpanel.context import RunContext, quiet
from medpanel.errors import UsageError
from medpanel.models.base import Model
from medpanel.models.runtime import call_scope
from medpanel.protocols import PROTOCOLS, Outcome, get_protocol
from medpanel.protocols.base import build_settings
from medpanel.runs.pool import drain
from medpanel.runs.runner import RunConfig, expand_items
from medpanel.runs.scoring import score_outcome, scorers_to_run
from medpanel.transcript import Transcript


def judged_protocols() -> list[str]:
    """The protocols with a scorer that calls a judge."""
    return [name for name in PROTOCOLS if any(s.role == "judge" for s in get_protocol(name).scorers)]


async def judge_stored_run(store: Any, run_id: str, judge: Model, *, settings_update: dict | None = None, concurrency: int = 4,
                           on_item: Callable[[dict], None] | None = None, context: RunContext | None = None,
                           cases: list | None = None) -> list[dict]:
    """Judge every finished item of a stored run with `judge`; `settings_update` overrides the run's judge
    settings (judge_mode, judge_prompt_files, judge_max_tokens, grader_max_tokens); `cases` stand in for the
    run's dataset (a run of cases built in memory). Returns one row per item, sorted. A run none of whose
    items a judging scorer applies to (a multiple-choice `single` run) is refused, before anything is recorded."""
    run = store.get_run(run_id)
    if run is None:
        raise UsageError(f"No run '{run_id}' in {store.path}.", "List runs with `medpanel runs`.")
    config = RunConfig.model_validate(run["settings"])
    spec = get_protocol(config.protocol)
    if not any(s.role == "judge" for s in spec.scorers):
        raise UsageError(f"Run {run_id} used the '{spec.name}' protocol, which no judge scores.",
                         f"Judge a run of one of: {', '.join(judged_protocols())}.")
    settings = build_settings(spec.settings, {**config.settings, **(settings_update or {})}, spec.name)
    roles = {"judge": judge}
    judging = scorers_to_run(spec, roles, settings, only=["judge"])
    scorers = [s.name for s in judging]
    context = quiet(context)
    cases = {c.id: c for c in expand_items(spec, cases if cases is not None else load_dataset(config.dataset, config.limit))}
    items = [i for i in store.items(run_id) if i["status"] == "done"]
    lost = sorted({i["item_id"] for i in items} - set(cases))
    if lost:
        raise UsageError(f"The run's dataset '{config.dataset}' no longer holds item(s) {', '.join(lost[:5])}.",
                         "Run the command from the folder the run was started in, with the same dataset files.")
    if items and not any(s.applies(cases[i["item_id"]]) for i in items for s in judging):
        raise UsageError(f"Run {run_id} is a '{spec.name}' run of cases which no judge scores: its judge grades only "
                         f"{', '.join(s.covers for s in judging)}.",
                         f"Judge a run of such cases, or a run of one of: {', '.join(judged_protocols())}.")
    rows: list[dict] = []
    if items:
        store.set_run_role(run_id, "judge", judge.id)  # `show` and the report name the judge that scored it

    async def judge_item(item: dict) -> None:
        item_id, repeat = item["item_id"], item["repeat"]
        events = store.events(run_id, item_id, repeat)
        kept = [e for e in events if (e.get("data") or {}).get("scorer") not in scorers]  # judging again replaces
        outcome = Outcome.model_validate({**(item["outcome"] or {}), "transcript": {"events": kept}})
        fresh = Transcript()
        token = call_scope.set((run_id, item_id, repeat))
        try:
            scores = await score_outcome(spec, cases[item_id], outcome, roles, settings, context, transcript=fresh, only=["judge"])
        finally:
            call_scope.reset(token)
        store.add_scored(run_id, item_id, repeat, scores, [e.model_dump(mode="json") for e in fresh], scorers)
        row = {"item": item_id, "repeat": repeat, "scores": scores,
               "results": {e.role: e.data for e in fresh if e.kind == "score"}}
        rows.append(row)
        if on_item:
            on_item(row)

    await drain(items, judge_item, concurrency)  # a budget stop raises here; items judged so far are stored
    return sorted(rows, key=lambda r: (r["item"], r["repeat"]))
