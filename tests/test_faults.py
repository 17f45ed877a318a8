"""Under 20% injected faults of every kind, a run ends with the same outcomes as a fault-free run."""

from __future__ import annotations

from medpanel.testing.fault_check import compare_under_faults


def test_faulty_run_matches_clean_run(shared_data):
    report = compare_under_faults(items=50, concurrency=8, fault_rate=0.2, seed=2, timeout_s=0.5)
    assert report["all_done"], report
    assert report["identical_outcomes"], report["differing_items"]
    # Faults of every kind really happened, and were absorbed by retries and re-asks.
    assert set(report["faults_injected"]) == {"500", "429", "timeout", "malformed", "invalid_json"}, report
    assert report["server_requests"] > report["clean_calls"]
