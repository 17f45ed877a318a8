"""Scorers declare their metrics, the runner calls them after `run`, and a score nobody declared is caught."""

from __future__ import annotations

import pytest

from medpanel.cases.model import Case, Reference
from medpanel.models.runtime import Runtime
from medpanel.models.scripted import ScriptedModel
from medpanel.protocols import PROTOCOLS, Outcome, Panel, get_protocol
from medpanel.protocols.base import ProtocolSpec
from medpanel.runs.runner import RunConfig, run_benchmark
from medpanel.runs.scoring import declared_kind, score_outcome
from medpanel.runs.store import Store
from medpanel.scoring.metrics import BY_PROTOCOL, COUNT, METRICS, PROPORTION, UNDECLARED, MetricKind
from medpanel.scoring.scorer import pure

from test_judge_paths import CASES, MEETING, judge


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_every_scorer_declares_kinds_that_agree_with_the_shared_table(name):
    spec = get_protocol(name)
    assert spec.scorers, f"{name} has no scorer"
    for scorer in spec.scorers:
        assert scorer.metrics, f"{name}: scorer {scorer.name} declares no metric"
        for metric, kind in scorer.metrics.items():
            assert isinstance(kind, MetricKind)
            shared = BY_PROTOCOL.get(name, {}).get(metric) or METRICS.get(metric)
            if shared is not None:
                assert kind == shared, f"{name}: {scorer.name} declares {metric} as {kind}, the table says {shared}"


MCQ = [Case(id=f"q{k}", question=f"Question {k}?", options={"A": "a", "B": "b"}, reference=Reference(answer="A")) for k in range(2)]


@pytest.mark.parametrize("protocol,seats,cases,roles", [
    ("single", 1, MCQ, False), ("vote", 3, MCQ, False), ("self-consistency", 1, MCQ, False), ("debate", 2, MCQ, False),
    ("board", 1, CASES[:2], True),
])
async def test_every_stored_score_is_declared_by_the_protocols_scorers(tmp_path, protocol, seats, cases, roles):
    store = Store(tmp_path / "s.db")
    runtime = Runtime(cache=store)
    reply = MEETING if protocol == "board" else "Because.\nAnswer: A"
    models = [ScriptedModel(responder=lambda r, text=reply: text, name=f"m{k}", runtime=runtime) for k in range(seats)]
    panel = Panel.of(models, names=[m.name for m in models], roles={"judge": judge(runtime)} if roles else None)
    result = await run_benchmark(store, RunConfig(dataset="inline", protocol=protocol, models=[m.name for m in models]), runtime,
                                 panel=panel, cases=cases)
    assert result.status == "done", result.error
    spec = get_protocol(protocol)
    names = {row["name"] for row in store.scores(result.run_id)}
    assert names
    undeclared = sorted(n for n in names if spec.metric_kind(n) is None)
    assert undeclared == []
    assert all(declared_kind(n, protocol) is not UNDECLARED for n in names)


async def test_two_scorers_giving_one_name_is_refused_and_the_kind_comes_from_the_declaration():
    async def answer(case, panel, settings, context=None):
        return Outcome(answer="A")

    first = pure("first", lambda case, outcome: {"turns": 1.0}, {"turns": COUNT})
    second = pure("second", lambda case, outcome: {"turns": 2.0}, {"turns": COUNT})
    spec = ProtocolSpec(name="twice", run=answer, settings=get_protocol("single").settings, scorers=(first, second), description="")
    with pytest.raises(RuntimeError, match="scorer 'second' of the twice protocol repeats score.s. turns"):
        await score_outcome(spec, Case(id="c"), Outcome(answer="A"), {}, None)
    # The declaration, not the shared table, decides: here "accuracy" is declared a count.
    odd = ProtocolSpec(name="odd", run=answer, settings=get_protocol("single").settings,
                       scorers=(pure("n", lambda c, o: {"accuracy": 3.0}, {"accuracy": COUNT}),), description="")
    assert odd.metric_kind("accuracy") == COUNT and METRICS["accuracy"] == PROPORTION
