"""The lean HTTP/1.1 client (models/http1.py) against a server that answers exactly the bytes a test scripts:
reuse of kept-alive connections, the idle-close race, the ways an answer can be framed, coded or broken,
cancellation, TLS, and a proxied endpoint (which goes through aiohttp)."""

from __future__ import annotations

import asyncio
import gzip
import json
import shutil
import socket
import ssl
import struct
import subprocess
import zlib

import pytest

from medpanel.errors import UsageError
from medpanel.models.chat_http import ChatTransport, StatusError
from medpanel.models.http1 import IDLE_S, Endpoint, Unreachable


@pytest.fixture(scope="module", params=["asyncio", "uvloop"])
def event_loop_policy(request):
    """Each test on asyncio's loop and on uvloop's (the one `medpanel bench` runs on). pytest-asyncio 1.x calls
    overriding this fixture deprecated; its replacement hook would parametrise every async test of the suite."""
    if request.param == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return uvloop.EventLoopPolicy()
    return asyncio.DefaultEventLoopPolicy()

ANSWER = json.dumps({"choices": [{"message": {"content": "B"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 3}}).encode()


def ok(body: bytes = ANSWER, *extra: str) -> bytes:
    head = ["HTTP/1.1 200 OK", "Content-Type: application/json", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def always_ok(n: int, writer: asyncio.StreamWriter) -> None:
    writer.write(ok())


class Scripted:
    """A loopback server: each request (headers and body read whole) is handed to `script(n, writer)`, n counting
    the requests over all connections; what it writes is the answer. `connections` counts accepted connections."""

    def __init__(self, script, ssl_context: ssl.SSLContext | None = None) -> None:
        self.script, self.ssl_context = script, ssl_context
        self.connections = self.requests = 0
        self.bodies: list[bytes] = []
        self.heads: list[bytes] = []
        self.writers: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> "Scripted":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl_context)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()
        for writer in list(self.writers):  # connections still open (a handler asleep): the test is over
            writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
                self.heads.append(head)
                self.bodies.append(await reader.readexactly(length))
                n, self.requests = self.requests, self.requests + 1
                if await self.script(n, writer) == "close":
                    writer.close()
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):  # the client left, or the test ended
            writer.close()


def endpoint(port: int, scheme: str = "http", host: str = "127.0.0.1") -> Endpoint:
    return Endpoint(scheme, host, port, "/v1/chat/completions", {"Authorization": "Bearer k", "Content-Type": "application/json"})


async def test_kept_alive_connection_is_reused_and_the_request_is_sent_as_given():
    async with Scripted(always_ok) as srv:
        ep = endpoint(srv.port)
        for i in range(5):
            answer = await ep.post(b'{"n": %d}' % i)
            assert (answer.status, answer.body) == (200, ANSWER)
        ep.close()
    assert srv.connections == 1
    assert srv.bodies == [b'{"n": %d}' % i for i in range(5)]
    head = srv.heads[0].decode()
    assert head.startswith("POST /v1/chat/completions HTTP/1.1\r\n") and f"Host: 127.0.0.1:{srv.port}\r\n" in head
    assert "Authorization: Bearer k\r\n" in head and "Content-Length: 8\r\n" in head and "User-Agent: medpanel/" in head


async def test_concurrent_requests_each_get_their_own_answer():
    async def script(n, writer):
        await asyncio.sleep(0.01 * (n % 3))
        writer.write(ok(b'{"n": %d}' % n))

    async with Scripted(script) as srv:
        ep = endpoint(srv.port)
        answers = await asyncio.gather(*(ep.post(b"{}") for _ in range(20)))
        ep.close()
    assert sorted(json.loads(a.body)["n"] for a in answers) == list(range(20))
    assert srv.connections == 20  # one request at a time per connection


async def test_an_answer_saying_close_is_not_reused():
    async def script(n, writer):
        writer.write(ok(ANSWER, "Connection: close"))
        return "close"

    async with Scripted(script) as srv:
        ep = endpoint(srv.port)
        for _ in range(3):
            assert (await ep.post(b"{}")).body == ANSWER
        ep.close()
    assert srv.connections == 3


async def test_an_idle_connection_the_server_closed_is_not_picked():
    async def script(n, writer):
        writer.write(ok())
        return "close"  # closes after answering, without saying so: the client learns it from the socket

    async with Scripted(script) as srv:
        ep = endpoint(srv.port)
        await ep.post(b"{}")
        await asyncio.sleep(0.05)
        assert (await ep.post(b"{}")).body == ANSWER
        ep.close()
    assert srv.connections == 2 and srv.requests == 2


async def test_a_request_is_never_sent_twice_by_the_client_itself():
    """A kept-alive connection that breaks after the server read the request (it died working on it) is Unreachable:
    whether to send it again is the retry policy's to decide and count, never a silent second send here."""
    async def script(n, writer):
        if n == 0:
            writer.write(ok())
            return
        await asyncio.sleep(0.2)
        writer.transport.abort()
        return "close"

    async with Scripted(script) as srv:
        ep = endpoint(srv.port)
        await ep.post(b"warm")
        with pytest.raises(Unreachable, match="broke before the answer ended"):
            await ep.post(b"work")
        ep.close()
    assert srv.bodies == [b"warm", b"work"]


async def test_a_connection_idle_too_long_is_closed_not_reused():
    async with Scripted(always_ok) as srv:
        ep = endpoint(srv.port)
        await ep.post(b"{}")
        old = ep._idle[-1]
        old.idle_since -= IDLE_S + 1  # as if it had waited past the servers' idle timeouts
        await ep.post(b"{}")
        assert old.closed and srv.connections == 2
        ep.close()


async def test_a_connection_already_closed_fails_at_once_instead_of_hanging():
    async with Scripted(always_ok) as srv:
        ep = endpoint(srv.port)
        await ep.post(b"{}")
        connection = ep._idle[-1]
        connection.transport.close()
        await asyncio.sleep(0.05)
        with pytest.raises(Unreachable, match="closed before the request"):
            async with asyncio.timeout(2):
                await connection.exchange(b"x")
        ep.close()


@pytest.mark.parametrize("split", [False, True])  # the final answer in the interim one's segment, or in two later ones
async def test_framings_chunked_until_close_and_interim_answers(split):
    async def script(n, writer):
        if n == 0:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n3\r\n 1}\r\n0\r\n\r\n")
        elif n == 1:
            final = ok(b'{"b": 2}').replace(b"200 OK", b"201 Created")
            if split:
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                await writer.drain()
                await asyncio.sleep(0.02)
                writer.write(final[:20])
                await writer.drain()
                await asyncio.sleep(0.02)
                writer.write(final[20:])
            else:
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + final)
        else:
            writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"c\": 3}")  # ends when the connection does
            return "close"

    async with Scripted(script) as srv:
        ep = endpoint(srv.port)
        assert json.loads((await ep.post(b"{}")).body) == {"a": 1}
        interim = await ep.post(b"{}")
        assert (interim.status, json.loads(interim.body)) == (201, {"b": 2})  # the final answer's status, not the 100's
        assert len(ep._idle) == 1  # and its connection kept for the next request
        assert json.loads((await ep.post(b"{}")).body) == {"c": 3}
        ep.close()
    assert srv.connections == 1


@pytest.mark.parametrize("broken", ["short of its length", "reset, with no length"])
async def test_an_answer_that_breaks_off_is_unreachable_and_not_sent_again(broken):
    """A body cut short of its Content-Length, or a reset where the body has no length (a reset is not the clean
    end that delimits such a body): no answer, and the request is not sent a second time."""
    async def script(n, writer):
        if broken == "short of its length":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"partial")
            return "close"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{\"partial")
        await writer.drain()
        await asyncio.sleep(0.05)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # closing sends a reset
        writer.transport.abort()
        return "close"

    async with Scripted(script) as srv:
        ep = endpoint(srv.port)
        with pytest.raises(Unreachable, match="broke before the answer ended"):
            await ep.post(b"{}")
        ep.close()
    assert srv.requests == 1


@pytest.mark.parametrize("coding, encode", [("gzip", gzip.compress), ("deflate", zlib.compress),
                                            ("deflate", lambda b: zlib.compress(b)[2:-4])])  # zlib-wrapped and raw deflate
async def test_coded_answers_are_decoded(coding, encode):
    async def script(n, writer):
        writer.write(ok(encode(ANSWER), f"Content-Encoding: {coding}"))

    async with Scripted(script) as srv:
        ep = endpoint(srv.port)
        assert (await ep.post(b"{}")).body == ANSWER
        ep.close()


async def test_unreadable_answers_are_unreachable_not_crashes():
    answers = [b"SSH-2.0-OpenSSH_9.6\r\n\r\n", ok(b"not gzip", "Content-Encoding: gzip"), ok(b"x", "Content-Encoding: br")]

    async def script(n, writer):
        writer.write(answers[n])

    async with Scripted(script) as srv:
        ep = endpoint(srv.port)
        with pytest.raises(Unreachable, match="not valid HTTP"):
            await ep.post(b"{}")
        with pytest.raises(Unreachable, match="could not be decoded"):
            await ep.post(b"{}")
        with pytest.raises(Unreachable, match="content coding medpanel cannot read"):
            await ep.post(b"{}")
        ep.close()


def test_a_header_with_a_line_break_is_refused_before_anything_is_sent():
    with pytest.raises(UsageError, match="line break"):
        Endpoint("http", "127.0.0.1", 80, "/v1/chat/completions", {"Authorization": "Bearer sk-abc\nX-Injected: 1"})


async def test_refused_and_unresolvable():
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    with pytest.raises(Unreachable) as refused:
        await endpoint(port).post(b"{}")
    assert refused.value.refused
    with pytest.raises(Unreachable, match="connection refused") as every_address:  # ::1 and 127.0.0.1 where both resolve
        await endpoint(port, host="localhost").post(b"{}")
    assert every_address.value.refused
    with pytest.raises(Unreachable, match="cannot connect") as unknown:
        await endpoint(80, host="no-such-host.invalid").post(b"{}")
    assert not unknown.value.refused


async def test_a_cancelled_request_drops_its_connection_and_the_next_one_works():
    async def script(n, writer):
        if n == 0:
            await asyncio.sleep(5)
        writer.write(ok())

    async with Scripted(script) as srv:
        ep = endpoint(srv.port)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await ep.post(b"{}")
        assert not ep._idle  # half an exchange is never reused
        assert (await ep.post(b"{}")).body == ANSWER
        ep.close()
    assert srv.connections == 2


async def test_transport_maps_statuses_and_headers():
    async def script(n, writer):
        body = b'{"error": {"message": "slow down"}}'
        writer.write(f"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2\r\nX-Twice: a\r\nX-Twice: b\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)

    async with Scripted(script) as srv:
        transport = ChatTransport(f"http://127.0.0.1:{srv.port}/v1", "k")
        with pytest.raises(StatusError) as err:
            await transport.post({"model": "m", "messages": []})
        await transport.close()
    assert err.value.status == 429 and err.value.message() == "slow down"
    headers = err.value.headers
    assert headers.get("Retry-After") == "2" and headers["retry-after"] == "2" and "RETRY-AFTER" in headers
    assert headers.get("x-twice") == "a, b"


def _self_signed(tmp_path) -> tuple[str, str]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True, capture_output=True)
    return str(cert), str(key)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
async def test_https_verifies_the_server_and_carries_the_call(tmp_path, monkeypatch):
    cert, key = _self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async with Scripted(always_ok, context) as srv:
        with pytest.raises(Unreachable, match="cannot connect"):  # not trusted: refused, as any client would
            await endpoint(srv.port, "https").post(b"{}")
        monkeypatch.setenv("SSL_CERT_FILE", cert)  # trusted, as a private CA is, through OpenSSL's own variable
        transport = ChatTransport(f"https://localhost:{srv.port}/v1", "k")
        for _ in range(3):
            assert await transport.post({"model": "m"}) == json.loads(ANSWER)
        await transport.close()
    assert srv.connections == 1  # one kept-alive connection for three calls (the refused handshake never became one)


async def test_a_proxied_endpoint_goes_through_the_proxy(monkeypatch):
    """HTTP_PROXY is honoured (through aiohttp): the call reaches the server by way of the proxy."""
    async def script(n, writer):
        writer.write(ok())

    seen: list[bytes] = []

    async def proxy(reader, writer):  # a forward proxy for plain HTTP: absolute-form request line, relayed
        head = await reader.readuntil(b"\r\n\r\n")
        seen.append(head.split(b"\r\n", 1)[0])
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
        body = await reader.readexactly(length)
        target = head.split(b" ")[1].decode()
        port = int(target.split(":")[2].split("/")[0])
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        up_writer.write(head.replace(target.encode(), target.split(str(port), 1)[1].encode(), 1) + body)
        answer = await up_reader.readuntil(b"\r\n\r\n")
        answer_length = next(int(line.split(b":")[1]) for line in answer.split(b"\r\n") if line.lower().startswith(b"content-length:"))
        writer.write(answer + await up_reader.readexactly(answer_length))
        up_writer.close()
        writer.close()

    async with Scripted(script) as srv:
        relay = await asyncio.start_server(proxy, "127.0.0.1", 0)
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{relay.sockets[0].getsockname()[1]}")
        monkeypatch.setenv("NO_PROXY", "")
        transport = ChatTransport(f"http://127.0.0.1:{srv.port}/v1", "k")
        assert transport.proxy is not None
        assert await transport.post({"model": "m"}) == json.loads(ANSWER)
        await transport.close()
        relay.close()
    assert seen == [f"POST http://127.0.0.1:{srv.port}/v1/chat/completions HTTP/1.1".encode()]
