"""The benchmark runner with scripted models: concurrency, failures recorded, resume, budget stop."""

from __future__ import annotations

import asyncio

import pytest


from medpanel.cases import Case, Reference
from medpanel.errors import ModelCallError
from medpanel.models import Runtime
from medpanel.models.budget import Budget
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import Panel
from medpanel.runs.runner import RunConfig, run_benchmark
from medpanel.runs.summary import summarize


def mcq(n: int) -> list[Case]:
    return [Case(id=f"q{i}", question=f"Question {i}?", options={"A": "yes", "B": "no"}, reference=Reference(answer="A" if i % 2 else "B")) for i in range(n)]


def answer_by_question(fail_on: set[str] = frozenset()):
    """Answers A for odd questions, B for even ones; raises a model error on the named questions."""
    def respond(request):
        text = request.messages[-1].content
        number = int(text.split("?")[0].split()[-1])
        if f"q{number}" in fail_on:
            raise ModelCallError("server refused", kind="bad_request")
        return f"Reasoning.\nAnswer: {'A' if number % 2 else 'B'}"
    return respond


def config(**kw) -> RunConfig:
    return RunConfig(dataset="inline", protocol="single", models=["scripted:x"], **kw)


async def test_run_scores_every_item_and_records_failures(store):
    runtime = Runtime(cache=store)
    panel = Panel.of([ScriptedModel(responder=answer_by_question({"q3"}), runtime=runtime)])
    result = await run_benchmark(store, config(concurrency=4), runtime, panel=panel, cases=mcq(10))
    assert result.status == "done_with_failures"  # one item failed: the run says so
    items = {i["item_id"]: i for i in store.items(result.run_id)}
    assert len(items) == 10
    assert items["q3"]["status"] == "failed" and items["q3"]["error_kind"] == "bad_request"
    summary = summarize(store, result.run_id)
    # The failed item is not scored as wrong: accuracy is over the 9 that finished.
    assert summary["scores"]["accuracy"]["n"] == 9 and summary["scores"]["accuracy"]["mean"] == 1.0
    assert summary["items"] == {"done": 9, "failed": 1, "expected": None}
    assert summary["calls"]["calls"] == 10
    assert store.events(result.run_id, "q0")[0]["speaker"] == "scripted:fake"


async def test_resume_runs_only_missing_and_failed_items(store):
    runtime = Runtime(cache=store)
    first = Panel.of([ScriptedModel(responder=answer_by_question({"q1", "q2"}), runtime=runtime)])
    result = await run_benchmark(store, config(), runtime, panel=first, cases=mcq(5))
    model = ScriptedModel(responder=answer_by_question(), runtime=runtime)
    again = await run_benchmark(store, config(), runtime, run_id=result.run_id, resume=True, panel=Panel.of([model]), cases=mcq(5))
    assert again.progress.skipped == 3 and again.progress.done == 2
    assert sorted(r.messages[-1].content.split("?")[0][-1] for r in model.history) == ["1", "2"]
    assert all(i["status"] == "done" for i in store.items(result.run_id))


async def test_repeats_make_distinct_items(store):
    runtime = Runtime(cache=store)
    panel = Panel.of([ScriptedModel(responder=answer_by_question(), runtime=runtime)])
    result = await run_benchmark(store, config(repeats=3), runtime, panel=panel, cases=mcq(4))
    assert len(store.items(result.run_id)) == 12


async def test_budget_stop_keeps_finished_items_and_resume_completes(store):
    runtime = Runtime(cache=store, budget=Budget(max_calls=3))
    panel = Panel.of([ScriptedModel(responder=answer_by_question(), runtime=runtime)])
    result = await run_benchmark(store, config(concurrency=1), runtime, panel=panel, cases=mcq(6))
    assert result.status == "stopped" and result.error.cap == "calls"
    assert store.get_run(result.run_id)["status"] == "stopped"
    assert len(store.finished_items(result.run_id)) == 3
    runtime2 = Runtime(cache=store)
    panel2 = Panel.of([ScriptedModel(responder=answer_by_question(), runtime=runtime2)])
    done = await run_benchmark(store, config(concurrency=1), runtime2, run_id=result.run_id, resume=True, panel=panel2, cases=mcq(6))
    assert done.status == "done" and len(store.finished_items(result.run_id)) == 6


async def test_concurrency_is_bounded(store):
    in_flight, peak = 0, 0

    async def slow(request):
        return "Answer: A"

    class Counting(ScriptedModel):
        async def generate(self, request):
            nonlocal in_flight, peak
            in_flight += 1
            peak = max(peak, in_flight)
            await asyncio.sleep(0.01)
            in_flight -= 1
            return await super().generate(request)

    runtime = Runtime(cache=store)
    panel = Panel.of([Counting(responder=lambda r: "Answer: A", runtime=runtime)])
    await run_benchmark(store, config(concurrency=3), runtime, panel=panel, cases=mcq(12))
    assert peak == 3


async def test_a_case_missing_fields_is_refused_before_any_call_with_fix(store):
    # (Issue 9: a dataset lacking what its protocol reads used to run, each item failing; now it is refused.)
    import pytest

    from medpanel.errors import UsageError

    runtime = Runtime(cache=store)
    model = ScriptedModel(responder=lambda r: "Answer: A", runtime=runtime)
    with pytest.raises(UsageError, match="empty: no question, options") as err:
        await run_benchmark(store, config(), runtime, panel=Panel.of([model]), cases=[Case(id="empty"), *mcq(2)])
    assert "1 of 3 items" in err.value.problem and "needs question, options" in err.value.fix
    assert model.history == [] and store.list_runs() == []


async def test_breakdown_groups_scores_by_outcome_data(store):
    from medpanel.runs.summary import breakdown

    runtime = Runtime(cache=store)
    panel = Panel.of([ScriptedModel(responder=lambda r: "Answer: A", runtime=runtime)])
    # Odd questions have gold A (right), even ones gold B (wrong); group by the parsed flag the protocol records.
    result = await run_benchmark(store, config(), runtime, panel=panel, cases=mcq(4))
    groups = breakdown(store, result.run_id, "parsed")
    assert list(groups) == ["True"]
    assert groups["True"]["accuracy"]["n"] == 4 and groups["True"]["accuracy"]["mean"] == 0.5


async def test_bad_protocol_settings_name_the_field_and_the_known_ones(store):
    from medpanel.errors import UsageError

    runtime = Runtime(cache=store)
    panel = Panel.of([ScriptedModel(responder=lambda r: "Answer: A", runtime=runtime)])
    with pytest.raises(UsageError, match="max_tokens: Input should be a valid integer") as info:
        await run_benchmark(store, config(settings={"max_tokens": "many"}), runtime, panel=panel, cases=mcq(1))
    assert "temperature" in info.value.fix


def test_one_item_of_a_named_dataset(shared_data):
    from medpanel.cases import load_dataset
    from medpanel.errors import UsageError

    (by_index,) = load_dataset("medqa:2")
    (by_id,) = load_dataset("medqa:medqa-2")
    assert by_index.id == by_id.id == "medqa-2"
    with pytest.raises(UsageError, match="has no item 'nope'"):
        load_dataset("medqa:nope")


def test_counts_get_a_t_interval_even_when_they_are_all_ones():
    from medpanel.runs.summary import mean_interval

    assert mean_interval([1.0, 1.0, 0.0, 1.0], "accuracy")["method"] == "wilson"  # a proportion
    counted = mean_interval([1.0, 1.0, 1.0], "turns")  # three consults of one turn each
    assert counted["method"] == "t" and counted["low"] == counted["high"] == 1.0  # no spread, no width


async def test_sampled_repeats_are_distinct_draws_and_greedy_repeats_share_the_cache(store):
    import itertools

    draws = itertools.count()
    runtime = Runtime(cache=store)
    model = ScriptedModel(responder=lambda r: f"Answer: {'AB'[next(draws) % 2]}", cacheable=True, runtime=runtime)
    sampled = await run_benchmark(store, config(repeats=3, concurrency=1, settings={"temperature": 0.9}), runtime,
                                  panel=Panel.of([model]), cases=mcq(2))
    assert store.call_counts(sampled.run_id) == {"calls": 6, "cached_calls": 0}  # 2 items x 3 repeats, all drawn
    greedy = await run_benchmark(store, config(repeats=3, concurrency=1), runtime, panel=Panel.of([model]), cases=mcq(2))
    assert store.call_counts(greedy.run_id) == {"calls": 2, "cached_calls": 4}  # greedy decoding repeats itself


async def test_a_failed_item_still_records_what_it_spent(store, tmp_path):
    from pydantic import BaseModel as Schema

    from medpanel.models.pricing import PriceTable

    class Letter(Schema):
        letter: str

    async def never_valid(case, panel, settings, context=None):
        _, model = panel.first()
        await model.complete("pick", schema=Letter)  # three replies, none valid: StructuredOutputError
        raise AssertionError("unreachable")

    from medpanel.protocols.base import ProtocolSpec
    from medpanel.protocols.single import SingleSettings

    spec = ProtocolSpec(name="never", run=never_valid, settings=SingleSettings, scorers=(), description="")
    runtime = Runtime(cache=store, max_reasks=2, prices=PriceTable({"fake": (1.0, 1.0)}))
    panel = Panel.of([ScriptedModel(responder=lambda r: "not json at all", runtime=runtime)])
    result = await run_benchmark(store, config(), runtime, protocol=spec, panel=panel, cases=mcq(1))
    (item,) = store.items(result.run_id)
    assert item["status"] == "failed" and item["error_kind"] == "invalid_output"
    # 3 attempts; each: 1 prompt word + re-ask text in, 4 words out, at $1 per 1K tokens either way.
    assert item["calls"] == 3 and item["output_tokens"] == 12
    assert item["cost_usd"] == pytest.approx((item["input_tokens"] + item["output_tokens"]) / 1000)
