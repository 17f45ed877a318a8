"""Money and time: caps that hold under concurrency, a ledger with every call sent, prices per server,
and a timeout that is a deadline. Against the mock OpenAI server over real HTTP."""

from __future__ import annotations

import asyncio
import time

import pytest

from medpanel.cases import Case
from medpanel.errors import BudgetExceeded, ModelCallError, UsageError
from medpanel.models import Runtime, build_model
from medpanel.models.budget import Budget
from medpanel.models.pricing import PriceTable
from medpanel.models.retry import RetryPolicy
from medpanel.runs.runner import RunConfig, build_panel, run_benchmark
from medpanel.testing import MockConfig, MockServer
from medpanel.testing.workloads import STAGED

FAST = RetryPolicy(max_attempts=2, base_delay_s=0.01, max_delay_s=0.01)


@pytest.fixture(scope="module")
def srv():
    with MockServer(MockConfig(reply="choice")) as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh(srv):
    srv.reset()
    yield


def items(n: int, tag: str = "") -> list[Case]:
    return [Case(id=f"i{i}", question=f"item {i} {tag}") for i in range(n)]


async def staged_run(store, srv, budget: Budget, cases, *, concurrency: int, stages: int, run_id: str, resume: bool = False,
                     query: str = ""):
    runtime = Runtime(cache=store, budget=budget, retry=FAST, timeout_s=30)
    spec = f"openai:mock-model@{srv.base_url}{query}"
    config = RunConfig(dataset="synthetic", protocol="staged", models=[spec], concurrency=concurrency,
                       settings={"stages": stages, "max_tokens": 16})
    result = await run_benchmark(store, config, runtime, run_id=run_id, resume=resume, protocol=STAGED,
                                 panel=build_panel([spec], runtime), cases=cases)
    return result, runtime


def sent_calls(store, run_id: str) -> list[dict]:
    return [row for row in store.call_log(run_id) if not row["cached"]]


async def test_calls_in_flight_when_a_cap_trips_finish_are_logged_and_resume_pays_nothing_for_them(store, srv):
    srv.configure(latency_s=0.3)
    cases = items(32)
    # Concurrency 16, two calls per item: the first 16 calls finish, calls 17-20 are in flight when the
    # 21st is refused. Those four must finish and be logged, not be cancelled and lost.
    result, runtime = await staged_run(store, srv, Budget(max_calls=20), cases, concurrency=16, stages=2, run_id="capped")
    assert result.status == "stopped" and result.error.cap == "calls"
    seen = srv.stats()["requests"]
    logged = sent_calls(store, "capped")
    assert seen == len(logged) == runtime.budget.calls == 20
    assert all(row["error"] is None and row["output_tokens"] > 0 for row in logged)  # finished, with what they used
    # A resume sends only the calls never made: each of the 20 logged is served from the cache.
    before = srv.stats()["by_hash"]
    again, _ = await staged_run(store, srv, Budget(), cases, concurrency=16, stages=2, run_id="capped", resume=True)
    assert again.status == "done"
    after = srv.stats()
    assert after["requests"] - seen == 2 * len(cases) - 20
    assert all(after["by_hash"][h] == n for h, n in before.items())  # no request of the first run was sent again


async def test_a_call_cancelled_in_flight_is_still_in_the_ledger(store, srv):
    srv.configure(latency_s=3.0)
    runtime = Runtime(cache=store, retry=FAST, budget=Budget(max_tokens=10_000))
    model = build_model(f"openai:mock-model@{srv.base_url}", runtime)
    task = asyncio.create_task(model.complete("a slow one"))
    for _ in range(200):  # until the server has the request
        await asyncio.sleep(0.02)
        if srv.stats()["requests"]:
            break
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await model.aclose()
    rows = store.call_log()
    assert srv.stats()["requests"] == len(rows) == 1 and "cancelled" in rows[0]["error"]
    assert (runtime.budget.in_flight, runtime.budget.reserved_tokens, runtime.budget.calls) == (0, 0, 1)  # room freed, call counted


async def test_a_call_that_fits_only_once_others_settle_waits_for_them():
    budget = Budget(max_tokens=100)
    first = await budget.reserve(60, 0.0)
    waiting = asyncio.create_task(budget.reserve(60, 0.0))  # 60 held + 60 > 100: wait, not trip
    await asyncio.sleep(0.01)
    assert not waiting.done()
    budget.settle(first, 10, 10, 0.0)  # 20 used: now 20 + 60 fits
    second = await asyncio.wait_for(waiting, 1)
    budget.settle(second, 30, 30, 0.0)  # 80 used
    with pytest.raises(BudgetExceeded) as info:
        await budget.reserve(30, 0.0)  # 80 + 30 > 100 with nothing in flight: the cap trips
    assert info.value.cap == "tokens" and budget.calls == 2


@pytest.mark.parametrize("cap", ["calls", "tokens", "dollars"])
async def test_a_cap_holds_at_concurrency_64(store, srv, cap):
    srv.configure(latency_s=0.2)
    limits = {"calls": Budget(max_calls=40), "tokens": Budget(max_tokens=1200), "dollars": Budget(max_dollars=1.2)}
    # $0.001 a token, so the dollar cap is the token cap in other units.
    result, runtime = await staged_run(store, srv, limits[cap], items(300), concurrency=64, stages=1, run_id=cap,
                                       query="?price_in=1&price_out=1")
    assert result.status == "stopped" and result.error.cap == cap
    logged = sent_calls(store, cap)
    assert srv.stats()["requests"] == len(logged) == runtime.budget.calls
    budget = runtime.budget
    used = {"calls": budget.calls, "tokens": budget.input_tokens + budget.output_tokens, "dollars": budget.dollars}[cap]
    limit = {"calls": 40, "tokens": 1200, "dollars": 1.2}[cap]
    per_call = {"calls": 1, "tokens": 60, "dollars": 0.06}[cap]  # a reservation here: ~26 prompt + 16 output tokens, and more
    assert used <= limit + 1e-9  # no overshoot: each call held its worst case before it was sent
    assert used >= limit - per_call  # and the run did not stop early: waiting calls got the room others left
    assert len(logged) > 10  # it really ran concurrently and for a while


async def test_a_cap_below_one_calls_worst_case_sends_nothing_and_says_why(srv):
    runtime = Runtime(budget=Budget(max_tokens=10), retry=FAST)
    model = build_model(f"openai:mock-model@{srv.base_url}", runtime)
    try:
        with pytest.raises(BudgetExceeded) as info:
            await model.complete("a question", max_tokens=64)
    finally:
        await model.aclose()
    assert info.value.cap == "tokens" and info.value.spent["next_call_worst_case"] > 64
    assert srv.stats()["requests"] == 0


async def test_dollar_cap_with_an_unpriced_model_refuses_before_any_call(store, srv):
    spec = f"openai:house-model@{srv.base_url}"
    with pytest.raises(UsageError) as info:
        build_model(spec, Runtime(budget=Budget(max_dollars=1.0)))
    assert "house-model" in info.value.problem and "--prices" in info.value.fix
    assert f"house-model@{srv.base_url}" in info.value.fix  # the exact table key to write
    # A run whose judge role is unpriced is refused too, before its first item.
    runtime = Runtime(cache=store, budget=Budget(max_dollars=1.0))
    priced = f"openai:mock-model@{srv.base_url}?price_in=0.1&price_out=0.1"
    config = RunConfig(dataset="synthetic", protocol="staged", models=[priced], roles={"judge": spec})
    with pytest.raises(UsageError, match="house-model"):
        await run_benchmark(store, config, runtime, protocol=STAGED, panel=build_panel([priced], runtime), cases=items(2))
    assert srv.stats()["requests"] == 0
    # Free models (scripted, replays, people, the embedded one) and runs with no dollar cap are fine.
    build_model("scripted:echo", Runtime(budget=Budget(max_dollars=1.0)))
    build_model(spec, Runtime())


def test_prices_are_keyed_per_server_and_model(tmp_path):
    table = tmp_path / "prices.yaml"
    table.write_text("m: {input: 1, output: 1}\n"
                     "m@http://a.example/v1: {input: 2, output: 2}\n"
                     "m@http://B.example/v1/: {input: 3, output: 3}\n")
    prices = PriceTable().load(table)
    assert prices.lookup("m", "http://a.example/v1") == (2.0, 2.0)
    assert prices.lookup("m", "http://b.example/v1") == (3.0, 3.0)  # host case and trailing slash ignored
    assert prices.lookup("m", "http://c.example/v1") == (1.0, 1.0)  # the bare name is the fallback
    assert prices.lookup("m-2025", "http://a.example/v1") == (2.0, 2.0)  # dated snapshots by prefix, per server
    assert prices.lookup("m") == (1.0, 1.0)


async def test_spec_prices_stay_with_their_server(srv):
    runtime = Runtime(prices=PriceTable({}), retry=FAST)
    here = build_model(f"openai:mock-model@{srv.base_url}?price_in=1&price_out=1", runtime)
    elsewhere = build_model("openai:mock-model@http://127.0.0.1:9/v1?price_in=5&price_out=5", runtime)
    try:
        reply = await here.complete("one two three")
    finally:
        await here.aclose()
    total = reply.usage.input_tokens + reply.usage.output_tokens
    assert reply.cost_usd == pytest.approx(total / 1000)  # not the other server's price of the same name
    assert runtime.prices.lookup("mock-model", elsewhere.base_url) == (5.0, 5.0)


async def test_timeout_is_a_total_deadline_per_attempt(srv):
    # Each byte comes well within 2 s of the last, so a per-read timeout never fires; a deadline does.
    srv.configure(trickle_s=0.5)
    srv.inject("trickle", 2)
    runtime = Runtime(timeout_s=2.0, retry=FAST)
    model = build_model(f"openai:mock-model@{srv.base_url}", runtime)
    started = time.perf_counter()
    try:
        with pytest.raises(ModelCallError) as info:
            await asyncio.wait_for(model.complete("hello there"), 40)
    finally:
        await model.aclose()
    elapsed = time.perf_counter() - started
    assert info.value.kind == "timeout" and "2 attempts" in info.value.problem
    assert srv.stats()["requests"] == 2
    # Two attempts of 2 s each; a generous bound for a loaded machine, far below the trickle's ~150 s.
    assert 3.5 <= elapsed < 3 * runtime.worst_call_s()


def test_worst_case_of_one_call_is_stated_in_help_docs_and_progress(tmp_path):
    from pathlib import Path

    from typer.testing import CliRunner

    from medpanel.cli import app
    from medpanel.cli.core import _progress_printer
    from medpanel.runs.runner import Progress

    runtime = Runtime(timeout_s=10.0, retry=RetryPolicy(max_attempts=3, max_delay_s=4.0))
    assert runtime.worst_call_s() == 3 * 10 + 2 * 4
    shown = CliRunner().invoke(app, ["bench", "--help"], env={"COLUMNS": "200", "TERM": "dumb"}).output
    assert "total deadline" in " ".join(shown.split()) and "attempts" in shown
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "attempts × `--timeout` + 5 waits × 30 s" in readme
    bar, hook = _progress_printer(False)
    hook(Progress(total=3), runtime)
    assert runtime.worst_call_text() in bar.tasks[0].fields["info"] and "38s" in runtime.worst_call_text()


async def test_an_interrupt_inside_a_call_gives_its_reservation_back():
    # Ctrl-C (KeyboardInterrupt) raised while a call is out must not leave the budget holding it: a reused
    # budget (a notebook, a library caller) would otherwise make every later call wait for room forever.
    import pytest

    from medpanel.models import Runtime
    from medpanel.models.budget import Budget
    from medpanel.models.scripted import ScriptedModel

    def interrupted(request):
        raise KeyboardInterrupt

    runtime = Runtime(budget=Budget(max_calls=5))
    with pytest.raises(KeyboardInterrupt):
        await ScriptedModel(responder=interrupted, runtime=runtime).complete("hi")
    assert runtime.budget.in_flight == 0
