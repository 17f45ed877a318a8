"""The wire of an OpenAI-compatible Chat Completions call: one POST of JSON, one JSON answer.

medpanel used the `openai` SDK for this, but at hundreds of calls in flight the SDK's per-request work
(validating and transforming every parameter against its typed signatures, building typed responses)
was most of the client's time (bench/bench_orchestration.py), and after it aiohttp's request machinery
was a third of what was left. The request body is already the plain JSON the server reads, and we read
four fields of the answer, so the call is bytes on a kept-alive connection (models/http1.py); what it can
fail with is mapped to medpanel's errors in models/openai_compat.py. An endpoint reached through a proxy
(HTTPS_PROXY and the like) goes through aiohttp, which speaks to proxies.

Connections are per event loop and endpoint (a connection belongs to the loop that opened it), with no
cap of their own: the endpoint's gate (models/adaptive.py) decides how many calls go at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import aiohttp
import pydantic_core
import yarl

from medpanel.models.http1 import Endpoint, Unreachable

DEFAULT_BASE_URL = "https://api.openai.com/v1"
T = TypeVar("T")


@dataclass
class StatusError(Exception):
    """The server answered with an HTTP error: its status, its body (decoded JSON, or the text), its headers."""

    status: int
    body: Any
    headers: Any

    def message(self) -> str:
        body = self.body
        if isinstance(body, dict):
            inner = body.get("error", body)
            if isinstance(inner, dict) and inner.get("message"):
                return str(inner["message"])
            if isinstance(inner, str):
                return inner
        return body.strip()[:500] if isinstance(body, str) else ""


def environment_proxy(url: str) -> str | None:
    """The proxy the environment names for `url` (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY; none when NO_PROXY
    covers its host), as the SDK's client honoured them."""
    scheme, host = urllib.parse.urlsplit(url).scheme, urllib.parse.urlsplit(url).hostname or ""
    if urllib.request.proxy_bypass(host):
        return None
    proxies = urllib.request.getproxies()
    return proxies.get(scheme) or proxies.get("all")


def resolve_base_url(base_url: str | None) -> str:
    """Where a spec's calls go: its base URL, else OPENAI_BASE_URL, else OpenAI's API (as the SDK chose)."""
    return (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")


class ChatTransport:
    def __init__(self, base_url: str | None, api_key: str) -> None:
        self.url = yarl.URL(resolve_base_url(base_url) + "/chat/completions")  # parsed once, not per request
        self.headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json", "Accept": "application/json"}
        # What the SDK would have sent from the environment: the account's organisation and project.
        for env, header in (("OPENAI_ORG_ID", "OpenAI-Organization"), ("OPENAI_PROJECT_ID", "OpenAI-Project")):
            if os.environ.get(env):
                self.headers[header] = os.environ[env]
        self._sessions: dict[int, tuple[asyncio.AbstractEventLoop, aiohttp.ClientSession]] = {}
        self._endpoints: dict[int, tuple[asyncio.AbstractEventLoop, Endpoint]] = {}
        self.proxy = environment_proxy(str(self.url))

    def _endpoint(self) -> Endpoint:
        url = self.url
        # raw_host: an international name in its ASCII (IDNA) form; yarl gives a scheme's default port itself.
        return _per_loop(self._endpoints, lambda: Endpoint(url.scheme, url.raw_host or "", url.port or 80, url.raw_path_qs or "/",
                                                           self.headers))

    def _session(self) -> aiohttp.ClientSession:
        # No timeouts of aiohttp's own (its default caps every call at 300 s): the caller's asyncio.timeout is
        # the attempt's whole deadline. No trust_env: it reads the environment and ~/.netrc on every request
        # (60% of the client's time at 768 in flight); the proxy is looked up once, in __init__.
        return _per_loop(self._sessions, lambda: aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300), headers=self.headers, json_serialize=json.dumps,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=None, sock_read=None)), usable=lambda s: not s.closed)

    async def post(self, body: dict) -> Any:
        """The decoded JSON answer (or its raw text when it is not JSON). Raises StatusError for an HTTP error,
        Unreachable when no whole answer came, and lets asyncio's timeout and cancellation through."""
        data = pydantic_core.to_json(body, inf_nan_mode="constants")  # as json.dumps would, several times faster
        if self.proxy is None:
            answer = await self._endpoint().post(data)
            return _decode(answer.status, answer.headers, answer.body)
        try:
            async with self._session().post(self.url, data=data, proxy=self.proxy) as response:
                raw = await response.read()
                status, headers = response.status, response.headers
        except aiohttp.ClientConnectorError as exc:
            refused = isinstance(exc.os_error, ConnectionRefusedError)
            raise Unreachable("connection refused" if refused else str(exc), refused) from None
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
            raise Unreachable(f"the connection broke before the answer ended: {type(exc).__name__}: {exc}") from None
        except aiohttp.ClientError as exc:
            raise Unreachable(f"{type(exc).__name__}: {exc}") from None
        return _decode(status, headers, raw)

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        endpoint = self._endpoints.pop(id(loop), None)
        if endpoint is not None:
            endpoint[1].close()
        held = self._sessions.pop(id(loop), None)
        if held is not None:
            await held[1].close()


def _per_loop(held: dict, make: Callable[[], T], usable: Callable[[T], bool] = lambda _: True) -> T:
    """The running loop's entry of `held` (connections belong to the loop that opened them), made when it has none;
    the entries of loops that have closed are dropped then."""
    loop = asyncio.get_running_loop()
    entry = held.get(id(loop))
    if entry is not None and entry[0] is loop and usable(entry[1]):
        return entry[1]
    for key in [k for k, (other, _) in held.items() if other.is_closed()]:
        del held[key]
    made = held[id(loop)] = (loop, make())
    return made[1]


def _decode(status: int, headers: Any, raw: bytes) -> Any:
    """The answer's JSON (its raw text when it is not JSON); StatusError for an HTTP error."""
    try:
        decoded: Any = pydantic_core.from_json(raw)  # from the bytes: no text made on the path of every answer
    except ValueError:
        decoded = raw.decode("utf-8", errors="replace")
    if status >= 400:
        raise StatusError(status, decoded, headers)
    return decoded
