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
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import random
import signal
import socket
import sys
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable

FAULT_KINDS = ("500", "429", "timeout", "malformed", "invalid_json", "trickle")
REPLY_MODES = ("echo", "choice", "scripted")
CHOICES = "ABCDE"

Responder = Callable[[dict], str]


@dataclass
class MockConfig:
    latency_s: float = 0.0  # fixed delay before every answer (asyncio.sleep, so it overlaps across requests)
    reply: str | Responder = "echo"  # "echo" | "choice" | "scripted" | callable(request body) -> reply text
    replies: list[Any] = field(default_factory=list)  # the script for reply="scripted"; dicts/lists are sent as JSON
    fault_rates: dict[str, float] = field(default_factory=dict)  # kind -> probability per request
    seed: int = 0  # seeds the fault RNG, so a faulty run is repeatable
    retry_after_s: float = 1.0  # the Retry-After a 429 carries
    hang_s: float = 30.0  # how long a "timeout" fault stalls before answering
    trickle_s: float = 1.0  # seconds between the bytes of a "trickle" fault's body
    models: list[str] = field(default_factory=lambda: ["mock-model"])  # what GET /v1/models lists
    max_recorded: int = 500  # request bodies kept for inspection
    served_model: str | None = None  # the model id replies report (e.g. a dated snapshot); None: the requested one
    cut_at_max_tokens: bool = False  # cut replies to max_tokens words (the mock's tokens), finish_reason "length"
    # Emulate servers that refuse some request shapes, naming the field as llama-cpp-python's server does
    # (HTTP 500, a pydantic error for ('body', 'response_format', 'type')): response_format types refused,
    # and top-level parameters refused (HTTP 400 "Unsupported parameter", with `param` set).
    reject_formats: list[str] = field(default_factory=list)
    reject_params: list[str] = field(default_factory=list)
    # Opt-in leaky server: answer every chat request with this HTTP status and an error body that echoes
    # the request's Authorization header, as is and URL-encoded (for testing that keys are redacted).
    echo_auth_status: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.reply, str) and self.reply not in REPLY_MODES:
            raise ValueError(f"reply must be one of {REPLY_MODES} or a callable, not {self.reply!r}")
        unknown = set(self.fault_rates) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(FAULT_KINDS)}")
        if sum(self.fault_rates.values()) > 1.0 + 1e-9:
            raise ValueError("fault rates add up to more than 1")

    def public(self) -> dict:
        """The config as JSON-safe data (a callable responder is shown by name)."""
        data = dataclasses.asdict(self)
        if callable(self.reply):
            data["reply"] = "callable"
        data["replies"] = len(self.replies)
        return data


# ---------------------------------------------------------------------------------------------- helpers


def request_hash(body: dict) -> str:
    """Identity of a request for counting retries: the model, messages and response_format only."""
    canonical = json.dumps([body.get("model"), body.get("messages"), body.get("response_format")], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def content_text(content: Any) -> str:
    """The text of a message's content, whether a string or a list of parts (vision requests)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _user_texts(body: dict) -> list[str]:
    return [content_text(m.get("content")) for m in body.get("messages", []) if isinstance(m, dict) and m.get("role") == "user"]


def _first_user(body: dict) -> str:
    users = _user_texts(body)
    return users[0] if users else ""


def _digest(*parts: str) -> int:
    return int(hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:12], 16)


def choice_for(body: dict) -> str:
    """A letter A-E fixed by the first user message and the model, so re-asks and retries agree."""
    return CHOICES[_digest(_first_user(body), str(body.get("model", ""))) % len(CHOICES)]


def requested_schema(body: dict) -> tuple[bool, dict | None]:
    """(is this a structured request, its JSON schema if one was given)."""
    fmt = body.get("response_format")
    if not isinstance(fmt, dict):
        return False, None
    if fmt.get("type") == "json_schema":
        inner = fmt.get("json_schema") or {}
        return True, inner.get("schema") if isinstance(inner, dict) else None
    if fmt.get("type") == "json_object":
        return True, fmt.get("schema")
    return False, None


def fake_from_schema(schema: dict, seed: str = "") -> Any:
    """A value satisfying `schema`, chosen deterministically from `seed`.

    Covers what pydantic emits: $ref into $defs, anyOf for Optional, enum/const for Literal and Enum,
    nested objects, arrays with bounds, numeric bounds and common string formats.
    """
    root = schema

    def resolve(node: Any) -> dict:
        seen = 0
        while isinstance(node, dict) and "$ref" in node and seen < 50:
            ref = node["$ref"]
            target: Any = root
            if not ref.startswith("#"):
                raise ValueError(f"only local $ref is supported, not {ref}")
            for part in [p for p in ref.lstrip("#").split("/") if p]:
                target = target[part.replace("~1", "/").replace("~0", "~")]
            node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
            seen += 1
        return node if isinstance(node, dict) else {}

    def pick(path: str, n: int) -> int:
        return _digest(seed, path) % n if n > 0 else 0

    def gen(node: Any, path: str, depth: int) -> Any:
        node = resolve(node)
        if "const" in node:
            return node["const"]
        if node.get("enum"):
            return node["enum"][pick(path, len(node["enum"]))]
        for key in ("anyOf", "oneOf"):
            if node.get(key):
                options = [resolve(o) for o in node[key]]
                real = [o for o in options if o.get("type") != "null"]
                return gen(real[0], path, depth) if real else None
        if node.get("allOf"):
            merged: dict = {k: v for k, v in node.items() if k != "allOf"}
            for part in node["allOf"]:
                part = resolve(part)
                merged.setdefault("properties", {}).update(part.get("properties", {}))
                merged.update({k: v for k, v in part.items() if k != "properties"})
            return gen(merged, path, depth)
        kind = node.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind is None:
            kind = "object" if "properties" in node else "array" if "items" in node else "string"
        if kind == "object":
            required = set(node.get("required", []))
            props = node.get("properties", {})
            # Deep (possibly self-referencing) schemas: past a depth, fill only what is required.
            names = [n for n in props if depth < 6 or n in required]
            return {n: gen(props[n], f"{path}.{n}", depth + 1) for n in names}
        if kind == "array":
            low = int(node.get("minItems", 0))
            high = int(node.get("maxItems", max(low, 2)))
            count = low if depth >= 6 else max(low, min(high, 1 + pick(path + "#n", 2)))
            items = node.get("items", {})
            values = [gen(items, f"{path}[{i}]", depth + 1) for i in range(count)]
            if node.get("uniqueItems"):
                unique: list = []
                for v in values:
                    if v not in unique:
                        unique.append(v)
                values = unique if len(unique) >= low else values
            return values
        if kind == "string":
            return _fake_string(node, path, pick(path, 1 << 30))
        if kind == "integer":
            lo = node.get("minimum", node["exclusiveMinimum"] + 1 if "exclusiveMinimum" in node else None)
            hi = node.get("maximum", node["exclusiveMaximum"] - 1 if "exclusiveMaximum" in node else None)
            lo = int(lo) if lo is not None else (int(hi) - 10 if hi is not None else 0)
            hi = int(hi) if hi is not None else lo + 10
            return lo + pick(path, hi - lo + 1)
        if kind == "number":
            lo = node.get("minimum", node.get("exclusiveMinimum"))
            hi = node.get("maximum", node.get("exclusiveMaximum"))
            lo = float(lo) if lo is not None else (float(hi) - 1.0 if hi is not None else 0.0)
            hi = float(hi) if hi is not None else lo + 1.0
            frac = (pick(path, 998) + 1) / 1000  # strictly inside (0, 1), so exclusive bounds hold
            return round(lo + (hi - lo) * frac, 6)
        if kind == "boolean":
            return pick(path, 2) == 0
        return None

    return gen(schema, "$", 0)


def _fake_string(node: dict, path: str, h: int) -> str:
    fmt = node.get("format")
    if fmt == "date-time":
        text = "2024-01-%02dT09:00:00Z" % (1 + h % 28)
    elif fmt == "date":
        text = "2024-01-%02d" % (1 + h % 28)
    elif fmt == "email":
        text = f"mock{h % 1000}@example.com"
    elif fmt in ("uri", "url"):
        text = f"https://example.com/{h % 1000}"
    elif fmt == "uuid":
        hexed = hashlib.sha256(str(h).encode()).hexdigest()
        text = f"{hexed[:8]}-{hexed[8:12]}-4{hexed[13:16]}-8{hexed[17:20]}-{hexed[20:32]}"
    else:
        name = path.rsplit(".", 1)[-1].strip("$[]0123456789") or "text"
        text = f"mock {name} {h % 100000:05d}"
    low, high = int(node.get("minLength", 0)), node.get("maxLength")
    if len(text) < low:
        text = text + "x" * (low - len(text))
    if high is not None:
        text = text[: int(high)]
    return text


def _error_body(message: str, kind: str, code: str | None = None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _refusal(body: dict, config: MockConfig) -> Any:
    """The error response for a request shape the config refuses, or None."""
    from starlette.responses import JSONResponse  # lazily, as in the app itself

    fmt = body.get("response_format")
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind in config.reject_formats:
        allowed = " or ".join(f"'{t}'" for t in ("text", "json_schema", "json_object") if t not in config.reject_formats)
        message = (f"1 validation error:\n  {{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
                   f"'msg': \"Input should be {allowed}\", 'input': '{kind}'}}")
        return JSONResponse(_error_body(message, "internal_server_error"), status_code=500)
    for param in config.reject_params:
        if param in body:
            return JSONResponse(_error_body(f"Unsupported parameter: '{param}' is not supported with this model.", "invalid_request_error",
                                            "unsupported_parameter", param), status_code=400)
    return None


# ---------------------------------------------------------------------------------------------- server state


class _State:
    """Everything the handlers share with the controlling thread; guarded by one lock."""

    def __init__(self, config: MockConfig) -> None:
        self.initial = config
        self.lock = threading.Lock()
        self.closing = False
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.config = dataclasses.replace(self.initial, fault_rates=dict(self.initial.fault_rates), replies=list(self.initial.replies))
            self.rng = random.Random(self.config.seed)
            self.injected: deque[str] = deque()
            self.recorded: deque[dict] = deque(maxlen=self.config.max_recorded)
            self.script_pos = 0
            self.total = 0
            self.successes = 0
            self.faults: Counter[str] = Counter()
            self.errors: Counter[str] = Counter()
            self.by_hash: Counter[str] = Counter()

    def configure(self, changes: dict) -> MockConfig:
        allowed = {f.name for f in dataclasses.fields(MockConfig)} - {"max_recorded"}
        unknown = set(changes) - allowed
        if unknown:
            raise ValueError(f"unknown config fields {sorted(unknown)}; known: {', '.join(sorted(allowed))}")
        with self.lock:
            new = dataclasses.replace(self.config, **changes)  # __post_init__ validates
            if "seed" in changes:
                self.rng = random.Random(new.seed)
            if "replies" in changes:
                self.script_pos = 0
            self.config = new
            return new

    def inject(self, kind: str, count: int = 1) -> None:
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(FAULT_KINDS)}")
        if count < 0:
            raise ValueError("count must be >= 0")
        with self.lock:
            self.injected.extend([kind] * count)

    def draw_fault(self) -> str | None:
        """Injected faults first (deterministic), then the seeded random rates. Caller holds the lock."""
        if self.injected:
            return self.injected.popleft()
        if not self.config.fault_rates:
            return None
        roll, acc = self.rng.random(), 0.0
        for kind, rate in self.config.fault_rates.items():
            acc += rate
            if roll < acc:
                return kind
        return None

    def stats(self) -> dict:
        with self.lock:
            return {
                "requests": self.total,
                "successes": self.successes,
                "faults": dict(self.faults),
                "errors": dict(self.errors),
                "by_hash": dict(self.by_hash),
                "pending_injections": len(self.injected),
            }


# ---------------------------------------------------------------------------------------------- the app


def build_app(state: _State):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    def reply_text(body: dict, config: MockConfig) -> str | None:
        """The assistant's text for a normal answer; None when the script has run out."""
        structured, schema = requested_schema(body)
        if callable(config.reply):
            return str(config.reply(body))
        if config.reply == "scripted":
            with state.lock:
                if state.script_pos >= len(config.replies):
                    return None
                item = config.replies[state.script_pos]
                state.script_pos += 1
            return item if isinstance(item, str) else json.dumps(item)
        if structured:
            value = fake_from_schema(schema, _first_user(body)) if schema else {"answer": choice_for(body)}
            return json.dumps(value)
        if config.reply == "choice":
            letter = choice_for(body)
            return f"Reasoning: weighing the findings in the case, option {letter} fits them best.\nAnswer: {letter}"
        users = _user_texts(body)
        return users[-1] if users else ""

    def completion(body: dict, text: str) -> dict:
        prompt_words = sum(len(content_text(m.get("content")).split()) for m in body["messages"] if isinstance(m, dict))
        finish = "stop"
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        if state.config.cut_at_max_tokens and isinstance(limit, int) and len(text.split()) > limit:
            text, finish = " ".join(text.split()[:limit]), "length"
        reply_words = max(1, len(text.split()))
        return {
            "id": "chatcmpl-mock-" + hashlib.sha256(text.encode()).hexdigest()[:12],
            "object": "chat.completion",
            "created": int(time.time()),
            "model": state.config.served_model or body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
            "usage": {"prompt_tokens": max(1, prompt_words), "completion_tokens": reply_words, "total_tokens": max(1, prompt_words) + reply_words},
        }

    async def hang(request: Request, seconds: float) -> bool:
        """Stall like a stuck server. Returns True if the client gave up meanwhile.

        Stops early once the client is gone or the server is closing, so abandoned requests do not
        hold up shutdown."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not state.closing:
            await asyncio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
            if await request.is_disconnected():
                return True
        return state.closing

    async def trickle(data: bytes, every_s: float):
        """The body one byte at a time; ends early when the server is closing (the client going away
        ends it too: the response is cancelled)."""
        for i in range(len(data)):
            if state.closing:
                return
            yield data[i:i + 1]
            await asyncio.sleep(every_s)

    async def chat(request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not isinstance(body.get("model"), str):
                raise ValueError("the body needs a string 'model' and a list 'messages'")
        except ValueError as exc:
            with state.lock:
                state.total += 1
                state.errors["400"] += 1
            return JSONResponse(_error_body(f"Could not parse the request body: {exc}", "invalid_request_error"), status_code=400)

        with state.lock:
            state.total += 1
            state.by_hash[request_hash(body)] += 1
            state.recorded.append(body)
            config = state.config
            if body["model"] == "missing":
                state.errors["404"] += 1
                fault = "404"
            else:
                fault = state.draw_fault()

        if config.echo_auth_status:
            from urllib.parse import quote

            said = request.headers.get("authorization", "")
            with state.lock:
                state.errors[str(config.echo_auth_status)] += 1
            return JSONResponse(_error_body(f"Bad credentials in header Authorization: {said} (as a query: api_key={quote(said.removeprefix('Bearer '), safe='')})",
                                            "invalid_request_error"), status_code=config.echo_auth_status)
        if fault == "404":
            return JSONResponse(_error_body("The model `missing` does not exist.", "invalid_request_error", "model_not_found", "model"), status_code=404)
        refused = _refusal(body, config)
        if refused is not None:
            with state.lock:
                state.errors[str(refused.status_code)] += 1
            return refused
        if config.latency_s > 0:
            await asyncio.sleep(config.latency_s)
        structured, _ = requested_schema(body)
        if fault == "invalid_json" and not structured:
            fault = None  # only meaningful for structured requests: answer normally instead
        if fault is not None:
            with state.lock:
                state.faults[fault] += 1
        if fault == "500":
            return JSONResponse(_error_body("Mock server error.", "server_error"), status_code=500)
        if fault == "429":
            seconds = config.retry_after_s
            header = str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"
            return JSONResponse(_error_body("Rate limit reached (mock).", "rate_limit_error", "rate_limit_exceeded"), status_code=429, headers={"Retry-After": header})
        if fault == "malformed":
            cut = '{"id": "chatcmpl-mock", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assist'
            return Response(cut, status_code=200, media_type="application/json")
        if fault == "invalid_json":
            return JSONResponse(completion(body, "Sure, here is my answer: {answer: B, reasons: [unquoted"))
        if fault == "timeout" and await hang(request, config.hang_s):
            return Response(status_code=204)  # nobody is listening; don't consume a scripted reply

        text = reply_text(body, config)
        if fault == "trickle" and text is not None:
            return StreamingResponse(trickle(json.dumps(completion(body, text)).encode(), config.trickle_s), media_type="application/json")
        if text is None:
            with state.lock:
                state.errors["400"] += 1
            return JSONResponse(_error_body("The mock's scripted replies are used up.", "invalid_request_error"), status_code=400)
        if fault is None:
            with state.lock:
                state.successes += 1
        return JSONResponse(completion(body, text))

    async def models(_request: Request) -> Response:
        with state.lock:
            names = list(state.config.models)
        return JSONResponse({"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "medpanel-mock"} for n in names]})

    async def stats(_request: Request) -> Response:
        return JSONResponse(state.stats())

    async def reset(_request: Request) -> Response:
        state.reset()
        return JSONResponse({"ok": True})

    async def inject(request: Request) -> Response:
        try:
            data = json.loads(await request.body())
            state.inject(str(data["kind"]), int(data.get("count", 1)))
        except (ValueError, KeyError, TypeError) as exc:
            return JSONResponse(_error_body(f"Bad injection: {exc}", "invalid_request_error"), status_code=400)
        return JSONResponse({"ok": True, "pending": state.stats()["pending_injections"]})

    async def configure(request: Request) -> Response:
        try:
            data = json.loads(await request.body())
            if not isinstance(data, dict):
                raise ValueError("send a JSON object of config fields")
            if callable(data.get("reply")) or data.get("reply") == "scripted":
                raise ValueError("only 'echo' and 'choice' replies can be set over HTTP")
            new = state.configure(data)
        except (ValueError, TypeError) as exc:
            return JSONResponse(_error_body(f"Bad config: {exc}", "invalid_request_error"), status_code=400)
        return JSONResponse(new.public())

    async def recorded(request: Request) -> Response:
        last = int(request.query_params.get("last", "20"))
        with state.lock:
            bodies = list(state.recorded)[-last:] if last > 0 else []
        return JSONResponse(bodies)

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/_stats", stats, methods=["GET"]),
            Route("/_reset", reset, methods=["POST"]),
            Route("/_inject", inject, methods=["POST"]),
            Route("/_config", configure, methods=["POST"]),
            Route("/_requests", recorded, methods=["GET"]),
        ]
    )


# ---------------------------------------------------------------------------------------------- the server


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
        self._state = _State(config)
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
