"""Protocols: each is an async function (case, panel, settings) -> Outcome, registered here by name."""

from __future__ import annotations

from medpanel.errors import UsageError
from medpanel.protocols.base import Outcome, Panel, ProtocolSpec


def _registry() -> dict[str, ProtocolSpec]:
    from medpanel.protocols import board, single

    return {spec.name: spec for spec in (single.SPEC, board.SPEC)}


def get_protocol(name: str) -> ProtocolSpec:
    protocols = _registry()
    if name not in protocols:
        raise UsageError(f"Unknown protocol '{name}'.", f"Choose one of: {', '.join(protocols)}.")
    return protocols[name]


def protocol_names() -> list[str]:
    return list(_registry())


__all__ = ["Outcome", "Panel", "ProtocolSpec", "get_protocol", "protocol_names"]
