"""Judging during a run and with `medpanel judge run` afterwards store identical records (issue 10)."""

from __future__ import annotations

import pytest

from medpanel.cases.model import Case, Reference
from medpanel.models.runtime import Runtime
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Panel
from medpanel.runs.judging import judge_stored_run
from medpanel.runs.runner import RunConfig, run_benchmark
from medpanel.runs.store import Store

CASES = [
    Case(id=f"c{k}", summary=f"A {60 + k}-year-old man with prostate cancer, Gleason {6 + k % 3}, PSA {8 + k}.",
         reference=Reference(conclusion="Offer radiotherapy without ADT. Surgery is not recommended."))
    for k in range(3)
]
MEETING = ("<discussion>\n<turn 1> Moderator: We discuss a man with prostate cancer.\n<turn 2> Radiologist: The MRI shows a "
           "single lesion.\n<turn 3> Radiation Oncologist: Radiotherapy fits.\n</discussion>\n"
           "<conclusion>Offer radiotherapy. Surgery is not advised.</conclusion>")
VERDICTS = {
    "AlignmentVerdict": {"conclusion_alignment": {"score": 4, "rationale": "Same plan."}},
    "DecisionScope": {"therapy": "positive", "surgery": "negative", "next_action": "absent", "clinical_trial": "absent", "rationale": "RT yes."},
    "FourDecisions": {"therapy": 4, "surgery": 5, "next_action": -1, "clinical_trial": -1, "rationale": "Matches."},
    "ConsistencyVerdict": {"consistency": 5, "rationale": "The discussion supports it."},
}


def judge(runtime: Runtime) -> ScriptedModel:
    return ScriptedModel(responder=lambda request: VERDICTS[request.schema_name], name="judge", runtime=runtime)


def stored(store: Store, run_id: str) -> dict:
    """Everything stored about a run's items, without what depends on the clock (times, latencies)."""
    volatile = {"at", "latency_s"}
    items = {}
    for item in store.items(run_id):
        key = (item["item_id"], item["repeat"])
        events = [{k: ({dk: dv for dk, dv in v.items() if dk not in volatile} if k == "data" else v)
                   for k, v in e.items() if k not in volatile} for e in store.events(run_id, *key)]
        row = {k: v for k, v in item.items() if k not in {"run_id", "started_at", "finished_at"}}
        items[key] = {"item": row, "events": events}
    for score in store.scores(run_id):
        items[(score["item_id"], score["repeat"])].setdefault("scores", {})[score["name"]] = score["value"]
    return items


async def test_judged_during_the_run_and_afterwards_are_stored_alike(tmp_path):
    during, later = Store(tmp_path / "during.db"), Store(tmp_path / "later.db")
    config = RunConfig(dataset="inline", protocol="board", models=["writer"], concurrency=2)

    runtime = Runtime(cache=during)
    writer = ScriptedModel(responder=lambda r: MEETING, name="writer", runtime=runtime)
    first = await run_benchmark(during, config.model_copy(update={"roles": {"judge": "judge"}}), runtime,
                                panel=Panel.of([writer], names=["writer"], roles={"judge": judge(runtime)}), cases=CASES)

    runtime = Runtime(cache=later)
    writer = ScriptedModel(responder=lambda r: MEETING, name="writer", runtime=runtime)
    second = await run_benchmark(later, config, runtime, panel=Panel.of([writer], names=["writer"]), cases=CASES)
    assert not any(e["kind"] == "score" for e in later.events(second.run_id, "c0"))  # not judged yet
    rows = await judge_stored_run(later, second.run_id, judge(runtime), concurrency=2, cases=CASES)

    judged_during, judged_later = stored(during, first.run_id), stored(later, second.run_id)
    assert judged_during == judged_later
    assert judged_later[("c0", 0)]["scores"]["conclusion_alignment"] == 4.0
    assert judged_later[("c0", 0)]["item"]["calls"] == 1 + 4  # the writer, then scope, alignment, decisions, consistency
    assert [r["item"] for r in rows] == ["c0", "c1", "c2"]
    assert later.get_run(second.run_id)["settings"]["roles"] == {"judge": "scripted:judge"}  # recorded, as show reads it


async def test_judging_again_replaces_the_earlier_judgement(tmp_path):
    store = Store(tmp_path / "again.db")
    runtime = Runtime(cache=store)
    writer = ScriptedModel(responder=lambda r: MEETING, name="writer", runtime=runtime)
    result = await run_benchmark(store, RunConfig(dataset="inline", protocol="board", models=["writer"]), runtime,
                                 panel=Panel.of([writer], names=["writer"]), cases=CASES[:1])
    await judge_stored_run(store, result.run_id, judge(runtime), cases=CASES[:1])
    once = [e for e in store.events(result.run_id, "c0") if e["kind"] == "score"]
    await judge_stored_run(store, result.run_id, judge(runtime), cases=CASES[:1])
    twice = [e for e in store.events(result.run_id, "c0") if e["kind"] == "score"]
    assert len(once) == len(twice) == 3  # alignment, four decisions, consistency: once each, not appended twice
    assert {e["data"]["scorer"] for e in twice} == {once[0]["data"]["scorer"]}


async def test_a_protocol_no_judge_scores_is_refused(tmp_path):
    from medpanel.errors import UsageError

    store = Store(tmp_path / "mcq.db")
    runtime = Runtime(cache=store)
    mcq = [Case(id="q", question="Q?", options={"A": "a", "B": "b"}, reference=Reference(answer="A"))]
    result = await run_benchmark(store, RunConfig(dataset="inline", protocol="single", models=["m"]), runtime,
                                 panel=Panel.of([ScriptedModel(["Answer: A"], runtime=runtime)], names=["m"]), cases=mcq)
    with pytest.raises(UsageError, match="which no judge scores"):  # single's judge grades HealthBench rubrics only
        await judge_stored_run(store, result.run_id, judge(runtime), cases=mcq)
