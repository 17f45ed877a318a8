"""Jinja templates with autoescaping on: every value from a model, a case or a run is escaped, always."""

from __future__ import annotations

from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse

TEMPLATES = Path(__file__).parent / "templates"

env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(default=True, default_for_string=True),
                  trim_blocks=True, lstrip_blocks=True)


def dollars(value) -> str:
    value = float(value or 0)
    return "$0" if value == 0 else f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def tokens(value) -> str:
    value = int(value or 0)
    return f"{value / 1000:.1f}k" if value >= 10_000 else str(value)


def when(value) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M", time.localtime(float(value))) if value else ""


def redacted(value) -> str:
    """A model spec or error as shown: any API key in it is masked (keys never reach the browser)."""
    from medpanel.redact import redact

    return redact(str(value))


env.filters.update(dollars=dollars, tokens=tokens, when=when, redacted=redacted)


def render(request: Request, name: str, status_code: int = 200, **context) -> HTMLResponse:
    context.setdefault("user", getattr(request.state, "user", None))
    context.setdefault("path", request.url.path)
    return HTMLResponse(env.get_template(name).render(request=request, **context), status_code=status_code)


def fragment(name: str, **context) -> str:
    """A template rendered to a string (the live page's SSE messages)."""
    return env.get_template(name).render(**context)
