"""Structured output on servers that take other forms or enforce less: fallback, memory, trimmed schemas, bounds.

The mock server emulates llama-cpp-python's server (it refuses `response_format: json_schema` with an
HTTP 500 that names the field); tests/test_llama_server.py checks the same against the real server.
"""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, Field

from medpanel.errors import ModelCallError
from medpanel.models import build_model
from medpanel.models.capabilities import rejected_parameter
from medpanel.models.retry import RetryPolicy
from medpanel.models.runtime import Runtime
from medpanel.models.scripted import ScriptedModel
from medpanel.models.structured import GRAMMAR_REPETITION_LIMIT, Schema, server_schema
from medpanel.runs.store import Store
from medpanel.testing import MockConfig, MockServer

FAST = RetryPolicy(max_attempts=4, base_delay_s=0.01, max_delay_s=1.0)

# llama-cpp-python 0.3's answer to a json_schema response_format, as it sends it.
LLAMA_500 = ("1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
             "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', 'ctx': {'expected': \"'text' or 'json_object'\"}}")


class Review(BaseModel):
    score: int = Field(ge=1, le=10)
    rationale: str = Field(max_length=1200)
    points: list[str] = Field(default_factory=list, max_length=3)


@pytest.fixture
def llama_like():
    with MockServer(MockConfig(reply="echo", reject_formats=["json_schema"])) as server:
        yield server


async def _complete(spec: str, runtime: Runtime, **options):
    model = build_model(spec, runtime)
    try:
        return await model.complete("Review the plan.", schema=Review, max_tokens=64, **options)
    finally:
        await model.aclose()


def _forms(server: MockServer) -> list[str]:
    return [r["response_format"]["type"] for r in server.requests]


# ------------------------------------------------------------------ rejected forms

async def test_a_rejected_json_schema_falls_back_to_json_object_with_no_retries(llama_like):
    reply = await _complete(f"openai:m@{llama_like.base_url}", Runtime(retry=FAST))
    assert isinstance(reply.parsed, Review)
    # One rejected request, then the schema-enforcing form llama.cpp takes; nothing retried as transient.
    assert _forms(llama_like) == ["json_schema", "json_object"]
    assert llama_like.requests[1]["response_format"]["schema"]["properties"]["score"]["maximum"] == 10


async def test_the_learned_form_is_kept_for_the_run_and_in_the_store(llama_like, tmp_path):
    store = Store(tmp_path / "caps.db")
    runtime = Runtime(cache=store, use_cache=False, retry=FAST)
    model = build_model(f"openai:m@{llama_like.base_url}", runtime)
    await model.complete("first", schema=Review, max_tokens=64)
    await model.complete("second", schema=Review, max_tokens=64)
    await model.aclose()
    assert _forms(llama_like) == ["json_schema", "json_object", "json_object"]  # the run pays once
    assert store.server_capability(llama_like.base_url.rstrip("/"), "m", "response_format")["form"] == "json_object"
    store.close()

    # A later run (a new process: new store handle, new model) sends no rejected request at all.
    llama_like.reset()
    again = Store(tmp_path / "caps.db")
    reply = await _complete(f"openai:m@{llama_like.base_url}", Runtime(cache=again, use_cache=False, retry=FAST))
    again.close()
    assert isinstance(reply.parsed, Review)
    assert _forms(llama_like) == ["json_object"]


async def test_calls_starting_after_a_rejection_lead_with_the_other_form():
    import asyncio

    # Rejections come at once, answers after 1 s: the second call starts while the first still waits.
    with MockServer(MockConfig(reply="echo", reject_formats=["json_schema"], latency_s=1.0)) as server:
        model = build_model(f"openai:m@{server.base_url}", Runtime(retry=FAST))
        first = asyncio.create_task(model.complete("one", schema=Review, max_tokens=64))
        for _ in range(200):  # until the first call was refused and has sent its second form
            if len(server.requests) >= 2:
                break
            await asyncio.sleep(0.01)
        second = asyncio.create_task(model.complete("two", schema=Review, max_tokens=64))
        await asyncio.gather(first, second)
        await model.aclose()
        assert _forms(server) == ["json_schema", "json_object", "json_object"]


async def test_the_memory_is_per_server_and_model(llama_like, tmp_path):
    store = Store(tmp_path / "caps.db")
    await _complete(f"openai:m@{llama_like.base_url}", Runtime(cache=store, use_cache=False, retry=FAST))
    llama_like.reset()
    await _complete(f"openai:other@{llama_like.base_url}", Runtime(cache=store, use_cache=False, retry=FAST))
    store.close()
    assert _forms(llama_like) == ["json_schema", "json_object"]  # another model name is learned on its own


async def test_a_server_refusing_every_form_fails_at_once_with_what_it_said():
    with MockServer(MockConfig(reply="echo", reject_formats=["json_schema", "json_object"])) as server:
        with pytest.raises(ModelCallError) as caught:
            await _complete(f"openai:m@{server.base_url}", Runtime(retry=FAST))
        assert len(server.requests) == 2  # each form once: a named rejection is not transient
    assert caught.value.kind == "unsupported_parameter"
    assert "rejected every structured-output form" in caught.value.problem and "Input should be" in caught.value.problem
    assert "check it is healthy" not in str(caught.value)


async def test_a_rejected_sampling_parameter_is_named_and_not_retried():
    with MockServer(MockConfig(reply="echo", reject_params=["seed"])) as server:
        with pytest.raises(ModelCallError) as caught:
            await _complete(f"openai:m@{server.base_url}", Runtime(retry=FAST), seed=7)
        assert len(server.requests) == 1
    assert caught.value.kind == "unsupported_parameter"
    assert "'seed'" in caught.value.problem and "'seed'" in caught.value.fix


def test_reading_rejections():
    sent = {"model": "m", "messages": [], "response_format": {}, "max_tokens": 9, "seed": 1}
    assert rejected_parameter(500, {"error": {"message": LLAMA_500}}, LLAMA_500, sent) == "response_format"
    openai_style = {"error": {"message": "Unsupported parameter: 'seed' is not supported with this model.", "param": "seed"}}
    assert rejected_parameter(400, openai_style, openai_style["error"]["message"], sent) == "seed"
    # A value problem, a rate limit, or a parameter we did not send: not "unsupported".
    assert rejected_parameter(400, None, "'max_tokens' is too large: 5000. This model's maximum context length is 2048", sent) is None
    assert rejected_parameter(429, None, "response_format not supported while rate limited", sent) is None
    assert rejected_parameter(400, None, "Unsupported parameter: 'top_p'", sent) is None
    assert rejected_parameter(500, None, "CUDA error: out of memory", sent) is None


# ------------------------------------------------------------------ schemas a grammar engine can compile

def test_the_server_copy_drops_only_bounds_beyond_the_grammar_limit():
    schema = {
        "type": "object",
        "properties": {
            "rationale": {"type": "string", "maxLength": 1200, "minLength": 1},
            "code": {"type": "string", "pattern": r"^[A-Z]([0-9]{2})(\.?[0-9A-Z]{1,4})?$", "maxLength": 8},
            "maxLength": {"type": "string", "maxLength": 300},  # a property that happens to be called maxLength
            "codes": {"type": "array", "items": {"type": "string", "maxLength": 5000}, "maxItems": GRAMMAR_REPETITION_LIMIT + 1},
            "kind": {"enum": [{"maxLength": 99999}]},  # data, not a schema: untouched
        },
        "$defs": {"D": {"anyOf": [{"type": "string", "maxLength": 2000}, {"type": "null"}]}},
    }
    before = json.dumps(schema, sort_keys=True)
    out = server_schema(schema)
    assert json.dumps(schema, sort_keys=True) == before  # the full schema is not changed
    props = out["properties"]
    assert props["rationale"] == {"type": "string", "minLength": 1}
    assert props["code"] == {"type": "string", "maxLength": 8}  # llama.cpp's regex translator crashes on this pattern
    assert props["maxLength"] == {"type": "string", "maxLength": 300}
    assert props["codes"] == {"type": "array", "items": {"type": "string"}}
    assert props["kind"] == {"enum": [{"maxLength": 99999}]}
    assert out["$defs"]["D"]["anyOf"][0] == {"type": "string"}
    assert server_schema({"type": "string", "maxLength": GRAMMAR_REPETITION_LIMIT})["maxLength"] == GRAMMAR_REPETITION_LIMIT


async def test_the_server_sees_the_trimmed_schema_and_the_prompt_the_full_one():
    with MockServer(MockConfig(reply="echo")) as server:
        await _complete(f"openai:m@{server.base_url}", Runtime(retry=FAST))
        body = server.requests[0]
    sent = body["response_format"]["json_schema"]["schema"]
    assert "maxLength" not in sent["properties"]["rationale"]  # 1200: beyond what llama.cpp compiles
    assert sent["properties"]["points"]["maxItems"] == 3
    note = body["messages"][0]["content"]
    assert '"maxLength":1200' in note  # the model is still told the real bound


async def test_a_strict_request_sends_its_schema_as_given():
    with MockServer(MockConfig(reply="echo")) as server:
        model = build_model(f"openai:m@{server.base_url}", Runtime(retry=FAST))
        await model.complete("Review the plan.", schema=Review, max_tokens=64, strict_schema=True)
        await model.aclose()
        sent = server.requests[0]["response_format"]["json_schema"]["schema"]
    assert sent["properties"]["rationale"]["maxLength"] == 1200


# ------------------------------------------------------------------ bounds enforced on our side

async def test_an_out_of_range_score_is_reasked_stating_the_bound():
    model = ScriptedModel(['{"score": 89, "rationale": "good"}', '{"score": 8, "rationale": "good"}'], runtime=Runtime(max_reasks=2))
    reply = await model.complete("Score it.", schema=Review)
    assert reply.parsed.score == 8 and reply.reasks == 1
    reask = model.history[1].messages[-1].content
    assert "score must be between 1 and 10 (got 89)" in reask


async def test_a_too_long_rationale_is_reasked_stating_the_limit():
    long = "x" * 1300
    model = ScriptedModel([{"score": 5, "rationale": long, "points": ["a", "b", "c", "d"]}, {"score": 5, "rationale": "short"}],
                          runtime=Runtime(max_reasks=1))
    reply = await model.complete("Score it.", schema=Review)
    assert reply.parsed.rationale == "short"
    reask = model.history[1].messages[-1].content
    assert "rationale must be at most 1200 characters long (got 1300)" in reask
    assert "points must have at most 3 items (got 4)" in reask


def test_plain_json_schemas_state_their_bounds_too():
    schema = Schema({"type": "object", "properties": {"scores": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 10}}},
                     "required": ["scores"]})
    with pytest.raises(ValueError, match=r"scores\.1 must be between 1 and 10 \(got 25\); scores\.2 must be between 1 and 10 \(got 34\)"):
        schema.validate('{"scores": [3, 25, 34]}')
    with pytest.raises(ValueError, match="'scores' is a required property"):
        schema.validate("{}")
