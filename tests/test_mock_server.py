"""The mock OpenAI-compatible server, exercised over real loopback HTTP with plain urllib."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from enum import Enum
from typing import Literal, Optional

import jsonschema
import pytest
from pydantic import BaseModel, Field

from medpanel.models.retry import RetryPolicy
from medpanel.models.runtime import Runtime
from medpanel.testing import MockConfig, MockServer, fake_from_schema
from medpanel.testing.mock_server import choice_for, request_hash


@pytest.fixture(scope="module")
def srv():
    with MockServer(MockConfig(reply="echo")) as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh(srv):
    srv.reset()
    yield


def call(url: str, body: object | None = None, method: str | None = None, timeout: float = 5.0):
    """(status, headers, raw body bytes) for one HTTP call; errors are returned, not raised."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method or ("POST" if data is not None else "GET"), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()


def chat(srv: MockServer, content: str = "hello there", model: str = "m", **extra):
    body = {"model": model, "messages": [{"role": "user", "content": content}], **extra}
    return call(srv.base_url + "/chat/completions", body)


class Severity(str, Enum):
    low = "low"
    high = "high"


class Finding(BaseModel):
    name: str = Field(min_length=3, max_length=40)
    severity: Severity
    score: int = Field(ge=1, le=5)


class Verdict(BaseModel):
    answer: Literal["A", "B", "C", "D", "E"]
    confidence: float = Field(gt=0, lt=1)
    urgent: bool
    findings: list[Finding] = Field(min_length=1, max_length=3)
    note: Optional[str] = None
    primary: Finding


# ------------------------------------------------------------------ ordinary answers


def test_echo_reply_with_word_count_usage(srv):
    status, _, raw = chat(srv, "the patient has a cough")
    assert status == 200
    data = json.loads(raw)
    assert data["object"] == "chat.completion"
    assert data["model"] == "m"
    assert data["choices"][0]["message"] == {"role": "assistant", "content": "the patient has a cough"}
    assert data["choices"][0]["finish_reason"] == "stop"
    assert data["usage"] == {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}
    assert srv.stats()["successes"] == 1


def test_the_completions_route_answers_only_a_post_and_the_other_routes_still_answer(srv):
    # The completions route bypasses the router (mock_app.app): any other method or path goes through it.
    assert call(srv.base_url + "/chat/completions", method="GET")[0] == 405
    assert call(srv.base_url + "/chat/completions/extra", {"model": "m", "messages": []})[0] == 404
    assert chat(srv)[0] == 200
    assert json.loads(call(srv.url + "/_stats")[2])["successes"] == 1


def test_models_endpoint_lists_configured_models(srv):
    status, _, raw = call(srv.base_url + "/models")
    assert status == 200
    assert [m["id"] for m in json.loads(raw)["data"]] == ["mock-model"]


def test_choice_is_fixed_by_first_user_message_and_model(srv):
    srv.configure(reply="choice")
    base = [{"role": "user", "content": "Which drug first?"}]
    longer = base + [{"role": "assistant", "content": "?"}, {"role": "user", "content": "Please answer again."}]
    texts = []
    for messages in (base, longer, base):
        _, _, raw = call(srv.base_url + "/chat/completions", {"model": "m", "messages": messages})
        texts.append(json.loads(raw)["choices"][0]["message"]["content"])
    letter = choice_for({"model": "m", "messages": base})
    assert all(t.endswith(f"Answer: {letter}") for t in texts)
    # Different questions spread over the letters rather than always giving one.
    letters = {choice_for({"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]}) for i in range(40)}
    assert letters == set("ABCDE")


def test_scripted_and_callable_replies():
    with MockServer(reply="scripted", replies=["first", {"answer": "B"}]) as server:
        assert json.loads(chat(server)[2])["choices"][0]["message"]["content"] == "first"
        assert json.loads(json.loads(chat(server)[2])["choices"][0]["message"]["content"]) == {"answer": "B"}
        status, _, raw = chat(server)
        assert status == 400 and "used up" in json.loads(raw)["error"]["message"]
        server.configure(reply=lambda body: body["model"].upper())
        assert json.loads(chat(server, model="shout")[2])["choices"][0]["message"]["content"] == "SHOUT"


# ------------------------------------------------------------------ structured output


def test_fake_from_schema_satisfies_a_pydantic_schema():
    schema = Verdict.model_json_schema()
    assert "$defs" in schema  # the generator must follow $ref, or this test proves little
    for seed in ("case one", "case two", "case three"):
        value = fake_from_schema(schema, seed)
        jsonschema.validate(value, schema)
        Verdict.model_validate(value)
        assert fake_from_schema(schema, seed) == value  # deterministic
    assert len({json.dumps(fake_from_schema(schema, f"s{i}")) for i in range(5)}) > 1


def test_structured_request_gets_schema_conforming_json(srv):
    schema = Verdict.model_json_schema()
    for fmt in (
        {"type": "json_schema", "json_schema": {"name": "Verdict", "schema": schema, "strict": False}},
        {"type": "json_object", "schema": schema},
    ):
        status, _, raw = chat(srv, "Assess the case", response_format=fmt)
        assert status == 200
        Verdict.model_validate_json(json.loads(raw)["choices"][0]["message"]["content"])


# ------------------------------------------------------------------ errors and faults


def test_bad_body_is_400_and_missing_model_is_404(srv):
    status, _, raw = call(srv.base_url + "/chat/completions", b"{not json")
    assert status == 400 and "error" in json.loads(raw)
    status, _, raw = chat(srv, model="missing")
    assert status == 404
    assert json.loads(raw)["error"]["code"] == "model_not_found"
    assert srv.stats()["errors"] == {"400": 1, "404": 1}


def test_injected_faults_over_http(srv):
    status, _, _ = call(srv.url + "/_inject", {"kind": "429", "count": 1})
    assert status == 200
    srv.inject("500")
    srv.inject("malformed")
    status, headers, _ = chat(srv)
    assert status == 429 and headers["Retry-After"] == "1"
    status, _, raw = chat(srv)
    assert status == 500 and json.loads(raw)["error"]["type"] == "server_error"
    status, _, raw = chat(srv)
    assert status == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)
    assert chat(srv)[0] == 200  # the queue is used up: back to normal
    stats = srv.stats()
    assert stats["faults"] == {"429": 1, "500": 1, "malformed": 1}
    assert stats["successes"] == 1 and stats["requests"] == 4
    # Four tries of one request share one hash.
    body = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}
    assert stats["by_hash"] == {request_hash(body): 4}
    assert call(srv.url + "/_inject", {"kind": "nonsense"})[0] == 400


def test_invalid_json_fault_only_affects_structured_requests(srv):
    fmt = {"type": "json_schema", "json_schema": {"name": "V", "schema": Verdict.model_json_schema()}}
    srv.inject("invalid_json", 2)
    content = json.loads(chat(srv, response_format=fmt)[2])["choices"][0]["message"]["content"]
    with pytest.raises(ValueError):
        json.loads(content)
    # A plain request cannot be "invalid JSON": it is answered normally.
    assert json.loads(chat(srv, "plain please")[2])["choices"][0]["message"]["content"] == "plain please"


def test_timeout_fault_hangs(srv):
    srv.configure(hang_s=0.4)
    srv.inject("timeout")
    started = time.perf_counter()
    assert chat(srv)[0] == 200
    assert time.perf_counter() - started >= 0.4


def test_seeded_fault_rates_repeat():
    def statuses(server):
        return [chat(server, f"q{i}")[0] for i in range(30)]

    with MockServer(fault_rates={"500": 0.3, "429": 0.2}, seed=7) as server:
        first = statuses(server)
        server.reset()  # reseeds the RNG
        assert statuses(server) == first
    assert {500, 429, 200} <= set(first)
    with MockServer(fault_rates={"500": 1.0}) as server:
        assert set(statuses(server)) == {500}


def test_config_and_reset_over_http(srv):
    status, _, raw = call(srv.url + "/_config", {"latency_s": 0.2})
    assert status == 200 and json.loads(raw)["latency_s"] == 0.2
    started = time.perf_counter()
    chat(srv)
    assert time.perf_counter() - started >= 0.2
    assert call(srv.url + "/_config", {"latency": 1})[0] == 400  # unknown field
    assert call(srv.url + "/_reset", {})[0] == 200
    assert srv.config.latency_s == 0.0 and json.loads(call(srv.url + "/_stats")[2])["requests"] == 0


def test_many_concurrent_requests_overlap(srv):
    from medpanel.models.openai_compat import OpenAIModel

    srv.configure(latency_s=0.5)
    model = OpenAIModel("m", base_url=srv.base_url, api_key="x", runtime=Runtime(retry=RetryPolicy(max_attempts=1)))

    async def burst():
        try:
            return await asyncio.gather(*(model.complete(f"question {i}") for i in range(300)))
        finally:
            await model.aclose()

    started = time.perf_counter()
    replies = asyncio.run(burst())
    elapsed = time.perf_counter() - started
    assert [r.text for r in replies] == [f"question {i}" for i in range(300)]
    assert srv.stats()["successes"] == 300
    assert elapsed < 8, f"300 requests with 0.5 s latency took {elapsed:.1f}s; they are not overlapping"


# ------------------------------------------------------------------ subprocess mode


def test_subprocess_mode_prints_ready_and_serves():
    from medpanel.models.openai_compat import OpenAIModel

    with subprocess.Popen(
        [sys.executable, "-m", "medpanel.testing.mock_server", "--port", "0", "--reply", "choice", "--latency", "0.01"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            line = proc.stdout.readline().strip()
            assert line.startswith("READY http://127.0.0.1:") and line.endswith("/v1"), line
            base_url = line.split(" ", 1)[1]
            model = OpenAIModel("m", base_url=base_url, api_key="x")

            async def one():
                try:
                    return await model.complete("Which is it?")
                finally:
                    await model.aclose()

            reply = asyncio.run(one())
            assert reply.text.endswith("Answer: " + choice_for({"model": "m", "messages": [{"role": "user", "content": "Which is it?"}]}))
            assert json.loads(call(base_url.removesuffix("/v1") + "/_stats")[2])["successes"] == 1
        finally:
            proc.terminate()
        _, errors = proc.communicate(timeout=10)
    assert proc.returncode == 0  # SIGTERM is a clean shutdown
    assert errors == ""  # quiet: no access log, no warnings
