"""The scorer path: how the runner turns one outcome into scores, the same way during a run and after it.

`score_outcome` runs a protocol's scorers in their declared order. During a run the score events go
into the item's own transcript before the item is written; `medpanel judge run` (runs/judging.py) calls
the same function on a stored outcome with a fresh transcript and appends what it recorded to the
stored events, so an item judged during the run and one judged afterwards are stored alike.
"""

from __future__ import annotations

import sys
from typing import Any, Iterable, Mapping

from medpanel.cases.model import Case
from medpanel.context import RunContext
from medpanel.models.base import Model
from medpanel.models.runtime import call_scope
from medpanel.protocols.base import Outcome, ProtocolSpec
from medpanel.scoring.metrics import MetricKind, metric_kind
from medpanel.scoring.scorer import ScoreContext, Scorer, Scores
from medpanel.transcript import Transcript


def scorers_to_run(spec: ProtocolSpec, roles: Mapping[str, Model], settings: Any, only: Iterable[str] | None = None) -> list[Scorer]:
    """The scorers this run asked for: pure ones always, a judging one when its role is on the panel,
    an opt-in one when the settings turn it on; `only` keeps those that call one of these roles."""
    keep = set(only) if only is not None else None
    chosen = []
    for scorer in spec.scorers:
        if keep is not None and scorer.role not in keep:
            continue
        if scorer.role is not None and scorer.role not in roles:
            continue
        if scorer.wanted(settings):
            chosen.append(scorer)
    return chosen


async def score_outcome(spec: ProtocolSpec, case: Case, outcome: Outcome, roles: Mapping[str, Model], settings: Any,
                        context: RunContext | None = None, *, transcript: Transcript | None = None,
                        only: Iterable[str] | None = None) -> Scores:
    """Run the chosen scorers on `outcome`; their score events are recorded in `transcript` (default: the
    outcome's own). Two scorers giving one score name is a bug in the protocol's declaration: refused."""
    record_in = transcript if transcript is not None else outcome.transcript
    scores: Scores = {}
    warn_unjudged(spec, case, roles, context)
    for scorer in scorers_to_run(spec, roles, settings, only):
        if not scorer.applies(case):
            continue
        before = len(record_in.events)
        values = await scorer.score(case, outcome, ScoreContext(settings=settings, roles=roles, run=context, transcript=record_in))
        for event in record_in.events[before:]:  # which scorer said it: judging again replaces exactly these
            event.data["scorer"] = scorer.name
        clash = sorted(set(values) & set(scores))
        if clash:
            raise RuntimeError(f"scorer '{scorer.name}' of the {spec.name} protocol repeats score(s) {', '.join(clash)}")
        scores.update(values)
    return scores


def warn_unjudged(spec: ProtocolSpec, case: Case, roles: Mapping[str, Model], context: RunContext | None) -> None:
    """On stderr, once per run (per context): a scorer that applies to this case cannot run because its role
    is not on the panel, and says so (`Scorer.unjudged`): the run would otherwise end quietly without that score."""
    for scorer in spec.scorers:
        if not scorer.unjudged or scorer.role is None or scorer.role in roles or not scorer.applies(case):
            continue
        said = context.shared("unjudged_warned", set) if context is not None else set()
        if scorer.name not in said:
            said.add(scorer.name)
            run_id = (call_scope.get() or ("RUN",))[0]
            print(f"warning: {scorer.unjudged.format(run=run_id)}", file=sys.stderr, flush=True)


def declared_kind(name: str, protocol: str | None) -> MetricKind:
    """The kind of score `name` in a run of `protocol`: as that protocol's scorers declare it, else the
    shared table (replays, runs of protocols since renamed), else UNDECLARED (shown as such)."""
    from medpanel.protocols import PROTOCOLS, get_protocol

    if protocol in PROTOCOLS:
        kind = get_protocol(protocol).metric_kind(name)
        if kind is not None:
            return kind
    return metric_kind(name, protocol)
