"""The SQLite store: migrations, atomic item writes, the call cache and log, run lookup."""

from __future__ import annotations

import sqlite3

import pytest

from medpanel.errors import UsageError
from medpanel.runs.store import MIGRATIONS, Store


def test_migrations_are_named_applied_once_and_wal(tmp_path):
    path = tmp_path / "s.db"
    Store(path).close()
    again = Store(path)  # reopening applies nothing twice
    assert again.migrations() == [name for name, _ in MIGRATIONS]
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_item_write_is_all_or_nothing(store):
    store.create_run("r1", dataset="d", protocol="single", models=["m"], settings={})
    store.write_item("r1", "a", 0, status="done", outcome={"answer": "B"}, events=[{"kind": "turn"}, {"kind": "decision"}],
                     scores={"accuracy": 1.0}, started_at=0.0)
    # A failing write (bad score name type) must leave the earlier item untouched and add nothing.
    with pytest.raises(sqlite3.Error):
        store.write_item("r1", "b", 0, status="done", outcome={}, events=[{"kind": "turn"}], scores={None: 1.0}, started_at=0.0)
    assert [i["item_id"] for i in store.items("r1")] == ["a"]
    assert store.events("r1", "b") == []
    assert store.finished_items("r1") == {("a", 0)}
    # Rewriting an item replaces its events and scores rather than duplicating them.
    store.write_item("r1", "a", 0, status="done", outcome={"answer": "C"}, events=[{"kind": "turn"}], scores={"accuracy": 0.0}, started_at=0.0)
    assert len(store.events("r1", "a")) == 1
    assert store.scores("r1")[0]["value"] == 0.0


def test_call_cache_and_log(store):
    assert store.get_call("k") is None
    store.put_call("k", {"model": "m", "text": "hi"}, ("r", "i", 0))
    assert store.get_call("k")["text"] == "hi"
    store.log_call("k", "m", True, ("r", "i", 0))
    store.log_call("k", "m", True, ("r", "j", 0))
    assert store.call_counts("r") == {"calls": 1, "cached_calls": 2}
    assert store.call_counts("r", "i", 0) == {"calls": 1, "cached_calls": 1}


def test_run_ids_resolve_by_prefix_and_last(store):
    store.create_run("20260101-aaaa", dataset="d", protocol="p", models=[], settings={})
    store.create_run("20260102-bbbb", dataset="d", protocol="p", models=[], settings={})
    assert store.resolve_run_id("20260101") == "20260101-aaaa"
    assert store.resolve_run_id("last") == "20260102-bbbb"
    with pytest.raises(UsageError, match="matches 2 runs"):
        store.resolve_run_id("2026")
    with pytest.raises(UsageError, match="No run matches"):
        store.resolve_run_id("nope")
    with pytest.raises(UsageError, match="already exists"):
        store.create_run("20260101-aaaa", dataset="d", protocol="p", models=[], settings={})


def test_unwritable_store_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UsageError, match="Cannot open the store"):
        Store(blocker / "sub" / "s.db")


def test_a_store_from_an_older_version_is_migrated_forward(tmp_path):
    """A file made by the first schema gains later migrations on open, keeping its rows."""
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    for statement in filter(str.strip, MIGRATIONS[0][1].split(";")):
        db.execute(statement)
    db.execute("INSERT INTO _migrations VALUES ('0001_initial', 0)")
    db.execute("INSERT INTO call_log (key, model, cached, at) VALUES ('k', 'm', 0, 0)")
    db.commit()
    db.close()
    store = Store(path)
    assert store.migrations() == [name for name, _ in MIGRATIONS]
    store.log_call("k2", "m", False, None, error="boom")
    assert [r["error"] for r in store.call_log()] == [None, "boom"]


def test_an_exact_run_id_wins_over_longer_ids_that_start_with_it(store):
    store.create_run("always-b", dataset="d", protocol="p", models=[], settings={})
    store.create_run("always-b-v2", dataset="d", protocol="p", models=[], settings={})
    store.create_run("a_x", dataset="d", protocol="p", models=[], settings={})
    assert store.resolve_run_id("always-b") == "always-b"
    assert store.resolve_run_id("always-b-") == "always-b-v2"
    with pytest.raises(UsageError, match="No run matches"):
        store.resolve_run_id("a%")  # '%' is no wildcard


def test_request_schemas_are_the_distinct_schemas_a_run_or_item_was_sent(store):
    q, a = {"title": "Question", "type": "object"}, {"title": "Answer", "type": "object"}
    calls = [("k1", q, ("r1", "i1", 0)), ("k2", a, ("r1", "i2", 0)), ("k3", q, ("r1", "i2", 0)), ("k4", None, ("r1", "i1", 0)),
             ("k5", a, ("r2", "i1", 0))]
    for key, schema, scope in calls:
        store.put_call(key, {"model": "m", "request": {"schema": schema}}, scope)
    store.log_call("k1", "m", True, ("r2", "i1", 0))  # served from the cache to another run: logged there too
    assert store.request_schemas("r1") == [q, a]  # first seen first, each once, calls without a schema skipped
    assert store.request_schemas("r1", "i1") == [q] and store.request_schemas("r1", "i2") == [a, q]
    assert store.request_schemas("r2") == [a, q] and store.request_schemas() == [q, a]
    assert store.request_schemas("none") == []


def test_one_items_repeats_and_scores_are_read_alone(store):
    """The web app's item page reads one item, not the whole run."""
    store.create_run("r", dataset="d", protocol="single", models=["m"], settings={})
    for item_id in ("a", "b"):
        for repeat in (0, 1):
            store.write_item("r", item_id, repeat, status="done", outcome={"answer": f"{item_id}{repeat}"}, events=[],
                             scores={"accuracy": float(repeat), "parsed": 1.0}, started_at=0.0)
    assert [(i["item_id"], i["repeat"], i["outcome"]["answer"]) for i in store.items("r", "b")] == [("b", 0, "b0"), ("b", 1, "b1")]
    assert store.items("r", "missing") == []
    assert [(s["name"], s["value"]) for s in store.scores("r", "a", 1)] == [("accuracy", 1.0), ("parsed", 1.0)]
    assert len(store.scores("r")) == 8 and store.scores("r", "a", 5) == []


def _spend(store, run_id, item_id):
    row = [i for i in store.items(run_id) if i["item_id"] == item_id][0]
    return row["input_tokens"], row["output_tokens"], row["cost_usd"], row["calls"], row["cached_calls"]


def test_an_items_spend_is_read_from_the_call_log_where_it_made_calls(store):
    """What the item's row says it spent: its calls made (not cached) from the log, counted with its cache hits;
    the record's own totals only where it made no call here (all cached, or none logged)."""
    store.create_run("r", dataset="d", protocol="p", models=[], settings={})
    store.put_call("k1", {"model": "m", "usage": {"input_tokens": 10, "output_tokens": 5}, "cost_usd": 0.25}, ("r", "a", 0))
    store.put_call("k2", {"model": "m", "usage": {"input_tokens": 1, "output_tokens": 2}, "cost_usd": 0.5}, ("r", "a", 0))
    store.log_call("k1", "m", True, ("r", "a", 0))  # a cache hit: counted, costs nothing
    store.log_call("k3", "m", False, ("r", "a", 0), error="HTTP 500", usage=(7, 0, 0.125))  # failed, still spent
    store.log_call("k1", "m", True, ("r", "b", 0))
    given = {"input_tokens": 99, "output_tokens": 98, "cost_usd": 9.5}
    for item in ("a", "b", "c"):
        store.write_item("r", item, 0, status="done", outcome={}, events=[], scores={}, started_at=0.0, totals=given)
    store.write_item("r", "d", 0, status="done", outcome={}, events=[], scores={}, started_at=0.0)
    assert _spend(store, "r", "a") == (18, 7, 0.875, 3, 1)
    assert _spend(store, "r", "b") == (99, 98, 9.5, 0, 1)  # only cached calls: the record's totals
    assert _spend(store, "r", "c") == (99, 98, 9.5, 0, 0)  # nothing logged
    assert _spend(store, "r", "d") == (0, 0, 0.0, 0, 0)


async def test_the_writer_commits_call_rows_merged_and_in_order_with_the_items_between_them(store):
    """A group of many calls goes in as multi-row INSERTs, more rows than one statement holds, and an item queued
    among them counts exactly the calls queued before it."""
    import asyncio

    store.create_run("r", dataset="d", protocol="p", models=[], settings={})
    record = {"model": "m", "usage": {"input_tokens": 1, "output_tokens": 1}, "cost_usd": 0.001}
    waits = [store.put_call_async(f"k{i}", record | {"text": str(i)}, ("r", "a", 0)) for i in range(450)]
    waits.append(store.write_item_async("r", "a", 0, status="done", outcome={"n": 450}, events=[{"kind": "turn"}] * 3, scores={"s": 1.0},
                                        started_at=0.0))
    waits += [store.put_call_async(f"k{i}", record | {"text": f"again {i}"}, ("r", "a", 0)) for i in range(450, 700)]
    waits += [store.log_call_async("k0", "m", True, ("r", "a", 0)) for _ in range(5)]
    await asyncio.gather(*waits)
    assert _spend(store, "r", "a") == (450, 450, pytest.approx(0.45), 450, 0)
    assert store.call_counts("r") == {"calls": 700, "cached_calls": 5}
    assert store.get_call("k449")["text"] == "449" and store.get_call("k699")["text"] == "again 699"
    ids = [row["key"] for row in store.call_log("r")]
    assert ids == [f"k{i}" for i in range(700)] + ["k0"] * 5  # the ledger in the order the calls were made
    assert len(store.events("r", "a")) == 3 and store.scores("r")[0]["value"] == 1.0
