"""The shared model path (cache, budget, retries, structured output) tested through the scripted model."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from medpanel.errors import BudgetExceeded, ModelCallError, StructuredOutputError, TransientModelError, UsageError
from medpanel.models import Runtime
from medpanel.models.budget import Budget
from medpanel.models.pricing import PriceTable
from medpanel.models.retry import RetryPolicy
from medpanel.models.scripted import ScriptedModel

FAST_RETRY = RetryPolicy(max_attempts=3, base_delay_s=0.001, max_delay_s=0.01)


class Choice(BaseModel):
    answer: str
    confidence: int


async def test_scripted_queue_history_and_echo():
    model = ScriptedModel(["one", {"answer": "B"}])
    assert (await model.complete("q1")).text == "one"
    assert (await model.complete("q2")).text == '{"answer": "B"}'
    assert [r.messages[-1].content for r in model.history] == ["q1", "q2"]
    with pytest.raises(UsageError, match="no replies left"):
        await model.complete("q3")
    assert (await ScriptedModel().complete("hello")).text == "hello"


async def test_structured_output_reasks_then_validates():
    model = ScriptedModel(["not json", '{"answer": "C", "confidence": 4}'], runtime=Runtime(max_reasks=2))
    reply = await model.complete("Which?", schema=Choice)
    assert reply.parsed == Choice(answer="C", confidence=4)
    assert reply.reasks == 1
    # The re-ask shows the model its bad reply and says why it was refused.
    second = model.history[1].messages
    assert second[-2].role == "assistant" and second[-2].content == "not json"
    assert "not valid JSON" in second[-1].content


async def test_structured_output_gives_up_after_bounded_reasks():
    model = ScriptedModel(['{"answer": 1}'] * 3, runtime=Runtime(max_reasks=2))
    with pytest.raises(StructuredOutputError) as info:
        await model.complete("Which?", schema=Choice)
    assert len(model.history) == 3  # first try + 2 re-asks, then stop
    assert "confidence" in info.value.problem
    assert info.value.kind == "invalid_output"


async def test_json_schema_dict_and_code_fence():
    schema = {"type": "object", "properties": {"codes": {"type": "array", "items": {"type": "string"}}}, "required": ["codes"]}
    model = ScriptedModel(['```json\n{"codes": ["I10", "E11.9"]}\n```'])
    assert (await model.complete("codes?", schema=schema)).parsed == {"codes": ["I10", "E11.9"]}


async def test_transient_errors_are_retried_then_capped():
    flaky = ScriptedModel([TransientModelError("busy", kind="rate_limit", retry_after=0), "ok"], runtime=Runtime(retry=FAST_RETRY))
    reply = await flaky.complete("hi")
    assert reply.text == "ok" and reply.attempts == 2
    broken = ScriptedModel([TransientModelError("down", kind="server_error")] * 5, runtime=Runtime(retry=FAST_RETRY))
    with pytest.raises(ModelCallError, match="gave up after 3 attempts") as info:
        await broken.complete("hi")
    assert info.value.kind == "server_error"
    assert len(broken.history) == 3


async def test_permanent_errors_are_not_retried():
    model = ScriptedModel([ModelCallError("bad request", kind="bad_request"), "never"], runtime=Runtime(retry=FAST_RETRY))
    with pytest.raises(ModelCallError, match="bad request"):
        await model.complete("hi")
    assert len(model.history) == 1


async def test_cache_serves_identical_calls_and_keys_samples(store):
    model = ScriptedModel(["first", "second", "third", "fourth"], cacheable=True, runtime=Runtime(cache=store))
    a = await model.complete("same", max_tokens=10)
    b = await model.complete("same", max_tokens=10)
    assert (a.text, a.cached, b.text, b.cached) == ("first", False, "first", True)
    c = await model.complete("same", max_tokens=11)  # a semantic option changes the key
    assert c.text == "second" and not c.cached
    s0 = await model.complete("same", temperature=0.7, sample_index=0)
    s1 = await model.complete("same", temperature=0.7, sample_index=1)
    assert not s0.cached and not s1.cached  # distinct samples are distinct calls
    # Cache bypass: still recorded, never served.
    fresh = ScriptedModel(["new"], cacheable=True, runtime=Runtime(cache=store, use_cache=False))
    fresh.name = model.name
    assert (await fresh.complete("same", max_tokens=10)).text == "new"


class DictCache:
    """A cache of the CallCache protocol's plain methods only (no coroutines), as a user might write one."""

    def __init__(self) -> None:
        self.records: dict = {}
        self.log: list = []

    def get_call(self, key):
        return self.records.get(key)

    def put_call(self, key, record, scope=None):
        self.records[key] = record
        self.log.append((key, False))

    def log_call(self, key, model, cached, scope, error=None, usage=(0, 0, 0.0), served_model=None, truncated=None):
        self.log.append((key, cached))


async def test_a_cache_with_only_the_plain_methods_stores_serves_and_logs_every_call():
    cache = DictCache()
    model = ScriptedModel(["first", "second"], cacheable=True, runtime=Runtime(cache=cache))
    a = await model.complete("same", max_tokens=10)
    b = await model.complete("same", max_tokens=10)
    assert (a.text, a.cached, b.text, b.cached) == ("first", False, "first", True)
    uncached = ScriptedModel(["x"], runtime=Runtime(cache=cache))  # not cacheable: logged, never stored
    await uncached.complete("other")
    assert [cached for _, cached in cache.log] == [False, True, False] and len(cache.records) == 1


async def test_budget_caps_stop_loudly_with_what_was_spent():
    runtime = Runtime(budget=Budget(max_calls=2))
    model = ScriptedModel(["a", "b", "c"], runtime=runtime)
    await model.complete("1")
    await model.complete("2")
    with pytest.raises(BudgetExceeded) as info:
        await model.complete("3")
    assert info.value.cap == "calls" and info.value.spent["calls"] == 2
    assert "--resume" in info.value.fix


async def test_price_table_costs_and_dollar_cap(tmp_path):
    prices = tmp_path / "prices.yaml"
    prices.write_text("fake: {input: 1.0, output: 2.0}\n")
    # A call reserves its worst case first: ~7 prompt tokens (estimated) + max_tokens=1 -> $0.009 fits $0.012.
    runtime = Runtime(prices=PriceTable.default().load(prices), budget=Budget(max_dollars=0.012))
    model = ScriptedModel(["w1 w2"], responder=None, runtime=runtime)
    reply = await model.complete("p1 p2 p3", max_tokens=1)  # 3 words in, 2 words out in the scripted model's count
    assert reply.cost_usd == pytest.approx(3 / 1000 * 1.0 + 2 / 1000 * 2.0)
    with pytest.raises(BudgetExceeded, match="dollars"):  # $0.007 spent + ~$0.008 worst case > $0.012: not sent
        await model.complete("again", max_tokens=1)
    assert PriceTable.default().lookup("gpt-4o-mini-2024-07-18") == (0.00015, 0.0006)


def test_bad_price_table_names_the_problem(tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text('{"m": {"input": "cheap"}}')
    with pytest.raises(UsageError, match="numeric 'input' and 'output'"):
        PriceTable().load(bad)
