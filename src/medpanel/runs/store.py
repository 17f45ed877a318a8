"""The SQLite store: runs, items, transcripts, scores, and every model call (which doubles as the cache).

One file, WAL mode, so a crash or Ctrl-C loses nothing already committed. Each finished item is
written in one transaction with its events and scores. Schema changes are named, append-only
migrations: never edit a migration that has shipped, add a new one.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import socket
import sqlite3
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Iterable

import pydantic_core

from medpanel.errors import UsageError
from medpanel.runs.call_writer import CallWriter
from medpanel.runs.migrations import MIGRATIONS
from medpanel.runs.store_errors import StoreError, is_store_problem, store_error  # noqa: F401 (StoreError: re-exported)

# How often a run's holder refreshes its lease, and after how long without a refresh the lease is stale
# (for a holder on this host whose pid is still alive too: it may be a reused pid, or a hung process).
LEASE_HEARTBEAT_S = 5.0
LEASE_STALE_S = 60.0

# The two rows of every model call: its cache entry and its line in the spend ledger.
PUT_CALL_SQL = "INSERT OR REPLACE INTO calls VALUES (?, ?, ?, ?)"
LOG_CALL_SQL = ("INSERT INTO call_log (key, model, cached, run_id, item_id, repeat, at, error, input_tokens, output_tokens, cost_usd, "
                "served_model, truncated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
MERGED = (PUT_CALL_SQL, LOG_CALL_SQL)
MERGED_ROWS = 128  # rows per multi-row INSERT at most


@functools.lru_cache(maxsize=64)
def _multi_row(sql: str, rows: int) -> str:
    """An INSERT ... VALUES (?, ...) statement for `rows` rows at once."""
    head, values = sql.split(" VALUES ", 1)
    return f"{head} VALUES {', '.join([values] * rows)}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    try:  # a killed child its parent has not reaped yet is a zombie: dead for our purposes
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def default_store_path() -> Path:
    env = os.environ.get("MEDPANEL_STORE")
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "medpanel" / "medpanel.db"


_OPEN_STORES: "weakref.WeakSet[Store]" = weakref.WeakSet()
# Connections a forked child inherited. SQLite forbids using them there, and closing one could disturb the
# parent's locks and journal, so the child never uses or closes them (its interpreter's exit, if it exits
# normally rather than by os._exit, finalises them).
_INHERITED: list[sqlite3.Connection] = []


def _after_fork_in_child() -> None:
    for store in list(_OPEN_STORES):
        store._forked_away()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Store:
    """Thread-safe access to one SQLite file. Implements the model layer's CallCache protocol. A store open
    when the process forks is refused in the child, with what to do instead (SQLite's connections cannot
    cross a fork: a child writing beside the parent's copied lock state can lose its commits)."""

    def __init__(self, path: str | Path | None = None, *, create: bool = True, make_folder: bool = True) -> None:
        """Open (and migrate) the store. `create=False`: a missing file is an error, nothing is created (read-only
        commands); `make_folder=False`: a missing folder is an error, not made (a typo in --store). `created` says
        whether this call made a new store file."""
        # Absolute: the cache-lookup connection opens later, perhaps after the working directory changed.
        self.path = (Path(path) if path else default_store_path()).absolute()
        self.created = not self.path.exists()
        if self.created and not create:
            raise StoreError(f"There is no store at {self.path}.",
                             "Check the path in --store or MEDPANEL_STORE; runs are stored there by `medpanel bench` and the protocol commands.")
        if self.created and not make_folder and not self.path.parent.is_dir():
            raise StoreError(f"The folder {self.path.parent} of the store {self.path.name} does not exist.",
                             f"Fix the path in --store or MEDPANEL_STORE, or create the folder: mkdir -p {self.path.parent}")
        self._lock = threading.RLock()
        self._read_lock = threading.Lock()
        self._closed = self._forked = False
        self._reader: sqlite3.Connection | None = None  # for cache lookups (get_call), opened on the first
        self._writer = CallWriter(self._write_merged, self.path.name)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        except (OSError, sqlite3.Error) as exc:
            raise store_error(exc, self.path) from None
        # Rows per multi-row INSERT: MERGED_ROWS (a power of two), fewer where SQLite takes fewer parameters.
        variables = self._db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        self._merge_rows = {sql: 1 << (min(MERGED_ROWS, max(1, variables // sql.count("?"))).bit_length() - 1) for sql in MERGED}
        try:
            self._db.row_factory = sqlite3.Row
            self._set_wal()
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across app crashes, fast commits
            self._migrate()
        except (OSError, sqlite3.Error) as exc:
            self._db.close()
            raise store_error(exc, self.path) from None
        _OPEN_STORES.add(self)

    def _forked_away(self) -> None:
        """After fork(), in the child: new locks (a parent's thread may have held one at the fork), the parent's
        connections kept untouched, and every later use refused (StoreError) instead of going through them."""
        _INHERITED.extend(c for c in (self._conn, self._reader) if c is not None)
        self._lock, self._read_lock, self._reader = threading.RLock(), threading.Lock(), None
        self._forked = True

    def _fork_error(self) -> StoreError:
        return StoreError(f"The store {self.path} was opened before this process forked, and SQLite's connections cannot be "
                          "used across a fork (the child could lose what it writes).",
                          "Open the store only in the process that uses it: in a worker, after it starts, with nothing "
                          "opened before the fork; or start workers with multiprocessing's 'spawn' or 'forkserver' method.")

    def check_usable(self) -> None:
        """Raise the fork's StoreError in a forked child: a model call asks before it sends, so no billed call is
        made that the ledger could not take."""
        if self._forked:
            raise self._fork_error()

    @property
    def _db(self) -> sqlite3.Connection:
        self.check_usable()
        return self._conn

    @_db.setter
    def _db(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    # ------------------------------------------------------------------ plumbing

    def _set_wal(self, attempts: int = 100) -> None:
        # Switching a new file to WAL takes an exclusive lock and SQLite may answer "locked" at once, without
        # waiting on the busy timeout, while another process opens the same new store: retry, bounded (~10 s).
        for attempt in range(attempts):
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc) or attempt == attempts - 1:
                    raise
                time.sleep(0.1)

    def _migrate(self) -> None:
        # All pending migrations in one IMMEDIATE transaction, the list of applied ones read inside it: two
        # processes opening an old store at once then apply each migration once (the second waits, sees it done).
        with self._lock:
            if self._pending_migrations(self._db.execute("SELECT name FROM sqlite_master WHERE name = '_migrations'").fetchone()):
                self._transaction(self._apply_migrations)

    def _pending_migrations(self, table_exists) -> bool:
        if not table_exists:
            return True
        done = {r[0] for r in self._db.execute("SELECT name FROM _migrations")}
        return any(name not in done for name, _ in MIGRATIONS)

    def _apply_migrations(self) -> None:
        self._db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
        done = {r[0] for r in self._db.execute("SELECT name FROM _migrations")}
        for name, sql in MIGRATIONS:
            if name in done:
                continue
            for statement in filter(str.strip, sql.split(";")):
                self._db.execute(statement)
            self._db.execute("INSERT INTO _migrations VALUES (?, ?)", (name, time.time()))

    def _transaction(self, body):
        """Run body() inside BEGIN IMMEDIATE ... COMMIT; on any failure roll back (if SQLite has not already)
        and raise the first error, a store problem as one StoreError."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    result = body()
                    self._db.execute("COMMIT")
                    return result
                except BaseException:
                    if self._db.in_transaction:  # SQLite rolls back by itself after e.g. SQLITE_FULL
                        try:
                            self._db.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass
                    raise
            except (sqlite3.DatabaseError, OSError) as exc:
                if not is_store_problem(exc):
                    raise
                raise store_error(exc, self.path) from None

    def migrations(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT name FROM _migrations ORDER BY name")]

    def _write(self, statements: Iterable[tuple[str, tuple]]) -> None:
        # No redaction here: ids, tokens, URLs and serialised JSON must be stored exactly. Keys a server
        # echoes reach the store only in error text, which is redacted where errors are made
        # (MedpanelError, and the runner's record of an unexpected exception).
        def body() -> None:
            for sql, args in statements:
                self._db.execute(sql, args)

        self._transaction(body)

    def _write_merged(self, statements: Iterable[tuple[str, tuple]]) -> None:
        """_write for the writer thread's groups: the call rows of many calls as one multi-row INSERT per table.

        One statement per row let the thread give up and wait to take back the GIL once per row, against an event
        loop that holds it most of the time; a group of a hundred calls took milliseconds of waiting. Rows keep
        their order within each table, and every other statement (an item's record, which reads the call log) is
        run where it stood, after every call row queued before it."""
        def body() -> None:
            pending: dict[str, list[tuple]] = {}

            def flush() -> None:
                for sql, rows in pending.items():
                    at = 0
                    while at < len(rows):
                        # Chunks of a power of two rows: a handful of distinct statements, each prepared once and cached.
                        size = min(self._merge_rows[sql], 1 << ((len(rows) - at).bit_length() - 1))
                        chunk = rows[at:at + size]
                        self._db.execute(_multi_row(sql, size), [v for row in chunk for v in row])
                        at += size
                pending.clear()

            for sql, args in statements:
                if sql in self._merge_rows:
                    pending.setdefault(sql, []).append(args)
                else:
                    flush()
                    self._db.execute(sql, args)
            flush()

        self._transaction(body)

    def _query(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.DatabaseError as exc:
                if not is_store_problem(exc):
                    raise  # a bug in the query, not a store problem
                raise store_error(exc, self.path) from None

    def close(self) -> None:
        if self._forked:  # the parent's: nothing here to commit or close
            self._closed = True
            return
        self._closed = True
        self._writer.close()  # the calls still queued are committed first
        with self._read_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------------ model-call cache and log

    def get_call(self, key: str) -> dict[str, Any] | None:
        # On a connection of its own: a cache lookup never waits for a group of calls being committed.
        with self._read_lock:
            self.check_usable()
            if self._closed:
                raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
            try:
                if self._reader is None:
                    self._reader = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
                row = self._reader.execute("SELECT record FROM calls WHERE key = ?", (key,)).fetchone()
            except sqlite3.DatabaseError as exc:
                if not is_store_problem(exc):
                    raise
                raise store_error(exc, self.path) from None
        return json.loads(row[0]) if row else None

    def put_call(self, key: str, record: dict[str, Any], scope: tuple[str, str, int] | None = None) -> None:
        """Cache a finished call and log it against its item, in one transaction."""
        self._write(self._put_rows(key, record, scope))

    async def put_call_async(self, key: str, record: dict[str, Any], scope: tuple[str, str, int] | None = None) -> None:
        """put_call, committed in a group with other calls (runs/call_writer.py); returns once committed."""
        await self._writer.submit(self._put_rows(key, record, scope))

    def log_call(self, key: str, model: str, cached: bool, scope: tuple[str, str, int] | None, error: str | None = None,
                 usage: tuple[int, int, float] = (0, 0, 0.0), served_model: str | None = None, truncated: bool | None = None) -> None:
        """Log a call: served from the cache, failed, or made without caching (usage = tokens in, out, dollars;
        served_model and truncated as the reply said, None where there was no reply)."""
        self._write([self._log_row(key, model, cached, scope, error, usage, served_model, truncated)])

    async def log_call_async(self, key: str, model: str, cached: bool, scope: tuple[str, str, int] | None, error: str | None = None,
                             usage: tuple[int, int, float] = (0, 0, 0.0), served_model: str | None = None,
                             truncated: bool | None = None) -> None:
        """log_call, committed in a group with other calls; returns once committed."""
        await self._writer.submit([self._log_row(key, model, cached, scope, error, usage, served_model, truncated)])

    @staticmethod
    def _put_rows(key: str, record: dict[str, Any], scope: tuple[str, str, int] | None) -> list[tuple[str, tuple]]:
        run_id, item_id, repeat = scope or (None, None, None)
        now = time.time()
        model = record.get("model", "")
        usage = record.get("usage") or {}
        truncated = record.get("truncated")
        return [
            # pydantic_core's encoder: json.dumps's output (NaN included) in compact form, several times faster.
            (PUT_CALL_SQL, (key, model, pydantic_core.to_json(record, inf_nan_mode="constants").decode(), now)),
            (LOG_CALL_SQL, (key, model, 0, run_id, item_id, repeat, now, None, int(usage.get("input_tokens", 0)),
                            int(usage.get("output_tokens", 0)), float(record.get("cost_usd", 0.0)), record.get("served_model"),
                            None if truncated is None else int(truncated))),
        ]

    @staticmethod
    def _log_row(key: str, model: str, cached: bool, scope: tuple[str, str, int] | None, error: str | None,
                 usage: tuple[int, int, float], served_model: str | None, truncated: bool | None) -> tuple[str, tuple]:
        run_id, item_id, repeat = scope or (None, None, None)
        return (LOG_CALL_SQL, (key, model, int(cached), run_id, item_id, repeat, time.time(), error, *usage, served_model,
                 None if truncated is None else int(truncated)))

    # ------------------------------------------------------------------ what servers accept

    def server_capability(self, base_url: str, model: str, name: str) -> Any:
        """What was learned about `name` on this server and model, or None if nothing is known."""
        rows = self._query("SELECT value FROM server_capabilities WHERE base_url = ? AND model = ? AND name = ?", (base_url, model, name))
        return json.loads(rows[0]["value"]) if rows else None

    def remember_server_capability(self, base_url: str, model: str, name: str, value: Any) -> None:
        self._write([self._capability_row(base_url, model, name, value)])

    # What a gate learned is kept here for the next process (models/gate_memory.py); a Ray worker's forwarding
    # cache does not keep it.
    keeps_gate_memory = True

    def remember_server_capability_soon(self, base_url: str, model: str, name: str, value: Any) -> None:
        """remember_server_capability through the writer thread, not waited for: from a model call on an event
        loop, which must not stall on the store's lock. Its outcome is not reported (a head start, not a record)."""
        row = self._capability_row(base_url, model, name, value)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self._write([row])
            return
        self._writer.submit([row]).add_done_callback(lambda done: done.cancelled() or done.exception())

    @staticmethod
    def _capability_row(base_url: str, model: str, name: str, value: Any) -> tuple[str, tuple]:
        return ("INSERT OR REPLACE INTO server_capabilities VALUES (?, ?, ?, ?, ?)", (base_url, model, name, json.dumps(value), time.time()))

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

    def request_schemas(self, run_id: str | None = None, item_id: str | None = None) -> list[dict]:
        """The distinct reply schemas the logged calls were sent (of a run, of one of its items), first seen first."""
        sql, args = "SELECT c.record FROM call_log l JOIN calls c ON c.key = l.key WHERE 1 = 1", ()
        if run_id is not None:
            sql, args = sql + " AND l.run_id = ?", (run_id,)
        if item_id is not None:
            sql, args = sql + " AND l.item_id = ?", args + (item_id,)
        schemas: dict[str, dict] = {}
        for row in self._query(sql + " ORDER BY l.id", args):  # one query, not one per logged call
            schema = (json.loads(row["record"]).get("request") or {}).get("schema")
            if schema:
                schemas.setdefault(json.dumps(schema, sort_keys=True), schema)
        return list(schemas.values())

    # ------------------------------------------------------------------ runs

    def create_run(self, run_id: str, *, dataset: str, protocol: str, models: list[str], settings: dict,
                   lease: tuple[str, int, str] | None = None) -> None:
        """Record a new run, checked and inserted in one IMMEDIATE transaction (two processes creating one id:
        the second gets the UsageError). `lease` = (token, pid, host): the creator holds the run's lease from
        the same transaction on."""
        def body() -> None:
            if self._db.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone():
                raise UsageError(f"A run with id {run_id} already exists.", "Use --resume to continue it, or pick another id.")
            now = time.time()
            self._db.execute("INSERT INTO runs (id, created_at, status, dataset, protocol, models, settings) VALUES (?, ?, 'running', ?, ?, ?, ?)",
                             (run_id, now, dataset, protocol, json.dumps(models), json.dumps(settings)))
            if lease:
                self._db.execute("INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?, ?, ?)", (run_id, *lease, now, now))

        self._transaction(body)

    def set_run_role(self, run_id: str, role: str, spec: str) -> None:
        """Record the model in `role` of a stored run (a judge used afterwards, by `medpanel judge run`)."""
        def body() -> None:
            row = self._db.execute("SELECT settings FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise UsageError(f"No run '{run_id}' in {self.path}.", "List runs with `medpanel runs`.")
            settings = json.loads(row["settings"])
            settings["roles"] = {**(settings.get("roles") or {}), role: spec}
            self._db.execute("UPDATE runs SET settings = ? WHERE id = ?", (json.dumps(settings), run_id))

        self._transaction(body)

    # ------------------------------------------------------------------ one writer per run

    def lease(self, run_id: str) -> dict | None:
        rows = self._query("SELECT * FROM leases WHERE run_id = ?", (run_id,))
        return dict(rows[0]) if rows else None

    @staticmethod
    def lease_stale(lease: dict, *, host: str, now: float | None = None, stale_after_s: float = LEASE_STALE_S) -> str | None:
        """Why a lease is stale (its holder is gone), or None while its holder may still be writing."""
        age = (now or time.time()) - lease["heartbeat_at"]
        if lease["host"] == host and not _pid_alive(lease["pid"]):
            return f"its writer (pid {lease['pid']} on {host}) is no longer running"
        if age > stale_after_s:
            return f"its writer (pid {lease['pid']} on {lease['host']}) last signalled {age:.0f} s ago"
        return None

    def acquire_lease(self, run_id: str, token: str, *, pid: int, host: str, stale_after_s: float = LEASE_STALE_S) -> str | None:
        """Become the run's one writer, in one IMMEDIATE transaction. A live holder: UsageError naming it. A stale
        holder (dead pid on this host, or no heartbeat for stale_after_s): taken over, the run first marked
        `interrupted` with the reason, which is returned. None when there was no holder."""
        def body() -> str | None:
            row = self._db.execute("SELECT * FROM leases WHERE run_id = ?", (run_id,)).fetchone()
            now = time.time()
            reason = None
            if row is not None and row["token"] != token:
                holder = dict(row)
                stale = self.lease_stale(holder, host=host, now=now, stale_after_s=stale_after_s)
                if stale is None:
                    raise UsageError(
                        f"Run {run_id} is being written by another process: pid {holder['pid']} on {holder['host']} "
                        f"(since {time.strftime('%H:%M:%S', time.localtime(holder['started_at']))}, last heartbeat {now - holder['heartbeat_at']:.0f} s ago).",
                        f"Wait for it to finish, or stop it (on {holder['host']}: kill {holder['pid']}) and resume again; "
                        "a run has one writer at a time so no item is paid for twice.")
                reason = f"taken over: {stale}"
                self._db.execute("UPDATE runs SET status = 'interrupted', finished_at = ?, message = ? WHERE id = ?", (now, reason, run_id))
            self._db.execute("INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?, ?, ?)", (run_id, token, pid, host, now, now))
            return reason

        return self._transaction(body)

    def heartbeat(self, run_id: str, token: str) -> bool:
        """Refresh the lease; False when this holder no longer holds it (it was taken over)."""
        def body() -> bool:
            return self._db.execute("UPDATE leases SET heartbeat_at = ? WHERE run_id = ? AND token = ?", (time.time(), run_id, token)).rowcount == 1

        return self._transaction(body)

    def release_lease(self, run_id: str, token: str) -> None:
        self._write([("DELETE FROM leases WHERE run_id = ? AND token = ?", (run_id, token))])

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
            if d["status"] == "running":  # a writer killed outright never said so: show what its lease says
                lease = self.lease(d["id"])
                gone = "no writer holds its lease" if lease is None else self.lease_stale(lease, host=socket.gethostname())
                if gone:
                    d["status"], d["stale"] = "interrupted", gone
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

    def write_item(self, run_id: str, item_id: str, repeat: int, **record: Any) -> None:
        """Record one finished (or failed) item with its transcript and scores, all or nothing (see _item_rows)."""
        self._write(self._item_rows(run_id, item_id, repeat, **record))

    async def write_item_async(self, run_id: str, item_id: str, repeat: int, **record: Any) -> None:
        """write_item, committed by the store's writer thread in a group with calls (runs/call_writer.py), so the
        event loop goes on serving calls meanwhile; returns once the item is in the file. The writer commits in
        order, so every call record handed to it before (this item's, and its siblings' that had answered) is
        counted in the item's spend."""
        await self._writer.submit(self._item_rows(run_id, item_id, repeat, **record))

    @staticmethod
    def _item_rows(
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
    ) -> list[tuple[str, tuple]]:
        """The statements that record an item. Its tokens, dollars and call counts are read from the call log
        inside the same transaction (every call it made, failed or re-asked ones too), so they count every call
        committed before it; `totals` is used only for an item none of whose calls was made (not cached) here."""
        key = (run_id, item_id, repeat)
        given = totals or {}
        statements: list[tuple[str, tuple]] = [
            ("DELETE FROM events WHERE run_id = ? AND item_id = ? AND repeat = ?", key),
            ("DELETE FROM scores WHERE run_id = ? AND item_id = ? AND repeat = ?", key),
            (
                "INSERT OR REPLACE INTO items SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                "CASE WHEN s.made > 0 OR ? THEN s.i ELSE ? END, CASE WHEN s.made > 0 OR ? THEN s.o ELSE ? END, "
                "CASE WHEN s.made > 0 OR ? THEN s.c ELSE ? END, s.made, s.cached FROM ("
                "SELECT COALESCE(SUM(cached = 0), 0) AS made, COALESCE(SUM(cached <> 0), 0) AS cached, "
                "CAST(COALESCE(SUM(CASE WHEN cached = 0 THEN input_tokens END), 0) AS INTEGER) AS i, "
                "CAST(COALESCE(SUM(CASE WHEN cached = 0 THEN output_tokens END), 0) AS INTEGER) AS o, "
                "CAST(COALESCE(SUM(CASE WHEN cached = 0 THEN cost_usd END), 0) AS REAL) AS c "
                "FROM call_log WHERE run_id = ? AND item_id = ? AND repeat = ?) AS s",
                (*key, status, json.dumps(outcome) if outcome is not None else None, error, error_kind, started_at, time.time(),
                 not totals, int(given.get("input_tokens", 0)), not totals, int(given.get("output_tokens", 0)),
                 not totals, float(given.get("cost_usd", 0.0)), *key),
            ),
        ]
        statements += [("INSERT INTO events VALUES (?, ?, ?, ?, ?)", (*key, seq, json.dumps(ev))) for seq, ev in enumerate(events)]
        statements += [("INSERT INTO scores VALUES (?, ?, ?, ?, ?)", (*key, name, value)) for name, value in scores.items()]
        return statements

    def add_scores(self, run_id: str, item_id: str, repeat: int, scores: dict[str, float | None]) -> None:
        """Add or replace the named scores of a recorded item, keeping its other scores (e.g. a judge's,
        computed after the run). Unlike write_item, which replaces an item's scores wholesale."""
        if not self._query("SELECT 1 FROM items WHERE run_id = ? AND item_id = ? AND repeat = ?", (run_id, item_id, repeat)):
            raise UsageError(f"Run {run_id} has no item '{item_id}' (repeat {repeat}) to add scores to.", "Item ids are listed by `medpanel show RUN --json`.")
        self._write([("INSERT OR REPLACE INTO scores VALUES (?, ?, ?, ?, ?)", (run_id, item_id, repeat, name, value))
                     for name, value in scores.items()])

    def add_scored(self, run_id: str, item_id: str, repeat: int, scores: dict[str, float | None], events: list[dict],
                   scorers: list[str]) -> None:
        """Record what scorers run after the item was written (`medpanel judge run`) as the run would have:
        their scores merged into the item's, their events appended to its transcript (replacing earlier
        events of the same scorers), and the item's tokens, dollars and calls re-read from the call log."""
        key = (run_id, item_id, repeat)
        if not self._query("SELECT 1 FROM items WHERE run_id = ? AND item_id = ? AND repeat = ?", key):
            raise UsageError(f"Run {run_id} has no item '{item_id}' (repeat {repeat}) to add scores to.", "Item ids are listed by `medpanel show RUN --json`.")
        kept = [e for e in self.events(run_id, item_id, repeat) if (e.get("data") or {}).get("scorer") not in scorers]
        counts, spent = self.call_counts(run_id, item_id, repeat), self.item_spend(run_id, item_id, repeat)
        statements: list[tuple[str, tuple]] = [("DELETE FROM events WHERE run_id = ? AND item_id = ? AND repeat = ?", key)]
        statements += [("INSERT INTO events VALUES (?, ?, ?, ?, ?)", (*key, seq, json.dumps(ev))) for seq, ev in enumerate([*kept, *events])]
        statements += [("INSERT OR REPLACE INTO scores VALUES (?, ?, ?, ?, ?)", (*key, name, value)) for name, value in scores.items()]
        if counts["calls"]:
            statements.append(("UPDATE items SET input_tokens = ?, output_tokens = ?, cost_usd = ?, calls = ?, cached_calls = ? "
                               "WHERE run_id = ? AND item_id = ? AND repeat = ?",
                               (int(spent.get("input_tokens", 0)), int(spent.get("output_tokens", 0)), float(spent.get("cost_usd", 0.0)),
                                counts["calls"], counts["cached_calls"], *key)))
        self._write(statements)

    def items(self, run_id: str, item_id: str | None = None) -> list[dict]:
        """A run's items in order; with `item_id`, that item's repeats only (one indexed read, for one item's page)."""
        if item_id is None:
            rows = self._query("SELECT * FROM items WHERE run_id = ? ORDER BY item_id, repeat", (run_id,))
        else:
            rows = self._query("SELECT * FROM items WHERE run_id = ? AND item_id = ? ORDER BY repeat", (run_id, item_id))
        out = []
        for r in rows:
            d = dict(r)
            d["outcome"] = json.loads(d["outcome"]) if d["outcome"] else None
            out.append(d)
        return out

    def scores(self, run_id: str, item_id: str | None = None, repeat: int | None = None) -> list[dict]:
        """A run's scores; with `item_id` and `repeat`, that one item's."""
        if item_id is None:
            return [dict(r) for r in self._query("SELECT * FROM scores WHERE run_id = ? ORDER BY item_id, repeat, name", (run_id,))]
        return [dict(r) for r in self._query("SELECT * FROM scores WHERE run_id = ? AND item_id = ? AND repeat = ? ORDER BY name",
                                             (run_id, item_id, repeat or 0))]

    def events(self, run_id: str, item_id: str, repeat: int = 0) -> list[dict]:
        rows = self._query("SELECT event FROM events WHERE run_id = ? AND item_id = ? AND repeat = ? ORDER BY seq", (run_id, item_id, repeat))
        return [json.loads(r["event"]) for r in rows]

    # ------------------------------------------------------------------ web app users (hashed tokens only)

    def add_user(self, name: str, role: str, token_hash: str) -> None:
        """Add a person, or give an existing one a new role and token (the old token stops working)."""
        self._write([("INSERT OR REPLACE INTO users VALUES (?, ?, ?, ?)", (name, role, token_hash, time.time()))])

    def remove_user(self, name: str) -> bool:
        found = bool(self._query("SELECT 1 FROM users WHERE name = ?", (name,)))
        self._write([("DELETE FROM users WHERE name = ?", (name,))])
        return found

    def users(self) -> list[dict]:
        return [dict(r) for r in self._query("SELECT name, role, created_at FROM users ORDER BY name")]

    def user_by_token_hash(self, token_hash: str) -> dict | None:
        rows = self._query("SELECT name, role FROM users WHERE token_hash = ?", (token_hash,))
        return dict(rows[0]) if rows else None
