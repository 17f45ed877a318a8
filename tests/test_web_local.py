"""The README's web command on the real embedded model: `medpanel serve --board examples/prostate` opens a
live board as the server starts, and the board runs to its conclusion on SmolLM2 (slow: the real model)."""

from __future__ import annotations

import os
import re
import subprocess
import time

import httpx
import pytest

from conftest import MEDPANEL, ROOT, needs_local_model
from web_support import free_port


@pytest.mark.slow
def test_serve_opens_a_live_board_on_the_embedded_model(tmp_path):
    needs_local_model()
    port = free_port()
    env = dict(os.environ, MEDPANEL_STORE=str(tmp_path / "web.db"))
    server = subprocess.Popen([MEDPANEL, "serve", "--board", "examples/prostate", "--port", str(port)], cwd=ROOT, env=env,
                              stderr=subprocess.PIPE, text=True)
    try:
        where = None
        deadline = time.monotonic() + 120
        while where is None and time.monotonic() < deadline:
            line = server.stderr.readline()
            found = re.search(r"(/deliberations/[0-9a-f]+)", line)
            where = found.group(1) if found else None
        assert where, "serve never said where the board is"
        base = f"http://127.0.0.1:{port}"
        page = ""
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            try:
                page = httpx.get(base + where, timeout=30).text
            except httpx.ConnectError:  # the board opens as the server starts, a moment before it listens
                time.sleep(0.5)
                continue
            if re.search(r'data-status="(done|failed|stopped)"', page):
                break
            time.sleep(2)
        assert 'data-status="done"' in page, page[-2000:]
        assert page.count('class="turn') >= 4  # the opening, the specialists' turns, the plan
        assert "The board recommends" in page
    finally:
        server.terminate()
        server.wait(timeout=60)
