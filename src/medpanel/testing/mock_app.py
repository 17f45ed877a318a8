"""The mock server's HTTP side, a Starlette app over one `ServerState`: the Chat Completions route,
which counts the request, answers a refused shape or a drawn fault as the real servers do (500, 429 with
Retry-After, a hang, a truncated or non-JSON body, a trickle) and otherwise sends the reply, plus
`/v1/models` and the `/_stats`, `/_reset`, `/_inject`, `/_config` and `/_requests` control routes. It is
kept apart from the server's lifecycle (`mock_server`) so the routing and fault behaviour read in one
place; Starlette is imported only when an app is built, as the mock is a test extra's. `build_app` returns
a plain ASGI app: the completions route goes straight to its handler, every other request to a Starlette
router.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any

from medpanel.testing.mock_replies import choice_for, content_text, fake_from_schema, first_user, request_hash, requested_schema, user_texts
from medpanel.testing.mock_state import MockConfig, ServerState


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




# ---------------------------------------------------------------------------------------------- the app


def build_app(state: ServerState):
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
            value = fake_from_schema(schema, first_user(body)) if schema else {"answer": choice_for(body)}
            return json.dumps(value)
        if config.reply == "choice":
            letter = choice_for(body)
            return f"Reasoning: weighing the findings in the case, option {letter} fits them best.\nAnswer: {letter}"
        users = user_texts(body)
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

    slots: list[tuple[int, asyncio.Semaphore]] = []  # the capacity's slots, made in the server's own event loop

    async def serve_time(config: MockConfig) -> bool:
        """Take the time an answer takes: latency_s, after a free slot when the server has a capacity.
        False when the queue for a slot is full (the server is overloaded)."""
        if config.capacity is None:
            if config.latency_s > 0:
                await asyncio.sleep(config.latency_s)
            return True
        with state.lock:
            if config.queue_limit is not None and state.queued >= config.queue_limit and state.active >= config.capacity:
                state.errors["503"] += 1
                return False
            state.queued += 1
            if not slots or slots[0][0] != config.capacity:  # first use, or a new capacity (for new requests)
                slots[:] = [(config.capacity, asyncio.Semaphore(config.capacity))]
            slot = slots[0][1]
        queued = True
        try:
            async with slot:
                with state.lock:
                    state.queued -= 1
                    queued = False
                    state.active += 1
                    state.peak_active = max(state.peak_active, state.active)
                try:
                    if config.latency_s > 0:
                        await asyncio.sleep(config.latency_s)
                finally:
                    with state.lock:
                        state.active -= 1
        finally:
            if queued:  # the client went away while it waited for a slot
                with state.lock:
                    state.queued -= 1
        return True

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
        if config.rate_limit_rpm:
            with state.lock:
                wait = state.rate_take(time.monotonic())
                if wait is not None:
                    state.errors["429"] += 1
            if wait is not None:
                return JSONResponse(_error_body("Rate limit reached for requests (mock).", "requests", "rate_limit_exceeded"), status_code=429,
                                    headers={"Retry-After": f"{wait:.3f}", "retry-after-ms": str(max(1, round(wait * 1000)))})
        with state.lock:
            state.in_flight += 1
            state.peak_in_flight = max(state.peak_in_flight, state.in_flight)
        try:
            overloaded = not await serve_time(config)
        finally:
            with state.lock:
                state.in_flight -= 1
        if overloaded:
            return JSONResponse(_error_body("The server is overloaded (mock): too many requests queued.", "server_error", "overloaded"), status_code=503)
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

    routes = Starlette(
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

    async def app(scope, receive, send) -> None:
        # The completions route straight to its handler: Starlette's middleware and router cost the mock
        # more CPU per request than the answer itself, and a benchmark's mock shares the client's cores.
        # Its behaviour is the same (the handler and its responses are Starlette's); an error in it is
        # uvicorn's plain 500 instead of Starlette's.
        if scope["type"] == "http" and scope["path"] == "/v1/chat/completions" and scope["method"] == "POST":
            response = await chat(Request(scope, receive, send))
            await response(scope, receive, send)
        else:
            await routes(scope, receive, send)

    return app
