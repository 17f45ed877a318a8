"""The SQL of rating sessions (tables from migration 0008_rating_sessions), through the Store's own
`_write` (one transaction per call) and `_query`. Nothing else in medpanel.rating writes SQL.

Rows come back as plain dicts with JSON columns decoded. `rating_systems` is the unblinding key: only
analysis (report.py, judge_agreement.py) reads run ids from it; what a rater sees never does.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from medpanel.errors import UsageError
from medpanel.runs.store import Store


class AlreadyRated(UsageError):
    """The rater has already rated (part of) this item: ratings are final once given."""


def insert_session(store: Store, session: dict[str, Any], systems: list[tuple[int, str]], items: list[dict[str, Any]],
                   answers: list[tuple[int, int, str, str]]) -> None:
    """A new session with its hidden systems, its items and the answers as shown, in one transaction.
    answers: (item, system, letter, text)."""
    if store._query("SELECT 1 FROM rating_sessions WHERE id = ?", (session["id"],)):
        raise UsageError(f"A rating session with id {session['id']} already exists.", "Pick another id.")
    sid = session["id"]
    statements: list[tuple[str, tuple]] = [(
        "INSERT INTO rating_sessions (id, created_at, rubric, dimensions, seed, raters, adjudicator, note) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (sid, session.get("created_at") or time.time(), session["rubric"], json.dumps(session["dimensions"]), int(session["seed"]),
         json.dumps(session["raters"]), session.get("adjudicator"), session.get("note")),
    )]
    statements += [("INSERT INTO rating_systems VALUES (?, ?, ?)", (sid, system, run_id)) for system, run_id in systems]
    statements += [("INSERT INTO rating_items VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (sid, it["item"], it["item_id"], it["repeat"], json.dumps(it["prompt"]), json.dumps(it["raters"]), it.get("adjudicator")))
                   for it in items]
    statements += [("INSERT INTO rating_answers VALUES (?, ?, ?, ?, ?)", (sid, item, system, letter, text)) for item, system, letter, text in answers]
    store._write(statements)


def _session_row(row: sqlite3.Row) -> dict[str, Any]:
    d = dict(row)
    d["dimensions"] = json.loads(d["dimensions"])
    d["raters"] = json.loads(d["raters"])
    return d


def get_session(store: Store, session_id: str) -> dict[str, Any] | None:
    rows = store._query("SELECT * FROM rating_sessions WHERE id = ?", (session_id,))
    return _session_row(rows[0]) if rows else None


def list_sessions(store: Store) -> list[dict[str, Any]]:
    return [_session_row(r) for r in store._query("SELECT * FROM rating_sessions ORDER BY created_at DESC, id")]


def resolve_session_id(store: Store, prefix: str) -> str:
    """A full session id, a unique prefix of one, or 'last'."""
    prefix = prefix.strip()
    if prefix == "last":
        rows = store._query("SELECT id FROM rating_sessions ORDER BY created_at DESC LIMIT 1")
    elif store._query("SELECT 1 FROM rating_sessions WHERE id = ?", (prefix,)):
        return prefix
    else:
        rows = store._query("SELECT id FROM rating_sessions WHERE substr(id, 1, ?) = ? ORDER BY created_at DESC", (len(prefix), prefix))
    if not rows or not prefix:
        raise UsageError(f"No rating session matches '{prefix}' in {store.path}.", "List sessions with `medpanel rate list`.")
    if len(rows) > 1:
        raise UsageError(f"'{prefix}' matches {len(rows)} rating sessions.", "Give more characters of the session id.")
    return rows[0]["id"]


def session_systems(store: Store, session_id: str) -> list[dict[str, Any]]:
    """The unblinding key: hidden system number -> run id. For analysis only."""
    return [dict(r) for r in store._query("SELECT system, run_id FROM rating_systems WHERE session_id = ? ORDER BY system", (session_id,))]


def sessions_of_runs(store: Store, run_ids: list[str]) -> list[str]:
    """Ids of the sessions that rated any of these runs, oldest first."""
    if not run_ids:
        return []
    marks = ",".join("?" * len(run_ids))
    rows = store._query(f"SELECT DISTINCT s.id, s.created_at FROM rating_sessions s JOIN rating_systems r ON r.session_id = s.id "
                        f"WHERE r.run_id IN ({marks}) ORDER BY s.created_at, s.id", tuple(run_ids))
    return [r["id"] for r in rows]


def session_items(store: Store, session_id: str) -> list[dict[str, Any]]:
    out = []
    for r in store._query("SELECT * FROM rating_items WHERE session_id = ? ORDER BY item", (session_id,)):
        d = dict(r)
        d["prompt"] = json.loads(d["prompt"])
        d["raters"] = json.loads(d["raters"])
        out.append(d)
    return out


def session_answers(store: Store, session_id: str, item: int | None = None) -> list[dict[str, Any]]:
    """Answers as shown: (item, system, letter, text), ordered by item then letter."""
    if item is None:
        rows = store._query("SELECT item, system, letter, text FROM rating_answers WHERE session_id = ? ORDER BY item, letter", (session_id,))
    else:
        rows = store._query("SELECT item, system, letter, text FROM rating_answers WHERE session_id = ? AND item = ? ORDER BY letter",
                            (session_id, item))
    return [dict(r) for r in rows]


def session_ratings(store: Store, session_id: str) -> list[dict[str, Any]]:
    rows = store._query("SELECT rater, item, system, dimension, value, role, at FROM ratings WHERE session_id = ? "
                        "ORDER BY item, system, dimension, at, rater", (session_id,))
    return [dict(r) for r in rows]




def insert_ratings(store: Store, session_id: str, rater: str, item: int, role: str, values: list[tuple[int, str, int]]) -> None:
    """One rater's verdicts on one item, all or nothing: (system, dimension, value). A rater rates an item once."""
    if store._query("SELECT 1 FROM ratings WHERE session_id = ? AND rater = ? AND item = ? LIMIT 1", (session_id, rater, item)):
        raise AlreadyRated(f"{rater} has already rated item {item} of this session.", "Ratings are final once given: go on to the next item.")
    now = time.time()
    try:
        store._write([("INSERT INTO ratings VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (session_id, rater, item, system, dimension, int(value), role, now))
                      for system, dimension, value in values])
    except sqlite3.IntegrityError:  # the same form sent twice at once: the first one won
        raise AlreadyRated(f"{rater} has already rated item {item} of this session.", "Ratings are final once given: go on to the next item.") from None


__all__ = ["AlreadyRated", "get_session", "insert_ratings", "insert_session", "list_sessions", "resolve_session_id",
           "session_answers", "session_items", "session_ratings", "session_systems", "sessions_of_runs"]
