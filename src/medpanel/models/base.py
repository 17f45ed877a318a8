"""The `Model` interface. Providers implement one method, `generate`; `complete` adds the rest.

`complete` is the same for every provider: normalise messages, serve from the cache, respect the
budget, retry transient failures, validate structured output (re-asking a bounded number of times),
and price the call. A provider only turns a `Request` into a `Generation`.
"""

from __future__ import annotations

import hashlib
import json
import time
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from medpanel.errors import MedpanelError, ModelCallError, StructuredOutputError
from medpanel.models.messages import Image, Message, normalise_messages
from medpanel.models.retry import with_retries
from medpanel.models.runtime import Runtime, call_scope
from medpanel.models.structured import Schema, reask_message

__all__ = ["Generation", "Image", "Message", "Model", "Reply", "Request", "Usage"]

# Options that change what a model says, and so belong in the cache key; anything else (timeouts) does not.
SEMANTIC_OPTIONS = ("temperature", "max_tokens", "top_p", "seed", "stop", "frequency_penalty", "presence_penalty")


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


class Request(BaseModel):
    """One call as a provider sees it."""

    messages: list[Message]
    schema_: dict | None = Field(default=None, alias="schema")
    schema_name: str = "reply"
    temperature: float = 0.0
    max_tokens: int = 512
    top_p: float | None = None
    seed: int | None = None
    stop: list[str] | None = None
    # OpenAI's definitions: subtract penalty x (times the token was generated) / x (generated at all).
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    timeout_s: float = 120.0

    model_config = {"populate_by_name": True}

    @property
    def schema(self) -> dict | None:
        return self.schema_


class Generation(BaseModel):
    """What a provider returns: raw text and token counts."""

    text: str
    usage: Usage = Field(default_factory=Usage)
    finish_reason: str | None = None
    model: str | None = None  # the id the server reports, if any


class Reply(BaseModel):
    text: str
    parsed: Any = None
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = 0.0
    cost_usd: float = 0.0
    model: str = ""
    cached: bool = False
    finish_reason: str | None = None
    attempts: int = 1  # transport attempts of the last generation
    reasks: int = 0  # structured-output re-asks used


class Model(ABC):
    """Anything that answers messages. Subclasses set `provider` and implement `generate`."""

    provider: ClassVar[str] = "abstract"
    supports_vision: bool = False
    supports_json_schema: bool = False  # the provider can constrain output to a schema itself
    supports_streaming: bool = False
    cacheable: bool = True  # False for people and scripted fakes: their answers are not a function of the request

    def __init__(self, name: str, runtime: Runtime | None = None) -> None:
        self.name = name
        self.runtime = runtime or Runtime()

    @property
    def id(self) -> str:
        return f"{self.provider}:{self.name}" if self.name else self.provider

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id}>"

    @abstractmethod
    async def generate(self, request: Request) -> Generation:
        """Produce one generation. Raise TransientModelError for failures worth retrying."""

    async def aclose(self) -> None:
        """Release connections or loaded weights. Optional."""

    # ------------------------------------------------------------------ the shared path

    async def complete(self, messages: Any, schema: Any = None, **options: Any) -> Reply:
        msgs = normalise_messages(messages)
        spec = Schema(schema) if schema is not None else None
        sample_index = int(options.pop("sample_index", 0))
        request = Request(
            messages=msgs,
            schema=spec.json_schema if spec else None,
            schema_name=spec.name if spec else "reply",
            timeout_s=options.pop("timeout_s", self.runtime.timeout_s),
            **options,
        )
        started = time.perf_counter()
        reply = None
        spent = Usage()
        cost = 0.0
        for reask in range(self.runtime.max_reasks + 1 if spec else 1):
            reply = await self._complete_once(request, sample_index)
            reply.reasks = reask
            # The reply carries what every attempt cost, re-asks included, not just the last one.
            spent = Usage(input_tokens=spent.input_tokens + reply.usage.input_tokens, output_tokens=spent.output_tokens + reply.usage.output_tokens)
            cost += reply.cost_usd
            reply.usage, reply.cost_usd = spent, cost
            if spec is None:
                break
            try:
                reply.parsed = spec.validate(reply.text)
                break
            except ValueError as problem:
                if reask == self.runtime.max_reasks:
                    raise StructuredOutputError(
                        f"{self.id} gave no valid '{spec.name}' reply after {reask + 1} tries: {problem}.",
                        model=self.id,
                        last_text=reply.text,
                    ) from None
                request = request.model_copy(
                    update={
                        "messages": [
                            *request.messages,
                            Message(role="assistant", content=reply.text),
                            Message(role="user", content=reask_message(str(problem), spec)),
                        ]
                    }
                )
        assert reply is not None
        reply.latency_s = time.perf_counter() - started
        return reply

    def cache_identity(self) -> dict:
        """What, besides the request, decides this model's answer. Providers add their server and modes."""
        return {"model": self.id}

    def cache_key(self, request: Request, sample_index: int = 0) -> str:
        scope = call_scope.get()
        repeat = scope[2] if scope else 0
        body = {
            **self.cache_identity(),
            "messages": [
                {"role": m.role, "content": m.content, "images": [img.fingerprint() for img in m.images]}
                for m in request.messages
            ],
            "schema": request.schema,
            "options": {k: getattr(request, k) for k in SEMANTIC_OPTIONS},
            # Greedy decoding is repeatable; sampled calls are distinct draws, told apart by their index and
            # by the run's repeat number (repeat r of an item must not reuse repeat 0's draw).
            "sample": (sample_index if repeat == 0 else [repeat, sample_index]) if request.temperature > 0 else 0,
        }
        return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()

    async def _complete_once(self, request: Request, sample_index: int) -> Reply:
        rt = self.runtime
        use_cache = rt.cache is not None and rt.use_cache and self.cacheable
        key = self.cache_key(request, sample_index) if rt.cache is not None else None
        if use_cache and key:
            hit = rt.cache.get_call(key)
            if hit is not None:
                rt.budget.cached_calls += 1
                rt.cache.log_call(key, self.id, True, call_scope.get())
                return Reply(
                    text=hit["text"],
                    usage=Usage(**hit.get("usage", {})),
                    model=hit.get("model") or self.id,
                    cost_usd=0.0,  # a cached call costs nothing now; its original cost stays in the store
                    cached=True,
                    finish_reason=hit.get("finish_reason"),
                )
        rt.budget.before_call()
        started = time.perf_counter()
        try:
            gen, attempts = await with_retries(lambda: self.generate(request), rt.retry)
        except MedpanelError as exc:
            if key is not None:
                rt.cache.log_call(key, self.id, False, call_scope.get(), error=str(exc))
            raise
        except Exception as exc:  # a provider bug or unexpected library error: classify, don't retry
            if key is not None:
                rt.cache.log_call(key, self.id, False, call_scope.get(), error=f"{type(exc).__name__}: {exc}")
            raise ModelCallError(f"{self.id} failed: {type(exc).__name__}: {exc}", kind="provider_error", model=self.id) from exc
        latency = time.perf_counter() - started
        cost = rt.prices.cost(self.name, gen.usage.input_tokens, gen.usage.output_tokens)
        rt.budget.charge(gen.usage.input_tokens, gen.usage.output_tokens, cost)
        if key is not None and self.cacheable:
            rt.cache.put_call(
                key,
                {
                    "model": self.id,
                    "text": gen.text,
                    "usage": gen.usage.model_dump(),
                    "finish_reason": gen.finish_reason,
                    "cost_usd": cost,
                    "latency_s": latency,
                    "request": request.model_dump(mode="json", by_alias=True, exclude={"timeout_s"}),
                },
                call_scope.get(),
            )
        elif key is not None:  # every call is logged, cacheable or not, so a run can count what it spent
            rt.cache.log_call(key, self.id, False, call_scope.get(), usage=(gen.usage.input_tokens, gen.usage.output_tokens, cost))
        return Reply(
            text=gen.text,
            usage=gen.usage,
            model=self.id,
            cost_usd=cost,
            cached=False,
            finish_reason=gen.finish_reason,
            attempts=attempts,
        )
