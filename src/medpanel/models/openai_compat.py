"""Any OpenAI-compatible Chat Completions server (OpenAI, vLLM, llama.cpp server, Ollama, ...).

    openai:gpt-4o-mini
    openai:my-model@http://127.0.0.1:8000/v1?vision=true&key_env=VLLM_API_KEY&json_mode=json_object
    openai:my-r1@http://127.0.0.1:8000/v1?reasoning=1      (hidden reasoning counts: default budgets leave room)
    openai:qwen2.5-0.5b@http://127.0.0.1:8000/v1?small=1   (a small model: protocols keep compact budgets)
    openai:m@http://h1:8000/v1|http://h2:8000/v1?endpoint_concurrency=32   (a pool of servers: models/endpoints.py)
    openai:gpt-4o-mini?rpm=500&tpm=200000      (the account's limits: requests and tokens per minute)

Each endpoint paces itself (models/adaptive.py): a window of requests in flight that grows while answers
come back promptly and narrows when latency rises or the server is overloaded, a pace learned from its
429s, Retry-After honoured by every request to it; `?adaptive=0` turns the learning off.

The call itself is one POST over aiohttp (models/chat_http.py: the SDK's per-request work was most of the
client's time at hundreds of calls in flight). `Model.complete` retries, and only what we classify as
transient here (429, 5xx, timeouts, dropped connections, undecodable bodies). A rejection that
names a parameter we sent is not transient whatever its status: for `response_format` the other
structured-output form is tried and remembered for the server (models/capabilities.py).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import time
from email.utils import parsedate_to_datetime
from typing import Any

from medpanel.errors import ModelCallError, TransientModelError, UsageError
from medpanel.models.base import Generation, Model, Request, Usage, thinking_name
from medpanel.models.chat_http import ChatTransport, StatusError, Unreachable, resolve_base_url
from medpanel.models.capabilities import FORMS, ServerMemory, UnsupportedParameter, forms_in_order, rejected_parameter
from medpanel.models.adaptive import positive, shared_gate
from medpanel.models import gate_memory
from medpanel.models.endpoints import ENDPOINT_ERRORS, OVERLOAD_ERRORS, SEPARATOR, normal_url, pool_urls, shared_pool
from medpanel.models.registry import spec_flag
from medpanel.models.runtime import Runtime
from medpanel.models.structured import server_schema

KNOWN_PARAMS = ("vision", "key_env", "json_mode", "price_in", "price_out", "small", "reasoning", "endpoint_concurrency", "rpm", "tpm",
                "adaptive")
JSON_MODES = FORMS  # the form tried first; the other is the fallback when a server rejects it
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
# Local servers usually ignore the key; one is always sent, as the SDKs do.
PLACEHOLDER_KEY = "not-needed"



def parse_retry_after(headers: Any) -> float | None:
    """Seconds to wait from Retry-After (seconds or an HTTP date) or OpenAI's retry-after-ms."""
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _price(value: str, name: str) -> float:
    try:
        price = float(value)
    except ValueError:
        price = -1.0
    if price < 0:
        raise UsageError(f"Spec parameter {name}={value!r} is not a price.", f"Give {name} in USD per 1,000 tokens, e.g. {name}=0.0005.")
    return price


@functools.lru_cache(maxsize=512)  # asked twice a call
def _reasoning_model(name: str) -> bool:
    """OpenAI's o-series (o1, o3, o4-mini, ...) and the GPT-5 family (gpt-5, gpt-5-mini, gpt-5-nano, dated
    snapshots, "openai/gpt-5-mini" via a gateway; not the non-reasoning gpt-5-chat*): they refuse max_tokens
    and a temperature other than 1."""
    base = name.rsplit("/", 1)[-1].lower()
    return bool(re.match(r"^o\d", base) or (re.match(r"^gpt-5(?:\.\d+)?(?:-|$)", base) and not re.search(r"-chat(?:-|$)", base)))


def _ignores_temperature(name: str) -> bool:
    """Models that sample at their server's default whatever temperature they are sent: the o-series (we
    send none) and DeepSeek's API reasoner (it accepts one and disregards it)."""
    return _reasoning_model(name) or name.rsplit("/", 1)[-1].lower() == "deepseek-reasoner"


def _interleaved(message: Any) -> list[dict]:
    """Text and image parts in order, each image at its offset in the content; empty text parts are left out."""
    parts: list[dict] = []
    start = 0
    for offset, image in zip(message.image_at, message.images):
        if message.content[start:offset]:
            parts.append({"type": "text", "text": message.content[start:offset]})
        parts.append({"type": "image_url", "image_url": {"url": image.data_url()}})
        start = offset
    if message.content[start:]:
        parts.append({"type": "text", "text": message.content[start:]})
    return parts


class OpenAIModel(Model):
    provider = "openai"
    supports_json_schema = True
    billed = True  # a dollar cap needs this model's price (Runtime.check_prices)

    def __init__(
        self,
        name: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        vision: bool = False,
        json_mode: str = "json_schema",
        small: bool = False,
        reasoning: bool | None = None,
        endpoint_concurrency: int | None = None,
        rpm: float | None = None,
        tpm: float | None = None,
        adaptive: bool | None = None,
        runtime: Runtime | None = None,
    ) -> None:
        super().__init__(name, runtime)
        self.small = small
        # Unless told, trust the name: o-series always reason; R1/QwQ-style names very likely do.
        self.reasoning = (_reasoning_model(name) or thinking_name(name)) if reasoning is None else reasoning
        self.reasoning_flag = reasoning  # as the spec said (?reasoning=1): such a model is taken to sample at its default
        if json_mode not in JSON_MODES:
            raise UsageError(f"Unknown json_mode '{json_mode}' for {self.id}.", f"Use one of: {', '.join(JSON_MODES)}.")
        # Several base URLs (url1|url2|...): one model behind a pool of servers (models/endpoints.py), named by
        # its endpoints normalised and sorted, so their order in the spec makes no other model (cache, prices).
        urls = pool_urls(base_url)
        self.base_url = SEPARATOR.join(urls) if urls else base_url
        # Every endpoint paces itself (models/adaptive.py), one gate per URL in the process.
        limits = {"cap": endpoint_concurrency, "rpm": rpm, "tpm": tpm, "adaptive": adaptive}
        # The gate is named by where the calls really go (OPENAI_BASE_URL included), as the transport sends them.
        gates = [shared_gate(u, name, **limits) for u in (urls or [normal_url(resolve_base_url(base_url))])]
        self.pool = shared_pool(urls, endpoint_concurrency, gates, name) if urls else None
        self.gate = None if urls else gates[0]
        # Many calls may wait on its gate at once: the runner may keep many items in flight (RunConfig.concurrency).
        self.paced = gates[0].adaptive
        self.api_key = api_key
        self.supports_vision = vision
        self.json_mode = json_mode  # as configured: part of the cache identity, whatever the server turns out to take
        self.memory = ServerMemory(base_url, name, self.runtime)
        # One transport per endpoint; each keeps a session per event loop (a program may call asyncio.run
        # more than once).
        self._transports: dict[str | None, ChatTransport] = {}

    @classmethod
    def from_spec(cls, spec: Any, runtime: Runtime, **kwargs: Any) -> "OpenAIModel":
        params = dict(spec.params)
        unknown = sorted(set(params) - set(KNOWN_PARAMS))
        if unknown:
            raise UsageError(
                f"Unknown parameter(s) {', '.join(unknown)} in model spec for openai:{spec.name}.",
                f"Known parameters: {', '.join(KNOWN_PARAMS)}.",
            )
        vision = spec_flag(params, "vision", False)
        small = spec_flag(params, "small", False)
        reasoning = spec_flag(params, "reasoning", False) if "reasoning" in params else None
        json_mode = params.get("json_mode", "json_schema").strip() or "json_schema"
        key_env = params.get("key_env", DEFAULT_KEY_ENV).strip() or DEFAULT_KEY_ENV
        api_key = kwargs.pop("api_key", None) or os.environ.get(key_env)
        from medpanel.redact import add_secret, add_secret_env

        add_secret_env(key_env)  # never printed, stored or reported, even when a server echoes it
        add_secret(api_key)
        if not api_key:
            if not spec.base_url:
                raise UsageError(
                    f"No API key for openai:{spec.name}: the environment variable {key_env} is not set.",
                    f"Export it (export {key_env}=sk-...), or point the spec at a local server, e.g. openai:{spec.name}@http://127.0.0.1:8000/v1.",
                )
            api_key = PLACEHOLDER_KEY
        if "price_in" in params or "price_out" in params:
            known = runtime.prices.lookup(spec.name, spec.base_url) or (0.0, 0.0)
            price_in = _price(params["price_in"], "price_in") if "price_in" in params else known[0]
            price_out = _price(params["price_out"], "price_out") if "price_out" in params else known[1]
            runtime.prices.set(spec.name, (price_in, price_out), spec.base_url)  # this server's price only
        cap = None
        if "endpoint_concurrency" in params:
            try:
                cap = int(params["endpoint_concurrency"])
                if cap < 1:
                    raise ValueError
            except ValueError:
                raise UsageError(f"endpoint_concurrency={params['endpoint_concurrency']!r} in the spec of openai:{spec.name} is not a whole number above 0.",
                                 "Give the most requests in flight per endpoint, e.g. ?endpoint_concurrency=32.") from None
        model = f"openai:{spec.name}"
        rpm = positive(params["rpm"], "rpm", model, "500") if "rpm" in params else None
        tpm = positive(params["tpm"], "tpm", model, "200000") if "tpm" in params else None
        adaptive = spec_flag(params, "adaptive", True) if "adaptive" in params else None
        return cls(spec.name, base_url=spec.base_url, api_key=api_key, vision=vision, json_mode=json_mode, small=small,
                   reasoning=reasoning, endpoint_concurrency=cap, rpm=rpm, tpm=tpm, adaptive=adaptive, runtime=runtime, **kwargs)

    def cache_identity(self) -> dict:
        # The same model name on two servers (or two quantisations) are different models.
        return {"model": self.id, "base_url": self.base_url, "json_mode": self.json_mode, "vision": self.supports_vision}

    def effective_temperature(self, request: Request) -> float:
        # Such a model samples at its default (1 for OpenAI's) however it is asked: every call is a fresh
        # draw, so sample indices and repeats must not share a cache entry. A spec marked ?reasoning=1 is
        # taken to sample at its server's default too (reasoning servers commonly override the temperature).
        return 1.0 if _ignores_temperature(self.name) or self.reasoning_flag is True else request.temperature

    # ------------------------------------------------------------------ client

    def _transport(self, url: str | None) -> ChatTransport:
        transport = self._transports.get(url)
        if transport is None:
            key = self.api_key or os.environ.get(DEFAULT_KEY_ENV) or PLACEHOLDER_KEY
            transport = self._transports[url] = ChatTransport(url, key)
        return transport

    async def aclose(self) -> None:
        for transport in self._transports.values():
            await transport.close()

    # ------------------------------------------------------------------ request building

    def wire_messages(self, request: Request) -> list[dict]:
        """Our messages in Chat Completions form; images as parts for vision models, captions otherwise."""
        out: list[dict] = []
        for m in request.messages:
            if m.images and self.supports_vision and m.image_at is not None:
                out.append({"role": m.role, "content": _interleaved(m)})
            elif m.images and self.supports_vision:
                parts: list[dict] = [{"type": "text", "text": m.text_with_captions()}]
                parts += [{"type": "image_url", "image_url": {"url": img.data_url()}} for img in m.images]
                out.append({"role": m.role, "content": parts})
            else:
                out.append({"role": m.role, "content": m.text_with_captions()})
        if request.schema is not None and not request.strict_schema:
            # Many compatible servers ignore response_format, so say it in words as well.
            note = (
                "Reply with one JSON object that conforms to the JSON schema below, and nothing else "
                "(no prose, no code fence).\n" + json.dumps(request.schema, separators=(",", ":"))
            )
            if out and out[0]["role"] == "system" and isinstance(out[0]["content"], str):
                out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + note}
            else:
                out.insert(0, {"role": "system", "content": note})
        return out

    def response_format(self, request: Request, form: str | None = None) -> dict | None:
        if request.schema is None:
            return None
        # The server sees a copy its grammar engine can compile (no huge repetition bounds); `complete`
        # validates against the full schema. A strict request reproduces a released one: sent as given.
        schema = request.schema if request.strict_schema else server_schema(request.schema)
        if (form or self.json_mode) == "json_object":
            return {"type": "json_object", "schema": schema}  # llama.cpp server's form
        # strict=False unless asked: strict mode rejects schemas pydantic commonly emits (optional fields, defaults).
        return {"type": "json_schema", "json_schema": {"name": request.schema_name, "schema": schema, "strict": request.strict_schema}}

    def request_args(self, request: Request, form: str | None = None) -> dict:
        args: dict[str, Any] = {"model": self.name, "messages": self.wire_messages(request)}
        if _reasoning_model(self.name):
            # OpenAI's reasoning models take max_completion_tokens and only their default temperature.
            args["max_completion_tokens"] = request.max_tokens
        else:
            args |= {"temperature": request.temperature, "max_tokens": request.max_tokens}
        for key in ("top_p", "seed", "stop", "frequency_penalty", "presence_penalty"):
            value = getattr(request, key)
            if value is not None:
                args[key] = value
        fmt = self.response_format(request, form)
        if fmt is not None:
            args["response_format"] = fmt
        return args

    # ------------------------------------------------------------------ the call

    async def generate(self, request: Request) -> Generation:
        if request.schema is None:
            return await self._send(request, self.request_args(request))
        forms = forms_in_order(self.memory.form() or self.json_mode)
        refused: list[UnsupportedParameter] = []
        for form in forms:
            try:
                generation = await self._send(request, self.request_args(request, form))
            except UnsupportedParameter as exc:
                if exc.param != "response_format":
                    raise
                refused.append(exc)
                self.memory.refused(form)
                continue
            if refused:  # a form was rejected and this one was taken: say so once, for the run and the store
                self.memory.learn(form, [forms[i] for i in range(len(refused))])
            return generation
        said = "; ".join(f"{form}: {exc.detail}" for form, exc in zip(forms, refused))
        raise ModelCallError(
            f"{self.id}: the server at {self.base_url or 'the OpenAI API'} rejected every structured-output form ({said}).",
            "Use a server that enforces JSON schemas (llama.cpp, vLLM, SGLang, OpenAI), or upgrade this one.",
            kind="unsupported_parameter",
            model=self.id,
        )

    async def _send(self, request: Request, args: dict) -> Generation:
        if self.pool is None:
            return await self._send_gated(request, args)
        return await self._send_pooled(request, args)

    def _tokens(self, request: Request, gate_has_tpm: bool) -> int:
        """What a request may cost against a tokens-per-minute limit: its prompt's estimate plus max_tokens."""
        return self.worst_case(request)[0] if gate_has_tpm else 0

    async def _send_gated(self, request: Request, args: dict) -> Generation:
        """One attempt at the one server, once its gate lets it go. The wait is a queue of this client's own
        (its window, its pace), so the attempt's `timeout_s` starts when the request is sent: a run with
        many items waiting for a slow rate limit does not time them out."""
        gate = self.gate
        self._recall(gate)
        ticket = await gate.acquire(None, self._tokens(request, gate.tokens is not None))
        try:
            generation = await self._send_to(self.base_url, request, args)
        except TransientModelError as exc:
            outcome = "limited" if exc.kind == "rate_limit" else "overloaded" if exc.kind in OVERLOAD_ERRORS else "neutral"
            gate.release(ticket, outcome, retry_after=exc.retry_after)
            self._remember(gate)
            raise
        except BaseException:
            gate.release(ticket, "neutral")
            raise
        gate.release(ticket, "ok", output_tokens=generation.usage.output_tokens, input_tokens=generation.usage.input_tokens,
                     used_tokens=generation.usage.input_tokens + generation.usage.output_tokens)
        self._remember(gate)
        return generation

    def _recall(self, gate) -> None:
        """Start a gate that has sent nothing yet from what the store kept of it (models/gate_memory.py)."""
        if not gate.recalled:
            try:
                gate_memory.recall(gate, self.runtime.cache, self.name)
            except Exception:  # noqa: BLE001  a store that cannot be read: the gate starts as a stranger
                pass

    def _remember(self, gate) -> None:
        try:
            gate_memory.remember(gate, self.runtime.cache, self.name)
        except Exception:  # noqa: BLE001  memory is a head start, never a reason to fail an answered call
            pass

    async def _send_pooled(self, request: Request, args: dict) -> Generation:
        """One attempt over the pool: the least busy usable endpoint, then (on an endpoint's failure) each other
        one at most once; the last failure goes to the retry policy. Each request to an endpoint has the
        attempt's `timeout_s`; waiting for a free endpoint is this client's own queue, as at one server."""
        tried: set[str] = set()
        last: TransientModelError | None = None
        tokens = self._tokens(request, any(e.gate.tokens is not None for e in self.pool.endpoints))
        for endpoint in self.pool.endpoints:
            self._recall(endpoint.gate)
        while True:
            lease = await self.pool.acquire(tried, None, tokens)
            if lease is None:
                if last is not None:
                    raise last
                raise TransientModelError(f"{self.id}: no endpoint of its pool ({len(self.pool.endpoints)}) can take the request "
                                          f"(all down or rate limited).", kind="connection", model=self.id,
                                          retry_after=self.pool.next_ready())
            url = lease.endpoint.url
            try:
                generation = await self._send_to(url, request, args)
            except TransientModelError as exc:
                if exc.kind not in ENDPOINT_ERRORS:
                    self.pool.release(lease, "neutral")
                    raise
                self.pool.release(lease, "limited" if exc.kind == "rate_limit" else "failed", exc.retry_after,
                                  overloaded=exc.kind in OVERLOAD_ERRORS)
                self._remember(lease.endpoint.gate)
                tried.add(url)
                last = exc
                continue
            except BaseException:  # refused for the request's own sake (4xx, a rejected parameter), or cancelled
                self.pool.release(lease, "neutral")
                raise
            self.pool.release(lease, "ok", output_tokens=generation.usage.output_tokens, input_tokens=generation.usage.input_tokens,
                              used_tokens=generation.usage.input_tokens + generation.usage.output_tokens)
            self._remember(lease.endpoint.gate)
            return generation

    async def _send_to(self, url: str | None, request: Request, args: dict, timeout_s: float | None = None) -> Generation:
        """One request to one server; `timeout_s` (default: the request's) is its total deadline."""
        transport = self._transport(url)
        limit = request.timeout_s if timeout_s is None else timeout_s
        at = f" at {url}" if self.pool is not None else ""  # which endpoint of a pool said it
        try:
            # A total deadline for the attempt, body included: a server trickling bytes cannot hold a call for ever.
            async with asyncio.timeout(limit):
                response = await transport.post(args)
        except TimeoutError:
            raise TransientModelError(f"{self.id}{at} did not finish within {limit:g}s.", kind="timeout", model=self.id) from None
        except Unreachable as exc:
            said = "connection refused" if exc.refused else str(exc)
            raise TransientModelError(f"{self.id}: cannot reach {url or 'the OpenAI API'} ({said}).", kind="connection", model=self.id) from None
        except StatusError as exc:
            param = rejected_parameter(exc.status, exc.body, exc.message(), args)
            if param is not None:
                raise UnsupportedParameter(self.id, param, exc.message()[:500], exc.status) from None
            raise self._status_error(exc, url) from None
        return self.to_generation(response)

    def to_generation(self, response: Any) -> Generation:
        """Check the decoded response has what we need; anything missing is a (retryable) broken body."""
        if not isinstance(response, dict):
            shown = response if isinstance(response, str) else type(response).__name__
            raise TransientModelError(f"{self.id} sent a body that could not be decoded as a Chat Completions response: {str(shown)[:200]!r}",
                                      kind="malformed_response", model=self.id)
        choices = response.get("choices")
        if not isinstance(choices, list) or not choices:
            raise TransientModelError(f"{self.id} sent a response with no choices: {json.dumps(response)[:200]!r}", kind="malformed_response", model=self.id)
        first = choices[0] if isinstance(choices[0], dict) else {}
        message = first.get("message")
        if not isinstance(message, dict):
            raise TransientModelError(f"{self.id} sent a choice with no message.", kind="malformed_response", model=self.id)
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise TransientModelError(f"{self.id} sent message content of type {type(content).__name__}.", kind="malformed_response", model=self.id)
        usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}

        def count(name: str) -> int:
            try:
                return int(usage.get(name) or 0)
            except (TypeError, ValueError):
                return 0

        finish = first.get("finish_reason")
        served = response.get("model")
        return Generation(
            text=content or "",
            usage=Usage(input_tokens=count("prompt_tokens"), output_tokens=count("completion_tokens")),
            finish_reason=finish if isinstance(finish, str) else None,
            model=served if isinstance(served, str) and served else self.name,
        )

    def _status_error(self, exc: StatusError, url: str | None = None) -> ModelCallError:
        status = exc.status
        detail = exc.message()
        said = f": {detail}" if detail else ""
        at = f" at {url}" if self.pool is not None else ""
        if status == 429:
            return TransientModelError(f"{self.id}{at} is rate limited (HTTP 429){said}", kind="rate_limit", model=self.id, retry_after=parse_retry_after(exc.headers))
        if status >= 500:
            return TransientModelError(f"{self.id}{at}: server error (HTTP {status}){said}", kind="server_error", model=self.id, retry_after=parse_retry_after(exc.headers))
        if status == 408:
            return TransientModelError(f"{self.id}: the server timed out the request (HTTP 408){said}", kind="timeout", model=self.id)
        where = url or self.base_url or "the OpenAI API"
        if status in (401, 403):
            return ModelCallError(
                f"{self.id}: the server refused the API key (HTTP {status}){said}",
                "Check the key in the environment variable the spec names (key_env, default OPENAI_API_KEY) is valid for this server.",
                kind="auth",
                model=self.id,
            )
        if status == 404:
            return ModelCallError(
                f"{self.id}: not found at {where} (HTTP 404){said}",
                "Check the model name and the base URL (it usually ends in /v1); GET <base_url>/models lists what the server offers.",
                kind="not_found",
                model=self.id,
            )
        if status == 400:
            return ModelCallError(
                f"{self.id}: the server rejected the request (HTTP 400){said}",
                "Check the prompt fits the model's context and the server supports the options used (e.g. json_mode, vision).",
                kind="bad_request",
                model=self.id,
            )
        return ModelCallError(f"{self.id}: request failed (HTTP {status}){said}", "The server refused the request; see its message.", kind="client_error", model=self.id)
