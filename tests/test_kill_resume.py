"""SIGKILL a running benchmark part way, resume it, and check nothing was lost or done twice."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time

from conftest import MEDPANEL, ROOT, count_done
from medpanel.testing.process import mock_server_process

ITEMS = 24


def test_sigkill_then_resume_finishes_each_item_once_without_repeating_calls(cli_env, shared_data, tmp_path):
    db_path = cli_env["MEDPANEL_STORE"]
    with mock_server_process("--latency", "0.25", "--reply", "choice") as mock:
        args = [MEDPANEL, "bench", "medqa", "-m", f"openai:mock-model@{mock.base_url}", "--limit", str(ITEMS), "-c", "3", "--run-id", "killme"]
        proc = subprocess.Popen(args, env=cli_env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while count_done(db_path) < 6 and time.time() < deadline:
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        killed_at = time.time()
        with sqlite3.connect(db_path) as db:
            finished_before = {r[0] for r in db.execute("SELECT item_id FROM items WHERE status = 'done'")}
        assert 6 <= len(finished_before) < ITEMS, "the kill should land part way through"

        resumed = subprocess.run([MEDPANEL, "bench", "--resume", "killme", "--json"], env=cli_env, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert resumed.returncode == 0, resumed.stderr
        stats = mock.stats()

    with sqlite3.connect(db_path) as db:
        items = db.execute("SELECT item_id, repeat, status FROM items WHERE run_id = 'killme'").fetchall()
        assert len(items) == ITEMS and {s for _, _, s in items} == {"done"}
        assert len({(i, r) for i, r, _ in items}) == ITEMS  # each item exactly once
        for item_id, _, _ in items:  # exactly one transcript per item: one turn, one decision
            kinds = [k for (k,) in db.execute("SELECT json_extract(event, '$.kind') FROM events WHERE run_id='killme' AND item_id=? ORDER BY seq", (item_id,))]
            assert kinds == ["turn", "decision"], item_id
        # No model call of an item finished before the kill was made again after it.
        placeholders = ",".join("?" * len(finished_before))
        repeated = db.execute(
            f"SELECT COUNT(*) FROM call_log WHERE run_id='killme' AND cached=0 AND at > ? AND item_id IN ({placeholders})",
            (killed_at, *finished_before)).fetchone()[0]
        assert repeated == 0
        status = db.execute("SELECT status FROM runs WHERE id='killme'").fetchone()[0]
        assert status == "done"
    # The server saw every distinct request once, except the few in flight at the kill (at most the concurrency).
    assert sum(stats["by_hash"].values()) - len(stats["by_hash"]) <= 3
    assert len(stats["by_hash"]) == ITEMS
