"""One model behind several mock servers (`openai:m@url1|url2|url3`): balanced by requests in flight, each
endpoint capped, a dead or rate-limited one failed over at once, and a run that loses one server mid-way
losing nothing (issue 15, acceptance 4)."""

from __future__ import annotations

import asyncio
import time

import pytest

from medpanel.errors import ModelCallError, UsageError
from medpanel.models import build_model
from medpanel.models.endpoints import EndpointPool, pool_urls, reset_pools
from medpanel.models.retry import RetryPolicy
from medpanel.models.runtime import Runtime
from medpanel.testing import MockConfig, MockServer


@pytest.fixture(autouse=True)
def fresh_pools():
    reset_pools()  # a pool's load and health are per process: each test starts with none
    yield
    reset_pools()


@pytest.fixture
def servers():
    started = [MockServer(MockConfig(reply="choice", latency_s=0.05)).start() for _ in range(3)]
    yield started
    for server in started:
        server.stop()


def pooled(servers, query: str = "", runtime: Runtime | None = None):
    spec = "openai:mock@" + "|".join(s.base_url for s in servers) + query
    return build_model(spec, runtime or Runtime(retry=RetryPolicy(max_attempts=3, base_delay_s=0.05, max_delay_s=0.2), timeout_s=5))


async def ask_many(model, n: int) -> list:
    return await asyncio.gather(*(model.complete(f"Question {i}?\nA. yes\nB. no") for i in range(n)))


async def test_requests_spread_over_the_endpoints_and_each_cap_holds(servers):
    model = pooled(servers, "?endpoint_concurrency=2")
    started = time.perf_counter()
    replies = await ask_many(model, 30)
    elapsed = time.perf_counter() - started
    assert all(r.text for r in replies)
    counts = [s.stats()["requests"] for s in servers]
    assert sum(counts) == 30 and min(counts) >= 5  # balanced: 10 each, give or take
    assert max(e.peak for e in model.pool.endpoints) == 2  # the cap was reached and never passed
    assert elapsed >= 30 / (3 * 2) * 0.05 * 0.9  # 6 in flight in all: five waves of 50 ms at the least


async def test_a_dead_endpoint_is_failed_over_at_once_then_probed_and_healed(servers):
    model = pooled(servers)
    port = servers[1].port
    servers[1].stop()
    replies = await ask_many(model, 12)
    assert all(r.text for r in replies) and all(r.attempts == 1 for r in replies)  # no retry: the pool moved on
    dead = next(e for e in model.pool.endpoints if e.url == servers[1].base_url)
    assert dead.failed >= 1 and dead.failures == 1  # the requests in flight when it died count as one outage
    assert dead.down_until > time.monotonic()
    before = dead.sent
    await ask_many(model, 12)
    assert dead.sent == before  # cooling down: nothing sent there
    # Back up on the same port: after the cooldown one request probes it, and its success heals it.
    revived = MockServer(MockConfig(reply="choice", latency_s=0.05), port=port).start()
    try:
        dead.down_until = time.monotonic()  # the cooldown is over (1 s; not waited for here)
        await ask_many(model, 12)
        assert dead.failures == 0 and dead.sent > before and revived.stats()["successes"] >= 1
    finally:
        revived.stop()


async def test_a_success_that_started_before_a_failure_heals_nothing_and_one_probe_goes_at_a_time():
    pool = EndpointPool(["http://a/v1"])
    early = await pool.acquire(set(), time.monotonic() + 1)
    failing = await pool.acquire(set(), time.monotonic() + 1)
    pool.release(failing, "failed")
    pool.release(early, "ok")  # started before the failure: the endpoint stays down
    endpoint = pool.endpoints[0]
    assert endpoint.failures == 1 and endpoint.down_until > time.monotonic()
    endpoint.down_until = 0.0
    probe = await pool.acquire(set(), time.monotonic() + 1)
    assert probe.probe and await pool.acquire(set(), time.monotonic() + 0.05) is None  # the probe is alone
    pool.release(probe, "failed")
    assert endpoint.failures == 2 and endpoint.down_until - time.monotonic() > 1.5  # doubled to 2 s
    endpoint.down_until = 0.0
    again = await pool.acquire(set(), time.monotonic() + 1)
    pool.release(again, "ok")
    assert endpoint.failures == 0 and endpoint.in_flight == 0


async def test_a_429_keeps_its_endpoint_out_for_its_retry_after_whatever_else_succeeds():
    pool = EndpointPool(["http://a/v1", "http://b/v1"])
    a, b = pool.endpoints
    limited = await pool.acquire({b.url}, time.monotonic() + 1)
    beside = await pool.acquire({b.url}, time.monotonic() + 1)  # another request on the same endpoint
    pool.release(limited, "limited", retry_after=30.0)
    pool.release(beside, "ok")  # its success must not cut the Retry-After short
    assert a.gate.limited_until - time.monotonic() > 29 and a.failures == 0 and a.failed == 0
    for _ in range(3):
        lease = await pool.acquire(set(), time.monotonic() + 1)
        assert lease.endpoint is b
        pool.release(lease, "ok")
    pool.release(await pool.acquire(set(), time.monotonic() + 1), "limited", retry_after=10_000)
    assert b.gate.limited_until - time.monotonic() <= 60.5  # a Retry-After is capped at the longest cooldown


async def test_a_cancelled_request_gives_its_slot_back():
    with MockServer(MockConfig(reply="choice", latency_s=2.0)) as slow, MockServer(MockConfig(reply="choice", latency_s=2.0)) as other:
        model = pooled([slow, other], "?endpoint_concurrency=1")
        calls = [asyncio.create_task(model.complete(f"Q{i}?\nA. yes\nB. no")) for i in range(4)]
        await asyncio.sleep(0.3)  # two in flight, two waiting for a slot
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        assert [e.in_flight for e in model.pool.endpoints] == [0, 0] and all(e.failures == 0 for e in model.pool.endpoints)


async def test_a_request_the_server_refuses_fails_without_failover_or_blame():
    with MockServer(MockConfig(reply="choice")) as a, MockServer(MockConfig(reply="choice")) as b:
        model = build_model("openai:missing@" + a.base_url + "|" + b.base_url, Runtime(retry=RetryPolicy(max_attempts=2)))
        with pytest.raises(ModelCallError, match="404"):
            await model.complete("Q?")
        assert a.stats()["requests"] + b.stats()["requests"] == 1  # sent once: a 404 is the request's, not the server's
        assert all(e.failures == 0 and e.failed == 0 for e in model.pool.endpoints)


async def test_one_attempt_stays_within_its_timeout_over_the_whole_pool():
    with MockServer(MockConfig(reply="choice", latency_s=5.0)) as a, MockServer(MockConfig(reply="choice", latency_s=5.0)) as b:
        model = build_model("openai:mock@" + a.base_url + "|" + b.base_url, Runtime(retry=RetryPolicy(max_attempts=1), timeout_s=0.4))
        started = time.perf_counter()
        with pytest.raises(ModelCallError):
            await model.complete("Q?")
        assert time.perf_counter() - started < 1.5  # 0.4 s for the attempt in all, not 0.4 s per endpoint


async def test_a_rate_limited_endpoint_hands_its_request_to_another():
    with MockServer(MockConfig(reply="choice")) as busy, MockServer(MockConfig(reply="choice")) as free:
        model = pooled([busy, free])
        busy.inject("429", 1)
        next(e for e in model.pool.endpoints if e.url == free.base_url).last_used = time.monotonic() + 60  # busy is picked first
        reply = await model.complete("Q?\nA. yes\nB. no")
        assert reply.text and reply.attempts == 1
        assert busy.stats()["faults"] == {"429": 1} and free.stats()["successes"] == 1
        limited = next(e for e in model.pool.endpoints if e.url == busy.base_url)
        assert limited.failures == 0 and limited.gate.limited_until > time.monotonic()  # busy, not broken: out for its Retry-After


async def test_every_endpoint_down_fails_the_call_within_its_retries(servers):
    model = pooled(servers)
    for server in servers:
        server.stop()
    started = time.perf_counter()
    with pytest.raises(ModelCallError, match="gave up after 3 attempts"):
        await model.complete("Q?\nA. yes\nB. no")
    assert time.perf_counter() - started < 10


def test_a_bad_pool_is_refused_and_a_pool_is_named_by_its_endpoints_in_any_order():
    for spec, said in (("openai:m@http://a:1/v1|ftp://b/v1", "not an http"), ("openai:m@http://a:1/v1|http://a:1/v1/", "twice"),
                       ("openai:m@http://a:1/v1|", "empty entry"), ("openai:m@http://a:1/v1|http://b:1/v1?endpoint_concurrency=0", "above 0")):
        with pytest.raises(UsageError, match=said):
            build_model(spec, Runtime())
    assert pool_urls("http://a/v1") is None and pool_urls(" http://b/v1/|http://a/v1") == ["http://a/v1", "http://b/v1"]
    one, two = build_model("openai:m@http://a:1/v1|http://b:1/v1", Runtime()), build_model("openai:m@http://b:1/v1/|http://a:1/v1", Runtime())
    assert one.cache_identity() == two.cache_identity() and one.pool is two.pool  # one model, one pool
    with pytest.raises(UsageError, match="already in use"):
        build_model("openai:m@http://a:1/v1|http://b:1/v1?endpoint_concurrency=3", Runtime())


async def test_acquire_waits_for_a_slot_and_gives_up_at_its_deadline():
    pool = EndpointPool(["http://a/v1"], cap=1)
    first = await pool.acquire(set(), time.monotonic() + 1)
    assert await pool.acquire(set(), time.monotonic() + 0.05) is None  # full until the deadline
    waiting = asyncio.create_task(pool.acquire(set(), time.monotonic() + 2))
    await asyncio.sleep(0.02)
    pool.release(first)
    assert (await waiting).endpoint is first.endpoint and pool.endpoints[0].in_flight == 1


async def test_a_run_that_loses_one_of_three_servers_mid_way_loses_nothing(servers, tmp_path):
    from medpanel.cases.model import Case
    from medpanel.runs.runner import RunConfig, run_benchmark
    from medpanel.runs.store import Store

    store = Store(tmp_path / "pool.db")
    runtime = Runtime(cache=store, retry=RetryPolicy(max_attempts=3, base_delay_s=0.05, max_delay_s=0.2), timeout_s=5)
    spec = "openai:mock@" + "|".join(s.base_url for s in servers)
    cases = [Case(id=f"q{i}", question=f"Question {i}?", options={"A": "yes", "B": "no"}, reference={"answer": "A"}) for i in range(60)]

    async def kill_later():
        while sum(s.stats()["requests"] for s in servers) < 40:
            await asyncio.sleep(0.01)
        await asyncio.to_thread(servers[0].stop)

    killer = asyncio.create_task(kill_later())
    try:
        result = await run_benchmark(store, RunConfig(dataset="inline", protocol="debate", models=[spec, spec, spec], concurrency=8),
                                     runtime, cases=cases)
    finally:
        killer.cancel()
    items = store.items(result.run_id)
    assert len(items) == 60 and all(i["status"] == "done" for i in items)  # nothing lost, nothing failed
    assert servers[0].stats()["requests"] >= 1 and not servers[0].running  # it did take work before it died
    from medpanel.models.endpoints import shared_pool

    killed = next(e for e in shared_pool(sorted(s.base_url for s in servers), None, model="mock").endpoints if e.url == servers[0].base_url)
    assert killed.failed >= 1  # and the pool failed its requests over
    assert store.call_counts(result.run_id)["calls"] >= 3 * 60  # every seat answered every item
