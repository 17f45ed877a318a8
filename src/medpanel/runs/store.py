"""The SQLite store: runs, items, transcripts, scores, and every model call (which doubles as the cache).

One file, WAL mode, so a crash or Ctrl-C loses nothing already committed. Each finished item is
written in one transaction with its events and scores. Schema changes are named, append-only
migrations: never edit a migration that has shipped, add a new one.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from medpanel.errors import UsageError

MIGRATIONS: list[tuple[str, str]] = [
    (
        "0001_initial",
        """
        CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            created_at REAL NOT NULL,
            finished_at REAL,
            status TEXT NOT NULL,            -- running | done | interrupted | stopped (budget) | failed
            dataset TEXT NOT NULL,
            protocol TEXT NOT NULL,
            models TEXT NOT NULL,            -- JSON list of model specs
            settings TEXT NOT NULL,          -- JSON: everything needed to resume the run as it was started
            message TEXT
        );
        CREATE TABLE items (
            run_id TEXT NOT NULL REFERENCES runs(id),
            item_id TEXT NOT NULL,
            repeat INTEGER NOT NULL,
            status TEXT NOT NULL,            -- done | failed
            outcome TEXT,                    -- JSON
            error TEXT,
            error_kind TEXT,
            started_at REAL,
            finished_at REAL,
            input_tokens INTEGER DEFAULT 0,
            output_tokens INTEGER DEFAULT 0,
            cost_usd REAL DEFAULT 0,
            calls INTEGER DEFAULT 0,
            cached_calls INTEGER DEFAULT 0,
            PRIMARY KEY (run_id, item_id, repeat)
        );
        CREATE TABLE events (
            run_id TEXT NOT NULL,
            item_id TEXT NOT NULL,
            repeat INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            event TEXT NOT NULL,             -- JSON of medpanel.transcript.Event
            PRIMARY KEY (run_id, item_id, repeat, seq)
        );
        CREATE TABLE scores (
            run_id TEXT NOT NULL,
            item_id TEXT NOT NULL,
            repeat INTEGER NOT NULL,
            name TEXT NOT NULL,
            value REAL,
            PRIMARY KEY (run_id, item_id, repeat, name)
        );
        CREATE TABLE calls (
            key TEXT PRIMARY KEY,            -- sha256 of (model, messages, schema, semantic options, sample index)
            model TEXT NOT NULL,
            record TEXT NOT NULL,            -- JSON: text, usage, finish_reason, cost, latency, request
            created_at REAL NOT NULL
        );
        CREATE TABLE call_log (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            key TEXT NOT NULL,
            model TEXT NOT NULL,
            cached INTEGER NOT NULL,
            run_id TEXT,
            item_id TEXT,
            repeat INTEGER,
            at REAL NOT NULL
        );
        CREATE INDEX call_log_item ON call_log (run_id, item_id, repeat);
        """,
    ),
    (
        # call_log.error: set when the call failed for good. (No SQL comment inside ALTER TABLE: SQLite
        # splices the column text into the stored CREATE statement, and a trailing comment would eat its ')'.)
        "0002_call_log_error",
        "ALTER TABLE call_log ADD COLUMN error TEXT",
    ),
    (
        # The call log becomes the ledger of what each item spent: every made call's tokens and dollars,
        # so failed items, re-asks and judge calls are all counted.
        "0003_call_log_usage",
        """
        ALTER TABLE call_log ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE call_log ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE call_log ADD COLUMN cost_usd REAL NOT NULL DEFAULT 0
        """,
    ),
]


def default_store_path() -> Path:
    env = os.environ.get("MEDPANEL_STORE")
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "medpanel" / "medpanel.db"


class Store:
    """Thread-safe access to one SQLite file. Implements the model layer's CallCache protocol."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else default_store_path()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
        except (OSError, sqlite3.Error) as exc:
            raise UsageError(f"Cannot open the store {self.path}: {exc}.", "Pass a writable path with --store or MEDPANEL_STORE.") from None
        self._db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across app crashes, fast commits
        self._db.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        self._migrate()

    # ------------------------------------------------------------------ plumbing

    def _migrate(self) -> None:
        with self._lock:
            self._db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
            done = {r[0] for r in self._db.execute("SELECT name FROM _migrations")}
            for name, sql in MIGRATIONS:
                if name in done:
                    continue
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    for statement in filter(str.strip, sql.split(";")):
                        self._db.execute(statement)
                    self._db.execute("INSERT INTO _migrations VALUES (?, ?)", (name, time.time()))
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise

    def migrations(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT name FROM _migrations ORDER BY name")]

    def _write(self, statements: Iterable[tuple[str, tuple]]) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for sql, args in statements:
                    self._db.execute(sql, args)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def _query(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------------ model-call cache and log

    def get_call(self, key: str) -> dict[str, Any] | None:
        rows = self._query("SELECT record FROM calls WHERE key = ?", (key,))
        return json.loads(rows[0]["record"]) if rows else None

    def put_call(self, key: str, record: dict[str, Any], scope: tuple[str, str, int] | None = None) -> None:
        """Cache a finished call and log it against its item, in one transaction."""
        run_id, item_id, repeat = scope or (None, None, None)
        now = time.time()
        model = record.get("model", "")
        usage = record.get("usage") or {}
        self._write([
            ("INSERT OR REPLACE INTO calls VALUES (?, ?, ?, ?)", (key, model, json.dumps(record), now)),
            ("INSERT INTO call_log (key, model, cached, run_id, item_id, repeat, at, error, input_tokens, output_tokens, cost_usd) "
             "VALUES (?, ?, 0, ?, ?, ?, ?, NULL, ?, ?, ?)",
             (key, model, run_id, item_id, repeat, now, int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0)),
              float(record.get("cost_usd", 0.0)))),
        ])

    def log_call(self, key: str, model: str, cached: bool, scope: tuple[str, str, int] | None, error: str | None = None,
                 usage: tuple[int, int, float] = (0, 0, 0.0)) -> None:
        """Log a call: served from the cache, failed, or made without caching (usage = tokens in, out, dollars)."""
        run_id, item_id, repeat = scope or (None, None, None)
        self._write([("INSERT INTO call_log (key, model, cached, run_id, item_id, repeat, at, error, input_tokens, output_tokens, cost_usd) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                      (key, model, int(cached), run_id, item_id, repeat, time.time(), error, *usage))])

    def item_spend(self, run_id: str, item_id: str, repeat: int) -> dict[str, float]:
        """Tokens and dollars of the calls an item made (cache hits cost nothing), from the call log."""
        row = self._query("SELECT COALESCE(SUM(input_tokens), 0) AS i, COALESCE(SUM(output_tokens), 0) AS o, COALESCE(SUM(cost_usd), 0) AS c "
                          "FROM call_log WHERE run_id = ? AND item_id = ? AND repeat = ? AND cached = 0", (run_id, item_id, repeat))[0]
        return {"input_tokens": row["i"], "output_tokens": row["o"], "cost_usd": row["c"]}

    def call_counts(self, run_id: str, item_id: str | None = None, repeat: int | None = None) -> dict[str, int]:
        sql = "SELECT cached, COUNT(*) AS n FROM call_log WHERE run_id = ?"
        args: tuple = (run_id,)
        if item_id is not None:
            sql += " AND item_id = ? AND repeat = ?"
            args += (item_id, repeat)
        rows = self._query(sql + " GROUP BY cached", args)
        counts = {"calls": 0, "cached_calls": 0}
        for r in rows:
            counts["cached_calls" if r["cached"] else "calls"] += r["n"]
        return counts

    def call_log(self, run_id: str | None = None) -> list[dict]:
        if run_id is None:
            return [dict(r) for r in self._query("SELECT * FROM call_log ORDER BY id")]
        return [dict(r) for r in self._query("SELECT * FROM call_log WHERE run_id = ? ORDER BY id", (run_id,))]

    # ------------------------------------------------------------------ runs

    def create_run(self, run_id: str, *, dataset: str, protocol: str, models: list[str], settings: dict) -> None:
        if self.get_run(run_id) is not None:
            raise UsageError(f"A run with id {run_id} already exists.", "Use --resume to continue it, or pick another id.")
        self._write([
            ("INSERT INTO runs (id, created_at, status, dataset, protocol, models, settings) VALUES (?, ?, 'running', ?, ?, ?, ?)",
             (run_id, time.time(), dataset, protocol, json.dumps(models), json.dumps(settings)))
        ])

    def set_run_status(self, run_id: str, status: str, message: str | None = None) -> None:
        finished = time.time() if status != "running" else None
        self._write([("UPDATE runs SET status = ?, finished_at = ?, message = ? WHERE id = ?", (status, finished, message, run_id))])

    def get_run(self, run_id: str) -> dict | None:
        rows = self._query("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not rows:
            return None
        run = dict(rows[0])
        run["models"] = json.loads(run["models"])
        run["settings"] = json.loads(run["settings"])
        return run

    def list_runs(self, limit: int = 50) -> list[dict]:
        rows = self._query(
            """SELECT r.id, r.created_at, r.finished_at, r.status, r.dataset, r.protocol, r.models,
                      COUNT(i.item_id) AS items,
                      SUM(i.status = 'done') AS done,
                      SUM(i.status = 'failed') AS failed,
                      COALESCE(SUM(i.cost_usd), 0) AS cost_usd
               FROM runs r LEFT JOIN items i ON i.run_id = r.id
               GROUP BY r.id ORDER BY r.created_at DESC LIMIT ?""",
            (limit,),
        )
        out = []
        for r in rows:
            d = dict(r)
            d["models"] = json.loads(d["models"])
            d["done"] = d["done"] or 0
            d["failed"] = d["failed"] or 0
            out.append(d)
        return out

    def resolve_run_id(self, prefix: str) -> str:
        """Accept a full run id, a unique prefix, or 'last'."""
        if prefix == "last":
            rows = self._query("SELECT id FROM runs ORDER BY created_at DESC LIMIT 1")
        elif self._query("SELECT id FROM runs WHERE id = ?", (prefix,)):
            return prefix  # an exact id wins even when longer ids start with it
        else:  # substr, not LIKE: '_' and '%' in ids are ordinary characters
            rows = self._query("SELECT id FROM runs WHERE substr(id, 1, ?) = ? ORDER BY created_at DESC", (len(prefix), prefix))
        if not rows:
            raise UsageError(f"No run matches '{prefix}' in {self.path}.", "List runs with `medpanel runs` (or check --store).")
        if len(rows) > 1 and rows[0]["id"] != prefix:
            raise UsageError(f"'{prefix}' matches {len(rows)} runs.", "Give more characters of the run id.")
        return rows[0]["id"]

    # ------------------------------------------------------------------ items

    def finished_items(self, run_id: str) -> set[tuple[str, int]]:
        return {(r["item_id"], r["repeat"]) for r in self._query("SELECT item_id, repeat FROM items WHERE run_id = ? AND status = 'done'", (run_id,))}

    def write_item(
        self,
        run_id: str,
        item_id: str,
        repeat: int,
        *,
        status: str,
        outcome: dict | None,
        events: list[dict],
        scores: dict[str, float | None],
        error: str | None = None,
        error_kind: str | None = None,
        started_at: float,
        totals: dict[str, float] | None = None,
    ) -> None:
        """Record one finished (or failed) item with its transcript and scores, all or nothing.

        Its tokens and dollars come from the call log (every call it made, failed or re-asked ones too);
        `totals` is used only for an item whose calls were not logged here.
        """
        counts = self.call_counts(run_id, item_id, repeat)
        logged = self.item_spend(run_id, item_id, repeat)
        totals = logged if counts["calls"] or not totals else totals
        key = (run_id, item_id, repeat)
        statements: list[tuple[str, tuple]] = [
            ("DELETE FROM events WHERE run_id = ? AND item_id = ? AND repeat = ?", key),
            ("DELETE FROM scores WHERE run_id = ? AND item_id = ? AND repeat = ?", key),
            (
                "INSERT OR REPLACE INTO items VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*key, status, json.dumps(outcome) if outcome is not None else None, error, error_kind, started_at, time.time(),
                 int(totals.get("input_tokens", 0)), int(totals.get("output_tokens", 0)), float(totals.get("cost_usd", 0.0)),
                 counts["calls"], counts["cached_calls"]),
            ),
        ]
        statements += [("INSERT INTO events VALUES (?, ?, ?, ?, ?)", (*key, seq, json.dumps(ev))) for seq, ev in enumerate(events)]
        statements += [("INSERT INTO scores VALUES (?, ?, ?, ?, ?)", (*key, name, value)) for name, value in scores.items()]
        self._write(statements)

    def add_scores(self, run_id: str, item_id: str, repeat: int, scores: dict[str, float | None]) -> None:
        """Add or replace the named scores of a recorded item, keeping its other scores (e.g. a judge's,
        computed after the run). Unlike write_item, which replaces an item's scores wholesale."""
        if not self._query("SELECT 1 FROM items WHERE run_id = ? AND item_id = ? AND repeat = ?", (run_id, item_id, repeat)):
            raise UsageError(f"Run {run_id} has no item '{item_id}' (repeat {repeat}) to add scores to.", "Item ids are listed by `medpanel show RUN --json`.")
        self._write([("INSERT OR REPLACE INTO scores VALUES (?, ?, ?, ?, ?)", (run_id, item_id, repeat, name, value))
                     for name, value in scores.items()])

    def items(self, run_id: str) -> list[dict]:
        rows = self._query("SELECT * FROM items WHERE run_id = ? ORDER BY item_id, repeat", (run_id,))
        out = []
        for r in rows:
            d = dict(r)
            d["outcome"] = json.loads(d["outcome"]) if d["outcome"] else None
            out.append(d)
        return out

    def scores(self, run_id: str) -> list[dict]:
        return [dict(r) for r in self._query("SELECT * FROM scores WHERE run_id = ? ORDER BY item_id, repeat, name", (run_id,))]

    def events(self, run_id: str, item_id: str, repeat: int = 0) -> list[dict]:
        rows = self._query("SELECT event FROM events WHERE run_id = ? AND item_id = ? AND repeat = ? ORDER BY seq", (run_id, item_id, repeat))
        return [json.loads(r["event"]) for r in rows]
