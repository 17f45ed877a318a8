"""The web app's test harness: the real app served by uvicorn on a loopback port, and headless Chromium.

Chromium is Debian's (/usr/bin/chromium), driven by Playwright's Python client with no browser download.
Where it is absent the browser tests skip with the reason, unless MEDPANEL_REQUIRE_BROWSER=1 (CI sets it),
where they fail instead: CI must never pass by skipping them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("MEDPANEL_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
SCREENSHOTS = Path(os.environ.get("MEDPANEL_SCREENSHOTS", Path(__file__).resolve().parents[1] / "screenshots"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(app, host: str = "127.0.0.1"):
    """Serve `app` with uvicorn in a thread; yields the base URL (always reached over loopback)."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the web app did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def need_browser() -> None:
    missing = None
    if not (shutil.which(CHROMIUM) or Path(CHROMIUM).exists()):
        missing = f"Debian's chromium is not at {CHROMIUM} (apt-get install chromium)"
    else:
        try:
            import playwright  # noqa: F401
        except ImportError:
            missing = "playwright (the Python client) is not installed: pip install -e '.[test]'"
    if missing:
        if os.environ.get("MEDPANEL_REQUIRE_BROWSER") == "1":
            pytest.fail(missing)
        pytest.skip(missing)


@contextlib.contextmanager
def browser_page(width: int = 1280, height: int = 900):
    """A fresh headless Chromium page (its own profile), closed afterwards."""
    need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(30_000)
            yield page
        finally:
            browser.close()


def screenshot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
