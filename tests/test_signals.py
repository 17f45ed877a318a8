"""SIGTERM and SIGHUP end a benchmark the way Ctrl-C does: run marked interrupted, resume command printed."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time

import pytest

from conftest import MEDPANEL, ROOT
from medpanel.testing.process import mock_server_process


def _done(db_path) -> int:
    try:
        with sqlite3.connect(db_path, timeout=5) as db:
            return db.execute("SELECT COUNT(*) FROM items WHERE status = 'done'").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_termination_signal_marks_the_run_interrupted(cli_env, shared_data, sig):
    db_path = cli_env["MEDPANEL_STORE"]
    with mock_server_process("--latency", "0.3", "--reply", "choice") as mock:
        args = [MEDPANEL, "bench", "medqa", "-m", f"openai:mock-model@{mock.base_url}", "--limit", "40", "-c", "2", "--run-id", "sig"]
        proc = subprocess.Popen(args, env=cli_env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while _done(db_path) < 2 and time.time() < deadline:
            time.sleep(0.05)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "Interrupted" in stderr and "--resume sig" in stderr
    assert "Traceback" not in stderr
    with sqlite3.connect(db_path) as db:
        assert db.execute("SELECT status FROM runs WHERE id='sig'").fetchone()[0] == "interrupted"
        assert 2 <= db.execute("SELECT COUNT(*) FROM items WHERE run_id='sig' AND status='done'").fetchone()[0] < 40
