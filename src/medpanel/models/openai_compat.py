"""Any OpenAI-compatible Chat Completions server (OpenAI, vLLM, llama.cpp server, Ollama, ...).

    openai:gpt-4o-mini
    openai:my-model@http://127.0.0.1:8000/v1?vision=true&key_env=VLLM_API_KEY&json_mode=json_object

The SDK's own retries are off (max_retries=0): `Model.complete` retries, and only what we classify
as transient here (429, 5xx, timeouts, dropped connections, undecodable bodies).
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
from medpanel.models.base import Generation, Model, Request, Usage
from medpanel.models.runtime import Runtime

KNOWN_PARAMS = ("vision", "key_env", "json_mode", "price_in", "price_out")
JSON_MODES = ("json_schema", "json_object")
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
# Local servers usually ignore the key, but the SDK insists on one.
PLACEHOLDER_KEY = "not-needed"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


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


def _flag(value: str, name: str) -> bool:
    low = value.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise UsageError(f"Spec parameter {name}={value!r} is not a yes/no value.", f"Write {name}=true or {name}=false.")


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
    """OpenAI's o-series (o1, o3, o4-mini, ...): they refuse max_tokens and a temperature other than 1."""
    return bool(re.match(r"^o\d", name.rsplit("/", 1)[-1]))


def _refused(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(8):  # walk a bounded cause chain
        seen = seen.__cause__ or seen.__context__ if seen is not None else None
        if seen is None:
            return False
        if isinstance(seen, ConnectionRefusedError) or any(isinstance(a, ConnectionRefusedError) for a in getattr(seen, "args", ())):
            return True
    return False


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

    def __init__(
        self,
        name: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        vision: bool = False,
        json_mode: str = "json_schema",
        runtime: Runtime | None = None,
    ) -> None:
        super().__init__(name, runtime)
        if json_mode not in JSON_MODES:
            raise UsageError(f"Unknown json_mode '{json_mode}' for {self.id}.", f"Use one of: {', '.join(JSON_MODES)}.")
        self.base_url = base_url
        self.api_key = api_key
        self.supports_vision = vision
        self.json_mode = json_mode
        # One SDK client per event loop: its connection pool belongs to the loop that opened it, and a
        # program may call asyncio.run more than once.
        self._clients: dict[int, tuple[asyncio.AbstractEventLoop, AsyncOpenAI]] = {}

    @classmethod
    def from_spec(cls, spec: Any, runtime: Runtime, **kwargs: Any) -> "OpenAIModel":
        params = dict(spec.params)
        unknown = sorted(set(params) - set(KNOWN_PARAMS))
        if unknown:
            raise UsageError(
                f"Unknown parameter(s) {', '.join(unknown)} in model spec for openai:{spec.name}.",
                f"Known parameters: {', '.join(KNOWN_PARAMS)}.",
            )
        vision = _flag(params["vision"], "vision") if "vision" in params else False
        json_mode = params.get("json_mode", "json_schema").strip() or "json_schema"
        key_env = params.get("key_env", DEFAULT_KEY_ENV).strip() or DEFAULT_KEY_ENV
        api_key = kwargs.pop("api_key", None) or os.environ.get(key_env)
        if not api_key:
            if not spec.base_url:
                raise UsageError(
                    f"No API key for openai:{spec.name}: the environment variable {key_env} is not set.",
                    f"Export it (export {key_env}=sk-...), or point the spec at a local server, e.g. openai:{spec.name}@http://127.0.0.1:8000/v1.",
                )
            api_key = PLACEHOLDER_KEY
        if "price_in" in params or "price_out" in params:
            known = runtime.prices.lookup(spec.name) or (0.0, 0.0)
            price_in = _price(params["price_in"], "price_in") if "price_in" in params else known[0]
            price_out = _price(params["price_out"], "price_out") if "price_out" in params else known[1]
            runtime.prices.prices[spec.name] = (price_in, price_out)
        return cls(spec.name, base_url=spec.base_url, api_key=api_key, vision=vision, json_mode=json_mode, runtime=runtime, **kwargs)

    def cache_identity(self) -> dict:
        # The same model name on two servers (or two quantisations) are different models.
        return {"model": self.id, "base_url": self.base_url, "json_mode": self.json_mode, "vision": self.supports_vision}

    # ------------------------------------------------------------------ client

    def _client(self) -> AsyncOpenAI:
        loop = asyncio.get_running_loop()
        held = self._clients.get(id(loop))
        if held is not None and held[0] is loop:
            return held[1]
        # Forget clients of loops that are gone; their sockets died with them.
        self._clients = {k: v for k, v in self._clients.items() if not v[0].is_closed()}
        client = AsyncOpenAI(api_key=self.api_key or os.environ.get(DEFAULT_KEY_ENV) or PLACEHOLDER_KEY, base_url=self.base_url,
                             max_retries=0, http_client=_http_client())
        self._clients[id(loop)] = (loop, client)
        return client

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        held = self._clients.pop(id(loop), None)
        if held is not None:
            await held[1].close()

    # ------------------------------------------------------------------ request building

    def wire_messages(self, request: Request) -> list[dict]:
        """Our messages in Chat Completions form; images as parts for vision models, captions otherwise."""
        out: list[dict] = []
        for m in request.messages:
            if m.images and self.supports_vision:
                parts: list[dict] = [{"type": "text", "text": m.text_with_captions()}]
                parts += [{"type": "image_url", "image_url": {"url": img.data_url()}} for img in m.images]
                out.append({"role": m.role, "content": parts})
            else:
                out.append({"role": m.role, "content": m.text_with_captions()})
        if request.schema is not None:
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

    def response_format(self, request: Request) -> dict | None:
        if request.schema is None:
            return None
        if self.json_mode == "json_object":
            return {"type": "json_object", "schema": request.schema}  # llama.cpp server's form
        # strict=False: strict mode rejects schemas pydantic commonly emits (optional fields, defaults).
        return {"type": "json_schema", "json_schema": {"name": request.schema_name, "schema": request.schema, "strict": False}}

    def request_args(self, request: Request) -> dict:
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
        fmt = self.response_format(request)
        if fmt is not None:
            args["response_format"] = fmt
        return args

    # ------------------------------------------------------------------ the call

    async def generate(self, request: Request) -> Generation:
        args = self.request_args(request)
        client = self._client()
        try:
            response = await client.chat.completions.create(**args, timeout=request.timeout_s)
        except openai.APITimeoutError as exc:  # before APIConnectionError, its parent
            if _refused(exc):  # the aiohttp transport reports a refused connection as a connect timeout
                raise TransientModelError(f"{self.id}: cannot reach {self.base_url or 'the OpenAI API'} (connection refused).", kind="connection", model=self.id) from None
            raise TransientModelError(f"{self.id} timed out after {request.timeout_s:g}s.", kind="timeout", model=self.id) from None
        except openai.APIConnectionError as exc:
            raise TransientModelError(f"{self.id}: cannot reach {self.base_url or 'the OpenAI API'} ({exc}).", kind="connection", model=self.id) from None
        except openai.APIResponseValidationError as exc:
            raise TransientModelError(f"{self.id} sent a response that does not fit the Chat Completions format: {exc.message}", kind="malformed_response", model=self.id) from None
        except openai.APIStatusError as exc:
            raise self._status_error(exc) from None
        except ValueError as exc:  # json.JSONDecodeError on a truncated body, pydantic errors on odd shapes
            raise TransientModelError(f"{self.id} sent a body that could not be decoded ({type(exc).__name__}: {exc}).", kind="malformed_response", model=self.id) from None
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

    def _status_error(self, exc: openai.APIStatusError) -> ModelCallError:
        status = exc.status_code
        detail = _server_message(exc)
        said = f": {detail}" if detail else ""
        if status == 429:
            return TransientModelError(f"{self.id} is rate limited (HTTP 429){said}", kind="rate_limit", model=self.id, retry_after=parse_retry_after(exc.response.headers))
        if status >= 500:
            return TransientModelError(f"{self.id}: server error (HTTP {status}){said}", kind="server_error", model=self.id, retry_after=parse_retry_after(exc.response.headers))
        if status == 408:
            return TransientModelError(f"{self.id}: the server timed out the request (HTTP 408){said}", kind="timeout", model=self.id)
        where = self.base_url or "the OpenAI API"
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
