"""The FastAPI app: configuration, the token check in front of every route, security headers, routers."""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from medpanel.errors import MedpanelError
from medpanel.runs.store import Store
from medpanel.web import auth
from medpanel.web.config import WebConfig
from medpanel.web.templating import render

STATIC = Path(__file__).parent / "static"
# Scripts only from this app's own files (no inline script can run, even if one slipped into a page),
# images from here or inline (plots), nothing from elsewhere: the app works offline and leaks nothing.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")


def create_app(config: WebConfig | None = None, store: Store | None = None) -> FastAPI:
    from medpanel.web import deliberate, live, pages, rating, runs  # routers

    config = (config or WebConfig()).with_token()
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if config.start_board is not None:  # `medpanel serve --board CASE`: the board opens as the server starts
            open_board(app, config)
        yield
        await app.state.deliberations.shutdown()  # what finished is stored; a resume runs the rest

    app = FastAPI(title="medpanel", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.config = config
    app.state.store = store or Store(config.store_path)
    app.state.deliberations = live.Deliberations(config, app.state.store)

    @app.middleware("http")
    async def guard(request: Request, call_next):
        request.state.user = auth.LOCAL_ADMIN
        if (problem := foreign_request(request, config)) is not None:
            return secured(PlainTextResponse(problem, status_code=403))
        if config.needs_token and request.url.path not in auth.OPEN_PATHS:
            token = auth.token_of(request.headers, request.cookies, request.query_params if request.method == "GET" else {})
            user = auth.user_for(token, config.token, app.state.store)
            if user is None:
                return refused(request)
            request.state.user = user
            if "token" in request.query_params and request.method == "GET":  # a link with ?token=: keep it in the cookie, out of the URL
                rest = request.url.remove_query_params("token").query
                response = RedirectResponse(request.url.path + (f"?{rest}" if rest else ""), status_code=303)
                set_token_cookie(response, token)
                return secured(response)
        return secured(await call_next(request))

    @app.exception_handler(MedpanelError)
    async def medpanel_error(request: Request, exc: MedpanelError):
        status = getattr(exc, "http_status", 400 if exc.exit_code == 2 else 500)
        problem = shown_problem(exc.problem, request.app.state.config)
        if wants_html(request):
            return render(request, "error.html", status_code=status, problem=problem, fix=exc.fix)
        return JSONResponse({"error": problem, "fix": exc.fix}, status_code=status)

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    for module in (pages, deliberate, runs, rating):
        app.include_router(module.router)
    app.add_middleware(BodyLimit, limit=config.max_request_bytes)
    return app


def open_board(app: FastAPI, config: WebConfig) -> None:
    import sys

    from medpanel.cases import load_case
    from medpanel.web.plans import make_plan

    case = load_case(config.start_board)
    plan = make_plan(case, str(config.start_board), "board-live", [config.default_model], "", "", 6)
    started = app.state.deliberations.start(plan, "admin" if config.needs_token else "local")
    print(f"live board on {case.id}: /deliberations/{started.id}", file=sys.stderr, flush=True)


MAX_PROBLEM_CHARS = 600


def shown_problem(problem: str, config: WebConfig) -> str:
    """An error as a page shows it: the server's folders left out (an upload is 'the upload'), and bounded (it may
    repeat what a form sent)."""
    folder = config.upload_folder
    problem = problem.replace(str(folder.resolve()), "[uploads]").replace(str(folder), "[uploads]")
    return problem if len(problem) <= MAX_PROBLEM_CHARS else problem[:MAX_PROBLEM_CHARS] + " [...]"


LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def foreign_request(request: Request, config: WebConfig) -> str | None:
    """Why a request from another site must be refused, or None. On loopback without a token the local person
    needs no sign-in, so the Host must name this machine (no DNS rebinding) and a form may be posted only from
    this app's own pages (no cross-site request forgery); with a token the SameSite cookie covers the second,
    and the Origin check still applies."""
    host = request.url.hostname or ""  # from the Host header, without its port (IPv6 without brackets)
    if not config.needs_token and host not in LOOPBACK_NAMES:
        return f"This medpanel server answers on loopback only; '{host}' is not this machine's name."
    if request.method not in SAFE_METHODS:
        site = request.headers.get("sec-fetch-site")
        origin = request.headers.get("origin")
        # A browser says where a form came from (Sec-Fetch-Site); one too old to say so still sends its Origin.
        if site is not None and site not in ("same-origin", "none"):
            return "A form from another site cannot be sent to this medpanel server."
        if site is None and origin not in (None, "null") and origin.split("://", 1)[-1] != request.headers.get("host", ""):
            return "A form from another site cannot be sent to this medpanel server."
    return None


class BodyLimit:
    """Refuse a request body past `limit` bytes as it arrives (a chunked upload has no Content-Length to check)."""

    def __init__(self, app, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await self._refuse(send)
        seen, over, started = 0, False, False

        async def counted():
            nonlocal seen, over
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:  # the app reads no more: to it the client has gone
                over = True
                return {"type": "http.disconnect"}
            return message

        async def watched(message):
            nonlocal started
            if over:
                return  # whatever the app answers to a vanished client, the client gets the 413 below
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except Exception:  # the app's error at a body cut short (wrapped in task groups, so any kind)
            if not over:
                raise
        if over and not started:
            await self._refuse(send)

    async def _refuse(self, send) -> None:
        text = (f"The upload is over {self.limit / 1e6:.0f} MB in all: upload fewer or smaller slide images.").encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(text)).encode())]})
        await send({"type": "http.response.body", "body": text})


def wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "") and request.headers.get("hx-request") is None


def refused(request: Request):
    if request.method == "GET" and wants_html(request):
        return secured(RedirectResponse(f"/login?next={request.url.path}", status_code=303))
    return secured(PlainTextResponse("This medpanel server needs an access token: sign in at /login, or send "
                                     "'Authorization: Bearer TOKEN'.", status_code=401))


def set_token_cookie(response, token: str) -> None:
    # HttpOnly: no script reads it; SameSite=Strict: no other site's page can post with it.
    response.set_cookie(auth.COOKIE, token, httponly=True, samesite="strict", max_age=12 * 3600)


def secured(response):
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "same-origin"  # nothing leaves for another site; this app's own forms keep their Origin
    return response
