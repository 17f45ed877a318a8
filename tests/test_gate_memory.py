"""What an endpoint's gate learned is kept in the store for the next process (models/gate_memory.py): a new
process starts from the window and pace the last one reached, not from a window of 4. Real HTTP to the mock
server, a real SQLite store; "a new process" is the process's gates forgotten (reset_pools), as at start."""

from __future__ import annotations

import asyncio
import time
from contextlib import closing

from medpanel.models import build_model
from medpanel.models.adaptive import INITIAL_WINDOW
from medpanel.models.endpoints import reset_pools
from medpanel.models.gate_memory import MEMORY_S, NAME
from medpanel.models.retry import RetryPolicy
from medpanel.models.runtime import Runtime
from medpanel.runs.store import Store
from medpanel.testing import MockConfig, MockServer


def runtime(store: Store) -> Runtime:
    return Runtime(cache=store, retry=RetryPolicy(max_attempts=4, base_delay_s=0.05, max_delay_s=1.0), timeout_s=20)


async def first_round_trip_load(model, n: int, tag: str) -> int:
    """How many of `n` calls offered at once were in flight by the time the first answers were taken: the gate's
    starting window, plus at most two per answer of that first round trip (slow start's growth)."""
    calls = [asyncio.ensure_future(model.complete(f"Question {tag}{i}?\nA. yes\nB. no", max_tokens=16)) for i in range(n)]
    await asyncio.wait(calls, return_when=asyncio.FIRST_COMPLETED)
    load = model.gate.peak
    await asyncio.gather(*calls)
    return load


def kept(store: Store, server: MockServer) -> dict | None:
    return store.server_capability(server.base_url, "mock", NAME)


async def test_a_new_process_starts_from_the_window_the_last_one_kept_in_the_store(tmp_path):
    with MockServer(MockConfig(reply="choice", latency_s=0.3)) as server, closing(Store(tmp_path / "runs.db")) as store:
        spec = f"openai:mock@{server.base_url}"
        first = build_model(spec, runtime(store))
        assert await first_round_trip_load(first, 400, "a") <= 3 * INITIAL_WINDOW  # a stranger: slow start from 4
        await store._writer.barrier()  # the rows handed to the writer thread are committed
        memory = kept(store, server)
        assert memory is not None and memory["window"] >= 36  # grown, saved on the way (and when the gate fell idle)

        reset_pools()  # a new process
        second = build_model(spec, runtime(store))
        load = await first_round_trip_load(second, 200, "b")
        assert load >= min(200, memory["window"])  # the first round trip already sends what the last process reached


async def test_memory_older_than_a_day_is_ignored_and_a_fixed_gate_neither_reads_nor_writes_it(tmp_path):
    with MockServer(MockConfig(reply="choice", latency_s=0.2)) as server, closing(Store(tmp_path / "runs.db")) as store:
        old = {"window": 500, "slow_start": True, "pace_per_s": None, "refused_at": None, "at": time.time() - MEMORY_S - 60}
        store.remember_server_capability(server.base_url, "mock", NAME, old)
        model = build_model(f"openai:mock@{server.base_url}", runtime(store))
        assert await first_round_trip_load(model, 50, "a") <= 3 * INITIAL_WINDOW
        assert kept(store, server)["at"] > old["at"]  # and replaced by what this process learned

        reset_pools()
        fresh = dict(old, window=1, at=time.time())  # recalled, it would start at 4
        store.remember_server_capability(server.base_url, "mock", NAME, fresh)
        fixed = build_model(f"openai:mock@{server.base_url}?adaptive=0&endpoint_concurrency=8", runtime(store))
        assert await first_round_trip_load(fixed, 30, "b") == 8  # its own fixed window, not what was kept
        assert kept(store, server) == fresh  # nothing written over it


async def test_a_remembered_pace_holds_a_rate_limited_endpoint_from_the_first_request(tmp_path):
    # 60 requests a minute with a burst of 1: a stranger's first window of 4 meets three 429s at once.
    config = MockConfig(reply="choice", latency_s=0.02, rate_limit_rpm=60, rate_burst_s=1.0)
    with MockServer(config) as server, closing(Store(tmp_path / "runs.db")) as store:
        now = time.time()
        store.remember_server_capability(server.base_url, "mock", NAME,
                                         {"window": 4, "slow_start": False, "pace_per_s": 0.5, "refused_at": 1.0, "at": now})
        model = build_model(f"openai:mock@{server.base_url}", runtime(store))
        replies = await asyncio.gather(*(model.complete(f"Question {i}?\nA. yes\nB. no", max_tokens=16) for i in range(4)))
        assert all(r.text for r in replies)
        gate = model.gate
        assert gate.rejected == 0  # paced from the start, below the limit
        assert gate.refused_at == 1.0 and gate.pace is not None and gate.pace.per_s <= 0.6

        reset_pools()
        stranger = build_model(f"openai:mock@{server.base_url}", Runtime(retry=RetryPolicy(max_attempts=6, base_delay_s=0.05, max_delay_s=2.0)))
        await asyncio.sleep(1.2)  # the server's bucket refills
        await asyncio.gather(*(stranger.complete(f"Other {i}?\nA. yes\nB. no", max_tokens=16) for i in range(4)))
        assert stranger.gate.rejected >= 1  # without a store to remember in, the first burst is refused in part


async def test_a_pace_learned_from_429s_is_kept_at_once_and_the_next_process_starts_paced(tmp_path):
    # 120 requests a minute, a burst of one second's worth: a stranger's first window of 4 meets 429s.
    config = MockConfig(reply="choice", latency_s=0.02, rate_limit_rpm=120, rate_burst_s=1.0)
    with MockServer(config) as server, closing(Store(tmp_path / "runs.db")) as store:
        spec = f"openai:mock@{server.base_url}"
        first = build_model(spec, runtime(store))
        await asyncio.gather(*(first.complete(f"First {i}?\nA. yes\nB. no", max_tokens=16) for i in range(6)))
        assert first.gate.rejected >= 1 and first.gate.pace is not None
        await store._writer.barrier()  # the rows handed to the writer thread are committed
        memory = kept(store, server)
        assert memory["pace_per_s"] is not None and memory["pace_per_s"] <= first.gate.pace.per_s * 1.25

        reset_pools()
        await asyncio.sleep(1.1)  # the server's bucket refills
        second = build_model(spec, runtime(store))
        await asyncio.gather(*(second.complete(f"Second {i}?\nA. yes\nB. no", max_tokens=16) for i in range(6)))
        assert second.gate.rejected < first.gate.rejected  # paced from its first request


class ForwardingLikeCache:
    """A cache that answers lookups and takes calls but is not this process's store (as a Ray worker's is)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def get_call(self, key):
        return self.store.get_call(key)

    def put_call(self, key, record, scope=None):
        self.store.put_call(key, record, scope)

    def log_call(self, key, model, cached, scope, **details):
        self.store.log_call(key, model, cached, scope, **details)

    def server_capability(self, base_url, model, name):
        return self.store.server_capability(base_url, model, name)

    def remember_server_capability(self, base_url, model, name, value):
        self.store.remember_server_capability(base_url, model, name, value)


async def test_a_cache_that_is_not_a_local_store_neither_recalls_nor_keeps_a_gate_and_a_closed_store_fails_no_call(tmp_path):
    with MockServer(MockConfig(reply="choice", latency_s=0.2)) as server, closing(Store(tmp_path / "runs.db")) as store:
        store.remember_server_capability(server.base_url, "mock", NAME,
                                         {"window": 500, "slow_start": True, "pace_per_s": None, "refused_at": None, "at": time.time()})
        worker = build_model(f"openai:mock@{server.base_url}", runtime(ForwardingLikeCache(store)))  # type: ignore[arg-type]
        assert await first_round_trip_load(worker, 50, "a") <= 3 * INITIAL_WINDOW  # N workers must not each take it all
        assert kept(store, server)["window"] == 500  # and none of them writes its share over it

    reset_pools()
    with MockServer(MockConfig(reply="choice", latency_s=0.01)) as server:
        gone = Store(tmp_path / "gone.db")
        model = build_model(f"openai:mock@{server.base_url}", runtime(gone))
        assert (await model.complete("Question?\nA. yes\nB. no", max_tokens=16)).text
        gone.close()
        model.gate.kept.clear()  # what it learned is news again, for a store that has closed meanwhile
        model._remember(model.gate)  # a head start that cannot be written is no error of the call's


async def test_a_restart_after_a_run_that_ended_in_cuts_is_no_slower_than_a_first_run(tmp_path):
    # The last process ended with its window cut to 3 by a burst of errors: slow start resumes from there.
    with MockServer(MockConfig(reply="choice", latency_s=0.1)) as server, closing(Store(tmp_path / "runs.db")) as store:
        store.remember_server_capability(server.base_url, "mock", NAME,
                                         {"window": 3, "slow_start": False, "pace_per_s": None, "refused_at": None, "at": time.time()})
        model = build_model(f"openai:mock@{server.base_url}", runtime(store))
        await asyncio.gather(*(model.complete(f"Question {i}?\nA. yes\nB. no", max_tokens=16) for i in range(300)))
        assert model.gate.slow_start and model.gate.peak >= 100  # tripling each round trip, as from 4 (not +1 a round)
