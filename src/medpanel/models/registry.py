"""Model spec strings -> providers, loaded lazily so a missing optional package fails only when used.

Spec grammar:  PROVIDER[:NAME][@BASE_URL][?key=value&...]
    openai:gpt-4o-mini
    openai:my-model@http://127.0.0.1:8000/v1?vision=true&key_env=VLLM_API_KEY
    local                      (the embedded SmolLM2-135M-Instruct)
    local?path=/models/x.gguf  (any chat GGUF; labelled by its file name)
    local?path=/runs/sft/final (a Hugging Face model or peft adapter folder, via transformers)
    openai:...?small=1 | ?reasoning=1   (size and thinking, for default token budgets; local too)
    scripted:echo | scripted:replies.yaml | scripted:"fixed text"
    replay:transcript.jsonl#Speaker
    human | human:Medical Oncologist
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from medpanel.errors import UsageError
from medpanel.models.base import Model
from medpanel.models.runtime import Runtime

# provider -> (module, class, one-line description). Modules are imported only when a spec uses them.
PROVIDERS: dict[str, tuple[str, str, str]] = {
    "openai": ("medpanel.models.openai_compat", "OpenAIModel", "any OpenAI-compatible Chat Completions server"),
    "local": ("medpanel.models.local", "LocalModel", "embedded SmolLM2-135M-Instruct (or any GGUF, ?path=) via llama.cpp, or a Hugging Face folder via transformers, offline"),
    "scripted": ("medpanel.models.scripted", "ScriptedModel", "scripted fake for tests and examples"),
    "replay": ("medpanel.models.replay", "ReplayModel", "answers from a recorded transcript"),
    "human": ("medpanel.models.human", "HumanModel", "a person answering at the terminal"),
}


@dataclass
class ModelSpec:
    provider: str
    name: str = ""
    base_url: str | None = None
    params: dict[str, str] = field(default_factory=dict)


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def spec_flag(params: dict[str, str], name: str, default: bool) -> bool:
    """A yes/no spec option (?vision=true, ?small=1), `default` when the spec does not give it."""
    if name not in params:
        return default
    low = params[name].strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise UsageError(f"Spec parameter {name}={params[name]!r} is not a yes/no value.", f"Write {name}=true or {name}=false.")


def provider_names() -> list[str]:
    return list(PROVIDERS)


def parse_spec(spec: str) -> ModelSpec:
    text = (spec or "").strip()
    if not text:
        raise UsageError("Empty model spec.", f"Use one of: {', '.join(p + ':...' for p in PROVIDERS)} (e.g. 'local' or 'openai:gpt-4o-mini').")
    cut = min((i for i in (text.find(":"), text.find("?")) if i >= 0), default=len(text))
    provider, rest = text[:cut].strip().lower(), text[cut:]
    rest = rest[1:] if rest.startswith(":") else rest  # keep a leading '?': 'local?n_ctx=4096' has options, no name
    if provider not in PROVIDERS:
        raise UsageError(
            f"Unknown model provider '{provider}' in spec '{spec}'.",
            f"Known providers: {', '.join(PROVIDERS)}. Examples: 'local', 'openai:gpt-4o-mini', 'openai:my-model@http://127.0.0.1:8000/v1'.",
        )
    params: dict[str, str] = {}
    if "?" in rest and provider in ("openai", "local"):
        rest, _, query = rest.partition("?")
        params = dict(parse_qsl(query, keep_blank_values=True))
    base_url = None
    if provider == "openai" and "@" in rest:
        rest, _, base_url = rest.partition("@")
        if not base_url.startswith(("http://", "https://")):
            raise UsageError(f"Base URL '{base_url}' in spec '{spec}' is not an http(s) URL.", "Write it as openai:MODEL@http://HOST:PORT/v1.")
    if provider == "openai" and not rest:
        raise UsageError(f"Spec '{spec}' names no model.", "Write openai:MODEL, e.g. openai:gpt-4o-mini.")
    return ModelSpec(provider=provider, name=rest.strip().strip('"'), base_url=base_url, params=params)


def provider_class(provider: str) -> type[Model]:
    module_name, class_name, _ = PROVIDERS[provider]
    module = importlib.import_module(module_name)
    return getattr(module, class_name)


def build_model(spec: str | Model, runtime: Runtime | None = None, **kwargs) -> Model:
    """Build a model from its spec string. A ready Model is returned as is (its runtime replaced if given)."""
    if isinstance(spec, Model):
        if runtime is not None:
            spec.runtime = runtime
        return spec
    parsed = parse_spec(spec)
    cls = provider_class(parsed.provider)
    model = cls.from_spec(parsed, runtime or Runtime(), **kwargs)  # type: ignore[attr-defined]
    model.runtime.check_prices([model])  # a dollar cap refuses a model it cannot price, before any call
    return model
