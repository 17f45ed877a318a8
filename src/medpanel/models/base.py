"""The `Model` interface. Providers implement one method, `generate`; `complete` adds the rest.

`complete` is the same for every provider: normalise messages, serve from the cache, respect the
budget, retry transient failures, validate structured output (re-asking a bounded number of times),
and price the call. A provider only turns a `Request` into a `Generation`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from medpanel.errors import MedpanelError, ModelCallError, StructuredOutputError
from medpanel.models.budget import prompt_tokens_estimate
from medpanel.models.messages import Image, Message, normalise_messages
from medpanel.models.retry import with_retries
from medpanel.models.runtime import Runtime, cache_log, cache_put, call_scope
from medpanel.models.structured import Schema, reask_message

__all__ = ["Generation", "Image", "Message", "Model", "Reply", "Request", "Usage", "thinking_name"]

# Tokens added to a default budget for models whose hidden reasoning is counted as output.
REASONING_ALLOWANCE = 16_000

# Finish reasons that mean the token limit cut the reply: OpenAI's "length", and "max_tokens" as some
# compatible servers (Anthropic-style gateways) spell it.
TRUNCATED_REASONS = frozenset({"length", "max_tokens"})

# Options that change what a model says, and so belong in the cache key; anything else (timeouts) does not.
SEMANTIC_OPTIONS = ("temperature", "max_tokens", "top_p", "seed", "stop", "frequency_penalty", "presence_penalty")


# Name parts of open models that think before answering (DeepSeek-R1 and its distills, QwQ, *-Thinking,
# *-reasoning, Magistral). A false match only leaves room that goes unused; a miss starves the model.
_THINKING_PARTS = {"r1", "qwq", "reasoner", "thinking", "reasoning", "magistral"}


def thinking_name(name: str) -> bool:
    """Whether a model's name says its hidden reasoning counts against max_tokens (spec ?reasoning= overrides)."""
    low = name.lower().rsplit("/", 1)[-1]
    parts = set(re.split(r"[-_.:@\s]+", low))
    if parts & _THINKING_PARTS or "gpt-oss" in low:
        return True
    if low.startswith("gpt-5") and "chat" not in parts:  # GPT-5 reasons; gpt-5-chat does not
        return True
    # Qwen3 thinks by default; its Instruct and Coder releases do not.
    return low.startswith("qwen3") and not parts & {"instruct", "coder"}


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
    # Send the schema as a strict json_schema response format and the messages exactly as given (no
    # schema note added to the system prompt): for reproducing a released evaluation's requests.
    strict_schema: bool = False

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
    truncated: bool = False  # the token limit cut the reply (finish_reason "length")
    served_model: str | None = None  # the model id the server reported, e.g. a dated snapshot
    attempts: int = 1  # transport attempts of the last generation
    reasks: int = 0  # structured-output re-asks used


class Model(ABC):
    """Anything that answers messages. Subclasses set `provider` and implement `generate`."""

    provider: ClassVar[str] = "abstract"
    supports_vision: bool = False
    supports_json_schema: bool = False  # the provider can constrain output to a schema itself
    supports_streaming: bool = False
    cacheable: bool = True  # False for people and scripted fakes: their answers are not a function of the request
    small: bool = False  # a small model (the embedded one, or marked ?small=1): protocols keep compact budgets
    reasoning: bool = False  # hidden reasoning counts against max_tokens (o-series, R1-style): leave room for it
    billed: bool = False  # its calls cost money, so a dollar cap needs its price (runtime.check_prices)
    base_url: str | None = None  # the server it calls, if any: prices are looked up per server + model

    def token_budget(self, requested: int | None, *, small: int, full: int) -> int:
        """max_tokens for one call: the setting when the user gave one; else `small` for a small model,
        `full` for others, plus REASONING_ALLOWANCE where hidden reasoning shares the budget."""
        if requested is not None:
            return requested
        # A small model that reasons (an R1 distill marked small=1) still spends tokens thinking first.
        return (small if self.small else full) + (REASONING_ALLOWANCE if self.reasoning else 0)

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
        # A caller may name the schema on the wire and forbid re-asks (a released protocol's own rules).
        schema_name = options.pop("schema_name", None)
        max_reasks = options.pop("max_reasks", None)
        max_reasks = self.runtime.max_reasks if max_reasks is None else int(max_reasks)
        request = Request(
            messages=msgs,
            schema=spec.json_schema if spec else None,
            schema_name=schema_name or (spec.name if spec else "reply"),
            timeout_s=options.pop("timeout_s", self.runtime.timeout_s),
            **options,
        )
        started = time.perf_counter()
        reply = None
        spent = Usage()
        cost = 0.0
        for reask in range(max_reasks + 1 if spec else 1):
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
                if reply.truncated:
                    # Asking again under the same limit (with a longer conversation) is cut off again.
                    raise StructuredOutputError(
                        f"{self.id}'s reply was cut off at max_tokens={request.max_tokens} before its '{spec.name}' "
                        f"object was complete ({problem}).",
                        model=self.id,
                        last_text=reply.text,
                        fix=f"Raise --max-tokens (e.g. --max-tokens {request.max_tokens * 2}); re-asks do not help a reply the limit cuts.",
                    ) from None
                if reask == max_reasks:
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

    def worst_case(self, request: Request) -> tuple[int, float]:
        """The most one call may use, reserved against the caps before it is sent: the prompt's tokens
        (estimated from its text) plus max_tokens, and the price of those tokens."""
        prompt = prompt_tokens_estimate(request.messages, request.schema)
        return prompt + request.max_tokens, self.runtime.prices.cost(self.name, prompt, request.max_tokens, self.base_url)

    def cache_identity(self) -> dict:
        """What, besides the request, decides this model's answer. Providers add their server, weights and modes."""
        return {"model": self.id}

    def effective_temperature(self, request: Request) -> float:
        """The temperature the answer is really sampled at. Providers whose model ignores the requested
        one (OpenAI's reasoning models sample at the server's default) override this."""
        return request.temperature

    def cache_key(self, request: Request, sample_index: int = 0) -> str:
        scope = call_scope.get()
        repeat = scope[2] if scope else 0
        temperature = self.effective_temperature(request)
        options = {k: getattr(request, k) for k in SEMANTIC_OPTIONS} | {"temperature": temperature}
        body = {
            **self.cache_identity(),
            "messages": [
                {"role": m.role, "content": m.content, "images": [img.fingerprint() for img in m.images]}
                for m in request.messages
            ],
            "schema": request.schema,
            "options": options,
            # Only when set, so the keys of every earlier call stay as they were.
            **({"strict": True, "schema_name": request.schema_name} if request.strict_schema else {}),
            **({"image_at": [m.image_at for m in request.messages]} if any(m.image_at for m in request.messages) else {}),
            # Greedy decoding is repeatable; sampled calls are distinct draws, told apart by their index and
            # by the run's repeat number (repeat r of an item must not reuse repeat 0's draw).
            "sample": (sample_index if repeat == 0 else [repeat, sample_index]) if temperature > 0 else 0,
        }
        return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()

    async def _complete_once(self, request: Request, sample_index: int) -> Reply:
        rt = self.runtime
        if rt.cache is not None and hasattr(rt.cache, "check_usable"):
            rt.cache.check_usable()  # a store that cannot take this call's record refuses before it is sent (and billed)
        use_cache = rt.cache is not None and rt.use_cache and self.cacheable
        key = self.cache_key(request, sample_index) if rt.cache is not None else None
        if use_cache and key:
            hit = rt.cache.get_call(key)
            if hit is not None:
                rt.budget.cached_calls += 1
                truncated = _truncated(hit.get("finish_reason"))
                await cache_log(rt.cache, key, self.id, True, call_scope.get(), served_model=hit.get("served_model"), truncated=truncated)
                return Reply(
                    text=hit["text"],
                    usage=Usage(**hit.get("usage", {})),
                    model=hit.get("model") or self.id,
                    cost_usd=0.0,  # a cached call costs nothing now; its original cost stays in the store
                    cached=True,
                    finish_reason=hit.get("finish_reason"),
                    truncated=truncated,
                    served_model=hit.get("served_model"),
                )
        # Budget: hold this call's worst case against the caps before sending; settle it to the real usage.
        reservation = await rt.budget.reserve(*self.worst_case(request))
        started = time.perf_counter()
        try:
            gen, attempts = await with_retries(lambda: self.generate(request), rt.retry)
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
            # Sent, then abandoned (Ctrl-C, a cancelled task): the ledger still shows the call was made, and the
            # reservation is given back (a leaked one would make later callers of a reused budget wait forever).
            rt.budget.release(reservation)
            if key is not None:
                rt.cache.log_call(key, self.id, False, call_scope.get(), error="cancelled in flight; what the server billed is unknown")
            raise
        except MedpanelError as exc:
            rt.budget.release(reservation)
            if key is not None:
                rt.cache.log_call(key, self.id, False, call_scope.get(), error=str(exc))
            raise
        except Exception as exc:  # a provider bug or unexpected library error: classify, don't retry
            rt.budget.release(reservation)
            if key is not None:
                rt.cache.log_call(key, self.id, False, call_scope.get(), error=f"{type(exc).__name__}: {exc}")
            raise ModelCallError(f"{self.id} failed: {type(exc).__name__}: {exc}", kind="provider_error", model=self.id) from exc
        latency = time.perf_counter() - started
        cost = rt.prices.cost(self.name, gen.usage.input_tokens, gen.usage.output_tokens, self.base_url)
        rt.budget.settle(reservation, gen.usage.input_tokens, gen.usage.output_tokens, cost)
        truncated = _truncated(gen.finish_reason)
        if key is not None and self.cacheable:
            await cache_put(
                rt.cache,
                key,
                {
                    "model": self.id,
                    "text": gen.text,
                    "usage": gen.usage.model_dump(),
                    "finish_reason": gen.finish_reason,
                    "served_model": gen.model,
                    "truncated": truncated,
                    "cost_usd": cost,
                    "latency_s": latency,
                    "request": request.model_dump(mode="json", by_alias=True, exclude={"timeout_s"}),
                },
                call_scope.get(),
            )
        elif key is not None:  # every call is logged, cacheable or not, so a run can count what it spent
            await cache_log(rt.cache, key, self.id, False, call_scope.get(), usage=(gen.usage.input_tokens, gen.usage.output_tokens, cost),
                            served_model=gen.model, truncated=truncated)
        return Reply(
            text=gen.text,
            usage=gen.usage,
            model=self.id,
            cost_usd=cost,
            cached=False,
            finish_reason=gen.finish_reason,
            truncated=truncated,
            served_model=gen.model,
            attempts=attempts,
        )


def _truncated(finish_reason: str | None) -> bool:
    return finish_reason in TRUNCATED_REASONS
