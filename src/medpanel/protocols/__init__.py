"""Protocols: each is an async function (case, panel, settings) -> Outcome, registered here by name.

A registry entry is "module:ATTRIBUTE" naming a ProtocolSpec; modules are imported only when used,
so one protocol's optional dependencies never burden another.
"""

from __future__ import annotations

import importlib

from medpanel.errors import UsageError
from medpanel.protocols.base import Outcome, Panel, ProtocolSpec

PROTOCOLS: dict[str, str] = {
    "single": "medpanel.protocols.single:SPEC",
    # tumor board (OpenTumorBoard)
    "board": "medpanel.protocols.board:SPEC",
    "board-live": "medpanel.protocols.board_live:SPEC",
    "specialist": "medpanel.protocols.specialist:SPEC",
    # debate (MCC) and the baselines it must beat
    "debate": "medpanel.protocols.debate:SPEC",
    "vote": "medpanel.protocols.baselines:VOTE",
    "self-consistency": "medpanel.protocols.baselines:SELF_CONSISTENCY",
    "longform": "medpanel.protocols.longform:SPEC",
    "osce": "medpanel.protocols.dialogue:SPEC",
    # consult (MedSyn) and its baselines
    "consult": "medpanel.protocols.consult:SPEC",
    "baseline": "medpanel.protocols.consult:BASELINE_CHIEF_COMPLAINT",
    "baseline-note": "medpanel.protocols.consult:BASELINE_FULL_NOTE",
}


def get_protocol(name: str) -> ProtocolSpec:
    if name not in PROTOCOLS:
        raise UsageError(f"Unknown protocol '{name}'.", f"Choose one of: {', '.join(PROTOCOLS)}.")
    module, _, attr = PROTOCOLS[name].partition(":")
    return getattr(importlib.import_module(module), attr or "SPEC")


def expands_cases(name: str) -> bool:
    """Whether the protocol turns one case into several items (so --limit does not count items)."""
    return name in PROTOCOLS and get_protocol(name).expand is not None


def protocol_names() -> list[str]:
    return list(PROTOCOLS)


__all__ = ["Outcome", "Panel", "ProtocolSpec", "expands_cases", "get_protocol", "protocol_names", "PROTOCOLS"]
