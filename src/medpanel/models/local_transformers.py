"""A Hugging Face model folder served as a `local` model through transformers: what `medpanel train sft`
writes (OUT/final) comes back to the model layer, offline, on CPU or a GPU.

    model = build_model("local?path=/runs/board-sft/final")          # a full model folder (config.json)
    model = build_model("local:sft?path=/runs/board-sft/final")      # the same, labelled local:sft
    model = build_model("local?path=/runs/lora/final&small=1")       # a peft adapter folder (adapter_config.json)
    model = build_model("local?path=/adapter&base=/models/base")     # its base somewhere else than it says

`local.LocalModel.from_spec` hands a spec whose path is a folder to this module; a `.gguf` file stays on
llama.cpp. The two behave alike wherever they can:

* the tokenizer's chat template (ChatML when it has none), the same schema note, images as captions;
* temperature, top_p, seed, stop, OpenAI's frequency / presence penalties, and the same repetition
  penalties (`local_grammar.Sampler`: DRY for a small model, `sampling=none` to turn them off);
* structured output held token by token to its schema by llguidance (`local_grammar.JsonConstraint`
  over the tokenizer's vocabulary), with the same soft max_tokens that lets a reply close its JSON; without
  llguidance (or a fast tokenizer), or with `grammar=0`, the model says so (`supports_json_schema` false)
  and the model layer's prompt-and-re-ask path (`Model.complete`, bounded by max_reasks) takes the schema;
* usage counts, `truncated` when max_tokens cut the reply, a deadline per call (timeout_s);
* weights loaded on first use and shared by every model of the process on the same folder, calls
  serialised by a lock and run in a worker thread so the event loop stays free;
* the last call's KV state is kept, and a call whose prompt shares its start evaluates only the rest
  (`reuse=0` evaluates every prompt whole);
* a folder is not `small` unless its spec says small=1, exactly as a GGUF path;
* the cache identity holds every file of the folder (name, size, mtime), and the base model's for an
  adapter, so two folders (or one folder retrained in place) never share cached answers.

What differs: transformers runs float32 weights, several times slower than llama.cpp's 4-bit ones on
a CPU, and a folder's answers are not the GGUF's (another numeric path), so each has its own cache keys.
`threads=N` sets torch's thread count for the whole process.

Bad input fails when the model is built, before any call: a folder with neither config.json nor
adapter_config.json, one without weights, weights whose header does not match the file, an adapter
whose base cannot be found offline, or a missing `train` extra (torch, transformers, peft) is a
UsageError (exit 2) with the fix.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from medpanel.errors import MissingExtraError, ModelCallError, UsageError
from medpanel.models.base import Generation, Request, Usage, thinking_name
from medpanel.models.local import (
    PerCallSampling,
    _CHATML,
    DEFAULT_N_CTX,
    DEFAULT_SCHEMA_NOTE,
    SAMPLING_OPTIONS,
    SAMPLING_PROFILES,
    SCHEMA_NOTES,
    SMALL_MODEL_SAMPLING,
    chat_messages,
    with_sampling,
)
from medpanel.models.local_grammar import CLOSING_ALLOWANCE, NO_PENALTIES, GrammarTokenizer, Penalties
from medpanel.models.registry import spec_flag
from medpanel.models.runtime import Runtime

FEATURE = "Serving a Hugging Face model folder"
WEIGHT_SUFFIXES = (".safetensors", ".bin")
# Prompt tokens evaluated per forward pass: bounds the attention's memory on a long prompt.
PROMPT_CHUNK = 512
# Folder names that say nothing about the model: the label takes its parent's name too (board-sft-final).
_GENERIC_NAMES = re.compile(r"^(final|model|merged|adapter|output|out|checkpoint-\d+)$", re.IGNORECASE)
# End-of-turn markers of common chat templates: generation stops on them as on EOS when they are special tokens.
_END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>")
SPEC_EXAMPLE = "local?path=/runs/board-sft/final&small=1 (or &base=/models/base for an adapter folder)"


def _require(module: str, package: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise MissingExtraError(FEATURE, "train", package)


# ------------------------------------------------------------------ the folder, before loading it


@dataclass(frozen=True)
class Folder:
    """What is in a model folder, read without loading it."""

    path: str  # the folder, resolved
    adapter: bool  # a peft adapter folder (its base in `base`)
    base: str | None  # the base model's folder, for an adapter
    tokenizer_from: str  # the folder whose tokenizer is used
    identity: dict  # files that decide the answers (see folder_identity)
    fast_tokenizer: bool  # a tokenizer.json is there (llguidance needs a fast tokenizer)


def _has_tokenizer(folder: Path) -> bool:
    return any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"))


def _files_identity(folder: Path) -> dict:
    """Every file at the top of the folder, with its size and mtime: weights, config, tokenizer, template."""
    files = {}
    for entry in sorted(folder.iterdir()):
        if entry.is_file():
            st = entry.stat()
            files[entry.name] = [st.st_size, st.st_mtime_ns]
    return {"path": str(folder), "files": files}


def _check_weights(folder: Path, adapter: bool) -> None:
    """Weights are there and readable; a safetensors file's header matches its size (a cut copy fails here)."""
    prefixes = ("adapter_model",) if adapter else ("model", "pytorch_model")  # not a checkpoint's optimizer.pt or training_args.bin
    weights = [p for p in folder.iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES) and p.name.startswith(prefixes)]
    kind = "adapter weights (adapter_model.safetensors)" if adapter else "weights (*.safetensors or pytorch_model.bin)"
    if not weights:
        raise UsageError(f"The model folder {folder} has no {kind}.", f"Give the folder training wrote (OUT/final), e.g. {SPEC_EXAMPLE}.")
    for path in weights:
        try:
            with open(path, "rb") as handle:
                if path.suffix != ".safetensors":
                    handle.read(1)
                    continue
                size = os.fstat(handle.fileno()).st_size
                (length,) = struct.unpack("<Q", handle.read(8))
                if not 0 < length <= size - 8:
                    raise ValueError("its header length is beyond the file")
                header = json.loads(handle.read(length))
                end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
                if 8 + length + end > size:
                    raise ValueError(f"it holds {size} bytes but its header describes {8 + length + end}")
        except OSError as exc:
            raise UsageError(f"Cannot read the weights file {path}: {exc.strerror}.", "Check the file's permissions, or copy the folder again.") from None
        except (ValueError, struct.error, KeyError, TypeError, IndexError) as exc:
            raise UsageError(f"The weights file {path} is damaged: {exc}.", "Copy the folder again, or retrain it.") from None


def _resolve_base(name: str, adapter: Path) -> Path:
    """The adapter's base model as a local folder: a path (absolute, or relative to the adapter or the
    working directory), or a Hugging Face id already in the local hub cache. Never downloads."""
    for candidate in (Path(name), adapter / name, adapter.parent / name):
        if candidate.is_dir() and (candidate / "config.json").is_file():
            return candidate.resolve()
    if re.fullmatch(r"[\w.-]+/[\w.-]+", name) and importlib.util.find_spec("huggingface_hub") is not None:
        from huggingface_hub import snapshot_download

        try:
            snapshot = Path(snapshot_download(name, local_files_only=True))
        except Exception:  # not in the cache (LocalEntryNotFoundError), or an id the hub refuses
            snapshot = None
        if snapshot is not None and (snapshot / "config.json").is_file():
            return snapshot.resolve()
    raise UsageError(f"The adapter in {adapter} names its base model '{name}', which is neither a local model folder nor in the "
                     "Hugging Face cache (nothing is downloaded).",
                     f"Point to the base folder: local?path={adapter}&base=/models/base (or fix base_model_name_or_path in adapter_config.json).")


def read_folder(path: str, base: str | None = None) -> Folder:
    """The folder's kind, base, tokenizer and identity, or a UsageError saying what is wrong with it."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise UsageError(f"Model folder {path} does not exist.", f"Give a Hugging Face model folder: {SPEC_EXAMPLE}.")
    folder = folder.resolve()
    if (folder / "adapter_config.json").is_file():
        try:
            config = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
            named = config.get("base_model_name_or_path") if isinstance(config, dict) else None
        except (OSError, ValueError) as exc:
            raise UsageError(f"Cannot read {folder / 'adapter_config.json'}: {exc}.", "Save the adapter again (save_pretrained).") from None
        if not base and not (isinstance(named, str) and named):
            raise UsageError(f"The adapter in {folder} does not name its base model (base_model_name_or_path).",
                             f"Give it: local?path={folder}&base=/models/base")
        base_folder = _resolve_base(base or named, folder)
        _check_weights(folder, adapter=True)
        _check_weights(base_folder, adapter=False)
        tokenizer = folder if _has_tokenizer(folder) else base_folder
        identity = {**_files_identity(folder), "base": _files_identity(base_folder)}
        return Folder(str(folder), True, str(base_folder), str(tokenizer), identity, (tokenizer / "tokenizer.json").is_file())
    if (folder / "config.json").is_file():
        if base:
            raise UsageError(f"base= is for an adapter folder, but {folder} holds a full model (config.json).", "Leave base= out.")
        try:
            json.loads((folder / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UsageError(f"Cannot read {folder / 'config.json'}: {exc}.", "Save the model again (save_pretrained).") from None
        _check_weights(folder, adapter=False)
        if not _has_tokenizer(folder):
            raise UsageError(f"The model folder {folder} has no tokenizer.", "Save the tokenizer beside the model (tokenizer.save_pretrained(folder)).")
        return Folder(str(folder), False, None, str(folder), _files_identity(folder), (folder / "tokenizer.json").is_file())
    raise UsageError(f"{folder} is not a model folder: it has neither config.json (a model) nor adapter_config.json (a peft adapter).",
                     f"Give the folder training wrote (OUT/final), or a .gguf file: {SPEC_EXAMPLE}.")


def folder_label(folder: str) -> str:
    """The model's name when the spec gives none: the folder's name, with its parent's when it says nothing alone."""
    path = Path(folder)
    if _GENERIC_NAMES.match(path.name) and path.parent.name:
        return f"{path.parent.name}-{path.name}"
    return path.name


# ------------------------------------------------------------------ the loaded model


class HFGrammarTokenizer(GrammarTokenizer):
    """local_grammar's GrammarTokenizer over a Hugging Face fast tokenizer instead of a llama.cpp vocabulary."""

    def __init__(self, tokenizer: Any, n_vocab: int, eos: Sequence[int]) -> None:
        from llguidance.hf import from_tokenizer

        self.tokenizer = from_tokenizer(tokenizer, n_vocab=n_vocab, eos_token=list(eos) or None)
        self.n_vocab = n_vocab
        self._closing_tiers()  # the same closing tiers as the llama.cpp path


def _new_cache(model: Any) -> Any:
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # an older transformers
        return DynamicCache()


def _cut_cache(cache: Any, keep: int) -> bool:
    """Shorten a plain dynamic KV cache to its first `keep` positions; False where it is of another kind
    (sliding windows, linear attention keep no full past, so the prompt is evaluated whole instead)."""
    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer).__name__ != "DynamicLayer" for layer in layers):
        return False
    for layer in layers:
        if getattr(layer, "keys", None) is not None and layer.keys.numel():
            layer.keys = layer.keys[..., :keep, :]
            layer.values = layer.values[..., :keep, :]
    return True


@dataclass
class LoadedFolder:
    """A transformers model in memory, with what every call on it shares."""

    model: Any
    tokenizer: Any
    device: str
    eos: frozenset[int]
    n_vocab: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    cache: Any = None  # the KV state of `context`
    context: list[int] = field(default_factory=list)  # tokens whose KV state `cache` holds
    last_reused: int = 0  # prompt tokens the last call took from the kept KV state (for measuring)
    _grammar: Any = None
    _breakers: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        import inspect

        params = inspect.signature(self.model.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"  # transformers 5 renamed it
        self.keep_logits = "logits_to_keep" in params
        self.template = getattr(self.tokenizer, "chat_template", None) or _CHATML

    def prompt_tokens(self, messages: list[dict[str, str]]) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, chat_template=self.template, add_generation_prompt=True, tokenize=False)
        bos = self.tokenizer.bos_token
        # Let the tokenizer decide about BOS, unless the template already wrote it.
        return list(self.tokenizer(text, add_special_tokens=not (bos and text.startswith(bos)))["input_ids"])

    def grammar(self) -> GrammarTokenizer | None:
        """The llguidance tokenizer for this vocabulary (about a second to build, so built once), or None
        when schemas cannot be enforced here (no llguidance, or a slow tokenizer)."""
        if self._grammar is None:
            self._grammar = False
            if importlib.util.find_spec("llguidance") is not None:
                try:
                    self._grammar = HFGrammarTokenizer(self.tokenizer, self.n_vocab, sorted(self.eos))
                except ValueError:  # "Only fast tokenizers are supported"
                    pass
        return self._grammar or None

    def breakers(self, breakers: tuple[str, ...]) -> Any:
        """DRY's sequence breakers over this vocabulary: tokens holding one of `breakers`, and special tokens."""
        if breakers not in self._breakers:
            import numpy as np

            special = set(self.tokenizer.all_special_ids) | {i for i, t in self.tokenizer.added_tokens_decoder.items() if t.special}
            known = len(self.tokenizer)
            mask = np.ones(self.n_vocab, dtype=bool)  # rows past the tokenizer's vocabulary never say anything
            for token in range(min(known, self.n_vocab)):
                piece = self.tokenizer.decode([token])
                mask[token] = token in special or not piece or any(b in piece for b in breakers)
            self._breakers[breakers] = mask
        return self._breakers[breakers]

    def forward(self, tokens: Sequence[int]) -> Any:
        """Evaluate `tokens` after the context; the last position's logits as a numpy array."""
        import torch

        logits = None
        for start in range(0, len(tokens), PROMPT_CHUNK):
            chunk = list(tokens[start:start + PROMPT_CHUNK])
            extra = {"logits_to_keep": 1} if self.keep_logits else {}
            out = self.model(input_ids=torch.tensor([chunk], device=self.device), use_cache=True, **{self.cache_arg: self.cache}, **extra)
            self.context.extend(chunk)
            logits = out.logits[0, -1]
        return logits.float().cpu().numpy()

    def start(self, prompt: Sequence[int], reuse: bool) -> tuple[Any, int]:
        """Evaluate the prompt, reusing the kept KV state of its start when `reuse`: (logits, tokens reused)."""
        shared = 0
        if reuse and self.cache is not None and self.cache.get_seq_length() == len(self.context):
            limit = min(len(self.context), len(prompt) - 1)  # at least one token is evaluated, for its logits
            while shared < limit and self.context[shared] == prompt[shared]:
                shared += 1
            if shared and not _cut_cache(self.cache, shared):
                shared = 0
        if shared:
            del self.context[shared:]
        else:
            self.cache, self.context = _new_cache(self.model), []
        self.last_reused = shared
        return self.forward(prompt[shared:]), shared

    def forget(self) -> None:
        self.cache, self.context = None, []


_LOADED: dict[str, LoadedFolder] = {}
_LOADING = threading.Lock()


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    ids: set[int] = set()
    for source in (getattr(getattr(model, "generation_config", None), "eos_token_id", None), getattr(model.config, "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(source, int):
            ids.add(source)
        elif isinstance(source, (list, tuple)):
            ids.update(i for i in source if isinstance(i, int))
    special = {t.content: i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    ids.update(special[name] for name in _END_OF_TURN if name in special)
    return frozenset(ids)


def load_folder(folder: Folder, threads: int | None = None) -> LoadedFolder:
    """The shared loaded model for this folder (and these files), loading it on first use."""
    key = json.dumps(folder.identity, sort_keys=True)
    with _LOADING:
        if key not in _LOADED:
            _LOADED[key] = _load(folder, threads)
        return _LOADED[key]


def _load(folder: Folder, threads: int | None) -> LoadedFolder:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if threads:
        torch.set_num_threads(threads)  # loading is multithreaded too
    device = "cuda" if torch.cuda.is_available() else "cpu"
    logging = transformers.utils.logging
    bars, verbosity = logging.is_progress_bar_enabled(), logging.get_verbosity()
    logging.disable_progress_bar()  # the CLI prints model text, not loading bars
    logging.set_verbosity_error()
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder.tokenizer_from, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(folder.base or folder.path, local_files_only=True, dtype=torch.float32)
        if folder.adapter:
            _require("peft", "peft")
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, folder.path, is_trainable=False).merge_and_unload()
    except (MissingExtraError, UsageError):
        raise
    except Exception as exc:  # transformers and peft raise OSError, ValueError, KeyError, RuntimeError, safetensors' own...
        what = f"the adapter in {folder.path} on {folder.base}" if folder.adapter else f"the model in {folder.path}"
        raise UsageError(f"Cannot load {what}: {type(exc).__name__}: {exc}",
                         "Check that it is a complete causal language model folder this transformers reads (config, weights, tokenizer).") from None
    finally:
        if bars:
            logging.enable_progress_bar()
        logging.set_verbosity(verbosity)
    model.to(device).eval()
    n_vocab = int(model.get_output_embeddings().weight.shape[0]) if model.get_output_embeddings() is not None else len(tokenizer)
    return LoadedFolder(model, tokenizer, device, _eos_ids(model, tokenizer), n_vocab)


# ------------------------------------------------------------------ decoding


@dataclass
class Decoded:
    text: str
    tokens: list[int]
    prompt_tokens: int
    finish_reason: str  # "stop" (end of turn, grammar end or stop string) or "length"
    reused: int = 0  # prompt tokens whose KV state was kept from the last call


def decode(loaded: LoadedFolder, prompt: Sequence[int], *, n_ctx: int, max_tokens: int, sampler: Any, constraint: Any = None,
           stop: Sequence[str] = (), deadline: float | None = None, reuse: bool = True) -> Decoded:
    """Generate after `prompt`, as local_grammar.decode does on llama.cpp. The caller holds the model's lock.

    With a constraint, max_tokens is a soft limit: a reply still inside its JSON at the limit gets up to
    CLOSING_ALLOWANCE more tokens, steered to closing quotes and brackets, so it always parses."""
    import torch

    from medpanel.models.local_grammar import choose_token

    if len(prompt) >= n_ctx:
        raise OverflowError(f"the prompt has {len(prompt)} tokens but the context holds {n_ctx}")
    limit = min(n_ctx - len(prompt), max_tokens + (CLOSING_ALLOWANCE if constraint is not None else 0))
    out: list[int] = []
    longest_stop = max((len(s.encode()) for s in stop), default=0)
    finish = "length"
    try:
        with torch.inference_mode():
            logits, reused = loaded.start(prompt, reuse)
            sampler.begin(prompt)
            while len(out) < limit:
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"generation passed its deadline after {len(out)} tokens")
                if constraint is not None:
                    if constraint.done:
                        finish = "stop"
                        break
                    run = constraint.forced()[: limit - len(out)]
                    if run:  # tokens the grammar dictates: one forward pass for the whole run
                        constraint.consume_all(run)
                        out.extend(run)
                        sampler.observe(run)
                        if not constraint.done and len(out) < limit:
                            logits = loaded.forward(run)
                        continue
                tiers = constraint.closing_tiers() if constraint is not None and len(out) >= max_tokens else ()
                token, _ = choose_token(sampler.penalise(logits), sampler, constraint, tiers=tiers)
                if token in loaded.eos:
                    finish = "stop"
                    break
                if constraint is not None:
                    constraint.consume(token)
                out.append(token)
                sampler.record(token)
                if stop and constraint is None:  # stop strings would cut JSON short, so they apply to free text only
                    tail = loaded.tokenizer.decode(out[-(longest_stop + 16):], skip_special_tokens=True)
                    if any(s in tail for s in stop):
                        finish = "stop"
                        break
                if len(out) < limit and not (constraint is not None and constraint.done):
                    logits = loaded.forward([token])
            else:
                if constraint is not None and constraint.done:
                    finish = "stop"
    except BaseException:
        loaded.forget()  # a pass cut short may leave the KV state half written
        raise
    text = loaded.tokenizer.decode(out, skip_special_tokens=True)
    if stop and constraint is None:
        cuts = [text.find(s) for s in stop if s and s in text]
        if cuts:
            text, finish = text[: min(cuts)], "stop"
    return Decoded(text, out, len(prompt), finish, reused)


# ------------------------------------------------------------------ the model


class TransformersModel(PerCallSampling):
    """A Hugging Face model folder (or peft adapter folder) as a `local` model. See the module docstring."""

    provider = "local"
    supports_json_schema = True  # set per model: False where no grammar can hold a schema

    def __init__(
        self,
        name: str = "",
        *,
        path: str,
        base: str | None = None,
        n_ctx: int = DEFAULT_N_CTX,
        threads: int | None = None,
        small: bool | None = None,
        reasoning: bool | None = None,
        sampling: Penalties | None = None,
        reuse: bool = True,
        schema_note: str = DEFAULT_SCHEMA_NOTE,
        grammar: bool | None = None,
        runtime: Runtime | None = None,
    ) -> None:
        # Check the packages and the folder now, so bad input fails when the model is named, not mid-run.
        _require("torch", "torch")
        _require("transformers", "transformers")
        self.folder = read_folder(path, base)
        if self.folder.adapter:
            _require("peft", "peft")
        super().__init__(name or folder_label(self.folder.path), runtime)
        self.path = self.folder.path
        self.weights = self.folder.identity
        self.n_ctx = n_ctx
        self.threads = threads  # not in the cache key, as for llama.cpp
        self.small = bool(small)  # a folder is small only when its spec says so, as a GGUF path
        self.reasoning = thinking_name(self.name) if reasoning is None else reasoning
        self.sampling = sampling if sampling is not None else (SMALL_MODEL_SAMPLING if self.small else NO_PENALTIES)
        self.reuse = reuse
        if schema_note not in SCHEMA_NOTES:
            raise UsageError(f"Unknown schema_note '{schema_note}' for the local model.", f"Use one of: {', '.join(SCHEMA_NOTES)}.")
        self.schema_note = schema_note
        # Schemas are held by llguidance over a fast tokenizer; without them (or with grammar=0) the schema is
        # asked for in the prompt and the model layer validates and re-asks (Model.complete, max_reasks).
        can = importlib.util.find_spec("llguidance") is not None and self.folder.fast_tokenizer
        if grammar and not can:
            if importlib.util.find_spec("llguidance") is None:
                raise MissingExtraError("Schema-constrained output on a model folder", "local", "llguidance")
            raise UsageError(f"The tokenizer in {self.folder.tokenizer_from} is not a fast one (no tokenizer.json), so no grammar can hold a schema.",
                             "Leave grammar= out: schemas are then asked for in the prompt and re-asked.")
        self.supports_json_schema = can if grammar is None else grammar
        self._loaded: LoadedFolder | None = None

    @classmethod
    def from_spec(cls, spec: Any, runtime: Runtime, **kwargs: Any) -> "TransformersModel":
        params = dict(spec.params)
        known = {"path", "base", "n_ctx", "threads", "small", "reasoning", "reuse", "sampling", "schema_note", "grammar", *SAMPLING_OPTIONS}
        unknown = set(params) - known
        if unknown:
            raise UsageError(f"Unknown option(s) {', '.join(sorted(unknown))} for a local model folder.",
                             "Use local?path=/folder&base=/base-folder&n_ctx=4096&threads=2&small=1&reasoning=0&reuse=1&sampling=none&grammar=0")
        try:
            n_ctx = int(params.get("n_ctx", DEFAULT_N_CTX))
            threads = int(params["threads"]) if params.get("threads") else None
        except ValueError:
            raise UsageError(f"n_ctx and threads must be whole numbers, got {params}.", "e.g. local?path=/folder&n_ctx=4096&threads=2") from None
        if n_ctx < 16 or (threads is not None and threads < 1):
            raise UsageError(f"n_ctx must be at least 16 and threads at least 1, got {params}.", "e.g. local?path=/folder&n_ctx=4096&threads=2")
        small = spec_flag(params, "small", False)
        reasoning = spec_flag(params, "reasoning", False) if "reasoning" in params else None
        reuse = spec_flag(params, "reuse", True)
        grammar = spec_flag(params, "grammar", True) if "grammar" in params else None
        sampling = None
        if "sampling" in params:
            if params["sampling"] not in SAMPLING_PROFILES:
                raise UsageError(f"Unknown sampling profile '{params['sampling']}' for the local model.",
                                 f"Use one of: {', '.join(SAMPLING_PROFILES)}, e.g. local?path=/folder&sampling=none")
            sampling = SAMPLING_PROFILES[params["sampling"]]
        overrides = {k: params[k] for k in SAMPLING_OPTIONS if k in params}
        if overrides:
            sampling = with_sampling(sampling or (SMALL_MODEL_SAMPLING if small else NO_PENALTIES), overrides)
        return cls(spec.name, path=params["path"], base=params.get("base") or None, n_ctx=n_ctx, threads=threads, small=small,
                   reasoning=reasoning, sampling=sampling, reuse=reuse, schema_note=params.get("schema_note") or DEFAULT_SCHEMA_NOTE,
                   grammar=grammar, runtime=runtime, **kwargs)

    def cache_identity(self) -> dict:
        # The folder's files (and its base's) say which weights answered; the engine and its number format
        # too, since they change the sums; penalties and the schema note as for the GGUF path.
        identity = {"model": self.id, "weights": self.weights, "n_ctx": self.n_ctx, "engine": "transformers", "dtype": "float32"}
        if self.sampling.active:
            identity["sampling"] = dataclasses.asdict(self.sampling)
        if self.schema_note != "system":
            identity["schema_note"] = self.schema_note
        if not self.supports_json_schema:  # schemas asked in the prompt only: other answers
            identity["grammar"] = False
        return identity

    @property
    def loaded(self) -> LoadedFolder:
        if self._loaded is None:
            self._loaded = load_folder(self.folder, self.threads)
        return self._loaded

    def _generate_blocking(self, request: Request) -> Generation:
        from medpanel.models.local_grammar import Sampler

        loaded = self.loaded
        messages = chat_messages(request.messages, None if request.strict_schema else request.schema, self.schema_note)
        with loaded.lock:
            if self.threads:  # torch keeps the count per thread, and calls come on the event loop's worker threads
                import torch

                torch.set_num_threads(self.threads)
            try:
                prompt = loaded.prompt_tokens(messages)
            except Exception as exc:  # a chat template that refuses these messages (a system turn, roles out of order)
                raise ModelCallError(f"{self.id}'s chat template refused the messages: {exc}", "Check the folder's chat template.",
                                     kind="bad_request", model=self.id) from None
            constraint = None
            if request.schema is not None and self.supports_json_schema:
                grammar = loaded.grammar()
                if grammar is not None:
                    try:
                        constraint = grammar.constraint(request.schema)
                    except ValueError as exc:
                        raise ModelCallError(f"{self.id} cannot enforce this schema: {exc}", "Simplify the schema.", kind="bad_request", model=self.id) from None
            sampler = Sampler(request.temperature, request.top_p, request.seed,
                              frequency_penalty=request.frequency_penalty or 0.0, presence_penalty=request.presence_penalty or 0.0,
                              penalties=self.sampling,
                              breakers=loaded.breakers(self.sampling.dry_breakers) if self.sampling.dry_multiplier > 0 else None)
            try:
                result = decode(loaded, prompt, n_ctx=self.n_ctx, max_tokens=request.max_tokens, sampler=sampler, constraint=constraint,
                                stop=request.stop or (), deadline=time.monotonic() + request.timeout_s, reuse=self.reuse)
            except OverflowError as exc:
                raise ModelCallError(f"{self.id}: {exc}.", f"Shorten the conversation or raise the context: local?path={self.path}&n_ctx={self.n_ctx * 2}",
                                     kind="context_length", model=self.id) from None
            except TimeoutError as exc:
                raise ModelCallError(f"{self.id}: {exc} ({request.timeout_s:g} s).", "Lower max_tokens or raise the timeout.", kind="timeout", model=self.id) from None
        return Generation(text=result.text, usage=Usage(input_tokens=result.prompt_tokens, output_tokens=len(result.tokens)),
                          finish_reason=result.finish_reason, model=self.id)
