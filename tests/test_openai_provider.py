"""OpenAIModel against the mock server over real loopback HTTP: replies, structure, faults, retries."""

from __future__ import annotations

import time
from email.utils import formatdate
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from medpanel.errors import ModelCallError, TransientModelError, UsageError
from medpanel.models import Image, Message, build_model
from medpanel.models.openai_compat import OpenAIModel, parse_retry_after
from medpanel.models.pricing import PriceTable
from medpanel.models.retry import RetryPolicy
from medpanel.models.runtime import Runtime
from medpanel.testing import MockConfig, MockServer
from medpanel.testing.mock_server import choice_for

FAST = RetryPolicy(max_attempts=4, base_delay_s=0.01, max_delay_s=5.0)


class Plan(BaseModel):
    diagnosis: str
    answer: Literal["A", "B", "C", "D", "E"]
    confidence: float = Field(ge=0, le=1)
    tests: list[str]


@pytest.fixture(scope="module")
def srv():
    with MockServer(MockConfig(reply="echo")) as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh(srv, monkeypatch):
    srv.reset()
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    yield


@pytest.fixture
async def make(srv):
    """Build models against the mock and close them after the test."""
    made: list[OpenAIModel] = []

    def _make(name: str = "mock-model", runtime: Runtime | None = None, query: str = "") -> OpenAIModel:
        model = build_model(f"openai:{name}@{srv.base_url}{query}", runtime or Runtime(retry=FAST))
        made.append(model)
        return model

    yield _make
    for model in made:
        await model.aclose()


# ------------------------------------------------------------------ plain calls


async def test_plain_reply_usage_and_latency(srv, make):
    srv.configure(latency_s=0.05)
    reply = await make().complete([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "is it pneumonia"}])
    assert reply.text == "is it pneumonia"
    assert reply.usage.input_tokens == 5  # "Be brief." + "is it pneumonia"
    assert reply.usage.output_tokens == 3
    assert reply.finish_reason == "stop"
    assert reply.latency_s >= 0.05
    assert reply.attempts == 1 and reply.model == "openai:mock-model"
    sent = srv.last_request
    assert sent["model"] == "mock-model" and sent["temperature"] == 0.0 and sent["max_tokens"] == 512
    assert "response_format" not in sent
    assert "frequency_penalty" not in sent  # unset options are not sent at all


async def test_sampling_options_reach_the_server(srv, make):
    await make().complete("hello", temperature=0.7, top_p=0.9, seed=3, stop=["\n"], frequency_penalty=0.4, presence_penalty=0.1)
    sent = srv.last_request
    assert (sent["temperature"], sent["top_p"], sent["seed"], sent["stop"]) == (0.7, 0.9, 3, ["\n"])
    assert (sent["frequency_penalty"], sent["presence_penalty"]) == (0.4, 0.1)


async def test_price_table_sets_cost(make):
    prices = PriceTable({"mock-model": (1.0, 2.0)})  # USD per 1K tokens
    runtime = Runtime(retry=FAST, prices=prices)
    reply = await make(runtime=runtime).complete("one two three four")
    assert reply.cost_usd == pytest.approx(4 / 1000 * 1.0 + 4 / 1000 * 2.0)
    assert runtime.budget.dollars == pytest.approx(reply.cost_usd)
    assert runtime.budget.input_tokens == 4


async def test_price_params_in_the_spec(make, srv):
    runtime = Runtime(retry=FAST, prices=PriceTable({}))
    reply = await make("priced", runtime=runtime, query="?price_in=0.5&price_out=1.5").complete("a b")
    # The spec prices this server's model only: the same name elsewhere is not priced by it.
    assert runtime.prices.lookup("priced", srv.base_url) == (0.5, 1.5) and runtime.prices.lookup("priced") is None
    assert reply.cost_usd == pytest.approx(2 / 1000 * 0.5 + 2 / 1000 * 1.5)


async def test_choice_reply_follows_the_first_user_message(srv, make):
    srv.configure(reply="choice")
    reply = await make().complete("Which treatment?")
    letter = choice_for({"model": "mock-model", "messages": [{"role": "user", "content": "Which treatment?"}]})
    assert reply.text.endswith(f"Answer: {letter}")


# ------------------------------------------------------------------ structured output


@pytest.mark.parametrize("json_mode", ["json_schema", "json_object"])
async def test_structured_reply_is_parsed(srv, make, json_mode):
    reply = await make(query=f"?json_mode={json_mode}").complete("Assess this case.", schema=Plan)
    assert isinstance(reply.parsed, Plan)
    assert reply.reasks == 0
    sent = srv.last_request
    fmt = sent["response_format"]
    if json_mode == "json_schema":
        assert fmt["type"] == "json_schema"
        assert fmt["json_schema"]["name"] == "Plan" and fmt["json_schema"]["strict"] is False
        assert fmt["json_schema"]["schema"] == Plan.model_json_schema()
    else:
        assert fmt == {"type": "json_object", "schema": Plan.model_json_schema()}
    # The schema is also stated in words, for servers that ignore response_format.
    assert sent["messages"][0]["role"] == "system" and '"diagnosis"' in sent["messages"][0]["content"]


async def test_instruction_joins_an_existing_system_message(srv, make):
    await make().complete([{"role": "system", "content": "You are a cardiologist."}, {"role": "user", "content": "Go."}], schema=Plan)
    messages = srv.last_request["messages"]
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"].startswith("You are a cardiologist.") and "JSON" in messages[0]["content"]


async def test_invalid_json_once_then_valid_reasks(srv, make):
    srv.inject("invalid_json", 1)
    reply = await make().complete("Assess this case.", schema=Plan)
    assert isinstance(reply.parsed, Plan)
    assert reply.reasks == 1
    first, second = srv.requests
    assert len(second["messages"]) == len(first["messages"]) + 2  # the bad answer, then our re-ask
    assert second["messages"][-1]["role"] == "user" and "JSON" in second["messages"][-1]["content"]


async def test_unknown_json_mode_is_a_usage_error(make):
    with pytest.raises(UsageError, match="json_mode"):
        make(query="?json_mode=grammar")


# ------------------------------------------------------------------ transient faults recover


@pytest.mark.parametrize("kind", ["500", "malformed"])
async def test_transient_fault_is_retried(srv, make, kind):
    srv.inject(kind, 2)
    reply = await make().complete("still there?")
    assert reply.text == "still there?"
    assert reply.attempts == 3
    stats = srv.stats()
    assert stats["requests"] == 3 and stats["faults"] == {kind: 2} and stats["successes"] == 1
    assert list(stats["by_hash"].values()) == [3]  # the same request, sent three times


async def test_429_waits_for_retry_after(srv, make):
    srv.configure(retry_after_s=1)
    srv.inject("429", 1)
    started = time.perf_counter()
    reply = await make().complete("rate me")
    elapsed = time.perf_counter() - started
    assert reply.text == "rate me" and reply.attempts == 2
    assert elapsed >= 1.0  # FAST's own backoff would be ~0.01 s: this is the server's Retry-After
    assert srv.stats()["requests"] == 2


async def test_timeout_is_retried(srv, make):
    srv.configure(hang_s=2)
    srv.inject("timeout", 1)
    started = time.perf_counter()
    reply = await make(runtime=Runtime(retry=FAST, timeout_s=0.5)).complete("are you stuck")
    elapsed = time.perf_counter() - started
    assert reply.text == "are you stuck" and reply.attempts == 2
    assert 0.5 <= elapsed < 2.0  # gave up on the hung request instead of waiting it out
    assert srv.stats()["faults"] == {"timeout": 1} and srv.stats()["requests"] == 2


async def test_malformed_structured_reply_recovers(srv, make):
    srv.inject("malformed", 1)
    reply = await make().complete("Assess this case.", schema=Plan)
    assert isinstance(reply.parsed, Plan) and reply.attempts == 2 and reply.reasks == 0


# ------------------------------------------------------------------ permanent failures


async def test_retry_cap_gives_up_after_max_attempts(srv, make):
    srv.configure(fault_rates={"500": 1.0})
    policy = RetryPolicy(max_attempts=3, base_delay_s=0.01)
    with pytest.raises(ModelCallError) as caught:
        await make(runtime=Runtime(retry=policy)).complete("hello")
    assert not isinstance(caught.value, TransientModelError)
    assert caught.value.kind == "server_error"
    assert "3 attempts" in str(caught.value)
    assert srv.stats()["requests"] == 3


async def test_404_is_not_retried(srv, make):
    with pytest.raises(ModelCallError) as caught:
        await make("missing").complete("hello")
    assert not isinstance(caught.value, TransientModelError)
    assert caught.value.kind == "not_found"
    assert "openai:missing" in caught.value.problem and "model name" in caught.value.fix
    assert srv.stats()["requests"] == 1


async def test_connection_refused_is_transient():
    with MockServer() as gone:
        url = gone.base_url
    model = OpenAIModel("m", base_url=url, api_key="x", runtime=Runtime(retry=RetryPolicy(max_attempts=2, base_delay_s=0.01)))
    try:
        with pytest.raises(ModelCallError) as caught:
            await model.complete("anyone?")
    finally:
        await model.aclose()
    assert caught.value.kind == "connection"


def test_undecodable_responses_are_malformed():
    model = OpenAIModel("m", base_url="http://127.0.0.1:9/v1", api_key="x")
    # The transport hands back the raw text of a body that is not JSON, or the decoded JSON of whatever shape.
    for response in ("<html>oops</html>", {"choices": []}, {"choices": [{"message": None}]}, {"choices": [{"message": {"content": 3}}]},
                     ["not", "an", "object"], {"choices": "many"}):
        with pytest.raises(TransientModelError) as caught:
            model.to_generation(response)
        assert caught.value.kind == "malformed_response"


def test_parse_retry_after():
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after": "0.5"}) == 0.5
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert 8 <= parse_retry_after({"retry-after": formatdate(time.time() + 10, usegmt=True)}) <= 10
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


# ------------------------------------------------------------------ images


def _slide_message() -> Message:
    pixel = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    return Message(role="user", content="What does the slide show?", images=[Image(url=pixel, caption="CT chest, axial")])


async def test_vision_model_sends_image_parts(srv, make):
    await make(query="?vision=true").complete([_slide_message()])
    content = srv.last_request["messages"][0]["content"]
    assert isinstance(content, list)
    assert content[0]["type"] == "text" and "CT chest, axial" in content[0]["text"]
    assert content[1]["type"] == "image_url" and content[1]["image_url"]["url"].startswith("data:image/png;base64,")


async def test_blind_model_gets_captions(srv, make):
    model = make()
    assert model.supports_vision is False
    await model.complete([_slide_message()])
    content = srv.last_request["messages"][0]["content"]
    assert isinstance(content, str)
    assert "What does the slide show?" in content and "[Image 1: CT chest, axial]" in content


# ------------------------------------------------------------------ spec handling


def test_missing_key_without_base_url(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(UsageError) as caught:
        build_model("openai:gpt-4o-mini")
    assert "OPENAI_API_KEY" in str(caught.value)
    monkeypatch.setenv("MY_KEY", "sk-test")
    model = build_model("openai:gpt-4o-mini?key_env=MY_KEY")
    assert model.api_key == "sk-test"
    with pytest.raises(UsageError, match="MY_OTHER_KEY"):
        build_model("openai:gpt-4o-mini?key_env=MY_OTHER_KEY")


def test_spec_params_are_checked(srv):
    with pytest.raises(UsageError) as caught:
        build_model(f"openai:m@{srv.base_url}?visoin=true")
    assert "visoin" in caught.value.problem and "vision" in caught.value.fix
    with pytest.raises(UsageError):
        build_model(f"openai:m@{srv.base_url}?vision=maybe")
    with pytest.raises(UsageError):
        build_model(f"openai:m@{srv.base_url}?price_in=cheap")


async def test_build_model_through_registry(srv, make):
    model = build_model("openai:m@" + srv.base_url)
    try:
        assert isinstance(model, OpenAIModel) and model.base_url == srv.base_url
        assert model.api_key == "not-needed"  # a local server with no key set
        assert (await model.complete("via the registry")).text == "via the registry"
    finally:
        await model.aclose()


async def test_reasoning_models_get_max_completion_tokens_and_no_temperature(srv, make):
    await make("o3-mini").complete("hello", max_tokens=77, temperature=0.0)
    sent = srv.last_request
    assert sent["max_completion_tokens"] == 77 and "max_tokens" not in sent and "temperature" not in sent


async def test_the_same_model_name_on_two_servers_is_cached_apart(srv):
    from medpanel.runs.store import Store

    import tempfile
    from pathlib import Path

    store = Store(Path(tempfile.mkdtemp()) / "c.db")
    a = OpenAIModel("m", base_url=srv.base_url, api_key="x", runtime=Runtime(cache=store))
    b = OpenAIModel("m", base_url=srv.base_url.replace("127.0.0.1", "localhost"), api_key="x", runtime=Runtime(cache=store))
    from medpanel.models.base import Request
    from medpanel.models.messages import Message

    request = Request(messages=[Message(role="user", content="hi")])
    assert a.cache_key(request) != b.cache_key(request)
    await a.aclose()
    await b.aclose()
