"""Training runs in the store (tables from migration 0009_training_runs), through the Store's own `_write`
(one transaction per call) and `_query`. Nothing else in medpanel.train writes SQL.

A run's id lives in its output folder (RUN_ID_FILE), so `--resume` into the same folder goes on with the
same stored run; a step logged again after a resume replaces its row, so a step is stored once.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from medpanel.errors import BudgetExceeded, UsageError
from medpanel.runs.store import Store

RUN_ID_FILE = "medpanel_run_id.txt"


def _clean(value: Any) -> Any:
    """JSON-safe metrics: NaN and infinities (a reward TRL could not average) become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def run_id_for(out: Path, kind: str) -> str:
    """The training run id of `out`: the one written there by an earlier start, else a new one."""
    path = out / RUN_ID_FILE
    if path.is_file():
        run_id = path.read_text(encoding="utf-8").strip()
        if not run_id.startswith(f"{kind}-"):
            raise UsageError(f"{out} holds a {run_id.split('-')[0]} run ({run_id}), not a {kind} run.", "Give this run its own --out.")
        return run_id
    run_id = f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(run_id + "\n", encoding="utf-8")
    return run_id


def start_run(store: Store, run_id: str, *, kind: str, out: Path, settings: dict, data: dict, seed: int) -> None:
    """Record the run as running (a resumed run keeps its creation time and takes the new settings)."""
    now = time.time()
    store._write([(
        "INSERT INTO training_runs (id, kind, out_dir, settings, data, seed, status, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?) ON CONFLICT(id) DO UPDATE SET settings = excluded.settings, "
        "data = excluded.data, status = 'running', updated_at = excluded.updated_at",
        (run_id, kind, str(out), json.dumps(_clean(settings), default=str), json.dumps(data), int(seed), now, now))])


def add_step(store: Store, run_id: str, step: int, metrics: dict, phase: str = "train") -> None:
    store._write([("INSERT OR REPLACE INTO training_steps (run_id, step, phase, metrics, at) VALUES (?, ?, ?, ?, ?)",
                   (run_id, int(step), phase, json.dumps(_clean(metrics), default=str), time.time()))])


def finish_run(store: Store, run_id: str, status: str, summary: dict | None = None) -> None:
    store._write([("UPDATE training_runs SET status = ?, updated_at = ?, summary = COALESCE(?, summary) WHERE id = ?",
                   (status, time.time(), json.dumps(_clean(summary), default=str) if summary is not None else None, run_id))])


@contextmanager
def marked(store: Store | None, run_id: str):
    """Whatever ends the block early is recorded as the run's status: a budget cap `stopped`, Ctrl-C
    `interrupted`, anything else `failed` (the error itself goes on to the caller)."""
    try:
        yield
    except BaseException as exc:
        if store is not None:
            status = "stopped" if isinstance(exc, BudgetExceeded) else "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            finish_run(store, run_id, status)
        raise


def _decode(row) -> dict:
    d = dict(row)
    for key in ("settings", "data", "summary", "metrics"):
        if key in d and d[key] is not None:
            d[key] = json.loads(d[key])
    return d


def training_runs(store: Store) -> list[dict]:
    return [_decode(r) for r in store._query("SELECT * FROM training_runs ORDER BY created_at DESC")]


def resolve_training_run(store: Store, ref: str) -> str | None:
    """The training run `ref` names (a full id or a unique prefix), or None when it names none."""
    rows = store._query("SELECT id FROM training_runs WHERE id = ? OR substr(id, 1, ?) = ? ORDER BY created_at DESC",
                        (ref, len(ref), ref))
    if not rows:
        return None
    ids = [r["id"] for r in rows]
    if ref in ids:
        return ref
    if len(ids) > 1:
        raise UsageError(f"'{ref}' matches {len(ids)} training runs.", "Give more characters of the run id.")
    return ids[0]


def training_run(store: Store, run_id: str) -> dict:
    """The run with its steps in order (train and eval rows)."""
    rows = store._query("SELECT * FROM training_runs WHERE id = ?", (run_id,))
    if not rows:
        raise UsageError(f"No training run {run_id} in {store.path}.", "List them with `medpanel train runs` (or check --store).")
    run = _decode(rows[0])
    run["steps"] = [_decode(r) for r in store._query("SELECT step, phase, metrics, at FROM training_steps WHERE run_id = ? "
                                                       "ORDER BY step, phase", (run_id,))]
    return run


def store_callback(store: Store, run_id: str):
    """A trainer callback writing every logged step to the store: evaluation logs as `eval` rows, the
    trainer's closing summary as `end`, the rest as `train` (one row per step and phase)."""
    from transformers import TrainerCallback

    class StoreSteps(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs:
                phase = "end" if "train_runtime" in logs else "eval" if any(k.startswith("eval_") for k in logs) else "train"
                add_step(store, run_id, state.global_step, dict(logs), phase)

    return StoreSteps()
