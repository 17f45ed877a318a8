"""A mock OpenAI-compatible Chat Completions server over real HTTP, for tests and benchmarks.

In process (uvicorn runs in a background thread on a free loopback port):

    with MockServer(MockConfig(reply="choice", latency_s=0.05)) as srv:
        model = build_model("openai:mock@" + srv.base_url)
        srv.inject("500", 2)          # the next two requests fail with HTTP 500
        ...
        srv.stats()["requests"]       # what the server saw

As a subprocess (prints one line `READY http://127.0.0.1:PORT/v1`, then serves until killed):

    python -m medpanel.testing.mock_server --port 0 --latency 0.05 --reply choice --fault-rate 0.2

Fault kinds: "500", "429" (with Retry-After), "timeout" (hangs `hang_s`), "malformed" (200 with a
truncated body), "invalid_json" (200 whose content is not JSON; structured requests only), "trickle"
(a normal answer sent one byte every `trickle_s`, as a stalled proxy would: an idle timeout never fires). A request
for the model `missing` gets a 404, an unparseable body a 400.

This module is the entry point and keeps every public name; the parts live beside it: `mock_replies`
(what a request is answered with), `mock_state` (the config, fault drawing and counters) and `mock_app`
(the HTTP routes). What is here is the server's lifecycle (`MockServer`) and the command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import socket
import sys
import threading
import time
from typing import Any

from medpanel.testing.mock_app import build_app
from medpanel.testing.mock_replies import CHOICES, choice_for, content_text, fake_from_schema, request_hash, requested_schema
from medpanel.testing.mock_state import FAULT_KINDS, REPLY_MODES, MockConfig, Responder, ServerState

__all__ = ["CHOICES", "FAULT_KINDS", "REPLY_MODES", "MockConfig", "MockServer", "Responder", "build_app", "choice_for", "content_text",
           "fake_from_schema", "main", "request_hash", "requested_schema"]


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


class MockServer:
    """Runs the mock on loopback in a background thread. Use as a context manager or start()/stop()."""

    def __init__(self, config: MockConfig | None = None, *, host: str = "127.0.0.1", port: int = 0, **overrides: Any) -> None:
        config = config or MockConfig()
        if overrides:
            config = dataclasses.replace(config, **overrides)
        self.host = host
        self._requested_port = port
        self._state = ServerState(config)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None

    # -- lifecycle

    def start(self, timeout_s: float = 10.0) -> "MockServer":
        import uvicorn

        if self._thread is not None:
            raise RuntimeError("MockServer already started")
        # Bind the socket ourselves so port 0 yields a known port before uvicorn starts.
        # proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on accepted sockets whose proto says TCP,
        # and without it Nagle + delayed ACK add ~40 ms to every keep-alive response.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._requested_port))
        sock.listen(4096)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            build_app(self._state),
            # The C parser and loop when installed (uvicorn[standard]): the mock should never be the bottleneck
            # of a benchmark that measures the client. Pure-Python h11 and asyncio otherwise.
            loop="uvloop" if _has("uvloop") else "asyncio",
            http="httptools" if _has("httptools") else "h11",
            lifespan="off",
            log_config=None,  # leave the host program's logging alone
            log_level="warning",
            access_log=False,
            proxy_headers=False,  # no proxy in front of it; the middleware would cost every request
            limit_concurrency=None,  # no cap: benchmarks open hundreds of connections at once
            backlog=4096,
            timeout_keep_alive=30,
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        self._state.closing = False
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, name=f"mock-openai-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"mock server on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._state.closing = True
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._thread = None
        self._server = None

    def __enter__(self) -> "MockServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- addresses

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("MockServer is not started")
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    # -- control (in process; the same operations exist over HTTP under /_...)

    @property
    def config(self) -> MockConfig:
        return self._state.config

    def configure(self, **changes: Any) -> MockConfig:
        """Change latency, fault rates, reply mode... while running."""
        return self._state.configure(changes)

    def inject(self, kind: str, count: int = 1) -> None:
        """The next `count` chat requests fail with fault `kind`."""
        self._state.inject(kind, count)

    def reset(self) -> None:
        """Back to the starting config, with empty counters, injections and recorded requests."""
        self._state.reset()

    def stats(self) -> dict:
        return self._state.stats()

    @property
    def requests(self) -> list[dict]:
        """The most recent chat request bodies, oldest first."""
        with self._state.lock:
            return list(self._state.recorded)

    @property
    def last_request(self) -> dict | None:
        with self._state.lock:
            return self._state.recorded[-1] if self._state.recorded else None


# ---------------------------------------------------------------------------------------------- CLI


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m medpanel.testing.mock_server", description="Mock OpenAI-compatible Chat Completions server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on the READY line)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds to wait before each answer")
    parser.add_argument("--reply", choices=["echo", "choice"], default="echo")
    parser.add_argument("--fault-rate", type=float, default=0.0, help="total probability that a request fails")
    parser.add_argument("--faults", default="500,429,malformed", help=f"comma-separated kinds sharing --fault-rate equally ({','.join(FAULT_KINDS)})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--retry-after", type=float, default=1.0, help="Retry-After seconds on a 429")
    parser.add_argument("--hang", type=float, default=30.0, help="seconds a 'timeout' fault stalls")
    parser.add_argument("--model", action="append", dest="models", help="a model id for /v1/models (repeatable)")
    parser.add_argument("--rpm", type=float, default=None, help="a rate limit in requests per minute (429 with Retry-After beyond it)")
    parser.add_argument("--rate-burst", type=float, default=1.0, help="seconds' worth of requests the rate limit lets through at once")
    parser.add_argument("--capacity", type=int, default=None, help="requests served at once; the rest queue (latency rises with load)")
    parser.add_argument("--queue-limit", type=int, default=None, help="requests queued beyond --capacity before 503s")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    kinds = [k.strip() for k in args.faults.split(",") if k.strip()]
    if not 0.0 <= args.fault_rate <= 1.0:
        print("--fault-rate must be between 0 and 1", file=sys.stderr)
        return 2
    rates = {k: args.fault_rate / len(kinds) for k in kinds} if args.fault_rate > 0 and kinds else {}
    try:
        config = MockConfig(
            latency_s=args.latency,
            reply=args.reply,
            fault_rates=rates,
            seed=args.seed,
            retry_after_s=args.retry_after,
            hang_s=args.hang,
            models=args.models or ["mock-model"],
            rate_limit_rpm=args.rpm,
            rate_burst_s=args.rate_burst,
            capacity=args.capacity,
            queue_limit=args.queue_limit,
        )
    except ValueError as exc:
        print(f"mock_server: {exc}", file=sys.stderr)
        return 2

    # SIGTERM -> normal exit, so the server thread is stopped cleanly.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with MockServer(config, host=args.host, port=args.port) as srv:
        print(f"READY {srv.base_url}", flush=True)
        try:
            while srv.running:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
