"""A lean HTTP/1.1 client for one endpoint: kept-alive connections, one POST at a time on each.

At hundreds of calls in flight the client's own CPU per call bounds a run (docs/scale.md), and aiohttp's
request machinery (its request and response objects, payload registry, connector, tracing hooks, stream
readers) was a third of the event loop's time per call (bench/bench_orchestration.py). A Chat Completions
call needs none of it: one request whose bytes are known up front, one answer read whole. So the request is
written as bytes and the answer parsed by httptools (the C parser uvicorn uses; llhttp inside), on asyncio's
own transports (TLS included). What is left to this file is the bookkeeping: which connection is free,
when one may be reused, and what a broken one means.

- A connection is reused only when the answer said keep-alive and came whole; an idle one the server closed
  is dropped when it closes (its `connection_lost`), and one idle for IDLE_S is closed by us first: servers
  close idle connections after a few seconds (uvicorn, and so vLLM, after 5), and a request written as the
  server closes is lost. Nothing is sent twice here: a request whose connection broke before its answer
  ended is `Unreachable`, for the caller's retry policy to count and retry (the server may have read it).
- Cancellation (the attempt's deadline, Ctrl-C) aborts the connection: half an exchange cannot be reused.

Proxies are not spoken here: models/chat_http.py sends a proxied endpoint's calls through aiohttp.
"""

from __future__ import annotations

import asyncio
import errno
import re
import ssl
import time
import zlib
from typing import Any

import httptools

from medpanel import __version__
from medpanel.errors import UsageError

MAX_IDLE = 1024  # connections kept open per endpoint and event loop; the gate bounds how many are in use
IDLE_S = 4.0  # an idle connection older than this is closed, not reused (servers close theirs after 5 s or more)


class Unreachable(Exception):
    """No answer came: the connection was refused, reset or dropped before the body ended."""

    def __init__(self, detail: str, refused: bool = False) -> None:
        super().__init__(detail)
        self.refused = refused


class Headers(dict):
    """An answer's headers, by lower-case name (a repeated header's values joined by ", ", as RFC 9110 allows)."""

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return super().__contains__(name.lower() if isinstance(name, str) else name)


class Answer:
    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: Headers, body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection and the answer to the request in flight on it, if any."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.keep_alive = False
        self.idle_since = 0.0
        self._complete = False  # the answer in flight has come whole
        self._waiter: asyncio.Future | None = None

    # -- asyncio's side
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            self.abort()  # bytes nobody asked for: the exchange is out of step, the connection cannot be trusted
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(Unreachable(f"the server's answer is not valid HTTP/1.1: {exc}"))
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if exc is None and self._status is not None and self._length is None and not self._chunked:
            self._finish(keep_alive=False)  # a body that ends when the connection does (no length given): a clean end
            return
        why = f": {exc}" if exc else ""
        self._fail(Unreachable(f"the connection broke before the answer ended{why}"))

    # -- httptools' side
    def on_message_begin(self) -> None:
        if self._complete:  # a second answer to one request: out of step, never reused
            self.keep_alive = False
            self.abort()

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        self._headers[key] = f"{self._headers[key]}, {text}" if key in self._headers else text

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()
        self._length = self._headers.get("content-length")
        self._chunked = "chunked" in self._headers.get("transfer-encoding", "").lower()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self._status is not None and 100 <= self._status < 200:
            self._fresh_answer()  # an interim answer (100 Continue): the real one follows, read by the same parser
            return
        self._finish(keep_alive=self._parser.should_keep_alive())

    # -- ours
    def _fresh_answer(self) -> None:
        self._headers, self._body = Headers(), []
        self._status = self._length = None
        self._chunked = False

    def _finish(self, keep_alive: bool) -> None:
        if self._complete:
            return
        self._complete = True
        self.keep_alive = keep_alive
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(Answer(self._status or 0, self._headers, b"".join(self._body)))

    def _fail(self, error: Exception) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    async def exchange(self, data: bytes) -> Answer:
        """Send one request and await its whole answer."""
        if self.closed or self.transport is None or self.transport.is_closing():
            raise Unreachable("the connection closed before the request could be sent")
        self._parser = httptools.HttpResponseParser(self)  # one parser per exchange (interim answers included)
        self._fresh_answer()
        self._complete = False
        self.keep_alive = False
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)  # type: ignore[union-attr]
        try:
            return await self._waiter
        finally:
            self._waiter = None


def _decoded(answer: Answer) -> bytes:
    """The body as sent before any content coding (we ask for none; a server may still gzip)."""
    coding = (answer.headers.get("content-encoding") or "identity").strip().lower()
    if coding in ("identity", ""):
        return answer.body
    if coding in ("gzip", "x-gzip", "deflate"):
        try:
            return zlib.decompress(answer.body, zlib.MAX_WBITS | 32)  # gzip or zlib, told by the header
        except zlib.error:
            if coding == "deflate":
                try:
                    return zlib.decompress(answer.body, -zlib.MAX_WBITS)  # raw deflate, as some servers send it
                except zlib.error:
                    pass
            raise Unreachable(f"the server's {coding}-coded answer could not be decoded") from None
    raise Unreachable(f"the server sent its answer in a content coding medpanel cannot read ({coding})")


def _all_refused(exc: OSError) -> bool:
    """asyncio's error when every address of a host failed: 'Multiple exceptions: [Errno N] ..., [Errno M] ...'."""
    codes = re.findall(r"\[Errno (\d+)\]", str(exc)) if str(exc).startswith("Multiple exceptions") else []
    return bool(codes) and all(int(code) == errno.ECONNREFUSED for code in codes)


class Endpoint:
    """Connections to one origin (scheme, host, port) on one event loop, and the POST they carry."""

    def __init__(self, scheme: str, host: str, port: int, path: str, headers: dict[str, str]) -> None:
        for name, value in headers.items():
            if "\r" in value or "\n" in value:
                raise UsageError(f"The HTTP header {name} for {host} holds a line break (an API key read from a file with its newline?).",
                                 "Remove the line break from the key or variable it comes from.")
        self.host, self.port, self.scheme = host, port, scheme
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if scheme == "https" else None
        authority = f"[{host}]" if ":" in host else host  # an IPv6 literal keeps its brackets
        default_port = 443 if scheme == "https" else 80
        if port != default_port:
            authority += f":{port}"
        lines = [f"POST {path} HTTP/1.1", f"Host: {authority}", f"User-Agent: medpanel/{__version__}",
                 *(f"{k}: {v}" for k, v in headers.items()), "Accept-Encoding: gzip, deflate", "Connection: keep-alive"]
        self._head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")  # the same for every request
        self._idle: list[_Connection] = []
        self._closed = False

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, connection = await loop.create_connection(_Connection, self.host, self.port, ssl=self._ssl)
        except ConnectionRefusedError:
            raise Unreachable("connection refused", refused=True) from None
        except (OSError, ssl.SSLError) as exc:  # no route, no such host, a TLS handshake that failed
            if _all_refused(exc):  # a name with several addresses (localhost: ::1 and 127.0.0.1), each refused
                raise Unreachable("connection refused", refused=True) from None
            raise Unreachable(f"cannot connect to {self.host}:{self.port}: {exc}") from None
        return connection

    def _reusable(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()  # the most recently used: the least likely to have been closed idle
            if connection.closed:
                continue
            if now - connection.idle_since > IDLE_S:
                # It and every one below it (returned earlier, so idle longer): the server may be closing them.
                for stale in (connection, *self._idle):
                    stale.abort()
                self._idle.clear()
                return None
            return connection
        return None

    async def post(self, body: bytes) -> Answer:
        """One POST of `body`; the answer with its body decoded. Raises Unreachable when no whole answer came."""
        data = self._head + str(len(body)).encode() + b"\r\n\r\n" + body
        connection = self._reusable() or await self._connect()
        try:
            answer = await connection.exchange(data)
        except BaseException:  # broken, cancelled (the attempt's deadline, Ctrl-C) or a bug: half an exchange
            connection.abort()
            raise
        if connection.keep_alive and not connection.closed and not self._closed and len(self._idle) < MAX_IDLE:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        else:
            connection.abort()
        answer.body = _decoded(answer)
        return answer

    def close(self) -> None:
        self._closed = True
        for connection in self._idle:
            if connection.transport is not None:
                connection.transport.close()
        self._idle.clear()
