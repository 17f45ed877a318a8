"""Run the mock server in its own process, as benchmarks and crash tests need: the client under test
then has the CPU and the event loop to itself, and can be killed without taking the server down."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Iterator


class MockProcess:
    def __init__(self, proc: subprocess.Popen, base_url: str) -> None:
        self.proc = proc
        self.base_url = base_url  # http://127.0.0.1:PORT/v1

    def _call(self, path: str, body: dict | None = None) -> dict:
        root = self.base_url.rsplit("/v1", 1)[0]
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(root + path, data=data, method="POST" if data is not None else "GET",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read() or b"{}")

    def stats(self) -> dict:
        return self._call("/_stats")

    def configure(self, **changes) -> dict:
        return self._call("/_config", changes)

    def reset(self) -> dict:
        return self._call("/_reset", {})

    def cpu_s(self) -> float | None:
        """CPU seconds the server process has used (user + system), read from /proc; None where there is none.
        Benchmarks report it per call, to tell the client's share of a shared machine from the server's."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def mock_server_process(*args: str, start_timeout_s: float = 30.0) -> Iterator[MockProcess]:
    """Start `python -m medpanel.testing.mock_server ARGS` and yield once it prints its READY line."""
    proc = subprocess.Popen([sys.executable, "-m", "medpanel.testing.mock_server", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()  # blocks until READY (or the process dies: empty line)
        if not line.startswith("READY "):
            proc.kill()
            raise RuntimeError(f"mock server did not start: {line!r} {proc.stderr.read()[-2000:]}")
        yield MockProcess(proc, line.split(" ", 1)[1])
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
