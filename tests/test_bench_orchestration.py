"""bench/bench_orchestration.py's yardsticks, kept honest: the raw client sends the same workload as the harness
(the same calls per item, no more in flight than the items allow), and the wave split reads the store right."""

from __future__ import annotations

from conftest import load_bench

from medpanel import event_loop
from medpanel.cases import Case
from medpanel.testing.process import mock_server_process


def test_the_raw_client_sends_the_harness_workload_and_the_waves_split_first_from_later(store):
    bench = load_bench("bench_orchestration")
    items, in_flight, stages, width, latency = 12, 4, 2, 3, 0.1
    with mock_server_process("--latency", str(latency), "--reply", "choice") as mock:
        wall = event_loop.run(bench.raw_run(mock.base_url, items, width, stages, in_flight, "raw"))
        raw = mock.stats()
        # Every item's every stage sends one call per seat: the harness's calls, one for one.
        assert raw["requests"] == raw["successes"] == items * stages * width
        # At most the items in flight times the seats are open at once; the items do fill it.
        assert raw["peak_in_flight"] == in_flight * width
        # No faster than the critical path: ceil(N / C) waves of S sequential stages (the mock's uvloop timers
        # keep whole milliseconds, so a round may end up to one early).
        assert wall >= (items // in_flight) * stages * (latency - 0.001)

        mock.reset()
        cases = [Case(id=f"i{i}", question=f"item {i}") for i in range(items)]
        event_loop.run(bench.one_run(store, mock.base_url, cases, width, stages, in_flight, "harness"))
        assert mock.stats()["requests"] == items * stages * width  # the same workload through medpanel
    first, later = bench.wave_medians(store, "harness", in_flight)
    # Each item takes its stages' latency at least, in the first wave and after it.
    assert first >= stages * (latency - 0.001) and later is not None and later >= stages * (latency - 0.001)
    rows = sorted(store.items("harness"), key=lambda i: i["started_at"])
    # The first wave is the C items started first: the next one starts only once one of them has ended.
    assert rows[in_flight]["started_at"] >= min(i["finished_at"] for i in rows[:in_flight])
    assert bench.wave_medians(store, "harness", items)[1] is None  # one wave: nothing after it
