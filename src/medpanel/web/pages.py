"""The pages every front end has: the health check, signing in and out."""

from __future__ import annotations

from fastapi import APIRouter, Form, Request
from fastapi.responses import PlainTextResponse, RedirectResponse

from medpanel.web import auth
from medpanel.web.templating import render

router = APIRouter()


@router.get("/health")
async def health() -> PlainTextResponse:
    return PlainTextResponse("ok")


def _local_path(target: str) -> str:
    """Only a path on this server is followed after sign-in (never another site)."""
    return target if target.startswith("/") and not target.startswith("//") and "\\" not in target else "/"


@router.get("/login")
async def login_form(request: Request, next: str = "/"):
    return render(request, "login.html", next=_local_path(next), failed=False)


@router.post("/login")
async def login(request: Request, token: str = Form(""), next: str = Form("/")):
    from medpanel.web.app import set_token_cookie

    config = request.app.state.config
    if auth.user_for(token.strip(), config.token, request.app.state.store) is None:
        return render(request, "login.html", status_code=401, next=_local_path(next), failed=True)
    response = RedirectResponse(_local_path(next), status_code=303)
    set_token_cookie(response, token.strip())
    return response


@router.post("/logout")
async def logout() -> RedirectResponse:
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(auth.COOKIE)
    return response
