"""Each endpoint paces itself (models/adaptive.py): a window that slow-starts and narrows when latency rises,
a pace learned from 429s, Retry-After honoured by every request, the spec's rpm and tpm; and runs keep many
items in flight when every model paces itself (issue 15, acceptance 3). Real HTTP to the mock server."""

from __future__ import annotations

import asyncio
import time

import pytest

from medpanel.errors import UsageError
from medpanel.models import build_model
from medpanel.models.adaptive import INITIAL_WINDOW, Bucket, EndpointGate, shared_gate
from medpanel.models.retry import RetryPolicy
from medpanel.models.runtime import Runtime
from medpanel.testing import MockConfig, MockServer


def runtime(**kw) -> Runtime:
    return Runtime(retry=RetryPolicy(max_attempts=kw.pop("attempts", 6), base_delay_s=0.05, max_delay_s=2.0), timeout_s=kw.pop("timeout_s", 20), **kw)


async def ask(model, n: int, tag: str = "") -> list:
    return await asyncio.gather(*(model.complete(f"Question {tag}{i}?\nA. yes\nB. no", max_tokens=16) for i in range(n)))


async def test_the_window_starts_small_and_grows_fast_while_answers_come_back_promptly():
    with MockServer(MockConfig(reply="choice", latency_s=0.3)) as server:
        model = build_model(f"openai:mock@{server.base_url}", runtime())
        started = time.perf_counter()
        replies = await ask(model, 150)
        elapsed = time.perf_counter() - started
        assert all(r.text for r in replies)
        gate = model.gate
        assert gate.peak >= 9 * INITIAL_WINDOW  # slow start: 4, 12, 36, then the rest (doubling reaches this too)
        assert elapsed >= 3 * 0.3  # but not all at once: 4 + 12 + 36 + 98 needs four round trips


async def test_a_server_whose_latency_rises_with_load_is_not_pushed_far_past_its_capacity():
    # 8 served at once, the rest queue: past 16 in flight the latency doubles, which cuts the window.
    with MockServer(MockConfig(reply="choice", latency_s=0.05, capacity=8)) as server:
        model = build_model(f"openai:mock@{server.base_url}", runtime())
        replies = await ask(model, 400)
        assert all(r.text for r in replies)
        stats = server.stats()
        gate = model.gate
        assert gate.epoch >= 1 and not gate.slow_start  # it saw the congestion and cut the window
        # A few times the capacity, never the 400 it was offered (adaptive=0 below sends 150+ at once; a gate that
        # never cut would be past 108 after three round trips of slow start). On an idle machine it ends near 16; on
        # one loaded by other work, cuts wait while this process's own loop runs late (67 seen in a full suite run).
        assert gate.window() <= 96
        assert stats["peak_active"] == 8 and stats["successes"] >= 400


async def test_with_adaptive_off_the_whole_load_goes_at_once():
    with MockServer(MockConfig(reply="choice", latency_s=0.05, capacity=8)) as server:
        model = build_model(f"openai:mock@{server.base_url}?adaptive=0", runtime())
        await ask(model, 200)
        assert server.stats()["peak_in_flight"] >= 150  # nothing held back: the queue at the server took it all


async def test_under_a_rate_limit_the_pace_is_learned_and_few_requests_are_refused():
    # 1,200 requests a minute (20/s, a quarter second's burst): 160 requests offered 64 at a time.
    config = MockConfig(reply="choice", latency_s=0.05, rate_limit_rpm=1200, rate_burst_s=0.25)
    with MockServer(config) as adaptive_server, MockServer(config) as fixed_server:
        adaptive = build_model(f"openai:mock@{adaptive_server.base_url}", runtime(timeout_s=60, attempts=12))
        fixed = build_model(f"openai:mock@{fixed_server.base_url}?adaptive=0", runtime(timeout_s=60, attempts=12))

        async def offered(model, n: int = 160, at_once: int = 64) -> tuple[float, int]:
            gate = asyncio.Semaphore(at_once)

            async def one(i: int):
                async with gate:
                    return await model.complete(f"Question {i}?\nA. yes\nB. no", max_tokens=16)

            started = time.perf_counter()
            replies = await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)
            return time.perf_counter() - started, sum(1 for r in replies if isinstance(r, Exception))

        adaptive_s, adaptive_failed = await offered(adaptive)
        await offered(fixed)  # one after the other: the storm must not starve the other client of CPU
        assert adaptive_failed == 0
        refused = adaptive_server.stats()["errors"].get("429", 0)
        fixed_refused = fixed_server.stats()["errors"].get("429", 0)
        assert adaptive.gate.pace is not None and 12 < adaptive.gate.pace.per_s < 32  # learned near 20/s, not the hundreds offered
        assert refused <= 0.1 * 160  # the initial burst and a cut or two
        assert fixed_refused > 2 * max(1, refused)  # without it, the load keeps hitting the limit
        assert adaptive_s < 160 / 20 * 1.6  # and it still ran near the limit's 8 s


async def test_a_retry_after_holds_back_every_request_to_the_endpoint():
    with MockServer(MockConfig(reply="choice", retry_after_s=0.6)) as server:
        model = build_model(f"openai:mock@{server.base_url}", runtime())
        await ask(model, 4, "warm")  # something admitted, so the 429 also sets a pace
        server.inject("429")
        started = time.perf_counter()
        first = asyncio.create_task(model.complete("Who gets the 429?\nA. yes\nB. no", max_tokens=16))
        await asyncio.sleep(0.1)  # the 429 has come back; the gate now holds the endpoint for 0.6 s
        before = server.stats()["requests"]
        others = asyncio.gather(*(model.complete(f"Later {i}?\nA. yes\nB. no", max_tokens=16) for i in range(5)))
        await asyncio.sleep(0.3)
        assert server.stats()["requests"] == before  # nothing was sent while the Retry-After ran
        await first
        await others
        assert time.perf_counter() - started >= 0.6
        assert server.stats()["successes"] == 4 + 6


async def test_the_specs_rpm_and_tpm_pace_requests_without_a_429():
    with MockServer(MockConfig(reply="choice")) as server:
        model = build_model(f"openai:mock@{server.base_url}?rpm=600", runtime())
        started = time.perf_counter()
        await ask(model, 30)
        assert time.perf_counter() - started >= (30 - 10) / 10 * 0.9  # 10 a second after a one-second burst
        assert server.stats()["errors"].get("429", 0) == 0
    with MockServer(MockConfig(reply="choice")) as server:
        # Each request holds its prompt's estimate plus max_tokens (16) against 1,200 tokens a minute (20/s).
        model = build_model(f"openai:mock@{server.base_url}?tpm=1200", runtime())
        started = time.perf_counter()
        await ask(model, 4)
        assert time.perf_counter() - started >= 1.0  # more tokens than one second's 20 allow at once


def test_bad_limits_and_clashing_specs_are_refused():
    rt = runtime()
    for query, said in (("?rpm=0", "rpm='0'"), ("?tpm=lots", "tpm='lots'"), ("?adaptive=maybe", "adaptive")):
        with pytest.raises(UsageError, match=said):
            build_model(f"openai:m@http://127.0.0.1:9/v1{query}", rt)
    build_model("openai:m@http://127.0.0.1:9/v1?rpm=100", rt)
    build_model("openai:m@http://127.0.0.1:9/v1", rt)  # leaving a limit out shares the one given
    with pytest.raises(UsageError, match="rpm=200"):
        build_model("openai:m@http://127.0.0.1:9/v1?rpm=200", rt)
    assert shared_gate("http://127.0.0.1:9/v1", "m").rpm == 100
    assert shared_gate("http://127.0.0.1:9/v1", "other").rpm is None  # an API's limits are per model


async def test_a_cancelled_wait_leaks_no_slot_and_wakes_the_next():
    gate = EndpointGate("http://x/v1", cap=1)
    held = await gate.acquire(time.monotonic() + 1)
    waiting = asyncio.create_task(gate.acquire(time.monotonic() + 5))
    behind = asyncio.create_task(gate.acquire(time.monotonic() + 5))
    await asyncio.sleep(0.01)
    waiting.cancel()
    gate.release(held, "ok")
    ticket = await asyncio.wait_for(behind, 1)  # the cancelled waiter's turn went on to the one behind it
    assert ticket is not None and gate.in_flight == 1
    gate.release(ticket, "neutral")
    assert gate.in_flight == 0


async def test_a_run_keeps_many_items_in_flight_only_when_every_model_paces_itself(tmp_path):
    from medpanel.cases.model import Case
    from medpanel.runs.runner import RunConfig, run_benchmark
    from medpanel.runs.store import Store

    cases = [Case(id=f"q{i}", question=f"Question {i}?", options={"A": "yes", "B": "no"}, reference={"answer": "A"}) for i in range(200)]
    with MockServer(MockConfig(reply="choice", latency_s=0.2)) as server:
        store = Store(tmp_path / "auto.db")
        config = RunConfig(dataset="inline", protocol="single", models=[f"openai:mock@{server.base_url}"])
        assert config.concurrency is None
        result = await run_benchmark(store, config, runtime(), cases=cases)
        assert result.progress.done == 200
        assert server.stats()["peak_in_flight"] > 3 * 8  # far past the 8 items of a fixed default
        server.reset()
        narrow = RunConfig(dataset="inline", protocol="single", models=[f"openai:other@{server.base_url}?adaptive=0"])
        result = await run_benchmark(store, narrow, runtime(), cases=cases)
        assert result.progress.done == 200 and server.stats()["peak_in_flight"] <= 8  # not pacing itself: 8 items


async def test_a_thousand_requests_held_by_the_pace_wait_in_one_line_without_a_stampede():
    gate = EndpointGate("http://x/v1", adaptive=False)
    gate.pace = Bucket(200.0, 1.0)  # 200 a second: 600 requests take about three seconds
    served: list[int] = []

    async def one(i: int):
        ticket = await gate.acquire(None)
        served.append(i)
        gate.release(ticket, "ok", output_tokens=10)

    started = time.process_time()
    await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(600))), 20)
    assert served == list(range(600)) and len(gate.line) == 0  # first come, first served, and the line empties
    assert time.process_time() - started < 2.5  # only the first in line watches the clock


async def test_one_passing_429_at_speed_sets_a_pace_near_what_the_server_was_taking():
    gate = EndpointGate("http://x/v1")
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:  # some 400 answers a second, for half a second
        gate.release(await gate.acquire(None), "ok", output_tokens=10)
        await asyncio.sleep(0.0025)
    admitted = len(gate.admitted) / 0.5
    gate.release(await gate.acquire(None), "limited", retry_after=0.5)  # a Retry-After alone would say 2 a second
    assert gate.pace is not None and gate.pace.per_s >= 0.8 * admitted


async def test_a_pool_keeps_many_items_waiting_without_timing_them_out(tmp_path):
    from medpanel.cases.model import Case
    from medpanel.runs.runner import RunConfig, run_benchmark
    from medpanel.runs.store import Store

    servers = [MockServer(MockConfig(reply="choice", latency_s=0.1, capacity=4)).start() for _ in range(2)]
    try:
        spec = "openai:mock@" + "|".join(s.base_url for s in servers)
        cases = [Case(id=f"p{i}", question=f"Pooled {i}?", options={"A": "yes", "B": "no"}, reference={"answer": "A"}) for i in range(200)]
        # 200 items at once, 8 served at a time: most wait far longer than the 1 s an attempt may take.
        result = await run_benchmark(Store(tmp_path / "pool.db"), RunConfig(dataset="inline", protocol="single", models=[spec]),
                                     runtime(timeout_s=1.0, attempts=2), cases=cases)
        assert result.progress.done == 200 and result.progress.failed == 0
    finally:
        for server in servers:
            server.stop()


async def test_a_spec_without_a_base_url_is_paced_where_openai_base_url_sends_it(monkeypatch):
    with MockServer(MockConfig(reply="choice")) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        model = build_model("openai:mock", runtime())
        assert model.gate.url == server.base_url  # the gate is named by where the calls really go
        assert (await model.complete("Which?\nA. yes\nB. no", max_tokens=8)).text
        assert server.stats()["successes"] == 1 and model.gate.ok == 1
        await model.aclose()


async def test_a_client_whose_own_loop_runs_late_does_not_blame_the_server():
    # The server's latency never changes; this process's event loop is then held up by blocking calls (as on a
    # machine whose other processes take the CPU: little CPU used here, so only the loop's lag shows it).
    with MockServer(MockConfig(reply="choice", latency_s=0.1)) as server:
        model = build_model(f"openai:mock@{server.base_url}", runtime())
        await ask(model, 40, "calm ")  # the baseline latency, measured on a free loop
        gate = model.gate
        assert gate.epoch == 0

        async def hog() -> None:
            while True:
                time.sleep(0.4)  # blocks the loop without using CPU
                await asyncio.sleep(0.01)

        hogging = asyncio.create_task(hog())
        try:
            for round_ in range(4):
                await ask(model, 40, f"late {round_} ")
        finally:
            hogging.cancel()
        assert gate.epoch == 0 and gate.slow_start  # the window was not cut...
        assert gate.fast > 2 * gate.base  # ...though the latency it measured rose well past the line


async def test_a_client_busy_on_its_own_cpu_neither_cuts_nor_grows_the_window():
    # The gate reads this process's CPU through its clock; here a clock that runs with the wall clock plays a
    # process using a whole core (a real busy thread would depend on what else the machine runs). Meanwhile
    # the server really slows down four times over. A busy client's latencies say nothing of the server: no
    # cut, and no growth that would add to its backlog.
    with MockServer(MockConfig(reply="choice", latency_s=0.05)) as server:
        model = build_model(f"openai:mock@{server.base_url}", runtime())
        for round_ in range(3):
            await ask(model, 6, f"calm {round_} ")  # the baseline latency
        gate = model.gate
        assert gate.epoch == 0 and gate.slow_start and not gate.client_busy
        gate.cpu_clock = time.monotonic  # gates are per process: put the clock back for later tests on this port
        try:
            gate.cpu_at, gate.cpu_used = time.monotonic(), gate.cpu_clock()
            for round_ in range(40):  # the gate reads the CPU every half second of answers
                await ask(model, 6, f"busy {round_} ")
                if gate.client_busy:
                    break
            assert gate.client_busy and gate.epoch == 0
            await asyncio.to_thread(server.configure, latency_s=0.2)
            for round_ in range(12):  # until the rise shows in the short-term average
                await ask(model, gate.window() + 4, f"rising {round_} ")  # enough to fill the window: it would grow
                if gate.fast > 2 * gate.base:
                    break
            assert gate.fast > 2 * gate.base and gate.client_busy
            limit = gate.limit
            for round_ in range(3):
                await ask(model, gate.window() + 4, f"busy {round_} ")
            assert gate.epoch == 0 and gate.limit == limit  # the rise neither cut nor grew the window
        finally:
            gate.cpu_clock = time.process_time


def test_the_loop_lag_probe_keeps_no_loop_alive():
    import gc

    from medpanel.models import loop_lag

    async def probe() -> None:
        loop_lag.loop_lag()
        await asyncio.sleep(0.06)  # one tick

    for _ in range(20):
        asyncio.run(probe())
    gc.collect()
    assert len(loop_lag._PROBES) <= 1  # each asyncio.run's loop is freed with its probe
