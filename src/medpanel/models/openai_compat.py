"""Any OpenAI-compatible Chat Completions server (OpenAI, vLLM, llama.cpp server, Ollama, ...).

    openai:gpt-4o-mini
    openai:my-model@http://127.0.0.1:8000/v1?vision=true&key_env=VLLM_API_KEY&json_mode=json_object
    openai:my-r1@http://127.0.0.1:8000/v1?reasoning=1      (hidden reasoning counts: default budgets leave room)
    openai:qwen2.5-0.5b@http://127.0.0.1:8000/v1?small=1   (a small model: protocols keep compact budgets)
    openai:m@http://h1:8000/v1|http://h2:8000/v1?endpoint_concurrency=32   (a pool of servers: models/endpoints.py)

The SDK's own retries are off (max_retries=0): `Model.complete` retries, and only what we classify
as transient here (429, 5xx, timeouts, dropped connections, undecodable bodies). A rejection that
names a parameter we sent is not transient whatever its status: for `response_format` the other
structured-output form is tried and remembered for the server (models/capabilities.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from email.utils import parsedate_to_datetime
from typing import Any

import openai
from openai import AsyncOpenAI

from medpanel.errors import ModelCallError, TransientModelError, UsageError
from medpanel.models.base import Generation, Model, Request, Usage, thinking_name
from medpanel.models.capabilities import FORMS, ServerMemory, UnsupportedParameter, forms_in_order, rejected_parameter
from medpanel.models.endpoints import ENDPOINT_ERRORS, SEPARATOR, pool_urls, shared_pool
from medpanel.models.registry import spec_flag
from medpanel.models.runtime import Runtime
from medpanel.models.structured import server_schema

KNOWN_PARAMS = ("vision", "key_env", "json_mode", "price_in", "price_out", "small", "reasoning", "endpoint_concurrency")
JSON_MODES = FORMS  # the form tried first; the other is the fallback when a server rejects it
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
# Local servers usually ignore the key, but the SDK insists on one.
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


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    return exc.message or ""


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


def _refused(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(8):  # walk a bounded cause chain
        seen = seen.__cause__ or seen.__context__ if seen is not None else None
        if seen is None:
            return False
        if isinstance(seen, ConnectionRefusedError) or any(isinstance(a, ConnectionRefusedError) for a in getattr(seen, "args", ())):
            return True
    return False


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


def _http_client() -> Any:
    """The SDK's aiohttp transport when installed: at 64+ calls in flight the default httpx pool spends
    most of its time scanning its own connections (bench/bench_orchestration.py measures the difference)."""
    try:
        return openai.DefaultAioHttpClient()
    except RuntimeError:  # the aiohttp extra is missing: the SDK's default client still works
        return None


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
        if endpoint_concurrency is not None and not urls:
            raise UsageError(f"endpoint_concurrency is set for {name}, which has one base URL.",
                             "It caps each endpoint of a pool (url1|url2|...); for one server, use --concurrency.")
        self.base_url = SEPARATOR.join(urls) if urls else base_url
        self.pool = shared_pool(urls, endpoint_concurrency) if urls else None
        self.api_key = api_key
        self.supports_vision = vision
        self.json_mode = json_mode  # as configured: part of the cache identity, whatever the server turns out to take
        self.memory = ServerMemory(base_url, name, self.runtime)
        # One SDK client per event loop: its connection pool belongs to the loop that opened it, and a
        # program may call asyncio.run more than once.
        self._clients: dict[tuple[int, str | None], tuple[asyncio.AbstractEventLoop, AsyncOpenAI]] = {}

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
                                 "Give the requests in flight per endpoint, e.g. ?endpoint_concurrency=32.") from None
        return cls(spec.name, base_url=spec.base_url, api_key=api_key, vision=vision, json_mode=json_mode, small=small,
                   reasoning=reasoning, endpoint_concurrency=cap, runtime=runtime, **kwargs)

    def cache_identity(self) -> dict:
        # The same model name on two servers (or two quantisations) are different models.
        return {"model": self.id, "base_url": self.base_url, "json_mode": self.json_mode, "vision": self.supports_vision}

    def effective_temperature(self, request: Request) -> float:
        # Such a model samples at its default (1 for OpenAI's) however it is asked: every call is a fresh
        # draw, so sample indices and repeats must not share a cache entry. A spec marked ?reasoning=1 is
        # taken to sample at its server's default too (reasoning servers commonly override the temperature).
        return 1.0 if _ignores_temperature(self.name) or self.reasoning_flag is True else request.temperature

    # ------------------------------------------------------------------ client

    def _client(self, url: str | None) -> AsyncOpenAI:
        loop = asyncio.get_running_loop()
        held = self._clients.get((id(loop), url))
        if held is not None and held[0] is loop:
            return held[1]
        # Forget clients of loops that are gone; their sockets died with them.
        self._clients = {k: v for k, v in self._clients.items() if not v[0].is_closed()}
        client = AsyncOpenAI(api_key=self.api_key or os.environ.get(DEFAULT_KEY_ENV) or PLACEHOLDER_KEY, base_url=url,
                             max_retries=0, http_client=_http_client())
        self._clients[(id(loop), url)] = (loop, client)
        return client

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        for key in [k for k in self._clients if k[0] == id(loop)]:
            await self._clients.pop(key)[1].close()

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
            return await self._send_to(self.base_url, request, args)
        return await self._send_pooled(request, args)

    async def _send_pooled(self, request: Request, args: dict) -> Generation:
        """One attempt over the pool, within the attempt's `timeout_s` in all: the least busy usable endpoint,
        then (on an endpoint's failure) each other one at most once; the last failure goes to the retry policy."""
        deadline = time.monotonic() + request.timeout_s
        tried: set[str] = set()
        last: TransientModelError | None = None
        while True:
            lease = await self.pool.acquire(tried, deadline)
            if lease is None:
                if last is not None:
                    raise last
                raise TransientModelError(f"{self.id}: no endpoint of its pool ({len(self.pool.endpoints)}) could take the request within "
                                          f"{request.timeout_s:g}s (all down, rate limited or full).", kind="connection", model=self.id,
                                          retry_after=self.pool.next_ready())
            url = lease.endpoint.url
            try:
                generation = await self._send_to(url, request, args, max(0.001, deadline - time.monotonic()))
            except TransientModelError as exc:
                if exc.kind not in ENDPOINT_ERRORS:
                    self.pool.release(lease, "neutral")
                    raise
                self.pool.release(lease, "limited" if exc.kind == "rate_limit" else "failed", exc.retry_after)
                tried.add(url)
                last = exc
                continue
            except BaseException:  # refused for the request's own sake (4xx, a rejected parameter), or cancelled
                self.pool.release(lease, "neutral")
                raise
            self.pool.release(lease, "ok")
            return generation

    async def _send_to(self, url: str | None, request: Request, args: dict, timeout_s: float | None = None) -> Generation:
        """One request to one server; `timeout_s` (default: the request's) is its total deadline."""
        client = self._client(url)
        limit = request.timeout_s if timeout_s is None else timeout_s
        at = f" at {url}" if self.pool is not None else ""  # which endpoint of a pool said it
        try:
            # The SDK's timeout is per read, so a server trickling bytes could hold a call for ever:
            # asyncio.timeout makes timeout_s a total deadline for the attempt, body included.
            async with asyncio.timeout(limit):
                response = await client.chat.completions.create(**args, timeout=limit)
        except TimeoutError:
            raise TransientModelError(f"{self.id}{at} did not finish within {limit:g}s.", kind="timeout", model=self.id) from None
        except openai.APITimeoutError as exc:  # before APIConnectionError, its parent
            if _refused(exc):  # the aiohttp transport reports a refused connection as a connect timeout
                raise TransientModelError(f"{self.id}: cannot reach {url or 'the OpenAI API'} (connection refused).", kind="connection", model=self.id) from None
            raise TransientModelError(f"{self.id}{at} timed out after {limit:g}s.", kind="timeout", model=self.id) from None
        except openai.APIConnectionError as exc:
            raise TransientModelError(f"{self.id}: cannot reach {url or 'the OpenAI API'} ({exc}).", kind="connection", model=self.id) from None
        except openai.APIResponseValidationError as exc:
            raise TransientModelError(f"{self.id}{at} sent a response that does not fit the Chat Completions format: {exc.message}", kind="malformed_response", model=self.id) from None
        except openai.APIStatusError as exc:
            param = rejected_parameter(exc.status_code, exc.body, _server_message(exc), args)
            if param is not None:
                raise UnsupportedParameter(self.id, param, _server_message(exc)[:500], exc.status_code) from None
            raise self._status_error(exc, url) from None
        except ValueError as exc:  # json.JSONDecodeError on a truncated body, pydantic errors on odd shapes
            raise TransientModelError(f"{self.id}{at} sent a body that could not be decoded ({type(exc).__name__}: {exc}).", kind="malformed_response", model=self.id) from None
        return self.to_generation(response)

    def to_generation(self, response: Any) -> Generation:
        """Check the decoded response has what we need; anything missing is a (retryable) broken body."""
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices:
            shown = response if isinstance(response, str) else type(response).__name__
            raise TransientModelError(f"{self.id} sent a response with no choices: {str(shown)[:200]!r}", kind="malformed_response", model=self.id)
        first = choices[0]
        message = getattr(first, "message", None)
        if message is None:
            raise TransientModelError(f"{self.id} sent a choice with no message.", kind="malformed_response", model=self.id)
        content = getattr(message, "content", None)
        if content is not None and not isinstance(content, str):
            raise TransientModelError(f"{self.id} sent message content of type {type(content).__name__}.", kind="malformed_response", model=self.id)
        usage = getattr(response, "usage", None)
        return Generation(
            text=content or "",
            usage=Usage(
                input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            ),
            finish_reason=getattr(first, "finish_reason", None),
            model=getattr(response, "model", None) or self.name,
        )

    def _status_error(self, exc: openai.APIStatusError, url: str | None = None) -> ModelCallError:
        status = exc.status_code
        detail = _server_message(exc)
        said = f": {detail}" if detail else ""
        at = f" at {url}" if self.pool is not None else ""
        if status == 429:
            return TransientModelError(f"{self.id}{at} is rate limited (HTTP 429){said}", kind="rate_limit", model=self.id, retry_after=parse_retry_after(exc.response.headers))
        if status >= 500:
            return TransientModelError(f"{self.id}{at}: server error (HTTP {status}){said}", kind="server_error", model=self.id, retry_after=parse_retry_after(exc.response.headers))
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
